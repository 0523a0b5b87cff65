//! What `join_expose.rs` reads and asks of a migration on the node: its status and step, the
//! source cluster's members (etcdctl over TLS through the client Service), what druid and
//! backup-restore say of the join, the connections the proxies forwarded per exposed name,
//! and the clean-up.

use super::join_tls::{Tls, ETCD};
use super::node::{etcdctl, poll, proxy_admin, Node, POLL, SYSTEM};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The seeds' shoot namespaces, in Gardener's form (`shoot--<project>--<name>`), which decides
/// which of a member's two peer URLs the others dial: etcd sorts them as text and dials the
/// first until it fails (`client/pkg/types/urls.go` `NewURLs`, `rafthttp/urlpick.go`). In a
/// seed the in-cluster `<pod>.etcd-main-peer.shoot--….svc` sorts before the exposed
/// `<pod>.shoot--….<seed>.<domain>`, so members of one seed reach each other directly and
/// only the other seed's go through the proxy. A namespace sorting before `etcd-main-peer`
/// (this test's earlier `druid-src`) sent the source's own members through the proxy after
/// `Expose`, a path no seed takes.
pub const SRC: &str = "shoot--isthmus--src";
pub const DST: &str = "shoot--isthmus--dst";
/// A druid roll of three members, or a join of two, on 2 busy cores: CI saw a join of two
/// take 323 s at load ~50, and more than 600 s at load ~78.
pub const STEP: Duration = Duration::from_secs(900);
/// One member list.
const MEMBERS: Duration = Duration::from_secs(5);

/// Where each side of the migration runs: one node for both in `tests/cluster.rs`, seed a
/// (source) and seed b (destination) in `tests/seeds.rs`.
pub struct Sides<'a> {
    pub src: &'a Node,
    pub dst: &'a Node,
}

pub fn status(node: &Node, ns: &str) -> Value {
    let s = node.kubectl(&["-n", ns, "get", "etcdmigration", ETCD, "-o", "json"]);
    serde_json::from_str::<Value>(&s).unwrap()["status"].clone()
}

/// A stretch of a wait, named after what the status said it waited on, from when to when.
pub type Waited = (String, Instant, Instant);

/// Polls until `ns`'s migration reports `step` reached; returns the time it took and where
/// it went: each stretch during which the migration's status named the same thing it waited
/// on ([`waiting_on`]), as seen at each poll.
pub fn reached(node: &Node, ns: &str, step: &str) -> (Duration, Vec<Waited>) {
    let t0 = Instant::now();
    let mut parts: Vec<Waited> = Vec::new();
    poll(node, &format!("{ns} at {step}"), STEP, POLL, || {
        let s = status(node, ns);
        let now = Instant::now();
        let on = waiting_on(&s, step);
        match parts.last_mut() {
            Some(last) if last.0 == on => last.2 = now,
            Some(last) => {
                last.2 = now;
                parts.push((on, now, now));
            }
            None => parts.push((on, t0, now)),
        }
        if s["step"] == step && s["stepReady"] == true {
            Ok(())
        } else {
            Err(s.to_string())
        }
    });
    // The last stretch is the poll that saw the step reached.
    parts.retain(|p| p.0 != READY);
    (t0.elapsed(), parts)
}

const READY: &str = "ready";

/// What a migration's `status` says it waits on for `step`: the controller not having
/// planned it yet, its `Progressing` conditions (`type: reason`), or ready.
pub fn waiting_on(s: &Value, step: &str) -> String {
    if s["step"] != step {
        return format!("the controller planning {step}");
    }
    if s["stepReady"] == true {
        return READY.into();
    }
    let progressing: Vec<String> = s["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "Progressing")
        .map(|c| {
            format!(
                "{}: {}",
                c["type"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?")
            )
        })
        .collect();
    if progressing.is_empty() {
        "not ready, nothing Progressing".into()
    } else {
        progressing.join(", ")
    }
}

/// [`members`], asked again until it answers: on a busy node one call can outlast its 5 s
/// (CI saw the source's leader log "waiting for ReadIndex response took too long" for seconds
/// at the end of `Expose`'s roll).
pub fn members_listed(node: &Node, tls: &Tls) -> Vec<(String, bool, Vec<String>)> {
    poll(node, "the source's member list", ANSWER, POLL, || {
        members(node, tls)
    })
}

/// How long a read of the source's etcd is asked again before the test gives up on it.
pub const ANSWER: Duration = Duration::from_secs(120);

/// etcd's members as the source's client Service lists them: (name, learner, peer URLs).
pub fn members(node: &Node, tls: &Tls) -> Result<Vec<(String, bool, Vec<String>)>, String> {
    let ip = node.jsonpath(SRC, &format!("svc/{ETCD}-client"), "{.spec.clusterIP}");
    let flags = tls.etcdctl_flags();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["member", "list", "-w", "json"]);
    let out = etcdctl(node, &format!("https://{ip}:2379"), MEMBERS, &args)?;
    let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    Ok(v["members"]
        .as_array()
        .ok_or("no members")?
        .iter()
        .map(|m| {
            let urls = m["peerURLs"].as_array().into_iter().flatten();
            (
                m["name"].as_str().unwrap_or("").to_owned(),
                m["isLearner"] == true,
                urls.filter_map(|u| u.as_str().map(String::from)).collect(),
            )
        })
        .collect())
}

/// backup-restore's log says it added its member as a learner: its add was answered, or one
/// of its adds failed in etcd's client after it had committed, and a later one found the
/// member, which backup-restore v0.43.0 takes as added (`pkg/member/member_control.go`
/// `AddMemberAsLearner`, ErrGRPCPeerURLExist: "already part of etcd cluster";
/// `AddLearnerWithRetry` retries any error without logging it, so the failure shows only as
/// etcd client's "retrying of unary invoker failed" on the source's client Service). CI saw
/// it at load ~46 (`etcdserver: request timed out`) and ~71 (`context deadline exceeded`);
/// a leader change answers an add whose outcome is unknown the same way. Nothing else here
/// adds a member, so "already part" with no failed call before it is not its own.
fn own_add(log: &str) -> bool {
    if log.contains("to cluster as a learner") {
        return true;
    }
    let Some(found) = log.find("already part of etcd cluster") else {
        return false;
    };
    log[..found].lines().any(|l| {
        l.contains("etcd-main-client:2379") && l.contains("retrying of unary invoker failed")
    })
}

#[test]
fn a_committed_add_that_timed_out_is_backup_restores_own() {
    let timed_out = r#"{"msg":"retrying of unary invoker failed","target":"etcd-endpoints://0x1/etcd-main-client:2379","error":"rpc error: code = DeadlineExceeded desc = context deadline exceeded"}"#;
    let leader = r#"{"msg":"retrying of unary invoker failed","target":"etcd-endpoints://0x1/etcd-main-client:2379","error":"rpc error: code = Unavailable desc = etcdserver: leader changed"}"#;
    let local = r#"{"msg":"retrying of unary invoker failed","target":"etcd-endpoints://0x2/etcd-main-local:2379","error":"rpc error: code = DeadlineExceeded"}"#;
    let already = r#"msg="Member m with peer urls [u] already part of etcd cluster""#;
    assert!(own_add(r#"msg="Added member 2a to cluster as a learner""#));
    assert!(own_add(&format!("{timed_out}\n{already}")));
    assert!(own_add(&format!("{leader}\n{already}")));
    // Its own etcd not up yet is no attempt of an add; nor is a timeout after the finding.
    assert!(!own_add(&format!("{local}\n{already}")));
    assert!(!own_add(&format!("{already}\n{timed_out}")));
    assert!(!own_add(already));
}

/// Members of the `Etcd` in `ns` were each added as a learner and promoted by their own
/// backup-restore, as its logs say (`pkg/member/member_control.go`,
/// `pkg/miscellaneous/miscellaneous.go` `DoPromoteMember`), and their etcd started with
/// `initial-cluster-state` `existing` (backup-restore's /config, as the wrapper's stand-in
/// logs it). `logs`: each pod's backup-restore log, every container of it, streamed through
/// the join (`etcd_logs::Streams`). Read right after they joined: druid rolls the members it
/// has when `replicas` changes, and a new pod's logs start afresh.
pub fn added_by_backup_restore(node: &Node, ns: &str, logs: BTreeMap<String, String>) {
    for (pod, log) in logs {
        assert!(
            own_add(&log) && log.contains("has been promoted"),
            "{ns}/{pod}'s backup-restore did not add and promote it:\n{log}"
        );
        let etcd = node.kubectl(&["-n", ns, "logs", &pod, "-c", "etcd"]);
        let state = etcd
            .split("\"initial-cluster-state\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?");
        assert_eq!(state, "existing", "{ns}/{pod}'s etcd configuration");
    }
}

/// druid reports the join of the `Etcd` in `ns` (`BootstrappedWithExistingCluster`,
/// `internal/health/condition/check_bootstrap_with_existing_cluster.go`) and it is ready.
pub fn bootstrapped(node: &Node, ns: &str) {
    let etcd = format!("etcd/{ETCD}");
    // druid's health check sets it from the members' leases, on its own period.
    poll(
        node,
        "druid's BootstrappedWithExistingCluster",
        STEP,
        POLL,
        || {
            let joined = node.jsonpath(
                ns,
                &etcd,
                "{.status.conditions[?(@.type==\"BootstrappedWithExistingCluster\")].status}",
            );
            (joined == "True").then_some(()).ok_or(joined)
        },
    );
    poll(node, &format!("{ns}'s Etcd ready"), STEP, POLL, || {
        let r = node.jsonpath(ns, &etcd, "{.status.ready}");
        (r == "true").then_some(()).ok_or(r)
    });
}

/// Connections the proxies forwarded on their peer listeners, per exposed name.
pub fn forwarded(node: &Node) -> Vec<(String, f64)> {
    let mut per: std::collections::BTreeMap<String, f64> = Default::default();
    for (_, body) in proxy_admin(node, SYSTEM, "/metrics") {
        for line in body.lines().filter(|l| {
            l.starts_with("isthmus_proxy_connections_total{listener=\"peer-")
                && l.contains("outcome=\"forwarded\"")
        }) {
            let route = line
                .split("route=\"")
                .nth(1)
                .and_then(|r| r.split('"').next());
            let v = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            if let (Some(r), Some(v)) = (route, v) {
                *per.entry(r.to_owned()).or_default() += v;
            }
        }
    }
    per.into_iter().collect()
}

/// The migrations in `namespaces` of `node` go first (their finalizers need the grants), then
/// the namespaces; the on-demand load balancer goes with the node's last migration.
pub fn cleanup(node: &Node, namespaces: &[&str]) {
    for ns in namespaces {
        node.kubectl(&["-n", ns, "delete", "etcdmigration", ETCD, "--wait=false"]);
    }
    poll(node, "the migrations gone", STEP, POLL, || {
        let left = node.kubectl(&["get", "etcdmigrations", "-A", "-o", "name"]);
        left.trim().is_empty().then_some(()).ok_or(left)
    });
    for ns in namespaces {
        node.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
    poll(
        node,
        "the namespaces and the load balancer gone",
        STEP,
        POLL,
        || {
            let ns = namespaces
                .iter()
                .any(|ns| node.try_kubectl(&["get", "namespace", ns]).is_ok());
            let lb = node
                .try_kubectl(&["-n", SYSTEM, "get", "svc/isthmus-proxy"])
                .is_ok();
            if ns || lb {
                Err(format!("namespaces left {ns}, load balancer left {lb}"))
            } else {
                Ok(())
            }
        },
    );
}
