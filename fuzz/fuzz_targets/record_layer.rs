//! Fuzzes the TLS record layer under the ClientHello parser: a handshake message split into
//! records in any way (sizes from the input) gets the verdict it gets in one record, and the
//! parser never panics on the re-framed bytes.
#![no_main]

use isthmus_proxy::client_hello::{parse, Parsed};
use libfuzzer_sys::fuzz_target;

fn records(body: &[u8], sizes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut at, mut i) = (0, 0);
    while at < body.len() {
        // No sizes: the whole message in one record.
        let n = if sizes.is_empty() {
            body.len()
        } else {
            usize::from(sizes[i % sizes.len()]).max(1)
        };
        let piece = &body[at..(at + n).min(body.len())];
        out.extend_from_slice(&[22, 3, 1]);
        out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
        out.extend_from_slice(piece);
        at += piece.len();
        i += 1;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // First byte: how many of the following bytes are record sizes; the rest is the
    // handshake message.
    let Some((&k, rest)) = data.split_first() else {
        return;
    };
    let k = usize::from(k % 16).min(rest.len());
    let (sizes, body) = rest.split_at(k);
    if body.is_empty() || body.len() > 16384 {
        return;
    }
    let one = records(body, &[]);
    let many = records(body, sizes);
    let (a, b) = (parse(&one), parse(&many));
    if matches!(a, Parsed::Sni(_) | Parsed::NoSni) {
        assert_eq!(a, b);
    }
});
