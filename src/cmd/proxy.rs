//! `isthmus proxy --config FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `proxy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The proxy configuration file (YAML). Reloaded on SIGHUP and when it changes.
    #[arg(long, short = 'c')]
    pub config: PathBuf,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet implemented")
}
