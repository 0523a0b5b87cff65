//! Fuzzes the address rules read from configuration files: the agent's allow-list entries
//! (`CIDR[:port]`, `IP`, `[IPv6]:port`) and the proxy's `allowed_sources`/`trusted_proxies`
//! CIDRs. Never a panic; what parses matches its own network address, and a CIDR prints to
//! text that parses back to it.
#![no_main]

use isthmus_config::{AllowRule, Cidr};
use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rule) = AllowRule::parse(text) {
        let port = rule.port.unwrap_or(1);
        assert!(rule.allows(SocketAddr::new(rule.net, port)), "{text:?}");
    }
    if let Ok(c) = Cidr::parse(text) {
        assert_eq!(Cidr::parse(&c.to_string()), Ok(c), "{text:?}");
    }
});
