//! The `isthmus-lab` binary: flags and wiring only; the lab itself is the `isthmus_lab` library.
//! Kept out of the production `isthmus` binary (it links etcd-client, tonic and prost); it runs
//! the real `isthmus` binary as each seed's proxy and tunnel server.

#![forbid(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use isthmus_lab::{Options, Scenario};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// isthmus-lab: a real etcd live migration between two seeds on this machine, through isthmus;
/// and the link between the real seeds of `scripts/cluster.sh`.
///
/// Needs root (network namespaces, veth pairs), iproute2, Debian's etcd-server and the `isthmus`
/// binary (`scripts/demo.sh` installs and builds everything, then runs `isthmus-lab demo`).
#[derive(Debug, Parser)]
#[command(name = "isthmus-lab", version, about)]
struct Cli {
    /// Log format: `text` for people, `json` for log pipelines. `RUST_LOG` filters (default `info,kube_client=off`).
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one live migration through isthmus and report what the clients saw.
    ///
    /// Moves a 3-member etcd from a source seed to a destination seed (network namespaces, one
    /// isthmus proxy each, a userspace link with the given RTT) while a client writes and reads
    /// and a webhook is called through the tunnel; writes the report (JSON) and the picture
    /// (SVG); exits non-zero if an invariant failed (a failed request, a lost write, wrong final
    /// members, a failed webhook call).
    Demo(Demo),
    /// The link between the real seeds of `scripts/cluster.sh` (`scripts/cluster.sh link up`
    /// starts it in the namespace joining the seeds and redirects their TCP to it).
    ///
    /// Relays every TCP connection nftables redirects to `--listen` to the address it was
    /// dialled with, adding half of `--rtt` to each direction's data. SIGUSR1 cuts the link,
    /// SIGUSR2 restores it, SIGTERM ends it.
    Link(LinkArgs),
}

/// Flags of `link`.
#[derive(Debug, clap::Args)]
struct LinkArgs {
    /// Round-trip time between the seeds (as `demo --rtt`).
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = isthmus_config::parse_duration_flag)]
    rtt: Duration,
    /// Where the relay listens (the port nftables redirects the seeds' connections to).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:15001")]
    listen: std::net::SocketAddr,
}

/// Flags of `demo`.
#[derive(Debug, clap::Args)]
struct Demo {
    /// Round-trip time of the emulated inter-seed link (e.g. `0ms`, `50ms`, `150ms`).
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = isthmus_config::parse_duration_flag)]
    rtt: Duration,
    /// What to run: the migration alone or with one fault injected.
    #[arg(long, value_name = "NAME", value_enum, default_value_t = ScenarioName::Migrate)]
    scenario: ScenarioName,
    /// Where to write the JSON report.
    #[arg(long, value_name = "FILE", default_value = "report.json")]
    report: PathBuf,
    /// Where to write the SVG latency timeline.
    #[arg(long, value_name = "FILE", default_value = "timeline.svg")]
    picture: PathBuf,
    /// How long the link stays cut in the `link-cut` scenario.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = isthmus_config::parse_duration_flag)]
    cut: Duration,
    /// Time between two client requests (writes and linearizable reads alternate).
    #[arg(long, value_name = "DURATION", default_value = "25ms", value_parser = isthmus_config::parse_duration_flag)]
    interval: Duration,
    /// Length of the steady phases (source, 5 members, destination).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = isthmus_config::parse_duration_flag)]
    hold: Duration,
    /// Run etcd without `--pre-vote`: after a link cut, the destination members' raised terms
    /// force an election (a multi-second write stall).
    #[arg(long)]
    no_pre_vote: bool,
    /// Let the controllers drive the migration: each seed gets its own kube-apiserver (on its
    /// own etcd v3.6) with the pinned etcd-druid and Gardener CRDs and deploy/'s RBAC, and runs
    /// two `isthmus controller` replicas as their ServiceAccount; stand-ins for etcd-druid,
    /// the DNS provider, kubelet and gardenlet act on what they write, through the API only.
    /// Without it, the lab calls the controller's planner as a library.
    #[arg(long)]
    controllers: bool,
    /// Scratch directory (certificates, configs, etcd data and logs); cleared at the start,
    /// kept after the run.
    #[arg(long, value_name = "DIR", default_value = "target/demo/run")]
    dir: PathBuf,
    /// The `isthmus` binary each seed runs as its proxy and tunnel server. Default: the
    /// `isthmus` next to this binary (`cargo build --release -p isthmus -p isthmus-lab` puts
    /// both in `target/release/`).
    #[arg(long, value_name = "FILE", env = "ISTHMUS_BIN")]
    isthmus: Option<PathBuf>,
    /// The shoot's kube-apiserver binary (one runs in each seed on the migrating etcd).
    /// `scripts/build-kubernetes.sh` builds it from k8s.io/kubernetes.
    #[arg(
        long,
        value_name = "FILE",
        env = "ISTHMUS_KUBE_APISERVER",
        default_value_os_t = isthmus_lab::api::default_binary()
    )]
    kube_apiserver: PathBuf,
}

/// The `--scenario` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ScenarioName {
    /// The whole migration (3 -> 5 -> 6 -> 3 members), no fault.
    Migrate,
    /// The inter-seed link is cut for `--cut` in the 5-member phase.
    LinkCut,
    /// The migration is aborted before the destination members have joined.
    Abort,
    /// The source proxy restarts (new process, old one drains) in the 5-member phase.
    ProxyRestart,
    /// `kill -9` of the etcd leader in the 5-member phase, restarted on its data after 2 s.
    KillLeader,
    /// The inter-seed link is cut for `--cut` in the 6-member phase (no quorum anywhere).
    LinkCutSix,
    /// The destination controller holding the Lease is killed mid-Join (implies `--controllers`).
    KillController,
    /// The destination seed's kube-apiserver restarts mid-Join (implies `--controllers`).
    RestartSeedApi,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log_format);
    let result = match cli.command {
        Command::Demo(args) => demo(args),
        Command::Link(args) => link(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("isthmus-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr; `RUST_LOG` filters (default `info,kube_client=off`).
fn init_logging(format: &str) {
    // kube's client logs every refused connection and 500 of a starting kube-apiserver as an
    // error; the lab waits for those on purpose and reports what the load saw instead.
    isthmus_admin::logging::init(format, "info,kube_client=off");
}

/// The `isthmus` binary to run: the flag, else the one next to this executable.
fn isthmus_binary(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match flag {
        Some(p) => p,
        None => std::env::current_exe()
            .context("locating the isthmus-lab binary")?
            .with_file_name("isthmus"),
    };
    let runnable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    anyhow::ensure!(
        runnable(&path),
        "no runnable isthmus binary at {}: build it with `cargo build --release -p isthmus` \
         (next to isthmus-lab) or pass --isthmus FILE",
        path.display()
    );
    Ok(std::path::absolute(&path)?)
}

fn link(args: LinkArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(isthmus_lab::seed_link::run(args.listen, args.rtt))?;
    Ok(ExitCode::SUCCESS)
}

fn demo(args: Demo) -> anyhow::Result<ExitCode> {
    let scenario = match args.scenario {
        ScenarioName::Migrate => Scenario::Migrate,
        ScenarioName::LinkCut => Scenario::LinkCut { cut: args.cut },
        ScenarioName::Abort => Scenario::Abort,
        ScenarioName::ProxyRestart => Scenario::ProxyRestart,
        ScenarioName::KillLeader => Scenario::KillLeader,
        ScenarioName::LinkCutSix => Scenario::LinkCutSix { cut: args.cut },
        ScenarioName::KillController => Scenario::KillController,
        ScenarioName::RestartSeedApi => Scenario::RestartSeedApi,
    };
    let proxy_bin = isthmus_binary(args.isthmus)?;
    anyhow::ensure!(
        args.kube_apiserver.is_file(),
        "no kube-apiserver at {}: run scripts/build-kubernetes.sh or pass --kube-apiserver FILE",
        args.kube_apiserver.display()
    );
    let kube_apiserver_bin = std::path::absolute(&args.kube_apiserver)?;
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("clearing {}", args.dir.display()))?;
    }
    let opts = Options {
        rtt: args.rtt,
        scenario,
        proxy_bin,
        kube_apiserver_bin,
        dir: std::path::absolute(&args.dir)?,
        interval: args.interval,
        hold: args.hold,
        pre_vote: !args.no_pre_vote,
        controllers: args.controllers || scenario.needs_controllers(),
    };
    let rt = tokio::runtime::Runtime::new()?;
    // On Ctrl-C the lab's future is dropped, which stops its processes and deletes its
    // namespaces, veth pairs and hosts files.
    let report = rt.block_on(async {
        tokio::select! {
            // On the heap: the lab's future is one deep state machine.
            r = Box::pin(isthmus_lab::run(&opts)) => r.map_err(anyhow::Error::from),
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
