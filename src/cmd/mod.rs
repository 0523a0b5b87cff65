//! One module per subcommand; each parses its flags and hands over to a library crate.

pub mod check_config;
pub mod controller;
pub mod proxy;
pub mod tunnel;

use tracing_subscriber::EnvFilter;

/// Logs go to stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging(format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
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
