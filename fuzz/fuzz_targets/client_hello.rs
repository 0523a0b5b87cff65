//! Fuzzes the ClientHello parser: it must never panic, and a verdict reached on a prefix is final.
#![no_main]

use isthmus_proxy::client_hello::{hello_len, parse, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let full = parse(data);
    if let Some(n) = hello_len(data) {
        assert_eq!(parse(&data[..n]), full);
        assert_eq!(parse(&data[..n - 1]), Parsed::NeedMore);
    }
    let early = parse(&data[..data.len() / 2]);
    assert!(early == Parsed::NeedMore || early == full);
});
