//! Fuzzes the configuration loader (YAML, serde, validation, error positions) of every
//! component: any text gives a configuration or a list of errors, never a panic.
#![no_main]

use isthmus_config::{parse, parse_proxy, TunnelAgentConfig, TunnelServerConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_proxy("f.yaml", text);
    let _ = parse::<TunnelServerConfig>("f.yaml", text);
    let _ = parse::<TunnelAgentConfig>("f.yaml", text);
});
