//! One module per subcommand; each parses its flags and hands over to a library crate.

pub mod check_config;
pub mod controller;
pub mod proxy;
pub mod tunnel;

/// Logs go to stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging(format: &str) {
    isthmus_admin::logging::init(format, "info");
}
