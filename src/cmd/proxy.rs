//! `isthmus proxy --config FILE`: run the SNI router until SIGTERM/SIGINT.

use anyhow::Context;
use isthmus_proxy::sched::{self, Scheduling};
use isthmus_proxy::{BusyPoll, ConnectionThreads, Proxy};
use prometheus_client::registry::Registry;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio::runtime::Handle;
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
    /// ConnectionThreads serving connections (default: one per CPU). Each is two threads: one accepts
    /// and routes connections (`isthmus-worker-N`), one moves the bytes of the connections it
    /// routed (`isthmus-splice-N`).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// How the worker threads share connections. `per-core`: each thread runs its own
    /// runtime with its own SO_REUSEPORT socket per listener; the kernel spreads connections
    /// over them and a connection stays with the worker that accepted it (the reload, admin
    /// endpoint and DNS run on the main thread). `shared`: one
    /// work-stealing runtime accepts on one socket per listener and moves tasks between
    /// threads (better when a few connections carry most of the load).
    #[arg(long, value_enum, default_value_t = Runtime::PerCore)]
    pub runtime: Runtime,
    /// Whether a worker keeps polling its connections before it sleeps. `auto` (default):
    /// up to 100us, only for the answer to a message just forwarded in a direction whose
    /// messages were recently answered that fast (request/response traffic; idle workers,
    /// bulk streams and short-lived connections never spin). A duration (e.g. `100us`):
    /// after every event, for that long. `0` or `off`: never. Waking a sleeping thread takes
    /// tens of microseconds on virtual machines; polling spends CPU instead. A poll's yield
    /// that keeps the worker off the CPU for over 500us (another busy thread's time slice)
    /// pauses polling for 1s. See BENCHMARKS.md for the trade-off measured.
    #[arg(long, value_name = "auto|off|DURATION", default_value = "auto", value_parser = parse_busy_poll)]
    pub busy_poll: BusyPoll,
    /// How the kernel schedules the proxy's threads. `batch` (default): SCHED_BATCH, under
    /// which a thread woken by a packet waits for the thread that sent it to block instead of
    /// preempting it (on one CPU a proxied round trip then costs one context switch per hop,
    /// not two); the same nice level and fair share of the CPU, no privilege needed. On a
    /// CPU other busy threads share, a batch thread's wake-up waits for their time slice, so
    /// each splicer thread reads its /proc/thread-self/schedstat every 20ms of traffic: when
    /// its wake-ups waited over 30us on average while it moved mostly messages rather than
    /// bulk bursts (which lose nothing by waiting), or its busy polling found the CPU
    /// contended, it runs as `normal` for 4s, doubled up to 64s while the contention lasts. `normal`: the kernel's default (SCHED_OTHER). See
    /// BENCHMARKS.md, issue 28, rounds 6-8.
    #[arg(long, value_enum, default_value_t = Policy::Batch)]
    pub scheduling: Policy,
}

/// The `--scheduling` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// SCHED_BATCH: no preemption on wake-up.
    Batch,
    /// SCHED_OTHER: the kernel's default.
    Normal,
}

fn parse_busy_poll(s: &str) -> Result<BusyPoll, String> {
    match s {
        "auto" => Ok(BusyPoll::default()),
        "off" => Ok(BusyPoll::Off),
        _ => {
            let d: Duration = isthmus_config::parse_duration_flag(s)
                .map_err(|e| format!("{e} (or `auto`, `off`)"))?;
            Ok(if d.is_zero() {
                BusyPoll::Off
            } else {
                BusyPoll::Fixed(d)
            })
        }
    }
}

/// The `--runtime` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Runtime {
    /// One current-thread runtime and one listening socket per worker thread.
    PerCore,
    /// One multi-thread (work-stealing) runtime.
    Shared,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let policy = match args.scheduling {
        Policy::Batch => Scheduling::Batch,
        Policy::Normal => Scheduling::Normal,
    };
    // Before any runtime or splicer thread starts: they inherit the policy.
    if let Err(e) = sched::apply(policy) {
        warn!(error = %e, ?policy, "cannot set the threads' scheduling policy; keeping the kernel's default");
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    if args.runtime == Runtime::Shared {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        // One splicer thread (and listening socket) per worker thread of the shared runtime.
        let runtimes = vec![rt.handle().clone(); threads];
        return rt.block_on(serve(args, runtimes));
    }
    let workers = (0..threads)
        .map(worker)
        .collect::<anyhow::Result<Vec<_>>>()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(serve(args, workers))
}

/// Starts worker thread `i` with its own current-thread runtime and returns its handle. The
/// thread runs until the process exits: draining is tracked per connection, not per thread.
fn worker(i: usize) -> anyhow::Result<Handle> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a worker runtime")?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name(format!("isthmus-worker-{i}"))
        .spawn(move || rt.block_on(std::future::pending::<()>()))
        .context("cannot start a worker thread")?;
    Ok(handle)
}

async fn serve(args: Args, workers: Vec<Handle>) -> anyhow::Result<ExitCode> {
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let threads = ConnectionThreads {
        runtimes: workers,
        busy_poll: args.busy_poll,
    };
    let proxy = Proxy::start_on(&args.config, Registry::default(), threads).await?;
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
