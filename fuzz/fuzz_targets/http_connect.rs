//! Fuzzes the CONNECT head parser: it must never panic, never look past `max_head`, and a verdict
//! reached on a prefix is final.
#![no_main]

use isthmus_proxy::http_connect::{parse, Error};
use libfuzzer_sys::fuzz_target;

const HEADER: &str = "X-Gardener-Destination";

fuzz_target!(|data: &[u8]| {
    // The first byte picks a small cap now and then, so that TooLarge is reached too.
    let max_head = match data.first() {
        Some(&b) if b < 16 => usize::from(b) * 4,
        _ => 8192,
    };
    let full = parse(data, HEADER, max_head);
    let early = parse(&data[..data.len() / 2], HEADER, max_head);
    assert!(early == Err(Error::NeedMore) || early == full);
    if let Ok(req) = &full {
        assert!(req.head_len <= data.len().min(max_head));
        assert_eq!(parse(&data[..req.head_len], HEADER, max_head), full);
        assert_eq!(
            parse(&data[..req.head_len - 1], HEADER, max_head),
            Err(Error::NeedMore)
        );
    }
});
