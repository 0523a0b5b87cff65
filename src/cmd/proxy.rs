//! `isthmus proxy --config FILE`: run the SNI router until SIGTERM/SIGINT.

use anyhow::Context;
use isthmus_proxy::Proxy;
use prometheus_client::registry::Registry;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

/// Flags of `proxy`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Signals: SIGHUP reloads the file (it is also watched for changes); \
SIGTERM drains (readiness 503, wait drain_delay, stop accepting, wait up to drain_timeout for \
open connections, exit 0); SIGINT drains without drain_delay. A second SIGTERM/SIGINT exits at once."
)]
pub struct Args {
    /// The proxy configuration file (YAML). See the README's configuration reference.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: PathBuf,
    /// Worker threads (default: one per CPU).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let proxy = Proxy::start(&args.config, Registry::default()).await?;
    let (delay, timeout) = loop {
        tokio::select! {
            _ = hup.recv() => {
                info!("SIGHUP: reloading");
                // Outcome is logged and counted by the proxy.
                let _ = proxy.reload().await;
            }
            _ = term.recv() => {
                info!("SIGTERM: draining");
                break proxy.drain_settings();
            }
            _ = int.recv() => {
                info!("SIGINT: draining without delay");
                break (Duration::ZERO, proxy.drain_settings().1);
            }
        }
    };
    let left = tokio::select! {
        left = proxy.shutdown(delay, timeout) => left,
        _ = term.recv() => { warn!("second signal: exiting now"); return Ok(ExitCode::SUCCESS) }
        _ = int.recv() => { warn!("second signal: exiting now"); return Ok(ExitCode::SUCCESS) }
    };
    if left > 0 {
        warn!(
            left,
            "drain timeout reached; closing the remaining connections"
        );
    }
    Ok(ExitCode::SUCCESS)
}
