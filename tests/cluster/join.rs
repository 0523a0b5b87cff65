//! The migration's etcd part done by the node's real etcd-druid and etcd-backup-restore
//! (issue 44 point 3, without the proxy yet): a destination `Etcd` in another namespace,
//! created with `bootstrapWithExistingCluster` naming the source cluster's members (the Ready
//! example of `druid.rs`), joins it — druid appends the source members to its
//! `initial-cluster` (v0.38.1 `internal/component/configmap/etcdconfig.go`
//! `prepareInitialCluster`) and the source's client endpoints to backup-restore's
//! `--service-endpoints` (`internal/component/statefulset/builder.go` `getServiceEndpoints`);
//! each destination pod's backup-restore (v0.43.0 `pkg/initializer/initializer.go`: scale-up
//! detected, `pkg/member/member_control.go` `AddMemberAsLearner`) adds its member as a learner
//! and promotes it once caught up (`pkg/server/backuprestoreserver.go`'s promote callback),
//! while a client writes through the cluster all along. Then the `Shrink` that etcd-druid#1426
//! will do: leadership moved to a destination member and the source members removed through
//! etcd's API by seed-world's one copy (`seed_world::etcd::{move_leader, remove}`), the source
//! `Etcd` scaled to 0 as gardenlet's cleanup would. Prints each step's duration and each join.

use super::join_writer::{keys, Writer};
use super::node::{poll, Node};
use super::traffic::POLL;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const NS: &str = "druid-join";
const ETCD: &str = "etcd-dest";
/// From apply to three voters: three learners one after another (etcd allows one at a time).
const JOIN: Duration = Duration::from_secs(420);

/// The destination: etcd-druid's example again (the same etcd minor, as druid requires), named
/// `etcd-dest`, created with the source members' in-cluster peer URLs and client Service.
fn destination(example: &str, src_ns: &str, src: &str) -> String {
    let members: String = (0..3)
        .map(|i| {
            format!(
                "        - name: {src}-{i}\n          peerUrls: [\"http://{src}-{i}.{src}-peer.{src_ns}.svc:2380\"]\n"
            )
        })
        .collect();
    let block = format!(
        "    quota: 8Gi\n    bootstrapWithExistingCluster:\n      members:\n{members}      clientEndpoints: [\"http://{src}-client.{src_ns}.svc:2379\"]\n"
    );
    assert!(example.contains("    quota: 8Gi\n"), "{example}");
    example
        .replacen(&format!("name: {src}"), &format!("name: {ETCD}"), 1)
        .replacen("    quota: 8Gi\n", &block, 1)
}

/// etcd's member list asked through `endpoint` (gRPC: druid turns the JSON gateway off).
fn members(node: &Node, endpoint: &str) -> Result<Vec<(String, bool)>, String> {
    let out = node.script(&[
        "node",
        "etcdctl",
        "--endpoints",
        endpoint,
        "--command-timeout",
        "5s",
        "member",
        "list",
        "-w",
        "json",
    ]);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok(v["members"]
        .as_array()
        .ok_or("no members")?
        .iter()
        .map(|m| {
            let name = m["name"].as_str().unwrap_or("").to_owned();
            (name, m["isLearner"] == true)
        })
        .collect())
}

fn client_url(node: &Node, ns: &str, etcd: &str) -> String {
    let ip = node.jsonpath(ns, &format!("svc/{etcd}-client"), "{.spec.clusterIP}");
    assert!(!ip.is_empty(), "{ns}/{etcd}-client has no address");
    format!("http://{ip}:2379")
}

/// The destination joins the source `src` (druid's example, Ready in `src_ns`) and the source
/// members leave, a client writing throughout; the destination's namespace is gone afterwards.
pub fn destination_joins(node: &Node, example: &Path, src_ns: &str, src: &str) {
    let t0 = Instant::now();
    let src_url = client_url(node, src_ns, src);
    let writer = Writer::start(&src_url);
    node.kubectl(&["create", "namespace", NS]);
    let yaml = destination(&std::fs::read_to_string(example).unwrap(), src_ns, src).replacen(
        "metadata:\n",
        &format!("metadata:\n  namespace: {NS}\n"),
        1,
    );
    let applied = Instant::now();
    node.apply(&yaml);

    // Each destination member: when etcd first listed it as a started learner, as a voter.
    let mut joins: BTreeMap<String, (Option<Duration>, Option<Duration>)> = BTreeMap::new();
    poll(
        node,
        "the destination's members voters, its Etcd Ready",
        JOIN,
        POLL,
        || {
            let list = members(node, &src_url)?;
            let at = applied.elapsed();
            for (name, learner) in list.iter().filter(|(n, _)| n.starts_with(ETCD)) {
                let e = joins.entry(name.clone()).or_default();
                e.0.get_or_insert(at);
                if !learner {
                    e.1.get_or_insert(at);
                }
            }
            let voters = joins.values().filter(|j| j.1.is_some()).count();
            let etcd = node.jsonpath(NS, &format!("etcd/{ETCD}"), "{.status.ready}");
            if voters == 3 && list.len() == 6 && etcd == "true" {
                Ok(())
            } else {
                Err(format!("ready={etcd:?} {list:?}"))
            }
        },
    );
    println!(
        "figure: join (real druid + backup-restore): destination Etcd applied to 3 voters of the source cluster and Ready: {:.1?}",
        applied.elapsed()
    );
    for (name, (learner, voter)) in &joins {
        let (learner, voter) = (learner.unwrap_or_default(), voter.unwrap_or_default());
        println!(
            "figure: join of {name} (member list polled ~1 s apart): listed at +{learner:.1?}, voter at +{voter:.1?}"
        );
    }
    added_and_promoted_by_backup_restore(node);
    let joined = node.jsonpath(
        NS,
        &format!("etcd/{ETCD}"),
        "{.status.conditions[?(@.type==\"BootstrappedWithExistingCluster\")].status}",
    );
    assert_eq!(joined, "True", "druid's BootstrappedWithExistingCluster");

    // The shoot's kube-apiserver talks to the destination from now on.
    let dest_url = client_url(node, NS, ETCD);
    writer.point_at(&dest_url);
    let t = Instant::now();
    super::join_shrink::shrink(node, src_ns, src, NS, ETCD);
    println!(
        "figure: shrink (leadership moved, 3 source members removed, source scaled to 0): {:.1?}",
        t.elapsed()
    );

    let (ok, failed) = writer.stop();
    let stored = keys(node, &dest_url);
    let lost: Vec<&u64> = ok.iter().filter(|n| !stored.contains(n)).collect();
    println!(
        "figure: writer through the join and shrink: {} acknowledged, {} failed, {} lost",
        ok.len(),
        failed.len(),
        lost.len()
    );
    assert!(ok.len() > 100, "the writer wrote {}", ok.len());
    assert!(failed.is_empty(), "failed writes: {failed:?}");
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    node.kubectl(&["delete", "namespace", NS, "--wait=false"]);
    poll(
        node,
        "the destination's namespace gone",
        JOIN,
        POLL,
        || match node.try_kubectl(&["get", "namespace", NS]) {
            Err(_) => Ok(()),
            Ok(s) => Err(s),
        },
    );
    println!("figure: the join step took {:.1?}", t0.elapsed());
}

/// The learners were added and promoted by backup-restore itself, as its logs say
/// (`pkg/member/member_control.go`, `pkg/miscellaneous/miscellaneous.go` `DoPromoteMember`).
fn added_and_promoted_by_backup_restore(node: &Node) {
    for i in 0..3 {
        let pod = format!("{ETCD}-{i}");
        let log = node.kubectl(&["-n", NS, "logs", &pod, "-c", "backup-restore"]);
        assert!(
            log.contains("to cluster as a learner") && log.contains("has been promoted"),
            "{pod}'s backup-restore did not add and promote it:\n{log}"
        );
        // What backup-restore's /config said, as the stand-in's etcd started with it.
        let etcd = node.kubectl(&["-n", NS, "logs", &pod, "-c", "etcd"]);
        let state = etcd
            .split("\"initial-cluster-state\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?");
        assert_eq!(state, "existing", "{pod}'s etcd configuration");
    }
}
