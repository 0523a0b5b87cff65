//! Fuzzes the configuration scanner: whenever it returns a tree, yaml-rust2 builds the same tree
//! from the same text (it may give up on anything, never return a different tree).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        assert!(
            isthmus_config::scan_agrees_with_yaml_rust2(text),
            "{text:?}"
        );
    }
});
