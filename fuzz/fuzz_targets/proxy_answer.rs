//! Fuzzes the tunnel agent's reader of an HTTP CONNECT proxy's answer: never a panic, and a
//! verdict reached on a prefix is final.
#![no_main]

use isthmus_tunnel::agent::{proxy_answer, ProxyAnswer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let full = proxy_answer(data);
    let early = proxy_answer(&data[..data.len() / 2]);
    assert!(early == ProxyAnswer::NeedMore || early == full);
});
