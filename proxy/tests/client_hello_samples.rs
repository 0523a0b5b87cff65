//! The ClientHello parser against hellos captured from real clients (`proxy/testdata/`, see its
//! README), the same hellos re-framed into several records or padded to 16 KiB, and a
//! deterministic mutation loop over them that stands in for the fuzz target where there is no
//! nightly toolchain.

// clippy's allow-unwrap-in-tests exempts only #[test] functions, not the helpers of a test crate.
#![allow(clippy::unwrap_used)]

use isthmus_testkit::Rng;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use isthmus_proxy::client_hello::{hello_len, parse, Parsed};

/// Every file in `proxy/testdata/` ending in `.bin`, with the server_name it carries.
const SAMPLES: &[(&str, Option<&str>)] = &[
    ("rustls-0.23-sni.bin", Some("rustls.example.test")),
    ("rustls-0.23-ip-nosni.bin", None),
    ("openssl-3.0-sni.bin", Some("openssl.example.test")),
    ("etcd-3.4-go-sni-localhost.bin", Some("localhost")),
    ("etcd-3.4-go-ip-nosni.bin", None),
    ("chromium-156-pq-sni.bin", Some("pq.example.test")),
];

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

fn samples() -> Vec<(String, Vec<u8>, Parsed)> {
    SAMPLES
        .iter()
        .map(|(file, sni)| {
            let bytes = std::fs::read(testdata().join(file)).unwrap();
            let want = sni.map_or(Parsed::NoSni, |s| Parsed::Sni(s.to_owned()));
            (file.to_string(), bytes, want)
        })
        .collect()
}

/// The handshake message carried by the records of `sample`.
fn unframe(mut records: &[u8]) -> Vec<u8> {
    let mut message = Vec::new();
    while !records.is_empty() {
        let len = usize::from(u16::from_be_bytes([records[3], records[4]]));
        message.extend(&records[5..5 + len]);
        records = &records[5 + len..];
    }
    message
}

/// Frames a handshake message into handshake records of at most `chunk` bytes.
fn frame(message: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for fragment in message.chunks(chunk) {
        out.extend([22, 3, 1]);
        out.extend(u16::try_from(fragment.len()).unwrap().to_be_bytes());
        out.extend(fragment);
    }
    out
}

/// The sample with its handshake message split into `parts` records of about equal size.
fn split_into(sample: &[u8], parts: usize) -> Vec<u8> {
    let message = unframe(sample);
    frame(&message, message.len().div_ceil(parts))
}

/// The sample with a padding extension (RFC 7685) making its body `pad` bytes longer.
fn padded(sample: &[u8], pad: usize) -> Vec<u8> {
    let message = unframe(sample);
    let body = &message[4..];
    // legacy_version, random, then the u8/u16/u8-prefixed session id, suites and compression.
    let mut at = 34;
    at += 1 + usize::from(body[at]);
    at += 2 + usize::from(u16::from_be_bytes([body[at], body[at + 1]]));
    at += 1 + usize::from(body[at]);
    let ext_len = usize::from(u16::from_be_bytes([body[at], body[at + 1]]));
    let mut new_body = body[..at].to_vec();
    new_body.extend(u16::try_from(ext_len + 4 + pad).unwrap().to_be_bytes());
    new_body.extend(&body[at + 2..]);
    new_body.extend(21u16.to_be_bytes());
    new_body.extend(u16::try_from(pad).unwrap().to_be_bytes());
    new_body.extend(std::iter::repeat_n(0, pad));
    let mut new_message = vec![1];
    new_message.extend(&u32::try_from(new_body.len()).unwrap().to_be_bytes()[1..]);
    new_message.extend(new_body);
    frame(&new_message, 1 << 14)
}

fn assert_every_prefix(name: &str, buf: &[u8], want: &Parsed) {
    for n in 0..buf.len() {
        assert_eq!(parse(&buf[..n]), Parsed::NeedMore, "{name}: prefix {n}");
    }
    assert_eq!(&parse(buf), want, "{name}");
    assert_eq!(hello_len(buf), Some(buf.len()), "{name}");
}

#[test]
fn samples_are_listed_and_present() {
    assert!(!SAMPLES.is_empty());
    let mut on_disk: Vec<String> = std::fs::read_dir(testdata())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".bin"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = SAMPLES.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "every testdata/*.bin needs an expected verdict"
    );
}

#[test]
fn samples_every_prefix() {
    for (name, bytes, want) in samples() {
        assert_every_prefix(&name, &bytes, &want);
    }
}

#[test]
fn samples_refragmented() {
    for (name, bytes, want) in samples() {
        for parts in [2, 3, 7] {
            assert_every_prefix(
                &format!("{name} in {parts}"),
                &split_into(&bytes, parts),
                &want,
            );
        }
        // One byte per record: the message header itself is spread over four records.
        let tiny = frame(&unframe(&bytes), 1);
        assert_every_prefix(&format!("{name} bytewise"), &tiny, &want);
    }
}

#[test]
fn samples_padded_to_16k() {
    for (name, bytes, want) in samples() {
        let big = padded(&bytes, 16 * 1024);
        assert!(big.len() > 16 * 1024 + 5, "{name} spans two records");
        assert_every_prefix(&format!("{name} padded"), &big, &want);
        assert_every_prefix(&format!("{name} padded, in 5"), &split_into(&big, 5), &want);
    }
}

#[test]
fn samples_with_pipelined_bytes() {
    for (name, bytes, want) in samples() {
        for tail in [
            &b"\x17\x03\x03\x00\x05hello"[..],
            b"\x16\x03\x01\xff\xff",
            b"\0",
        ] {
            let mut buf = bytes.clone();
            buf.extend(tail);
            assert_eq!(parse(&buf), want, "{name}");
            assert_eq!(hello_len(&buf), Some(bytes.len()), "{name}");
        }
    }
}

/// Applies one random edit of the kinds that break parsers: bit flips, boundary values,
/// off-by-some length fields, truncation, and splices of another input.
fn mutate(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8]) {
    let at = rng.below(buf.len());
    match rng.below(6) {
        0 => {
            if let Some(b) = buf.get_mut(at) {
                *b ^= 1 << rng.below(8);
            }
        }
        1 => {
            if let Some(b) = buf.get_mut(at) {
                *b = [0, 1, 0x16, 0x03, 0x7f, 0x80, 0xff][rng.below(7)];
            }
        }
        2 if at + 2 <= buf.len() => {
            let old = u16::from_be_bytes([buf[at], buf[at + 1]]);
            let delta = [1, 2, 4, 0xff, 0x100][rng.below(5)];
            let new = if rng.below(2) == 0 {
                old.wrapping_add(delta)
            } else {
                old.wrapping_sub(delta)
            };
            buf[at..at + 2].copy_from_slice(&new.to_be_bytes());
        }
        3 => buf.truncate(at),
        4 => {
            let from = rng.below(other.len());
            let len = rng.below(other.len() - from.min(other.len())).min(64);
            let chunk = other[from..from + len].to_vec();
            buf.splice(at..at, chunk);
        }
        _ => {
            let end = (at + rng.below(32)).min(buf.len());
            buf.drain(at..end);
        }
    }
}

/// Checks that `parse` does not panic on `buf` and that its verdicts never contradict each other
/// across prefixes: whatever a prefix decides (other than NeedMore) is final.
fn check_consistent(rng: &mut Rng, buf: &[u8]) -> Parsed {
    let full = parse(buf);
    if let Some(n) = hello_len(buf) {
        assert!(n <= buf.len());
        assert_eq!(
            parse(&buf[..n]),
            full,
            "the hello alone decides: {buf:02x?}"
        );
        assert_eq!(parse(&buf[..n - 1]), Parsed::NeedMore, "{buf:02x?}");
    }
    for _ in 0..2 {
        let cut = rng.below(buf.len() + 1);
        let early = parse(&buf[..cut]);
        assert!(
            early == Parsed::NeedMore || early == full,
            "prefix {cut}: {early:?} vs {full:?}: {buf:02x?}"
        );
    }
    full
}

#[test]
fn mutated_samples_never_panic_or_contradict() {
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for (_, bytes, _) in samples() {
        seeds.push(split_into(&bytes, 3));
        seeds.push(frame(&unframe(&bytes), 5));
        seeds.push(bytes);
    }
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut iterations = 0;
    // Which verdicts the mutants reached, to see with --nocapture that the loop goes deep.
    let mut verdicts = std::collections::BTreeMap::<String, usize>::new();
    while iterations < 200_000 && Instant::now() < deadline {
        let mut buf = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            let other = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, &mut buf, other);
        }
        let verdict = match check_consistent(&mut rng, &buf) {
            Parsed::Sni(_) => "sni".to_owned(),
            Parsed::Malformed(m) => m.as_str().to_owned(),
            other => format!("{other:?}"),
        };
        *verdicts.entry(verdict).or_default() += 1;
        iterations += 1;
    }
    eprintln!("{iterations} mutants: {verdicts:?}");
    assert!(
        iterations >= 10_000,
        "only {iterations} mutants in the time budget"
    );
}
