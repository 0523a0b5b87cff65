//! The shoot's API through the M2 across two real seeds, as the lab's migration runs it
//! (lab/src/migrate, docs/lab.md "The shoot's API"): the source kube-apiserver serves in seed
//! a on the source `Etcd` before the migration starts; the lab's load and watch run through
//! the shoot API's name from seed a's outside; once the destination's members are voters the
//! destination kube-apiserver starts in seed b on the destination `Etcd`, and once it is Ready
//! the name moves to it; the source kube-apiserver's Deployment goes before `Shrink` removes
//! the members it reads from. At the end: 0 failed requests, 0 lost objects, 0 missed watch
//! events.

use super::join::m2_across_with;
use super::join_expose;
use super::join_observe::{DST, SRC, STEP};
use super::node::{poll, Node, POLL};
use super::shoot_api::{self, ShootFiles};
use super::shoot_load::{Outcome, Outside};
use super::shoot_report;
use super::{shoot_side, shoot_webhook};
use isthmus_lab::api::audit;
use isthmus_lab::api::report::{ApiReport, Objects};
use isthmus_lab::report::steps::{DNS_MOVE, SOURCE_API_GONE};
use isthmus_lab::webhook::{Call, Via};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// How long a kube-apiserver's log stream may take to end once its pod is gone.
const LOG_END: Duration = Duration::from_secs(60);

/// Seed `seed`'s outside network namespace (scripts/cluster.sh "Seeds"; seed a's is the
/// single node's).
fn outside(seed: &Node) -> String {
    match seed.seed {
        'a' => super::node::EXT_NS.to_owned(),
        s => format!("isthmus-{s}-ext"),
    }
}

fn ms(t: tokio::time::Instant, epoch: tokio::time::Instant) -> f64 {
    t.saturating_duration_since(epoch).as_secs_f64() * 1000.0
}

pub fn across(a: &Node, b: &Node) {
    let t0 = Instant::now();
    let source = join_expose::start(a);
    // Both load balancer addresses first: the serving certificate and the name's two clients
    // carry them. The destination's namespace is made here (the migration applies it again).
    b.apply(
        &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DST}})
            .to_string(),
    );
    let tunnel = shoot_webhook::Tunnel::new(a, b);
    let addresses = [shoot_api::service(a, SRC), shoot_api::service(b, DST)];
    let mut files = ShootFiles::new(source.pki(), &[&addresses[0], &addresses[1]]);
    tunnel.kube_apiservers(&mut files);
    poll(a, "the source Etcd Ready", STEP, POLL, || {
        let r = a.jsonpath(SRC, "etcd/etcd-main", "{.status.ready}");
        (r == "true").then_some(()).ok_or(r)
    });
    let logs = isthmus_testkit::Scratch::new("seeds-shoot-api");
    let (took, source_log) = shoot_api::deploy(a, SRC, &files, &logs.path().join("seed-a.log"));
    println!(
        "figure: shoot API: the source kube-apiserver Ready in seed a at {}: {took:.1?}",
        addresses[0]
    );
    let webhook =
        shoot_side::Shoot::start(&tunnel, &outside(a), super::node::EXT_IP.parse().unwrap());
    let load = Outside::start(
        &outside(a),
        [&addresses[0], &addresses[1]],
        &files.ca_pem,
        &files.token,
        Some(webhook.admission()),
    );
    webhook.load_started();
    let epoch = load.epoch;
    let steps = isthmus_lab::report::steps::Recorder::new(epoch.into_std());
    let load = RefCell::new(Some(load));
    let phases = RefCell::new(Vec::new());
    let outcome: RefCell<Option<Result<Outcome, String>>> = RefCell::new(None);
    let mark = |name: &str, start: tokio::time::Instant| {
        let now = tokio::time::Instant::now();
        phases
            .borrow_mut()
            .push((name.to_owned(), ms(start, epoch), ms(now, epoch)));
        now
    };
    let m2_start = tokio::time::Instant::now();
    let handover = RefCell::new(m2_start);
    let destination_log = RefCell::new(None);
    let before_shrink = || {
        let t = mark("M2 to the destination's voters", m2_start);
        webhook.join_temporary(b);
        let (took, log) = shoot_api::deploy(b, DST, &files, &logs.path().join("seed-b.log"));
        shoot_report::destination_ready(&steps, b, DST, t.into_std());
        *destination_log.borrow_mut() = Some(log);
        println!(
            "figure: shoot API: the destination kube-apiserver Ready in seed b at {}: {took:.1?}",
            addresses[1]
        );
        let t = {
            let moved = mark("destination kube-apiserver starting", t);
            if let Some(l) = load.borrow().as_ref() {
                l.dns.move_to_destination();
            }
            steps.step(DNS_MOVE, moved.into_std(), Instant::now(), &[]);
            moved
        };
        let gone = Instant::now();
        let took = shoot_api::remove(a, SRC);
        steps.step(SOURCE_API_GONE, gone, Instant::now(), &[]);
        println!("figure: shoot API: the name moved to seed b; the source kube-apiserver's pod gone {took:.1?} later");
        *handover.borrow_mut() = mark("the source kube-apiserver stopping", t);
    };
    let after_shrink = || {
        mark("Shrink", *handover.borrow());
        if let Some(l) = load.borrow_mut().take() {
            *outcome.borrow_mut() = Some(l.stop());
        }
        webhook.after_load(a, b);
    };
    let vpn = tunnel.destination_vpn(b);
    m2_across_with(
        a,
        b,
        source,
        Some(&vpn),
        (&before_shrink, &after_shrink),
        Some(&steps),
    );
    let outcome = outcome.into_inner();
    let Outcome {
        mut rec,
        seen,
        objects,
        epoch_unix_ms,
    } = outcome
        .expect("the load was stopped after Shrink")
        .expect("the load's final read");
    // Each kube-apiserver's view of the requests: its pod is gone (the source's before
    // Shrink, the destination's with its namespace), so its log stream has ended.
    let mut paths = vec![source_log.finish(LOG_END)];
    paths.extend(destination_log.into_inner().map(|l| l.finish(LOG_END)));
    for (seed, path) in ["a", "b"].iter().zip(&paths) {
        let secs = t0.elapsed().as_secs_f64();
        for line in super::shoot_logs::troubles(path, epoch_unix_ms, secs, 20) {
            println!("figure: shoot API: seed {seed}'s kube-apiserver logged: {line}");
        }
    }
    let paths: Vec<&std::path::Path> = paths.iter().map(std::path::PathBuf::as_path).collect();
    audit::attach(&mut rec.samples, &paths, epoch_unix_ms);
    let phases = phases.into_inner();
    let calls = webhook.calls(epoch.into_std());
    let api = ApiReport::new(&rec, &seen, calls.len(), &phases, &[]);
    webhook_during_slow(&rec.samples, &calls);
    etcd_during_slow(
        &rec.samples,
        steps.written().unwrap_or_default().slow.as_slice(),
        &steps.etcd_slow_requests(),
    );
    println!("figure: shoot API across the seeds: {:.1?}", t0.elapsed());
    let measured = shoot_report::Measured {
        api: &api,
        objects: &objects,
        phases: &phases,
        webhook: &calls,
        webhook_failed: webhook.failed(),
    };
    shoot_report::write(&steps, measured);
    check(&api, &objects);
    webhook.check();
}

/// For each failed request and each of 2 s or more: the reviews the webhook accepted from
/// the same kube-apiserver while it waited, and the one before. None while the request
/// waited, with reviews before and after: its time went before the webhook (kube-apiserver,
/// the tunnel) or after it; reviews answered at once: it went elsewhere (etcd).
fn webhook_during_slow(samples: &[isthmus_lab::api::load::ApiSample], calls: &[Call]) {
    for s in samples.iter().filter(|s| !s.ok || s.latency_ms >= 2000.0) {
        let via = if s.via == "source" {
            Via::Source
        } else {
            Via::Destination
        };
        let end = s.start_ms + s.latency_ms;
        let from: Vec<&Call> = calls.iter().filter(|c| c.via == via).collect();
        let during: Vec<String> = from
            .iter()
            .filter(|c| (s.start_ms..=end).contains(&c.start_ms))
            .map(|c| format!("{:.1} s ({:.0} ms)", c.start_ms / 1000.0, c.latency_ms))
            .collect();
        let before = from
            .iter()
            .filter(|c| c.start_ms < s.start_ms)
            .map(|c| c.start_ms / 1000.0)
            .fold(f64::NAN, f64::max);
        println!(
            "figure: shoot webhook while {:?} {} via {} waited ({:.1} s to {:.1} s, ok {}): reviews accepted from its kube-apiserver [{}], the one before at {before:.1} s",
            s.op,
            s.object,
            s.via,
            s.start_ms / 1000.0,
            end / 1000.0,
            s.ok,
            during.join(", ")
        );
    }
}

/// Where the time of each request of a second or more went, on etcd's side (issue 45 point
/// 4): the puts of a second or more the etcd writer (straight to etcd, no kube-apiserver, no
/// webhook) had in flight at the same time, and the requests of 500 ms or more etcd itself
/// logged as too long then (`etcd`: start, took, member; from `Join` and `Grow`). A slow
/// request beside either waited on etcd; one beside neither waited elsewhere.
fn etcd_during_slow(
    samples: &[isthmus_lab::api::load::ApiSample],
    puts: &[(f64, f64)],
    etcd: &[(f64, f64, String)],
) {
    let slow: Vec<_> = samples
        .iter()
        .filter(|s| !s.ok || s.latency_ms >= 1000.0)
        .collect();
    let mut beside = 0;
    for s in &slow {
        let during: Vec<String> = puts
            .iter()
            .filter(|(at, ms)| overlaps(*at, *ms, s.start_ms, s.latency_ms))
            .map(|(at, ms)| format!("{:.1} s ({ms:.0} ms)", at / 1000.0))
            .collect();
        let logged: Vec<String> = etcd
            .iter()
            .filter(|(at, ms, _)| *ms >= 500.0 && overlaps(*at, *ms, s.start_ms, s.latency_ms))
            .map(|(at, ms, who)| format!("{who} {:.1} s ({ms:.0} ms)", at / 1000.0))
            .collect();
        beside += usize::from(!during.is_empty() || !logged.is_empty());
        println!(
            "figure: shoot API: {:?} {} via {} at {:.1} s, {:.0} ms: the etcd writer's puts of 1 s or more then [{}]; etcd's own requests of 500 ms or more then [{}]",
            s.op,
            s.object,
            s.via,
            s.start_ms / 1000.0,
            s.latency_ms,
            during.join(", "),
            logged.join(", ")
        );
    }
    println!(
        "figure: shoot API: {} requests of 1 s or more (or failed), {beside} of them while a put straight to etcd took 1 s or more or etcd logged one of 500 ms or more ({} such puts in all)",
        slow.len(),
        puts.len()
    );
}

/// Whether the span from `at` for `ms` overlaps the one from `start` for `length` (ms).
fn overlaps(at: f64, ms: f64, start: f64, length: f64) -> bool {
    at <= start + length && at + ms >= start
}

#[test]
fn a_put_in_flight_during_a_request_overlaps_it() {
    // Inside, begun inside, ended inside, and apart.
    assert!(overlaps(4000.0, 1500.0, 4500.0, 2000.0));
    assert!(overlaps(9000.0, 1000.0, 8000.0, 1500.0));
    assert!(overlaps(0.0, 1000.0, 500.0, 100.0));
    assert!(!overlaps(0.0, 1000.0, 2000.0, 1000.0));
    assert!(!overlaps(4000.0, 1500.0, 2000.0, 1000.0));
}

/// Prints the load's and the watch's figures and asserts the lab's invariants.
fn check(api: &ApiReport, objects: &Objects) {
    println!(
        "figure: shoot API: {} requests ({} via the source, {} via the destination), {} failed, {} retried, worst {:.0} ms, longest gap between acknowledged writes {:.0} ms",
        api.requests, api.via_source, api.via_destination, api.failed, api.retried, api.worst_ms, api.longest_write_gap_ms
    );
    println!(
        "figure: shoot API: {} writes acknowledged, {} lost; watch {} events, {} missed, {} out of order, {} reconnects, {} relists; {} stale reads",
        objects.written, objects.missing, api.watch.events, api.watch.missing, api.watch.out_of_order, api.watch.reconnects, api.watch.gone, api.stale_reads
    );
    for p in &api.phases {
        println!("figure: shoot API: phase {p:?}");
    }
    for s in &api.slow {
        println!("figure: shoot API: {s}");
    }
    assert!(
        objects.written > 100,
        "{} writes acknowledged",
        objects.written
    );
    assert!(
        api.via_destination > 0,
        "no request reached the destination"
    );
    let failed: Vec<_> = api.samples.iter().filter(|s| !s.ok).take(5).collect();
    assert_eq!(api.failed, 0, "failed requests, the first: {failed:?}");
    assert_eq!(objects.missing, 0, "lost: {:?}", objects.missing_examples);
    assert_eq!(
        (api.watch.missing, api.watch.out_of_order),
        (0, 0),
        "the watch"
    );
    assert_eq!(api.stale_reads, 0, "reads behind an acknowledged patch");
}
