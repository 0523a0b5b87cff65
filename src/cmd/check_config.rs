//! `isthmus check-config FILE`: validate without running.

use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `check-config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The proxy configuration file to check. Every error is printed as
    /// `file:line:column: field.path: message`; the exit code is 1 if there is any.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match isthmus_config::load_proxy_file(&args.file) {
        Ok(loaded) => {
            let c = &loaded.config;
            let routes: usize = c.listeners.iter().map(|l| l.routes.len()).sum();
            println!(
                "{}: ok: {} listeners, {} routes, {} upstreams, sha256 {}",
                args.file.display(),
                c.listeners.len(),
                routes,
                c.upstreams.len(),
                loaded.hash
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
