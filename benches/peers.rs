//! Peer comparison: isthmus against nginx (stream + ssl_preread), HAProxy, sniproxy and the
//! direct path, all driven by the same load generator against the same upstream, interleaved.
//!
//! `cargo bench --bench peers [-- [--quick] [--rounds N] [--threads N] [--latency-conns N]
//! [--busy-poll auto|off|DURATION] [FILTER…]]`; FILTERs
//! (also `PEERS_FILTER`, comma-separated) select contenders and/or scenarios by name, e.g.
//! `-- --quick isthmus nginx direct bulk`. The `syscalls` scenario (system calls per
//! connection under `strace -c -f`) and the `profile` scenario (where the CPU goes, call by
//! call, under `perf record -g`) run only when named. See BENCHMARKS.md.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "peers/contender.rs"]
mod contender;
#[path = "peers/latency.rs"]
mod latency;
#[path = "peers/load.rs"]
mod load;
#[path = "peers/profile.rs"]
mod profile;
#[path = "peers/report.rs"]
mod report;
#[path = "peers/syscalls.rs"]
mod syscalls;
#[path = "peers/upstream.rs"]
mod upstream;

use contender::{Kind, Routes, Running, Tuning};
use report::{percentile, Results};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A real ClientHello (Chromium 156, post-quantum key share, 1987 bytes) for `pq.example.test`.
const HELLO: &[u8] = include_bytes!("../proxy/testdata/chromium-156-pq-sni.bin");
const NAME: &str = "pq.example.test";
/// Same length as NAME, so the hello's length fields stay valid when the name is swapped.
const RELOAD_NAME: &str = "rl.example.test";

const SCENARIOS: [&str; 9] = [
    "bulk1", "bulk64", "latency", "connrate", "idle", "reload", "syscalls", "profile", "churn",
];
/// Scenarios run only when a filter names them: `syscalls` runs `connrate` under ptrace,
/// which takes minutes' worth of the others' CPU, and `profile` under `perf record`; neither
/// measures speed. `churn` (RSS before and after 200,000 connections opened and closed with
/// the controller's `idle_timeout: 3h` on isthmus's upstream, applied by a reload that stays
/// for the rest of the round) measures what closed connections leave behind.
const OPT_IN: [&str; 3] = ["syscalls", "profile", "churn"];

const USAGE: &str = "\
usage: cargo bench --bench peers [-- [OPTION…] [FILTER…]]

isthmus against nginx, HAProxy, sniproxy and the direct path, interleaved in rounds; prints
medians, min–max, ratios to the best peer and paired ratios, and writes target/peers.json.

options:
  --quick               short scenarios, 1 round (a smoke run)
  --rounds N            rounds (default 5; 1 with --quick)
  --threads N           workers per proxy (default 2)
  --latency-conns N     connections of the latency scenario (default 8)
  --busy-poll MODE      isthmus --busy-poll auto|off|DURATION (HAProxy busy-polling for a DURATION)
  --turns               print each contender's p99 per 100 ms turn of the latency scenario, in
                        order (when in a round its slow moments were)
  -h, --help            this text

FILTERs (also PEERS_FILTER, comma-separated) pick contenders (isthmus nginx haproxy sniproxy
direct) and scenarios (bulk1 bulk64 latency connrate idle reload; syscalls, profile and churn
only when named). ISTHMUS_BIN runs another build of isthmus. See BENCHMARKS.md.";

#[derive(Debug)]
struct Opts {
    quick: bool,
    rounds: usize,
    threads: usize,
    /// Connections of the latency scenario, each paced at 500 round trips per second.
    latency_conns: usize,
    busy_poll: Option<String>,
    /// Print each contender's turns' p99, in order (`--turns`).
    turns: bool,
    filters: Vec<String>,
}

impl Opts {
    fn parse() -> Opts {
        let mut o = Opts {
            quick: false,
            rounds: 0,
            threads: 2,
            latency_conns: 8,
            busy_poll: None,
            turns: false,
            filters: Vec::new(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--rounds" => o.rounds = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
                "--threads" => o.threads = args.next().and_then(|v| v.parse().ok()).unwrap_or(2),
                "--latency-conns" => {
                    o.latency_conns = args.next().and_then(|v| v.parse().ok()).unwrap_or(8);
                }
                "--busy-poll" => o.busy_poll = args.next(),
                "--turns" => o.turns = true,
                // cargo bench passes --bench to every bench binary.
                "--bench" => {}
                "--help" | "-h" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                s if s.starts_with('-') => {
                    eprintln!("peers: unknown option {s}\n\n{USAGE}");
                    std::process::exit(2);
                }
                s => o.filters.extend(s.split(',').map(str::to_owned)),
            }
        }
        if let Ok(f) = std::env::var("PEERS_FILTER") {
            o.filters
                .extend(f.split(',').filter(|s| !s.is_empty()).map(str::to_owned));
        }
        if std::env::var_os("PEERS_QUICK").is_some() {
            o.quick = true;
        }
        if o.rounds == 0 {
            o.rounds = if o.quick { 1 } else { 5 };
        }
        o
    }

    fn wants(&self, names: &[&str], name: &str) -> bool {
        let relevant: Vec<&String> = self
            .filters
            .iter()
            .filter(|f| names.contains(&f.as_str()))
            .collect();
        relevant.is_empty() || relevant.iter().any(|f| *f == name)
    }
}

/// Sizes of each scenario; `--quick` keeps a smoke run under a minute.
#[derive(Debug)]
struct Plan {
    /// A bulk transfer's first part, not counted in its rate (see `load::bulk`).
    ramp: Duration,
    bulk: Duration,
    latency: Duration,
    latency_conns: usize,
    conn_rate: Duration,
    idle_conns: usize,
    churn_conns: u64,
    reload_conns: usize,
    reload_routes: usize,
}

fn main() -> std::process::ExitCode {
    let opts = Opts::parse();
    // Idle connections need two descriptors each in the harness and in each proxy; children
    // inherit the limit. prlimit(1) rather than setrlimit(2) keeps this file free of unsafe.
    // Where raising the hard limit is not permitted (containers without CAP_SYS_RESOURCE),
    // the idle test opens 8k connections and scales to 10k; see BENCHMARKS.md.
    let _ = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg("--nofile=262144:262144")
        .stderr(std::process::Stdio::null())
        .status();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(opts))
}

async fn run(opts: Opts) -> std::process::ExitCode {
    let plan = if opts.quick {
        Plan {
            ramp: Duration::from_millis(250),
            bulk: Duration::from_millis(500),
            latency: Duration::from_secs(1),
            latency_conns: opts.latency_conns,
            conn_rate: Duration::from_millis(500),
            idle_conns: 2000,
            churn_conns: 20_000,
            reload_conns: 200,
            reload_routes: 10_000,
        }
    } else {
        Plan {
            ramp: Duration::from_secs(1),
            bulk: Duration::from_secs(2),
            latency: Duration::from_secs(3),
            latency_conns: opts.latency_conns,
            conn_rate: Duration::from_secs(2),
            idle_conns: 8000,
            churn_conns: 200_000,
            reload_conns: 1000,
            reload_routes: 10_000,
        }
    };
    let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
    let mut kinds = Vec::new();
    for k in Kind::ALL {
        if !opts.wants(&names, k.name()) {
            continue;
        }
        match k.missing() {
            Some(why) => eprintln!("skipping {}: {why}", k.name()),
            None => kinds.push(k),
        }
    }
    let scenarios: Vec<&str> = SCENARIOS
        .into_iter()
        .filter(|s| opts.wants(&SCENARIOS, s))
        .filter(|s| !OPT_IN.contains(s) || opts.filters.iter().any(|f| f == s))
        .collect();
    let hello: Arc<[u8]> = HELLO.into();
    let reload_hello: Arc<[u8]> = swap_name(HELLO, NAME, RELOAD_NAME).into();
    let (up, upstream_open) = upstream::start(HELLO.len()).await.unwrap();
    let scratch = std::env::temp_dir().join(format!("isthmus-peers-{}", std::process::id()));
    let base = Routes {
        names: std::iter::once(NAME.to_owned())
            .chain((1..10).map(|i| format!("r{i}.fill.example.test")))
            .collect(),
        idle_timeout: None,
    };
    let mut big = base.clone();
    big.names
        .extend((0..plan.reload_routes).map(|i| format!("r{i}.reload.example.test")));
    big.names.push(RELOAD_NAME.to_owned());
    eprintln!(
        "peers: {} round(s), {} worker(s) per proxy, busy polling {:?}, {} latency connection(s), \
         contenders {:?}, scenarios {:?}, load {:?}",
        opts.rounds,
        opts.threads,
        opts.busy_poll,
        opts.latency_conns,
        kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        scenarios,
        loadavg()
    );
    let tuning = Tuning {
        threads: opts.threads,
        busy_poll: opts.busy_poll.clone(),
    };
    let started = Instant::now();
    let mut res = Results::default();
    let mut failures = 0usize;
    for round in 0..opts.rounds {
        // Rotate the order each round so that no contender always goes first.
        let mut order = kinds.clone();
        let n = order.len().max(1);
        order.rotate_left(round % n);
        let mut running = Vec::new();
        for k in &order {
            match Running::start(
                *k,
                &scratch.join(format!("round{round}")),
                up,
                &base,
                &tuning,
                &hello,
            )
            .await
            {
                Ok(r) => running.push(r),
                Err(e) => {
                    failures += 1;
                    eprintln!("round {round}: cannot start {}: {e}", k.name());
                }
            }
        }
        // Only the contender being measured runs; the others are paused.
        for r in &running {
            r.pause(true);
        }
        for s in &scenarios {
            if *s == "latency" {
                // Every contender at once, taking turns (see `latency`).
                for r in &running {
                    r.pause(false);
                }
                let before = demotions(&running).await;
                let latency = latency_round(&running, &plan, opts.turns, &hello, &mut res).await;
                res.push_demotions(s, before, demotions(&running).await);
                if let Err(e) = latency {
                    failures += 1;
                    eprintln!("round {round}: latency: {e}");
                }
                if !all_closed(&upstream_open).await {
                    eprintln!("round {round}: latency: upstream connections still open");
                }
                for r in &running {
                    r.pause(true);
                }
                continue;
            }
            for r in &mut running {
                r.pause(false);
                let inputs = Inputs {
                    plan: &plan,
                    base: &base,
                    hello: &hello,
                    reload_hello: &reload_hello,
                    big: &big,
                    upstream_open: &upstream_open,
                };
                let before = r.demotions().await;
                if let Err(e) = scenario(s, r, &inputs, &mut res).await {
                    failures += 1;
                    eprintln!("round {round}: {} {s}: {e}", r.kind.name());
                }
                res.push_demotions(s, before, r.demotions().await);
                // The contender passes the scenario's closes on before it is paused, or the
                // upstream would keep those sockets (the idle scenario's 8000) open.
                if !all_closed(&upstream_open).await {
                    eprintln!(
                        "round {round}: {} {s}: {} upstream connections still open",
                        r.kind.name(),
                        upstream_open.get()
                    );
                }
                r.pause(true);
            }
        }
        for mut r in running {
            r.stop();
        }
        eprintln!("round {} done at {:.0?}", round + 1, started.elapsed());
    }
    res.derive_added();
    println!("\n{}", res.table());
    if let Some(t) = res.syscall_table() {
        println!("System calls per proxied connection (connrate under strace -c -f, median over rounds):\n{t}");
    }
    if let Some(t) = res.demotion_line() {
        println!("isthmus leaving SCHED_BATCH (demotions per round, by scenario): {t}");
    }
    if let Some(t) = res.profile_table() {
        println!("Where the CPU goes (connrate under perf record -g, share of samples, all rounds):\n{t}");
    }
    let meta = serde_json::json!({
        "rounds": opts.rounds, "quick": opts.quick, "threads_per_proxy": opts.threads,
        "latency_conns": opts.latency_conns, "busy_poll": opts.busy_poll,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_end": loadavg(), "hello_bytes": HELLO.len(),
        "plan": format!("{plan:?}"),
    });
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")),
        Into::into,
    );
    let path = dir.join("peers.json");
    match std::fs::write(
        &path,
        serde_json::to_string_pretty(&res.json(meta)).unwrap(),
    ) {
        Ok(()) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    if failures == 0 {
        let _ = std::fs::remove_dir_all(&scratch);
    } else {
        eprintln!(
            "{failures} failure(s); configurations and logs kept in {}",
            scratch.display()
        );
    }
    std::process::ExitCode::SUCCESS
}

/// What every scenario may need besides the contender.
struct Inputs<'a> {
    plan: &'a Plan,
    base: &'a Routes,
    hello: &'a Arc<[u8]>,
    reload_hello: &'a Arc<[u8]>,
    big: &'a Routes,
    upstream_open: &'a upstream::Open,
}

/// Waits (up to 10 s) until the upstream has no connection open: every close passed on.
/// `connrate` while a tracer (`tool`) watches the contender: the connections made. The closes
/// are part of each connection's cost, so it returns once the upstream has seen them all.
async fn traced_conn_rate(
    k: Kind,
    tool: &str,
    addr: std::net::SocketAddr,
    hello: &Arc<[u8]>,
    plan: &Plan,
    upstream_open: &upstream::Open,
) -> std::io::Result<u64> {
    let (_, ok, failed) = load::conn_rate(addr, hello.clone(), 32, plan.conn_rate).await?;
    if failed > 0 {
        eprintln!(
            "{} under {tool}: {failed} connection attempts failed",
            k.name()
        );
    }
    all_closed(upstream_open).await;
    Ok(ok)
}

async fn all_closed(open: &upstream::Open) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while open.get() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    open.get() == 0
}

async fn scenario(
    name: &str,
    r: &mut Running,
    inputs: &Inputs<'_>,
    res: &mut Results,
) -> std::io::Result<()> {
    let Inputs {
        plan,
        base,
        hello,
        reload_hello,
        big,
        upstream_open,
    } = *inputs;
    let (k, addr) = (r.kind, r.addr);
    match name {
        "bulk1" | "bulk64" => {
            let (conns, key, cpu_key) = if name == "bulk1" {
                (1, "bulk_1conn", "cpu_per_GB_1conn")
            } else {
                (64, "bulk_64conn", "cpu_per_GB_64conn")
            };
            let cpu = r.cpu_seconds();
            let b = load::bulk(addr, hello.clone(), conns, plan.ramp, plan.bulk).await?;
            res.push(key, k, b.rate / 1e9);
            // CPU the proxy spent per GB moved, over the whole transfer (ramp included): far
            // less sensitive to other load on a shared machine than the rate itself.
            if k != Kind::Direct {
                res.push(
                    cpu_key,
                    k,
                    (r.cpu_seconds() - cpu) * 1e3 / (b.bytes as f64 / 1e9),
                );
            }
        }
        "connrate" => {
            let cpu = r.cpu_seconds();
            let (rate, ok, failed) =
                load::conn_rate(addr, hello.clone(), 32, plan.conn_rate).await?;
            if failed > 0 {
                eprintln!("{}: {failed} connection attempts failed", k.name());
            }
            res.push("conns_per_s", k, rate);
            if k != Kind::Direct && ok > 0 {
                // CPU the proxy spent per proxied connection (both TCP handshakes, the hello,
                // the tiny exchange, both closes): the steady view of the connection rate.
                res.push("cpu_per_conn", k, (r.cpu_seconds() - cpu) * 1e6 / ok as f64);
            }
        }
        "syscalls" if k != Kind::Direct => {
            let out = r.dir().join("strace-connrate.txt");
            let trace = syscalls::Trace::attach(&r.pids(), &out).await?;
            let ok = traced_conn_rate(k, "strace", addr, hello, plan, upstream_open).await?;
            let counts = trace.finish().await?;
            if ok > 0 {
                res.push_syscalls(k, &counts, ok);
            }
        }
        "profile" if k != Kind::Direct => {
            let out = r.dir().join("perf-connrate.data");
            let rec = profile::Record::attach(&r.pids(), &out).await?;
            traced_conn_rate(k, "perf", addr, hello, plan, upstream_open).await?;
            let samples = rec.finish().await?;
            // The file is tens of megabytes per round.
            let _ = std::fs::remove_file(&out);
            res.push_profile(k, &samples);
        }
        "idle" if k != Kind::Direct => {
            settle().await;
            let before = r.rss_kib();
            let conns = load::open_many(addr, hello.clone(), plan.idle_conns).await?;
            settle().await;
            let after = r.rss_kib();
            drop(conns);
            let per_10k =
                (after.saturating_sub(before)) as f64 / 1024.0 * 10_000.0 / plan.idle_conns as f64;
            res.push("idle_mem_per_10k", k, per_10k);
        }
        "churn" if k != Kind::Direct => {
            if k == Kind::Isthmus {
                // The controller's limit on the upstream; the reload is in effect once the
                // name it adds routes.
                let mut limited = base.clone();
                limited.idle_timeout = Some("3h");
                limited.names.push(RELOAD_NAME.to_owned());
                r.write_config(&limited)?;
                r.signal_reload()?;
                let deadline = Instant::now() + Duration::from_secs(20);
                while !load::probe(addr, reload_hello).await {
                    if Instant::now() > deadline {
                        return Err(std::io::Error::other("no reload to idle_timeout 3h"));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            settle().await;
            let before = r.rss_kib();
            let (ok, failed) = load::churn(addr, hello.clone(), 32, plan.churn_conns).await?;
            all_closed(upstream_open).await;
            settle().await;
            let after = r.rss_kib();
            eprintln!(
                "{} churn: {ok} connections ({failed} failed), RSS {before} -> {after} KiB",
                k.name()
            );
            let grown = after.saturating_sub(before) as f64 / 1024.0;
            res.push(
                "churn_mem_per_100k",
                k,
                grown * 100_000.0 / ok.max(1) as f64,
            );
        }
        "reload" if k != Kind::Direct => {
            let conns = load::open_many(addr, hello.clone(), plan.reload_conns).await?;
            r.write_config(big)?;
            let t0 = Instant::now();
            r.signal_reload()?;
            let deadline = t0 + Duration::from_secs(20);
            let mut applied = None;
            while Instant::now() < deadline {
                if load::probe(addr, reload_hello).await {
                    applied = Some(t0.elapsed());
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let ms = applied.map_or(f64::INFINITY, |d| d.as_secs_f64() * 1e3);
            res.push("reload_10k_routes", k, ms);
            let n = conns.len();
            let alive = load::alive(conns).await;
            res.push("reload_survivors", k, alive as f64 * 100.0 / n as f64);
        }
        _ => {}
    }
    Ok(())
}

/// isthmus's demotions so far, when it is among `running`.
async fn demotions(running: &[Running]) -> Option<f64> {
    for r in running {
        if let Some(n) = r.demotions().await {
            return Some(n);
        }
    }
    None
}

/// The `latency` scenario of one round: every running contender, unpaused by the caller (who
/// pauses them again once their closes have passed), its connections taking turns with the others'
/// ([`latency::interleaved`]); the order rotates with the round's. With `print_turns`
/// (`--turns`) each contender's p99 per turn is printed in order.
async fn latency_round(
    running: &[Running],
    plan: &Plan,
    print_turns: bool,
    hello: &Arc<[u8]>,
    res: &mut Results,
) -> std::io::Result<()> {
    let cpu: Vec<f64> = running.iter().map(Running::cpu_seconds).collect();
    let measured = latency::interleaved(
        running.iter().map(|r| r.addr).collect(),
        hello.clone(),
        plan.latency_conns,
        500,
        plan.latency,
    )
    .await;
    for ((r, m), cpu) in running.iter().zip(measured?).zip(cpu) {
        if r.kind != Kind::Direct && m.pings > 0 {
            // CPU per round trip: what the proxy adds per message, independent of how busy
            // the rest of the machine is (a parked contender spends nothing in others' turns).
            let per = (r.cpu_seconds() - cpu) * 1e6 / m.pings as f64;
            res.push("cpu_per_rtt", r.kind, per);
        }
        let mut turns = m.turn_p99s();
        if print_turns {
            let us: Vec<String> = turns.iter().map(|t| format!("{}", t / 1000)).collect();
            println!("p99 per turn (us), {}: {}", r.kind.name(), us.join(" "));
        }
        turns.sort_unstable();
        res.push("turn_p99_median", r.kind, percentile(&turns, 50.0) / 1e3);
        res.push("turn_p99_worst", r.kind, percentile(&turns, 100.0) / 1e3);
        let mut v = m.samples;
        v.sort_unstable();
        for (key, p) in [
            ("latency_p50", 50.0),
            ("latency_p99", 99.0),
            ("latency_p999", 99.9),
        ] {
            res.push(key, r.kind, percentile(&v, p) / 1e3);
        }
    }
    Ok(())
}

/// Lets freed memory and closing sockets settle before RSS is read.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

fn swap_name(hello: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = hello
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .expect("SNI in sample");
    let mut v = hello.to_vec();
    v[at..at + to.len()].copy_from_slice(to.as_bytes());
    v
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}
