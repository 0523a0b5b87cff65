//! Fuzzes the configuration loaders of every component, both readers (JSON by serde_json, YAML
//! by marked-yaml: serde, validation, error positions, the nesting bound): any text gives a
//! configuration or a list of errors, never a panic or a stack overflow.
#![no_main]

use isthmus_config::{parse, parse_proxy, TunnelAgentConfig, TunnelServerConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for file in ["f.yaml", "f.json"] {
        let _ = parse_proxy(file, text);
        let _ = parse::<TunnelServerConfig>(file, text);
        let _ = parse::<TunnelAgentConfig>(file, text);
    }
});
