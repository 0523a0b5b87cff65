//! How every isthmus binary logs: to stderr, `text` for people (colours only on a terminal) or
//! `json` for log pipelines, filtered by `RUST_LOG`.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber: `format` is `json` or anything else for text; `RUST_LOG`
/// filters, `default_filter` when it is unset or invalid.
pub fn init(format: &str, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
