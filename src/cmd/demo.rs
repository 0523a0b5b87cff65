//! `isthmus demo`: runs the live-migration lab once and writes its report and picture.

use anyhow::Context;
use isthmus_lab::{duration, Options, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Run a real etcd live migration between two seeds (network namespaces) through isthmus.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Round-trip time of the emulated inter-seed link.
    #[arg(long, default_value = "50ms", value_parser = duration::parse)]
    rtt: Duration,
    /// Where to write the JSON report.
    #[arg(long, default_value = "report.json")]
    report: PathBuf,
    /// Where to write the SVG latency timeline.
    #[arg(long, default_value = "timeline.svg")]
    picture: PathBuf,
    /// Fault to inject: `migrate` (none), `link-cut`, `abort`, `proxy-restart`.
    #[arg(long, default_value = "migrate", value_parser = ["migrate", "link-cut", "abort", "proxy-restart"])]
    scenario: String,
    /// How long the link stays cut in the `link-cut` scenario.
    #[arg(long, default_value = "3s", value_parser = duration::parse)]
    cut: Duration,
    /// Time between two client requests (writes and linearizable reads alternate).
    #[arg(long, default_value = "25ms", value_parser = duration::parse)]
    interval: Duration,
    /// Length of the steady phases (source, 5 members, destination).
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    hold: Duration,
    /// Run etcd without `--pre-vote`: after a link cut, the destination members' raised terms
    /// force an election (a multi-second write stall).
    #[arg(long)]
    no_pre_vote: bool,
    /// Scratch directory (certificates, configs, etcd data and logs); kept after the run.
    #[arg(long, default_value = "target/demo/run")]
    dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let scenario = match args.scenario.as_str() {
        "link-cut" => Scenario::LinkCut { cut: args.cut },
        "abort" => Scenario::Abort,
        "proxy-restart" => Scenario::ProxyRestart,
        _ => Scenario::Migrate,
    };
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("clearing {}", args.dir.display()))?;
    }
    let opts = Options {
        rtt: args.rtt,
        scenario,
        proxy_bin: std::env::current_exe().context("locating the isthmus binary")?,
        dir: std::path::absolute(&args.dir)?,
        interval: args.interval,
        hold: args.hold,
        pre_vote: !args.no_pre_vote,
    };
    let rt = tokio::runtime::Runtime::new()?;
    // On Ctrl-C the lab's future is dropped, which stops its processes and deletes its
    // namespaces, veth pairs and hosts files.
    let report = rt.block_on(async {
        tokio::select! {
            r = isthmus_lab::run(&opts) => r.map_err(anyhow::Error::from),
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; the lab was cleaned up")),
        }
    })?;
    for (path, text) in [
        (&args.report, serde_json::to_string_pretty(&report)?),
        (&args.picture, isthmus_lab::svg::timeline(&report)),
    ] {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{}", report.summary());
    println!(
        "report: {}  picture: {}",
        args.report.display(),
        args.picture.display()
    );
    Ok(if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
