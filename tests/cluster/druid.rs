//! The node's real etcd-druid (v0.38.1, deployed as gardenlet deploys it: scripts/cluster/
//! druid.sh): etcd-druid's own example `Etcd` (examples/etcd/druid_v1alpha1_etcd.yaml of its
//! module, which names no backup store), applied unedited to a namespace of its own, becomes
//! Ready — three real etcd v3.5.27 members with etcd-backup-restore v0.43.0 beside each, in a
//! StatefulSet druid owns, on volumes the default StorageClass provisions on demand — and
//! serves as one cluster. Deleting the namespace gives the volumes back. Then the migration's
//! etcd part through isthmus (`join_expose.rs`: a TLS source `Etcd`, a destination joining it
//! through the proxy pods, the controller driving both). druid keeps running for the later
//! steps: the shoot's `Etcd` (`shoot.rs`) is its too. Prints the time to Ready and the memory
//! of druid, the etcd pods and the node.

use super::node::{etcdctl, poll, Node, LONG, POLL, ROOT, SYSTEM};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const NS: &str = "druid-example";
/// The example's name.
const ETCD: &str = "etcd-test";
/// From apply to Ready: image start, volume provisioning and three members joining, on 2 busy cores.
const READY: Duration = Duration::from_secs(600);
/// One etcdctl request on a Ready cluster.
const ETCDCTL: Duration = Duration::from_secs(10);

/// The example in the module cache, through the node's pinned wrapper module.
fn example() -> PathBuf {
    let out = Command::new("go")
        .args(["list", "-mod=readonly", "-m", "-f", "{{.Dir}}"])
        .arg("github.com/gardener/etcd-druid")
        .current_dir(PathBuf::from(ROOT).join("scripts/etcd-druid"))
        .env("GOFLAGS", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("examples/etcd/druid_v1alpha1_etcd.yaml")
}

fn json(node: &Node, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&node.kubectl(&a)).unwrap()
}

pub fn stock_etcd_becomes_ready(node: &Node) {
    let before = node_memory();
    // The migration's source `Etcd` becomes Ready beside the example (join_expose.rs), and
    // seed b comes up beside both, for the destination (seeds/join.rs).
    let m2 = super::join_expose::start(node);
    let seed_b = std::thread::spawn(super::across::SeedB::up);
    node.kubectl(&["create", "namespace", NS]);
    let file = example();
    let t0 = Instant::now();
    node.kubectl(&["-n", NS, "apply", "-f", file.to_str().unwrap()]);
    let etcd = poll(node, "the example Etcd Ready", READY, POLL, || {
        let etcd = json(node, &["-n", NS, "get", "etcd", ETCD]);
        if etcd["status"]["ready"] == true {
            Ok(etcd)
        } else {
            Err(format!("{}", etcd["status"]))
        }
    });
    let took = t0.elapsed();
    println!("figure: etcd-druid's example Etcd, apply to status.ready (M2's source Etcd starting beside it): {took:.1?}");

    // Three pods of a StatefulSet that the Etcd owns, with the images of the node's image
    // vector overwrite, each on a volume of the default StorageClass.
    let sts = json(node, &["-n", NS, "get", "statefulset", ETCD]);
    let owner = &sts["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"], &owner["controller"]),
        (&Value::from("Etcd"), &Value::from(ETCD), &Value::from(true)),
        "{}",
        sts["metadata"]
    );
    assert_eq!(sts["status"]["readyReplicas"], 3, "{}", sts["status"]);
    let images: Vec<&str> = sts["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        images,
        [
            "isthmus.local/etcd-wrapper-standin:v3.5.27",
            "isthmus.local/etcdbrctl:v0.43.0"
        ]
    );
    let pvcs = json(node, &["-n", NS, "get", "pvc"]);
    let bound: Vec<(&str, &str)> = pvcs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["status"]["phase"].as_str().unwrap_or(""),
                p["spec"]["storageClassName"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(bound, [("Bound", "local-path"); 3], "{pvcs}");
    let conditions: Vec<String> = etcd["status"]["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c["type"].as_str().unwrap(),
                        c["status"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    println!(
        "figure: the example Etcd's conditions: {}",
        conditions.join(", ")
    );

    protected_by_druids_webhook(node);
    one_cluster(node);
    memory(node, &before);
    volumes_given_back(node);
    let seed_b = seed_b
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    super::across::m2_across_from(node, seed_b.node(), m2);
    drop(seed_b);
    // Seed a's controller no longer reaches seed b's load balancer range.
    node.helm_upgrade(&["--set-json", "controller.loadBalancerCIDRs=[]"]);
    node.rolled_out(SYSTEM, "deploy/isthmus-controller", 240);
}

/// The three members form one cluster: the client Service lists them, a value put through it
/// is read back from each member's own address. (Druid's etcd configuration turns etcd's JSON
/// gateway off, so this speaks gRPC: Debian's etcdctl, run in the node's network namespace.)
fn one_cluster(node: &Node) {
    let etcdctl = |endpoint: &str, args: &[&str]| -> String {
        etcdctl(node, &format!("http://{endpoint}:2379"), ETCDCTL, args).unwrap()
    };
    let service = node.jsonpath(NS, &format!("svc/{ETCD}-client"), "{.spec.clusterIP}");
    let members: Value =
        serde_json::from_str(&etcdctl(&service, &["member", "list", "-w", "json"])).unwrap();
    let mut names: Vec<&str> = members["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap_or(""))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["etcd-test-0", "etcd-test-1", "etcd-test-2"],
        "{members}"
    );
    etcdctl(&service, &["put", "isthmus", "druid"]);
    let pods = node.pods_jsonpath(
        NS,
        "app.kubernetes.io/component=etcd-statefulset",
        "{.items[*].status.podIP}",
    );
    let ips: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(ips.len(), 3, "{pods}");
    for ip in ips {
        // --consistency=s: this member's own copy, not the leader's answer.
        let got = etcdctl(
            ip,
            &["get", "isthmus", "--print-value-only", "--consistency=s"],
        );
        assert_eq!(got, "druid", "member at {ip}");
    }
    println!("figure: the example Etcd is one cluster of {names:?}: a put through {ETCD}-client read back from each member");
}

/// Druid's etcd-components webhook (on, as gardenlet deploys druid) refuses anyone else's
/// change to what druid manages: kube-apiserver reaches it through its Service.
fn protected_by_druids_webhook(node: &Node) {
    let refused = node
        .try_kubectl(&["-n", NS, "delete", "statefulset", ETCD, "--dry-run=server"])
        .expect_err("deleting the StatefulSet druid manages");
    assert!(
        refused.contains("etcdcomponents.webhooks.druid.gardener.cloud"),
        "{refused}"
    );
}

/// The node cgroup's working set (usage less inactive file pages, as kubelet counts it), MiB.
fn node_memory() -> u64 {
    let dir = "/sys/fs/cgroup/memory/isthmus-node";
    let usage: u64 = std::fs::read_to_string(format!("{dir}/memory.usage_in_bytes"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).unwrap();
    let inactive: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    usage.saturating_sub(inactive) >> 20
}

/// Druid's and the etcd pods' working sets (kubelet's summary) and the node's, before and after.
fn memory(node: &Node, before: &u64) {
    let summary: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "--raw",
        "/api/v1/nodes/isthmus-node/proxy/stats/summary",
    ]))
    .unwrap();
    let mib = |ns: &str, prefix: &str| -> Vec<u64> {
        summary["pods"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| {
                p["podRef"]["namespace"] == ns
                    && p["podRef"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(prefix))
            })
            .map(|p| p["memory"]["workingSetBytes"].as_u64().unwrap_or(0) >> 20)
            .collect()
    };
    println!(
        "figure: memory (working set): etcd-druid {:?} MiB, the 3 etcd pods {:?} MiB, local-path-provisioner {:?} MiB; the node {} MiB before the Etcd, {} MiB with it, M2's source Etcd and the shoot's",
        mib("garden", "etcd-druid"),
        mib(NS, ETCD),
        mib("local-path-storage", "local-path-provisioner"),
        before,
        node_memory()
    );
}

/// Deleting the namespace deletes the Etcd (druid removes its finalizer), the claims and,
/// through the provisioner's teardown, the volumes and their directories.
fn volumes_given_back(node: &Node) {
    let pvs: Vec<String> = json(node, &["get", "pv"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["spec"]["claimRef"]["namespace"] == NS)
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pvs.len(), 3, "{pvs:?}");
    let t0 = Instant::now();
    node.kubectl(&["delete", "namespace", NS, "--wait=false"]);
    poll(node, "the example's volumes deleted", LONG, POLL, || {
        let left = node.kubectl(&["get", "pv", "-o", "name"]);
        match pvs.iter().filter(|p| left.contains(p.as_str())).count() {
            0 => Ok(()),
            n => Err(format!("{n} left: {left}")),
        }
    });
    let state = std::env::var_os("ISTHMUS_CLUSTER_DIR")
        .map_or_else(|| PathBuf::from(ROOT).join("target/cluster"), PathBuf::from);
    let dirs: Vec<_> = std::fs::read_dir(state.join("volumes"))
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .filter(|d| d.to_string_lossy().contains(NS))
        .collect();
    assert!(dirs.is_empty(), "volume directories left: {dirs:?}");
    println!(
        "figure: namespace deleted to its 3 volumes gone: {:.1?}",
        t0.elapsed()
    );
}
