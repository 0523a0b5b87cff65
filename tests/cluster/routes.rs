//! How fast a route change reaches every proxy pod through the real kubelet (issue 45 point
//! 1): the controller writes the ConfigMap and nudges the pods behind
//! (`controller/src/kube_adapter/nudge.rs`), kubelet resyncs their volumes, the proxy reloads.
//! Without the nudge kubelet's periodic sync delivered a change after 64–84 s on this node.

use super::checks::{proxy_admin, LONG};
use super::node::{poll, Node, EXT_IP, SYSTEM};
use super::shoot::NS;
use std::time::{Duration, Instant};

/// How many route changes the figure is taken over.
const CHANGES: usize = 20;

/// Whether the `/config` of every running proxy pod in `ns` holds `needle`, or why not.
pub fn served_by_all(node: &Node, ns: &str, needle: &str) -> Result<(), String> {
    let pods = proxy_admin(node, ns, "/config");
    if pods.is_empty() {
        return Err("no running proxy pod".into());
    }
    match pods.iter().find(|(_, body)| !body.contains(needle)) {
        Some((ip, _)) => Err(format!("{ip} does not serve {needle} yet")),
        None => Ok(()),
    }
}

/// The `q` quantile of sorted durations (nearest rank).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Changes the source migration's `allowedSources` [`CHANGES`] times (the allowed client stays
/// in) and times each change from the patch to every proxy pod serving it; prints p50/p99.
pub fn delivery_figures(node: &Node) {
    let mut took = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        let cidr = format!("198.18.{i}.0/24");
        let t0 = Instant::now();
        node.kubectl(&[
            "-n",
            NS,
            "patch",
            "etcdmigration/etcd-main",
            "--type=merge",
            "-p",
            &format!(r#"{{"spec":{{"allowedSources":["{EXT_IP}/32","{cidr}"]}}}}"#),
        ]);
        poll(
            node,
            &format!("route change {i} ({cidr}) served by every proxy pod"),
            LONG,
            Duration::from_millis(20),
            || served_by_all(node, SYSTEM, &cidr),
        );
        took.push(t0.elapsed());
    }
    took.sort();
    println!(
        "figure: route change (EtcdMigration patched -> served by every proxy pod, {CHANGES} changes, \
         kubectl's own ~0.1 s included): p50 {:.2?}, p99 {:.2?}, min {:.2?}, max {:.2?}",
        quantile(&took, 0.5),
        quantile(&took, 0.99),
        took[0],
        took[took.len() - 1]
    );
}
