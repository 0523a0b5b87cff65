//! Fuzzes the PROXY protocol parser: it must never panic, a verdict reached on a prefix is final,
//! a header's `len` fits the input and the v2 cap, what the encoders write parses back to the same
//! addresses, and a complete header is one that `detect` saw at its signature.
#![no_main]

use isthmus_proxy::proxy_protocol::{
    detect, encode_v1, encode_v2, parse, v2_len, Detected, Header, Parsed, V2_MAX_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let full = parse(data);
    let early = parse(&data[..data.len() / 2]);
    assert!(early == Parsed::NeedMore || early == full);
    if let Some(len) = v2_len(data) {
        assert!(len >= 16);
    }
    if let Parsed::Header { header, len } = full {
        assert!(len <= data.len() && len <= V2_MAX_LEN);
        assert_eq!(detect(data), Detected::Header);
        assert_eq!(parse(&data[..len]), full);
        if let Header::Proxied(a) = header {
            for encode in [encode_v1, encode_v2] {
                let mut out = Vec::new();
                encode(&a, &mut out);
                assert_eq!(
                    parse(&out),
                    Parsed::Header {
                        header,
                        len: out.len()
                    }
                );
            }
        }
    }
});
