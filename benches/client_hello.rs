//! ClientHello parsing: a ~300-byte hello, a ~2 KB post-quantum one, the same split over
//! several records, and a 16 KiB hello over two records.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use isthmus_proxy::client_hello::{parse, Parsed};
use std::hint::black_box;

const OPENSSL: &[u8] = include_bytes!("../proxy/testdata/openssl-3.0-sni.bin");
const CHROMIUM_PQ: &[u8] = include_bytes!("../proxy/testdata/chromium-156-pq-sni.bin");

/// The handshake message of a single-record hello (record header stripped).
fn handshake(hello: &[u8]) -> Vec<u8> {
    let len = usize::from(u16::from_be_bytes([hello[3], hello[4]]));
    assert_eq!(hello.len(), 5 + len, "single-record sample");
    hello[5..].to_vec()
}

/// Re-frames a handshake message into records of at most `size` bytes.
fn records(hs: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in hs.chunks(size) {
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&u16::try_from(chunk.len()).unwrap().to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Appends a padding extension (type 21) so the handshake message is `target` bytes long.
fn padded(hs: &[u8], target: usize) -> Vec<u8> {
    // Handshake header (4), version (2), random (32), then session id, ciphers, compression.
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(hs[at]);
    at += 2 + usize::from(u16::from_be_bytes([hs[at], hs[at + 1]]));
    at += 1 + usize::from(hs[at]);
    let ext_len_at = at;
    let ext_len = usize::from(u16::from_be_bytes([hs[at], hs[at + 1]]));
    let pad = target - hs.len() - 4;
    let mut v = hs.to_vec();
    v.extend_from_slice(&21u16.to_be_bytes());
    v.extend_from_slice(&u16::try_from(pad).unwrap().to_be_bytes());
    v.resize(v.len() + pad, 0);
    v[ext_len_at..ext_len_at + 2]
        .copy_from_slice(&u16::try_from(ext_len + 4 + pad).unwrap().to_be_bytes());
    let body = u32::try_from(v.len() - 4).unwrap().to_be_bytes();
    v[1..4].copy_from_slice(&body[1..]);
    v
}

fn bench(c: &mut Criterion) {
    let pq = handshake(CHROMIUM_PQ);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("openssl_326B", OPENSSL.to_vec()),
        ("chromium_pq_1987B", CHROMIUM_PQ.to_vec()),
        ("chromium_pq_7_records", records(&pq, pq.len().div_ceil(7))),
        (
            "padded_16KiB_2_records",
            records(&padded(&pq, 16 * 1024), 16 * 1024 - 512),
        ),
    ];
    let mut g = c.benchmark_group("client_hello_parse");
    for (name, bytes) in &cases {
        assert!(
            matches!(parse(bytes), Parsed::Sni(_)),
            "{name}: {:?}",
            parse(bytes)
        );
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(*name, |b| b.iter(|| parse(black_box(bytes))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
