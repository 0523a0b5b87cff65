//! Issue 44 point 3 through isthmus (M2): two druid `Etcd`s with peer and client TLS
//! (`join_tls.rs`) in two namespaces that play two seeds, the isthmus controller driving their
//! `EtcdMigration`s while the test plays the orchestrator (as lab/src/migrate/ does: it
//! advances the source and the destination and gives the destination the source's members as
//! the source's status reports them, `source_members_reported`). At `Expose` the controller
//! sets the source's `additionalAdvertisePeerURLs` and `skipClientSANVerification` and asks
//! druid to reconcile: druid rolls the members, and each one's backup-restore updates its peer
//! URLs in etcd (`pkg/server/backuprestoreserver.go` `updatePeerURLIfChanged`). At `Join` the
//! controller creates the destination `Etcd` with `bootstrapWithExistingCluster`, at `Grow` it
//! scales it to 3: each member's backup-restore adds it as a learner through the proxy's
//! client routes and promotes it (`pkg/initializer/initializer.go`, `pkg/member/
//! member_control.go`), and the destination's members reach the source's through the proxy's
//! peer routes only (the source's namespace admits other namespaces' traffic from the proxies
//! only; the way back is direct until druid advertises a prefixed member's exposed URL,
//! docs/etcd-druid-contract.md "Through the proxy"). Then `Shrink` by seed-world's stand-in
//! of etcd-druid#1426 (`join_shrink.rs`). One controller, the chart's, serves both sides: a
//! second one would write the same proxy route ConfigMap (both "seeds" share this node's
//! proxies). The `DNSRecord`s are made Succeeded by seed-world's DNS provider stand-in; the
//! names resolve through the node's CoreDNS (scripts/cluster/addons.yaml). A client writes
//! through the cluster all along (`join_writer.rs`): 0 failed, 0 lost. Prints each step's
//! duration, each join and the connections the proxy forwarded. The same steps run across two
//! real seeds (`tests/seeds/join.rs`): each side on its own node ([`Sides`]) with its own
//! controller, and what crossing the link needs ([`Across`]).

use super::etcd_logs;
use super::join_observe::{
    added_by_backup_restore, bootstrapped, cleanup, forwarded, members_listed, reached, Sides,
    Waited, ANSWER, DST, SRC, STEP,
};
use super::join_shrink::shrink;
use super::join_tls::{self, DOMAIN, ETCD, POD_NETWORK};
use super::join_watch::{
    joins, leadership_since, raft_index, restarts, source_members_reported, SNAPSHOT_COUNT,
};
use super::join_writer::{keys, Writer};
use super::node::{poll, proxy_admin, Node, POLL, SYSTEM};
use isthmus_controller::crd::{EtcdMigrationSpec, Step};
use isthmus_lab::report::steps::{self as report, Writer as WriterTotals};
use isthmus_seed_world::dns::DnsProviderTask;
use isthmus_seed_world::gardenlet;
use isthmus_testkit::TestPki;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The destination's `memberNamePrefix` (the seed's name, as Gardener would give it).
const PREFIX: &str = "seed-b";

/// What the migration needs when its sides are two seeds joined by the link
/// (`tests/seeds/join.rs`); `None` on one node.
pub struct Across<'a> {
    /// Where the other seed's connections arrive from in the source's seed and in the
    /// destination's (the link's masquerade address): admitted by each side's routes.
    pub src_from: &'a str,
    pub dst_from: &'a str,
    /// Called once both sides are exposed, before the destination joins: each seed's exposed
    /// names resolve in the other seed to that seed's load balancer (the DNS provider's part).
    pub resolve: &'a dyn Fn(),
    /// Called once the destination's members are voters, before `Shrink` removes the
    /// source's (the shoot's kube-apiserver moves to the destination's seed,
    /// `tests/seeds/shoot_api.rs`), and once `Shrink` is done, before the namespaces go.
    pub before_shrink: &'a dyn Fn(),
    pub after_shrink: &'a dyn Fn(),
    /// Each step's start, end and parts, for the run's report (`tests/seeds/shoot_report.rs`).
    pub steps: Option<&'a report::Recorder>,
    /// The destination migration's `spec.vpn` (its seed's controller then runs the temporary
    /// VPN's tunnel server from `Join`, `tests/seeds/shoot_webhook.rs`); `None`: no VPN.
    pub vpn: Option<&'a Value>,
}

fn migration(
    role: &str,
    (ns, seed): (&str, &str),
    step: &str,
    allowed: &[&str],
    destination: Option<Value>,
) -> Value {
    let mut sources = vec![POD_NETWORK];
    sources.extend_from_slice(allowed);
    let mut spec = json!({
        "role": role, "step": step, "etcdName": ETCD, "seedName": seed,
        "internalDomain": DOMAIN, "members": 3,
        "dns": {"type": "local", "secretRef": {"name": "dns-internal", "namespace": ns}},
        "loadBalancer": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "allowedSources": sources,
    });
    if let Some(d) = destination {
        spec["destination"] = d;
    }
    json!({
        "apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
        "metadata": {"name": ETCD, "namespace": ns}, "spec": spec,
    })
}

/// The source seed's `Etcd`, applied as gardenlet would before any migration: started before
/// the node test's other druid step, so that both become Ready in the same minutes.
pub struct Source {
    t0: Instant,
    pki: TestPki,
    tls: join_tls::Tls,
}

impl Source {
    /// The CA of both seeds' etcd Secrets (the shoot's kube-apiservers' too).
    // Only tests/seeds.rs reads it; tests/cluster.rs compiles this file too.
    #[allow(dead_code)]
    pub fn pki(&self) -> &TestPki {
        &self.pki
    }
}

pub fn start(node: &Node) -> Source {
    let t0 = Instant::now();
    let pki = TestPki::new();
    let tls = join_tls::namespace(node, &pki, SRC, "seed-a", "source", true);
    join_tls::apply_etcd(node, SRC);
    Source { t0, pki, tls }
}

fn client_url(node: &Node, ns: &str) -> String {
    let ip = node.jsonpath(ns, &format!("svc/{ETCD}-client"), "{.spec.clusterIP}");
    assert!(!ip.is_empty(), "{ns}/{ETCD}-client has no address");
    format!("https://{ip}:2379")
}

pub fn through_the_proxy(sides: &Sides, source: Source, across: Option<&Across>) {
    let Source { t0, pki, tls: src } = source;
    let (node, dst_node) = (sides.src, sides.dst);
    let steps = across.and_then(|a| a.steps);
    // A step from `start` to now, with where its time went (runs across two seeds only).
    let record = |name: &str, start: Instant, parts: &[Waited]| {
        if let Some(r) = steps {
            r.step(name, start, Instant::now(), parts);
        }
    };
    let names = |list: &[(String, bool, Vec<String>)]| -> Vec<String> {
        list.iter().map(|m| m.0.clone()).collect()
    };
    let (src_from, dst_from): (&[&str], &[&str]) = match across {
        Some(a) => (
            std::slice::from_ref(&a.src_from),
            std::slice::from_ref(&a.dst_from),
        ),
        None => (&[], &[]),
    };
    poll(node, "the source Etcd Ready", STEP, POLL, || {
        let r = node.jsonpath(SRC, &format!("etcd/{ETCD}"), "{.status.ready}");
        (r == "true").then_some(()).ok_or(r)
    });
    println!(
        "figure: M2: the TLS source Etcd applied to Ready: {:.1?}",
        t0.elapsed()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = |n: &Node| {
        rt.block_on(isthmus_testkit::kube::client_from_kubeconfig(
            &n.kubeconfig(),
        ))
    };
    // gardenlet's part, by its stand-in (seed-world/src/gardenlet.rs), as in the lab: the
    // migrations, created with a typed spec, and their steps.
    let create = |n: &Node, ns: &str, m: Value| {
        let spec: EtcdMigrationSpec = serde_json::from_value(m["spec"].clone()).unwrap();
        rt.block_on(gardenlet::create_migration(&client(n), ns, ETCD, &spec))
            .unwrap();
    };
    let advance = |n: &Node, ns: &str, step: Step| {
        rt.block_on(gardenlet::set_step(&client(n), ns, ETCD, step))
            .unwrap();
    };
    let _dns_src = {
        let c = client(node);
        let _g = rt.enter();
        DnsProviderTask::spawn(c, SRC)
    };
    let flags = src.etcdctl_flags();
    let writer = Writer::with_flags(node, &client_url(node, SRC), &flags, 0);

    // Expose: druid rolls the source onto its exposed peer URLs.
    let t = Instant::now();
    let since = utc_rfc3339();
    let pods: Vec<String> = (0..3).map(|i| format!("{ETCD}-{i}")).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("expose-etcd-logs-{}", since.replace(':', "")));
    let streams = etcd_logs::Streams::start(node, SRC, (&pods, "etcd"), dir.clone());
    create(
        node,
        SRC,
        migration("source", (SRC, "seed-a"), "Expose", src_from, None),
    );
    let (_, parts) = reached(node, SRC, "Expose");
    record(&format!("{}: source", report::EXPOSE), t, &parts);
    println!("figure: M2: source Expose (routes served, druid's roll onto the exposed peer URLs, records Succeeded): {:.1?}", t.elapsed());
    let list = members_listed(node, &src);
    if let Some(r) = steps {
        r.members(Instant::now(), names(&list));
    }
    let source_names = names(&list);
    for (name, _, urls) in &list {
        assert!(
            urls.iter().any(|u| u.contains(DOMAIN)),
            "{name} advertises no exposed peer URL: {list:?}"
        );
    }
    restarts(node);
    // What each member logged through the roll: a write that waits or fails then (a member
    // restarting while the others reach each other through the proxy) has its cause there.
    leadership_since(sides, &since, "Expose", steps);
    roll_peers(node, streams, (&since, &utc_rfc3339()), &dir);
    let w = writer.peek();
    println!(
        "figure: M2: writer through Expose's roll: {} acknowledged, failed {:?}, retried (number, first error) {:?}, acknowledged after more than 2 s (number, ms): {:?}",
        w.ok.len(),
        w.failed,
        w.retried,
        w.slow(Duration::from_secs(2)),
    );

    // The destination seed's namespace (no boundary there yet: druid v0.38.1 never advertises
    // a prefixed member's additional peer URLs, so the source reaches the destination's
    // members by their in-cluster names only: docs/etcd-druid-contract.md; across two seeds
    // those do not resolve in the source's, tests/seeds/join.rs), and its exposure.
    let _dst = join_tls::namespace(dst_node, &pki, DST, "seed-b", "destination", false);
    let _dns_dst = {
        let c = client(dst_node);
        let _g = rt.enter();
        DnsProviderTask::spawn(c, DST)
    };
    let mut template = join_tls::etcd_spec(3);
    template.as_object_mut().unwrap().remove("replicas");
    let destination = json!({
        "memberNamePrefix": PREFIX,
        "sourceMembers": source_members_reported(node, &src),
        "etcdVersion": "3.5",
        "etcdTemplate": {"labels": template["labels"], "spec": template},
    });
    let mut dst_migration = migration(
        "destination",
        (DST, "seed-b"),
        "Expose",
        dst_from,
        Some(destination),
    );
    if let Some(vpn) = across.and_then(|a| a.vpn) {
        dst_migration["spec"]["vpn"] = vpn.clone();
    }
    let t = Instant::now();
    create(dst_node, DST, dst_migration);
    let (took, parts) = reached(dst_node, DST, "Expose");
    record(&format!("{}: destination", report::EXPOSE), t, &parts);
    println!("figure: M2: destination Expose (routes served, records Succeeded): {took:.1?}");
    if let Some(a) = across {
        let t = Instant::now();
        (a.resolve)();
        record("names resolving across the seeds", t, &[]);
        println!(
            "figure: M2: each seed's exposed names resolving in the other seed: {:.1?}",
            t.elapsed()
        );
    }

    // Join (2 members) and Grow (the third) through the proxy, by druid and backup-restore.
    let mut joined: Vec<String> = Vec::new();
    for (step, kind, added) in [("Join", Step::Join, 0..2), ("Grow", Step::Grow, 2..3)] {
        let t = Instant::now();
        let since = utc_rfc3339();
        // Across two seeds the source's members cannot dial the destination's (druid v0.38.1
        // advertises those by in-cluster names): a member that must be sent a snapshot could
        // not join, and this test does not show that path.
        let index = poll(node, "the source's raft index", ANSWER, POLL, || {
            raft_index(node, &src)
        });
        println!("figure: M2: the source's raft index before {step}: {index} (a member snapshots past {SNAPSHOT_COUNT})");
        assert!(
            across.is_none() || index < SNAPSHOT_COUNT,
            "the source's raft index {index} before {step}: past a snapshot"
        );
        let mut parts: Vec<Waited> =
            vec![("the source's raft index read".into(), t, Instant::now())];
        advance(node, SRC, kind);
        let (_, source) = reached(node, SRC, step);
        parts.extend(
            source
                .into_iter()
                .map(|p| (format!("source: {}", p.0), p.1, p.2)),
        );
        // Each joining member's backup-restore, every container of it: one that added its
        // member and then crashed (CI: six adds refused "etcdserver: unhealthy cluster", two
        // restarts) leaves its add in neither the current log nor `--previous`.
        let added: Vec<String> = added.map(|i| format!("{ETCD}-{i}")).collect();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{step}-backup-restore-logs-{}",
            since.replace(':', "")
        ));
        let br = etcd_logs::Streams::start(dst_node, DST, (&added, "backup-restore"), dir);
        advance(dst_node, DST, kind);
        let tj = Instant::now();
        let seen = joins(sides, &src, (DST, step, PREFIX));
        parts.extend(join_parts(&seen, &joined, tj, Instant::now()));
        let tb = Instant::now();
        // The step is reached once the members are voters; the stream may trail that line.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && !br.text().values().all(|l| l.contains("has been promoted"))
        {
            std::thread::sleep(POLL);
        }
        added_by_backup_restore(dst_node, DST, br.finish_text());
        parts.push(("backup-restore's logs read".into(), tb, Instant::now()));
        record(step, t, &parts);
        leadership_since(sides, &since, step, steps);
        let new: Vec<String> = seen.into_keys().filter(|n| !joined.contains(n)).collect();
        joined.extend(new);
        if let Some(r) = steps {
            r.members(
                Instant::now(),
                source_names.iter().chain(&joined).cloned().collect(),
            );
        }
    }
    let list = members_listed(node, &src);
    let voters = list.iter().filter(|m| !m.1).count();
    assert_eq!((list.len(), voters), (6, 6), "{list:?}");
    bootstrapped(dst_node, DST);
    let through = forwarded(node);
    println!("figure: M2: peer connections the source's proxies forwarded, per exposed name: {through:?}");
    // The destination's members reach the source's only through the proxy (the boundary).
    for i in 0..3 {
        let name = format!("{ETCD}-{i}.{SRC}.seed-a.{DOMAIN}");
        assert!(
            through.iter().any(|(r, n)| *r == name && *n > 0.0),
            "no peer connection to {name} through the proxy: {through:?}"
        );
    }

    // The shoot's kube-apiserver talks to the destination from now on (a writer in the
    // destination's seed carries on), and the source leaves.
    let dst_url = client_url(dst_node, DST);
    let before = writer.stop();
    let writer = Writer::with_flags(dst_node, &dst_url, &flags, before.last());
    if let Some(a) = across {
        (a.before_shrink)();
    }
    let t = Instant::now();
    let tls = pki.client_config(Some(&pki.client_cert("etcd-client")), &["h2"]);
    let parts = shrink(sides, &tls, (SRC, DST, PREFIX));
    record(report::SHRINK, t, &parts);
    if let Some(r) = steps {
        r.members(Instant::now(), joined.clone());
    }
    println!("figure: M2: shrink by the stand-in of etcd-druid#1426 (leadership moved, 3 source members removed, source scaled to 0): {:.1?}", t.elapsed());
    if let Some(a) = across {
        (a.after_shrink)();
    }

    let w = before.then(writer.stop());
    let stored = keys(dst_node, &dst_url, &flags);
    let lost: Vec<u64> =
        w.ok.iter()
            .map(|o| o.0)
            .filter(|n| !stored.contains(n))
            .collect();
    println!(
        "figure: M2: writer through Expose's roll, the join, the growth and the shrink: {} acknowledged ({} retried: {:?}), {} failed, {} lost; acknowledged after more than 2 s (number, ms): {:?}",
        w.ok.len(),
        w.retried.len(),
        w.retried,
        w.failed.len(),
        lost.len(),
        w.slow(Duration::from_secs(2)),
    );
    if let Some(r) = steps {
        let epoch = r.wall_ms(std::time::UNIX_EPOCH);
        r.writer(WriterTotals {
            acknowledged: w.ok.len(),
            failed: w.failed.len(),
            lost: lost.len(),
            slow: w
                .ok
                .iter()
                .filter(|o| o.1 >= 1000)
                .map(|o| (epoch + o.2 as f64, o.1 as f64))
                .collect(),
        });
    }
    assert!(w.ok.len() > 100, "the writer wrote {}", w.ok.len());
    assert!(w.failed.is_empty(), "failed writes: {:?}", w.failed);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    if std::ptr::eq(node, dst_node) {
        cleanup(node, &[DST, SRC]);
    } else {
        cleanup(dst_node, &[DST]);
        cleanup(node, &[SRC]);
    }
    println!("figure: M2: the step took {:.1?}", t0.elapsed());
}

/// What each source member said about its peers through `Expose`'s roll (the replaced
/// containers' lines too, kept by `streams`), and what the proxies saw of the members'
/// upstreams: whether two running members reached each other while the third restarted.
fn roll_peers(node: &Node, streams: etcd_logs::Streams, window: (&str, &str), dir: &Path) {
    let logs = streams.finish();
    let ids = etcd_logs::ids(&logs);
    println!(
        "figure: M2: Expose: member ids {ids:?}; each member's log in {}",
        dir.display()
    );
    for (pod, log) in &logs {
        for (line, n, first, last) in etcd_logs::peer_lines(log, &ids, window) {
            println!("figure: M2: Expose: {pod}: {n} × {line} ({first} .. {last})");
        }
    }
    for (ip, body) in proxy_admin(node, SYSTEM, "/metrics") {
        let lines: Vec<&str> = body
            .lines()
            .filter(|l| {
                l.contains(ETCD)
                    && (l.contains("upstream_connect_errors")
                        || l.contains("ejections")
                        || l.contains("dns_resolutions")
                        || (l.contains("proxy_connections_total")
                            && !l.contains("outcome=\"forwarded\"")))
            })
            .collect();
        println!("figure: M2: Expose: proxy {ip}: members' upstreams {lines:?}");
    }
}

/// Where a destination step's join went, from `t0` (the step set) to `end` (the step ready),
/// from when etcd first listed each member and when as a voter ([`joins`]): one stretch per
/// change, named after it, so the stretches follow one another; members of `before` (joined
/// at an earlier step) are not this step's.
fn join_parts(
    seen: &std::collections::BTreeMap<String, (Duration, Option<Duration>)>,
    before: &[String],
    t0: Instant,
    end: Instant,
) -> Vec<Waited> {
    let mut marks: Vec<(Duration, String)> = Vec::new();
    for (name, (listed, voter)) in seen.iter().filter(|(n, _)| !before.contains(n)) {
        marks.push((*listed, format!("until {name} added as a learner")));
        if let Some(v) = voter {
            marks.push((*v, format!("until {name} promoted")));
        }
    }
    marks.sort();
    let mut parts = Vec::new();
    let mut from = t0;
    for (at, what) in marks {
        let to = (t0 + at).min(end).max(from);
        parts.push((what, from, to));
        from = to;
    }
    parts.push((
        "until the destination reports the step ready".into(),
        from,
        end,
    ));
    parts
}

/// Now in UTC as RFC 3339 to the millisecond (etcd's log timestamps, compared as text).
fn utc_rfc3339() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%3N"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_migrations_are_typed_specs() {
    let source = migration("source", (SRC, "seed-a"), "Expose", &["10.99.0.2"], None);
    let spec: EtcdMigrationSpec = serde_json::from_value(source["spec"].clone()).unwrap();
    assert_eq!(spec.step, Step::Expose);
    let members = json!([{"name": "etcd-main-0", "peerUrls": ["https://etcd-main-0.x:2380"]}]);
    let destination = json!({
        "memberNamePrefix": PREFIX, "sourceMembers": members, "etcdVersion": "3.5",
        "etcdTemplate": {"labels": {}, "spec": join_tls::etcd_spec(3)},
    });
    let d = migration(
        "destination",
        (DST, "seed-b"),
        "Expose",
        &[],
        Some(destination),
    );
    let spec: EtcdMigrationSpec = serde_json::from_value(d["spec"].clone()).unwrap();
    assert!(spec.destination.is_some());
}
