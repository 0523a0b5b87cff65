//! What `join_expose.rs` watches while the migration runs, between its steps: the source's
//! reported members against etcd's list, when each destination member was listed and became a
//! voter, when each source member restarted in `Expose`'s roll, and how far the source's raft
//! log is from a snapshot when a member joins.

use super::join_observe::{members, members_listed, status, Sides, SRC, STEP};
use super::join_tls::{Tls, ETCD};
use super::node::{etcdctl, poll, Node, POLL};
use isthmus_lab::report::steps::Recorder;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What the orchestrator copies to the destination: the source's `status.exposedMembers`,
/// checked against etcd's member list. etcd v3.5 starts a joining member only if its
/// `initial-cluster` names each existing member with exactly the peer URLs the cluster holds
/// (`etcdserver/api/membership` `ValidateClusterAndAssignIDs`, `pkg/netutil`
/// `URLStringsEqual`: same count, compared sorted), and druid v0.38.1 writes the bootstrap
/// members' `peerUrls` into it as they are (`configmap/etcdconfig.go`
/// `prepareInitialCluster`): with `additionalAdvertisePeerURLs` the controller reports each
/// source member's in-cluster URL beside its exposed one, as etcd holds them.
pub fn source_members_reported(node: &Node, src: &Tls) -> Value {
    let list = members_listed(node, src);
    let exposed = status(node, SRC)["exposedMembers"].clone();
    for m in exposed.as_array().unwrap() {
        let (_, _, held) = list.iter().find(|l| m["name"] == l.0.as_str()).unwrap();
        let mut reported: Vec<&str> = m["peerUrls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap())
            .collect();
        let mut held: Vec<&str> = held.iter().map(String::as_str).collect();
        reported.sort_unstable();
        held.sort_unstable();
        assert_eq!(
            reported, held,
            "{} as reported and as etcd holds it",
            m["name"]
        );
    }
    exposed
}

/// When etcd (asked through the source's client Service) first listed each member named
/// `prefix*`, and when as a voter, from `t0`; `Ok` once the destination's migration (in `ns`)
/// reports `step` ready.
pub fn joins(
    sides: &Sides,
    src: &Tls,
    (ns, step, prefix): (&str, &str, &str),
) -> BTreeMap<String, (Duration, Option<Duration>)> {
    let t0 = Instant::now();
    let mut seen: BTreeMap<String, (Duration, Option<Duration>)> = BTreeMap::new();
    poll(sides.dst, &format!("{ns} at {step}"), STEP, POLL, || {
        for (name, learner, _) in members(sides.src, src)?
            .iter()
            .filter(|m| m.0.starts_with(prefix))
        {
            let e = seen.entry(name.clone()).or_insert((t0.elapsed(), None));
            if !learner && e.1.is_none() {
                e.1 = Some(t0.elapsed());
            }
        }
        let s = status(sides.dst, ns);
        if s["step"] == step && s["stepReady"] == true {
            Ok(())
        } else {
            Err(s.to_string())
        }
    });
    println!(
        "figure: M2: destination {step} through the proxy: {:.1?}",
        t0.elapsed()
    );
    for (name, (listed, voter)) in &seen {
        let voter = voter.unwrap_or_default();
        println!("figure: M2: {step}: {name} listed at +{listed:.1?}, voter at +{voter:.1?}");
    }
    seen
}

/// When each source member's etcd started after Expose's roll, and the leader elections the
/// members logged since: what a slow or failed write is read against.
pub fn restarts(node: &Node) {
    for i in 0..3 {
        let pod = format!("{ETCD}-{i}");
        let started = node.jsonpath(
            SRC,
            &format!("pod/{pod}"),
            "{.status.containerStatuses[?(@.name==\"etcd\")].state.running.startedAt}",
        );
        let log = entries(&node.kubectl(&["-n", SRC, "logs", &pod, "-c", "etcd"]));
        let elections = elections(&log);
        println!("figure: M2: after Expose {pod}'s etcd started at {started}; leader elections it logged at {elections:?}");
    }
}

/// The times (UTC, to the millisecond) of the leader elections and leadership transfers an
/// etcd log shows.
fn elections(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|e| {
            e["msg"]
                .as_str()
                .is_some_and(|m| m.contains("elected leader") || m.contains("leadership transfer"))
        })
        .filter_map(stamp)
        .collect()
}

/// Each warning an etcd log shows since `since` (an RFC 3339 prefix, compared as text): how
/// often, first and last time. etcd says itself why a request waited: "apply request took
/// too long", "leader failed to send out heartbeat on time", "slow fdatasync", a lost leader.
fn warnings(log: &[Value], since: &str) -> BTreeMap<String, (usize, String, String)> {
    let mut seen: BTreeMap<String, (usize, String, String)> = BTreeMap::new();
    for e in log
        .iter()
        .filter(|e| e["level"] == "warn" || e["level"] == "error")
    {
        let (Some(ts), Some(msg)) = (stamp(e), e["msg"].as_str()) else {
            continue;
        };
        if ts.as_str() < since {
            continue;
        }
        let s = seen
            .entry(msg.to_owned())
            .or_insert((0, ts.clone(), ts.clone()));
        s.0 += 1;
        s.2 = ts;
    }
    seen
}

/// etcd's JSON log lines (zap), each parsed once; other lines skipped.
pub fn entries(log: &str) -> Vec<Value> {
    parsed(log.lines())
}

/// [`entries`] of lines already split.
pub fn parsed<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Value> {
    lines
        .into_iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// An entry's time, UTC to the millisecond without the zone (compared as text).
pub fn stamp(e: &Value) -> Option<String> {
    Some(e["ts"].as_str()?.get(..23)?.to_owned())
}

/// What every member of both sides logged about leadership and its own slowness since
/// `since` (UTC, RFC 3339): the cause of a write that waited in `step`, which the client
/// cannot see (issue 45 point 4).
pub fn leadership_since(sides: &Sides, since: &str, step: &str, steps: Option<&Recorder>) {
    for (node, ns) in [(sides.src, SRC), (sides.dst, super::join_observe::DST)] {
        for i in 0..3 {
            let pod = format!("{ETCD}-{i}");
            let Ok(log) = node.try_kubectl(&["-n", ns, "logs", &pod, "-c", "etcd"]) else {
                continue;
            };
            let log = entries(&log);
            let elected: Vec<String> = elections(&log)
                .into_iter()
                .filter(|t| t.as_str() >= since)
                .collect();
            println!(
                "figure: M2: {step}: {ns}/{pod}: leader elections {elected:?}; warnings (count, first, last) {:?}",
                warnings(&log, since)
            );
            if let Some(r) = steps {
                for (end, took) in too_long(&log)
                    .into_iter()
                    .filter(|(t, _)| t.as_str() >= since)
                {
                    r.etcd_slow(&format!("{ns}/{pod}"), &format!("{end}Z"), took);
                }
            }
        }
    }
}

/// etcd's `apply request took too long` lines: (end, UTC to the millisecond without the zone;
/// took, ms), so that a slow shoot request can be set beside etcd's own slow ones.
fn too_long(log: &[Value]) -> Vec<(String, f64)> {
    log.iter()
        .filter(|e| e["msg"] == "apply request took too long")
        .filter_map(|e| Some((stamp(e)?, go_duration_ms(e["took"].as_str()?)?)))
        .collect()
}

/// A Go duration as etcd prints it (`1.2s`, `988.1ms`, `93.2µs`), in milliseconds.
fn go_duration_ms(d: &str) -> Option<f64> {
    let (n, unit) = d.split_at(d.find(|c: char| c.is_alphabetic() || c == 'µ')?);
    let n: f64 = n.parse().ok()?;
    match unit {
        "s" => Some(n * 1000.0),
        "ms" => Some(n),
        "µs" | "us" => Some(n / 1000.0),
        "ns" => Some(n / 1e6),
        _ => None,
    }
}

#[test]
fn etcd_warnings_are_counted_since_a_time() {
    let log = r#"{"level":"warn","ts":"2026-11-30T07:20:00.000Z","msg":"slow fdatasync"}
{"level":"warn","ts":"2026-11-30T07:23:31.100Z","caller":"etcdserver/util.go:170","msg":"apply request took too long","took":"1.2s"}
{"level":"info","ts":"2026-11-30T07:23:32.000Z","msg":"raft.node: 1 elected leader 2 at term 5"}
{"level":"warn","ts":"2026-11-30T07:23:40.500Z","msg":"apply request took too long","took":"2s"}"#;
    let log = &entries(log);
    let w = warnings(log, "2026-11-30T07:23:00");
    assert_eq!(
        w.into_iter().collect::<Vec<_>>(),
        [(
            "apply request took too long".to_owned(),
            (
                2,
                "2026-11-30T07:23:31.100".to_owned(),
                "2026-11-30T07:23:40.500".to_owned()
            )
        )]
    );
    assert_eq!(elections(log), ["2026-11-30T07:23:32.000"]);
    assert_eq!(
        too_long(log),
        [
            ("2026-11-30T07:23:31.100".to_owned(), 1200.0),
            ("2026-11-30T07:23:40.500".to_owned(), 2000.0)
        ]
    );
    assert_eq!(go_duration_ms("988.5ms"), Some(988.5));
    assert_eq!(go_duration_ms("93µs"), Some(0.093));
    assert_eq!(go_duration_ms("1m2s"), None);
}

/// druid's `snapshot-count` when the `Etcd` sets none (v0.38.1
/// `internal/component/configmap/etcdconfig.go` `defaultSnapshotCount`): past it a member
/// snapshots and compacts its raft log, and a member joining later is sent a snapshot.
pub const SNAPSHOT_COUNT: u64 = 10_000;

/// The raft index of the source member behind its client Service. Below [`SNAPSHOT_COUNT`] no
/// member has compacted its log, so a joining member is sent entries, which travel over the
/// connections it dials itself; a snapshot needs the leader to dial it (tests/seeds/join.rs).
pub fn raft_index(node: &Node, tls: &Tls) -> Result<u64, String> {
    let ip = node.jsonpath(SRC, &format!("svc/{ETCD}-client"), "{.spec.clusterIP}");
    let flags = tls.etcdctl_flags();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["endpoint", "status", "-w", "json"]);
    let out = etcdctl(node, &format!("https://{ip}:2379"), STATUS, &args)?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
    v[0]["Status"]["raftIndex"]
        .as_u64()
        .ok_or_else(|| format!("no raftIndex in {out}"))
}

/// One endpoint status.
const STATUS: Duration = Duration::from_secs(5);
