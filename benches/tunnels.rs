//! The tunnel against the tunnels it replaces, side by side (issue 17): the isthmus tunnel,
//! OpenVPN (Debian's `openvpn`, TCP through an HTTP CONNECT proxy as Gardener's VPN runs it,
//! TUN in network namespaces) and konnectivity (`proxy-server`/`proxy-agent` v0.34.0, built by
//! `scripts/build-konnectivity.sh`, HTTP CONNECT front on a Unix socket), plus floors: the
//! direct path across the same emulated link, and the tunnel path's hops with nothing of a
//! tunnel in them ([`floor`], `relays`; when named, with TLS between them, `tls-relays`, and
//! with HTTP/2 over TLS, `h2-relays`, [`h2floor`]). One load generator drives them all
//! ([`load`]), against the same targets in the shoot's namespace ([`targets`]), every agent
//! connection crossing the lab's userspace link emulator ([`isthmus_lab::link::Link`]).
//!
//! `cargo bench --bench tunnels [-- [--quick] [--rounds N] [--rtts 0,50,150] [--perf] [PEER…]]`
//! (root: namespaces, TUN). Peers are measured in interleaved rounds (the order rotates every
//! round), as the peer bench does. `--perf` adds a pull and a saturation run counted by
//! `perf stat` ([`perf`]); with `TUNNELS_PERF_RECORD=DIR` also a `perf record` of each.
//! `ISTHMUS_BIN` runs another build of `isthmus` (before/after). See BENCHMARKS.md for the
//! figures and the method.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/byte_source.rs"]
mod byte_source;
#[path = "tunnels/floor.rs"]
mod floor;
#[path = "tunnels/h2floor.rs"]
mod h2floor;
#[path = "tunnels/load.rs"]
mod load;
#[path = "tunnels/perf.rs"]
mod perf;
#[path = "tunnels/targets.rs"]
mod targets;
#[path = "tunnels/world.rs"]
mod world;

use isthmus_testkit::percentile;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use world::{Between, Peer, World};

const USAGE: &str = "\
usage: cargo bench --bench tunnels [-- [OPTION…] [PEER…]]   (root: namespaces, TUN)

The isthmus tunnel against OpenVPN and konnectivity across the lab's emulated link, with the
direct path and the bare relays as floors, in interleaved rounds.

options:
  --quick          short runs
  --rounds N       rounds (default 3)
  --rtts LIST      emulated round-trip times in ms, comma-separated (default 0,50,150)
  --perf           one more pull and saturation run under perf stat
                   (TUNNELS_PERF_RECORD=DIR: also perf record)
  -h, --help       this text

PEERs: isthmus konnectivity openvpn (direct and relays always run), and, only when named,
tls-relays (the relays with TLS between them) and h2-relays (HTTP/2 over TLS between them, one
session). ISTHMUS_BIN runs another build of isthmus. See BENCHMARKS.md.";

struct Opts {
    quick: bool,
    perf: bool,
    rounds: usize,
    rtts: Vec<u64>,
    peers: Vec<String>,
}

impl Opts {
    fn parse() -> Opts {
        let mut o = Opts {
            quick: false,
            perf: false,
            rounds: 3,
            rtts: vec![0, 50, 150],
            peers: vec![],
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--perf" => o.perf = true,
                "--rounds" => o.rounds = args.next().and_then(|v| v.parse().ok()).unwrap_or(3),
                "--rtts" => {
                    o.rtts = args
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .filter_map(|v| v.parse().ok())
                        .collect()
                }
                "--bench" => {}
                "--help" | "-h" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                p if !p.starts_with('-') => o.peers.push(p.to_owned()),
                p => {
                    eprintln!("tunnels: unknown option {p}\n\n{USAGE}");
                    std::process::exit(2);
                }
            }
        }
        o
    }

    /// The floors (`direct`, `relays`) always run: the others are read against them. The
    /// floors with TLS (`tls-relays`, `h2-relays`) run only when named.
    fn wants(&self, peer: &str) -> bool {
        matches!(peer, "direct" | "relays")
            || (self.peers.is_empty() && !matches!(peer, "tls-relays" | "h2-relays"))
            || self.peers.iter().any(|p| p == peer)
    }
}

fn main() {
    if let Some(dir) = std::env::var_os(targets::ROLE_ENV) {
        return targets::child_main(std::path::Path::new(&dir));
    }
    if let Ok(role) = std::env::var(floor::ROLE_ENV) {
        return floor::child_main(&role);
    }
    let opts = Opts::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(opts));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Figures per (rtt, peer, metric), printed as one table at the end.
#[derive(Default)]
struct Table(BTreeMap<(u64, usize, &'static str), (String, String)>);

impl Table {
    fn put(&mut self, rtt: u64, peer: &Peer, order: usize, metric: &'static str, v: String) {
        println!("  rtt {rtt:3} ms  {:13} {metric:34} {v}", peer.name);
        self.0
            .insert((rtt, order, metric), (peer.name.to_owned(), v));
    }
}

async fn run(opts: Opts) {
    let world = World::new();
    if world::konnectivity_bins().is_none() {
        // Built on first use (about 3 min on 2 cores, cached in ~/.cache/isthmus): only this bench needs
        // it, so the test command does not pay for it.
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-konnectivity.sh");
        let built = std::process::Command::new(&script)
            .status()
            .is_ok_and(|s| s.success());
        if !built || world::konnectivity_bins().is_none() {
            println!("konnectivity: {} failed; left out", script.display());
        }
    }
    let mut table = Table::default();
    for &rtt_ms in &opts.rtts {
        let rtt = Duration::from_millis(rtt_ms);
        println!("== emulated link RTT {rtt_ms} ms");
        let tag = format!("r{rtt_ms}");
        let mut peers: Vec<Peer> = vec![world::direct(&world, rtt).await];
        if opts.wants("relays") {
            peers.push(world::relays(&world, rtt, &tag, Between::Tcp).await);
        }
        if opts.wants("tls-relays") {
            peers.push(world::relays(&world, rtt, &tag, Between::Tls).await);
        }
        if opts.wants("h2-relays") {
            peers.push(world::relays(&world, rtt, &tag, Between::H2).await);
        }
        if opts.wants("isthmus") {
            peers.push(world::isthmus(&world, rtt, &tag).await);
        }
        if opts.wants("konnectivity") {
            if let Some(k) = world::konnectivity(&world, rtt, &tag).await {
                peers.push(k);
            }
        }
        if opts.wants("openvpn") {
            peers.push(world::openvpn(&world, rtt, &tag).await);
        }
        for p in &peers {
            p.ready().await;
        }
        // Per-call latency, interleaved rounds.
        let (calls, workers) = match (rtt_ms, opts.quick) {
            (0, false) => (200, 4),
            (0, true) => (50, 4),
            (_, false) => (40, 4),
            (_, true) => (12, 4),
        };
        let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); peers.len()];
        for round in 0..opts.rounds {
            for i in 0..peers.len() {
                let k = (i + round) % peers.len();
                lat[k].extend(load::latency(&peers[k].dialer, calls, workers).await);
            }
        }
        // The link emulator is a userspace relay: it accepts the floor's TCP connection
        // locally, so the direct call's TCP handshake does not cross the link, while a tunnel's
        // stream setup (CONNECT → agent → 200) and OpenVPN's TCP handshake through the TUN do.
        // The floor gets that one round trip back: measured + 1 RTT.
        for d in &mut lat[0] {
            *d += rtt;
        }
        let floor50 = percentile(&lat[0], 50.0);
        let floor99 = percentile(&lat[0], 99.0);
        for (k, p) in peers.iter().enumerate() {
            let (p50, p99) = (percentile(&lat[k], 50.0), percentile(&lat[k], 99.0));
            table.put(
                rtt_ms,
                p,
                k,
                "call p50 / p99 ms (vs floor)",
                format!(
                    "{:.1} / {:.1} (+{:.1} / {:+.0} %)",
                    ms(p50),
                    ms(p99),
                    ms(p50) - ms(floor50),
                    (ms(p99) / ms(floor99) - 1.0) * 100.0
                ),
            );
        }
        if rtt_ms == 0 {
            bulk(&opts, &peers, &mut table).await;
            if opts.perf {
                counted(&opts, &world, &peers, &mut table).await;
            }
        }
        if rtt_ms <= 50 {
            for (k, p) in peers.iter().enumerate() {
                let n = if opts.quick { 10 } else { 30 };
                for (bulk, what) in [
                    (false, "call p50 / p99 ms, 1 stream stalled"),
                    (true, "call p50 / p99 ms, 1 stream bulk"),
                ] {
                    let v = tokio::time::timeout(
                        Duration::from_secs(120),
                        load::isolation(&p.dialer, bulk, n),
                    )
                    .await;
                    // The floor's TCP handshake round trip, as above.
                    let v = v.map(|v| {
                        v.into_iter()
                            .map(|d| if k == 0 { d + rtt } else { d })
                            .collect::<Vec<_>>()
                    });
                    let s = match v {
                        Ok(v) => format!(
                            "{:.1} / {:.1}",
                            ms(percentile(&v, 50.0)),
                            ms(percentile(&v, 99.0))
                        ),
                        Err(_) => "calls stuck (> 120 s)".into(),
                    };
                    table.put(rtt_ms, p, k, what, s);
                }
            }
        }
        // The relays have no session to cut: a new stream is a new connection.
        for (k, p) in peers
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.name.ends_with("relays"))
            .skip(1)
        {
            table.put(
                rtt_ms,
                p,
                k,
                "recovery after a cut agent connection",
                recovery(p).await,
            );
        }
        // OpenVPN's TUN addresses and port are reused at the next RTT: this one goes first.
        drop(peers);
    }
    println!("\n| RTT | peer | metric | value |\n|---|---|---|---|");
    for ((rtt, _, metric), (peer, v)) in &table.0 {
        println!("| {rtt} ms | {peer} | {metric} | {v} |");
    }
}

/// Throughput of 1 and 32 streams, CPU per GB, memory per idle stream, calls/s at saturation.
async fn bulk(opts: &Opts, peers: &[Peer], table: &mut Table) {
    let one: u64 = if opts.quick { 64 << 20 } else { 256 << 20 };
    let me = std::process::id();
    for (k, p) in peers.iter().enumerate() {
        let mut pids = p.pids.clone();
        pids.push(me);
        // Idle streams first, before bulk transfers leave freed memory in the peers' heaps.
        // Counted over the peer's own processes (the callers' side is the same for all).
        let n = if opts.quick { 200 } else { 1000 };
        let before = load::rss_bytes(&p.pids);
        let mut idle = Vec::with_capacity(n);
        for _ in 0..n {
            idle.push(p.dialer.source(0).await.unwrap());
        }
        let after = load::rss_bytes(&p.pids);
        drop(idle);
        table.put(
            0,
            p,
            k,
            "RSS KiB per idle stream (peer procs)",
            format!(
                "{:.1}",
                (after.saturating_sub(before)) as f64 / n as f64 / 1024.0
            ),
        );
        load::throughput(&p.dialer, 1, 8 << 20).await;
        let mut best = 0.0f64;
        let (mut cpu_all, mut cpu_peer) = (f64::MAX, f64::MAX);
        for _ in 0..opts.rounds {
            let (a0, p0) = (load::cpu_seconds(&pids), load::cpu_seconds(&p.pids));
            let g = load::throughput(&p.dialer, 1, one).await;
            let gb = one as f64 / 1e9;
            cpu_all = cpu_all.min((load::cpu_seconds(&pids) - a0) / gb);
            cpu_peer = cpu_peer.min((load::cpu_seconds(&p.pids) - p0) / gb);
            best = best.max(g);
        }
        table.put(
            0,
            p,
            k,
            "1 stream Gbit/s (best of rounds)",
            format!("{best:.2}"),
        );
        table.put(
            0,
            p,
            k,
            "CPU s per GB, 1 stream: peer / all",
            format!("{cpu_peer:.2} / {cpu_all:.2}"),
        );
        let g32 = load::throughput(&p.dialer, 32, one / 8).await;
        table.put(0, p, k, "32 streams Gbit/s", format!("{g32:.2}"));
        let secs = if opts.quick { 2 } else { 5 };
        let (rate, _) = load::saturation(&p.dialer, 32, Duration::from_secs(secs)).await;
        table.put(
            0,
            p,
            k,
            "calls/s at saturation (32 callers)",
            format!("{rate:.0}"),
        );
    }
}

/// `--perf`: one more 1-stream pull and one more saturation run, counted by `perf stat` on the
/// peer's processes and on this one (load generator, link relays, CONNECT proxy).
async fn counted(opts: &Opts, world: &World, peers: &[Peer], table: &mut Table) {
    let one: u64 = if opts.quick { 64 << 20 } else { 256 << 20 };
    let secs = if opts.quick { 2 } else { 5 };
    let me = std::process::id();
    for (k, p) in peers.iter().enumerate() {
        let mut pids = p.pids.clone();
        pids.push(me);
        let dir = world.dir.path();
        let Some(stat) = perf::PerfStat::start(&pids, dir, &format!("{}-pull", p.name)).await
        else {
            println!("perf stat could not attach; --perf left out");
            return;
        };
        load::throughput(&p.dialer, 1, one).await;
        let gb = one as f64 / 1e9;
        let (each, sum) = stat.stop();
        let metric = "per GB, 1 stream: CPU/syscalls/switches/faults";
        report(table, (p, k), metric, &each, sum, gb);
        let Some(stat) = perf::PerfStat::start(&pids, dir, &format!("{}-sat", p.name)).await else {
            return;
        };
        let (_, calls) = load::saturation(&p.dialer, 32, Duration::from_secs(secs)).await;
        let (each, sum) = stat.stop();
        let metric = "per call, saturation: CPU/syscalls/switches/faults";
        report(table, (p, k), metric, &each, sum, calls as f64);
        if let Some(out) = std::env::var_os("TUNNELS_PERF_RECORD") {
            let out = std::path::Path::new(&out);
            let tag = format!("{}-pull", p.name);
            if let Some(rec) = perf::PerfStat::record(&pids, out, &tag).await {
                // Long enough for a few thousand samples per process.
                load::throughput(&p.dialer, 1, 1 << 30).await;
                rec.stop();
                println!(
                    "    perf record of a 1-stream pull: {}/perf-{tag}-*.data",
                    out.display()
                );
            }
            let tag = format!("{}-sat", p.name);
            if let Some(rec) = perf::PerfStat::record(&pids, out, &tag).await {
                load::saturation(&p.dialer, 32, Duration::from_secs(secs)).await;
                rec.stop();
                println!(
                    "    perf record of saturation: {}/perf-{tag}-*.data",
                    out.display()
                );
            }
        }
    }
}

/// Puts the counts of the peer's processes (and of all, with this one) into the table under
/// `metric`; prints each process's.
fn report(
    table: &mut Table,
    (p, k): (&Peer, usize),
    metric: &'static str,
    each: &[(u32, perf::Counts)],
    all: perf::Counts,
    per: f64,
) {
    let me = std::process::id();
    let mut peer = perf::Counts::default();
    for (pid, c) in each {
        let who = if *pid == me { "bench" } else { p.name };
        println!(
            "    {metric}: {who} (pid {pid}) {}; {}",
            c.per(per),
            c.calls_per(per)
        );
        if *pid != me {
            peer.add(c);
        }
    }
    table.put(
        0,
        p,
        k,
        metric,
        format!("{} ({})", peer.per(per), all.per(per)),
    );
}

/// Cuts the link under the agent's connection (both ends see a reset), restores it at once,
/// and times until a webhook call succeeds again.
async fn recovery(p: &Peer) -> String {
    let before = p.link.resets();
    let t = Instant::now();
    p.link.cut();
    let deadline = t + Duration::from_secs(5);
    while p.link.resets() == before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    p.link.restore();
    let deadline = t + Duration::from_secs(120);
    loop {
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(3), p.dialer.call()).await {
            return format!("{:.0} ms", ms(t.elapsed()));
        }
        if Instant::now() > deadline {
            return "> 120 s".into();
        }
    }
}
