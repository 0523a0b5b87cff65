//! The steps before the upgrade: readiness, routes from a migration, who may connect, the
//! Lease.

use super::node::{poll, Node, EXT_IP, STRANGER_IP, SYSTEM};
use super::shoot::{Shoot, NS, SNI};
use super::traffic::{Client, POLL};
use serde_json::Value;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use super::node::{proxy_admin, LONG};

/// Seconds since the epoch of an RFC 3339 UTC timestamp as the API writes them.
pub fn epoch(ts: &str) -> u64 {
    let (d, t) = ts.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = d.split('-').map(|x| x.parse().unwrap()).collect();
    let t: Vec<u64> = t.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146097 + doe - 719468) as u64;
    days * 86400 + t[0] * 3600 + t[1] * 60 + t[2]
}

fn json(node: &Node, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&node.kubectl(&a)).unwrap()
}

/// From an empty state (`up` started) to the first pod Ready, by the pods' own conditions.
pub fn first_pod_ready(node: &Node, started: SystemTime) {
    let pods = json(node, &["get", "pods", "-A"]);
    let first = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready" && c["status"] == "True")
                .map(|c| epoch(c["lastTransitionTime"].as_str().unwrap()))
        })
        .min()
        .expect("no pod is Ready");
    let start = started.duration_since(UNIX_EPOCH).unwrap().as_secs();
    println!(
        "figure: empty state to first pod Ready: {} s (whole seconds, the API's resolution)",
        first.saturating_sub(start)
    );
}

/// The DaemonSet in `ns` is Ready through its real probes (kubelet's HTTP GETs of /readyz).
pub fn proxy_ready_through_probes(node: &Node, ns: &str) {
    let ds = json(node, &["-n", ns, "get", "ds/isthmus-proxy"]);
    let (want, ready) = (
        &ds["status"]["desiredNumberScheduled"],
        &ds["status"]["numberReady"],
    );
    assert!(
        want.as_u64() >= Some(1) && want == ready,
        "{}",
        ds["status"]
    );
    let pods = json(
        node,
        &[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=isthmus-proxy",
        ],
    );
    for p in pods["items"].as_array().unwrap() {
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(
            p["status"]["containerStatuses"][0]["ready"], true,
            "{}",
            p["status"]
        );
    }
}

/// The proxy in its pod (RuntimeDefault seccomp, every capability dropped) runs all its
/// threads under `SCHED_BATCH`, the default of `isthmus proxy --scheduling`: the container
/// runtime's profile lets the call through. Read from the host's `/proc`.
pub fn proxy_threads_run_as_batch(node: &Node) {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_proxy = argv.first().is_some_and(|a| a.ends_with(b"isthmus"))
            && argv.get(1) == Some(&&b"proxy"[..]);
        let in_pod =
            std::fs::read_to_string(dir.join("cgroup")).is_ok_and(|c| c.contains("kubepods"));
        if !(is_proxy && in_pod) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(dir.join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            let (name, policy) = isthmus_testkit::sched::name_and_policy(&stat).unwrap();
            threads.push((name.to_string(), policy));
        }
    }
    assert!(
        threads
            .iter()
            .any(|(name, _)| name.starts_with("isthmus-splice")),
        "no splicer thread of a proxy pod found: {threads:?}"
    );
    const SCHED_BATCH: i32 = 3; // <linux/sched.h>
    let not_batch: Vec<_> = threads.iter().filter(|(_, p)| *p != SCHED_BATCH).collect();
    // A splicer leaves batch for a while when its CPU is contended (`sched::Demotion`), and
    // counts it; no other thread ever does.
    let demoted = || {
        not_batch
            .iter()
            .all(|(name, _)| name.starts_with("isthmus-splice"))
            && proxy_metric(node, "isthmus_proxy_sched_demoted_total") > 0.0
    };
    assert!(
        not_batch.is_empty() || demoted(),
        "threads not under SCHED_BATCH: {not_batch:?}"
    );
    println!(
        "figure: proxy threads under SCHED_BATCH in the pod: {}",
        threads.len()
    );
}

/// The proxy pods' metrics: `series` summed over them.
pub fn proxy_metric(node: &Node, series: &str) -> f64 {
    proxy_admin(node, SYSTEM, "/metrics")
        .iter()
        .flat_map(|(_, body)| body.lines())
        .filter_map(|line| line.strip_prefix(series))
        .map(|v| v.trim().parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// The source `EtcdMigration` makes the controller write the routes ConfigMap; kubelet
/// delivers it into the proxy pod, which then routes the exposed name to the etcd pod. The
/// load balancer is on demand (the chart's default `proxy.service.mode: onDemand`): no
/// Service before the migration, the controller's from the chart's template with it.
pub fn migration_routes_reach_etcd(node: &Node, shoot: &Shoot) -> Client {
    let before = node.try_kubectl(&["-n", SYSTEM, "get", "svc/isthmus-proxy", "-o", "name"]);
    assert!(
        matches!(&before, Err(e) if e.contains("NotFound")),
        "a LoadBalancer Service before any migration: {before:?}"
    );
    node.kubectl(&["-n", SYSTEM, "get", "cm/isthmus-proxy-service"]);
    // The outside client may reach the load balancer (the example ranges stay): the
    // template's ranges, which the Service gets when the controller makes it.
    node.source_ranges(&[&format!("{EXT_IP}/32")]);
    shoot.migrate(node);
    let t0 = Instant::now();
    poll(
        node,
        "the controller's routes in the ConfigMap",
        LONG,
        Duration::from_millis(100),
        || {
            let cm = node.jsonpath(SYSTEM, "cm/isthmus-proxy-routes", "{.data}");
            if cm.contains(SNI) {
                Ok(())
            } else {
                Err(cm)
            }
        },
    );
    let written = t0.elapsed();
    let lb = poll(
        node,
        "the controller's LoadBalancer Service with its address (kube-router)",
        LONG,
        POLL,
        || {
            let ip = node.jsonpath(
                SYSTEM,
                "svc/isthmus-proxy",
                "{.status.loadBalancer.ingress[0].ip}",
            );
            if ip.is_empty() {
                Err("none yet".into())
            } else {
                Ok(ip)
            }
        },
    );
    let addressed = t0.elapsed();
    let label = node.jsonpath(
        SYSTEM,
        "svc/isthmus-proxy",
        "{.metadata.labels.isthmus\\.dev/on-demand}",
    );
    assert_eq!(
        label, "true",
        "the on-demand Service is labelled as the controller's"
    );
    println!("figure: LoadBalancer address {lb} (on demand: EtcdMigration created -> Service made with its address {addressed:.1?})");
    let client = Client {
        lb,
        ca: shoot.ca.clone(),
        cert: shoot.cert.clone(),
        key: shoot.key.clone(),
    };
    poll(
        node,
        "the route served through the LoadBalancer",
        LONG,
        Duration::from_millis(200),
        || client.health(node, None),
    );
    println!(
        "figure: EtcdMigration created -> routes ConfigMap written {written:.1?}; -> route served through the on-demand LoadBalancer and the real kubelet {:.1?}",
        t0.elapsed()
    );
    // The controller exposed the source: druid rolls the member (the later steps' load must
    // not meet that roll).
    shoot.rolled_onto_exposed_url(node, &client);
    client
}

/// `loadBalancerSourceRanges` (kube-proxy) and the proxy's own `allowed_sources` (from the
/// migration's `allowedSources`) both see the real client address: externalTrafficPolicy
/// Local keeps it. A stranger is refused by the first, and once the LB admits it, by the second.
pub fn source_ranges_and_allowed_sources(node: &Node, client: &Client) {
    let out = node
        .outside()
        .args([
            "ip",
            "addr",
            "add",
            &format!("{STRANGER_IP}/24"),
            "dev",
            "eth0",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = client.health(node, Some(STRANGER_IP));
    assert!(
        refused.is_err(),
        "a source outside loadBalancerSourceRanges got through: {refused:?}"
    );
    // The load balancer admits the stranger: the release's template changes, and the
    // controller applies it to its on-demand Service with its next pass (the migration's
    // change below; a template change alone waits for the periodic resync).
    node.source_ranges(&[&format!("{EXT_IP}/32"), &format!("{STRANGER_IP}/32")]);
    node.kubectl(&[
        "-n",
        NS,
        "patch",
        "etcdmigration/etcd-main",
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{{"allowedSources":["{EXT_IP}/32","198.51.100.7/32"]}}}}"#),
    ]);
    let series = "isthmus_proxy_hello_rejections_total{listener=\"client-2379\",reason=\"source_not_allowed\"}";
    poll(
        node,
        "the proxy refusing the stranger by allowed_sources",
        LONG,
        POLL,
        || {
            let r = client.health(node, Some(STRANGER_IP));
            let n = proxy_metric(node, series);
            if r.is_err() && n >= 1.0 {
                Ok(())
            } else {
                Err(format!("{r:?}, {series} = {n}"))
            }
        },
    );
    // The allowed client still passes: its address reached the proxy unchanged.
    client.health(node, None).unwrap();
    println!("checked: stranger {STRANGER_IP} refused by loadBalancerSourceRanges, then by allowed_sources; {EXT_IP} passes both");
}

/// Both controller replicas run with their projected tokens under the chart's RBAC; deleting
/// the leader's pod hands the Lease to the other.
pub fn lease_hand_over(node: &Node) {
    node.rolled_out(SYSTEM, "deploy/isthmus-controller", 180);
    let holder = poll(node, "a Lease holder", LONG, POLL, || {
        let h = node.jsonpath(SYSTEM, "lease/isthmus-controller", "{.spec.holderIdentity}");
        if h.is_empty() {
            Err("none".into())
        } else {
            Ok(h)
        }
    });
    node.kubectl(&["-n", SYSTEM, "delete", "pod", &holder, "--wait=false"]);
    let t0 = Instant::now();
    let next = poll(
        node,
        "the Lease handed over",
        LONG,
        Duration::from_millis(100),
        || {
            let h = node.jsonpath(SYSTEM, "lease/isthmus-controller", "{.spec.holderIdentity}");
            if !h.is_empty() && h != holder {
                Ok(h)
            } else {
                Err(h)
            }
        },
    );
    println!(
        "figure: Lease hand-over after deleting the leader's pod: {:.1?} ({holder} -> {next})",
        t0.elapsed()
    );
}
