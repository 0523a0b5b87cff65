//! A rolling update to a new image through `helm upgrade` under load (maxSurge: the new proxy
//! pod is Ready before the old one stops; the controller's routes survive the upgrade), and a
//! pod deleted with open connections draining within its grace period.

use super::checks::proxy_metric;
use super::drops;
use super::node::{poll, proxy_admin, Node, ROOT, SYSTEM};
use super::shoot::SNI;
use super::traffic::{Client, Ended, Load, Watch, POLL};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(300);
/// The chart's proxy.terminationGracePeriodSeconds.
const GRACE: Duration = Duration::from_secs(45);
const ACTIVE: &str = "isthmus_proxy_active_connections{listener=\"client-2379\"}";

fn proxy_pods(node: &Node) -> Vec<String> {
    node.pods_jsonpath(
        SYSTEM,
        "app.kubernetes.io/name=isthmus-proxy",
        "{.items[*].metadata.name}",
    )
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

/// Opens `n` etcd watches and waits until the proxy counts them.
fn open_watches(node: &Node, client: &Client, n: usize) -> Vec<Watch> {
    let before = proxy_metric(node, ACTIVE);
    let watches: Vec<Watch> = (0..n).map(|_| client.watch(node)).collect();
    poll(
        node,
        "the watches open through the proxy",
        LONG,
        POLL,
        || {
            let now = proxy_metric(node, ACTIVE);
            if now >= before + n as f64 {
                Ok(())
            } else {
                Err(format!("{ACTIVE} = {now}"))
            }
        },
    );
    watches
}

/// Waits for every watch to end and counts (drained, failed).
fn ended(node: &Node, watches: &mut [Watch]) -> (usize, Vec<i32>) {
    poll(
        node,
        "the long-lived connections to end",
        LONG,
        POLL,
        || {
            let open = watches
                .iter_mut()
                .map(|w| w.ended())
                .filter(|e| *e == Ended::Open)
                .count();
            if open == 0 {
                Ok(())
            } else {
                Err(format!("{open} open"))
            }
        },
    );
    let mut drained = 0;
    let mut failed = Vec::new();
    for w in watches.iter_mut() {
        match w.ended() {
            Ended::Drained => drained += 1,
            Ended::Failed(c) => failed.push(c),
            Ended::Open => unreachable!(),
        }
    }
    (drained, failed)
}

/// What shows where a new connection of the rolling update was lost: each proxy pod's start
/// and Ready times, its upstream connect errors, name resolutions and connections (a new pod
/// is Ready before its first resolution of the upstream's name), and kube-router's lines on
/// its NetworkPolicy syncs (its ipsets admit a new proxy pod to the etcd pod's policy only
/// after a sync: cloudnativelabs/kube-router#873), and the node's unanswered connections (a
/// SYN translated to an old pod's address, to the new one, or dropped before).
fn why_a_connection_failed(node: &Node, old_ips: &str) -> String {
    let pods = node.pods_jsonpath(
        SYSTEM,
        "app.kubernetes.io/name=isthmus-proxy",
        "{range .items[*]}{.metadata.name} started {.status.startTime} ready {.status.conditions[?(@.type==\"Ready\")].lastTransitionTime}{\"\\n\"}{end}",
    );
    let metrics: Vec<String> = proxy_admin(node, SYSTEM, "/metrics")
        .into_iter()
        .flat_map(|(pod, body)| {
            body.lines()
                .filter(|l| {
                    l.starts_with("isthmus_proxy_upstream_connect_errors_total")
                        || l.starts_with("isthmus_proxy_connections_total")
                        || l.starts_with("isthmus_proxy_dns_resolutions_total")
                })
                .map(|l| format!("{pod}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect();
    let log = node
        .kubeconfig()
        .with_file_name("logs")
        .join("kube-router.log");
    let router: Vec<String> = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| format!("{}: {e}", log.display()))
        .lines()
        .filter(|l| l.contains("sync") || l.contains("Sync"))
        .rev()
        .take(20)
        .map(str::to_owned)
        .collect();
    format!(
        "proxy pods:\n{pods}\nold proxy pods' addresses: {old_ips}\nmetrics:\n{}\nkube-router, last sync lines (newest first):\n{}\nthe node's unanswered and closing connections to 2379 (conntrack: where each SYN was sent):\n{}",
        metrics.join("\n"),
        router.join("\n"),
        unanswered(node)
    )
}

/// The node's conntrack entries of connections to 2379 that were never answered (a
/// connect that timed out leaves one for 120 s, `nf_conntrack_tcp_timeout_syn_sent`): the pod
/// address its SYN was translated to. None: the SYN was dropped before the node let it
/// through (an entry is kept only for a packet that passed its filter). With them every
/// other entry neither established nor in TIME_WAIT: SYN_RECV (the pod answered, its SYN-ACK
/// was lost on the way back), and those closing (FIN_WAIT, CLOSE_WAIT, LAST_ACK, CLOSE): a
/// new SYN on the same addresses and ports is INVALID to conntrack while one lasts, and
/// kube-proxy and kube-router drop it.
fn unanswered(node: &Node) -> String {
    let out = node.script(&["node", "cat", "/proc/net/nf_conntrack"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table
        .lines()
        .filter(|l| {
            l.contains("dport=2379 ") && !l.contains(" ESTABLISHED ") && !l.contains(" TIME_WAIT ")
        })
        .collect();
    if lines.is_empty() {
        "none".to_owned()
    } else {
        lines.join("\n")
    }
}

/// What one rolling update did to the load: new connections attempted and failed (the first
/// errors, and the failure report taken while the new pods run), the long-lived connections
/// the drain closed and those reset.
struct Rolled {
    attempted: u64,
    failed: u64,
    errors: Vec<String>,
    report: String,
    drained: usize,
    reset: Vec<i32>,
}

/// The rolling update to a new image under load, once with tag `v2`, then (to find what
/// fails one new connection in some runs) `ISTHMUS_CLUSTER_ROLLING_UPDATES` − 1 more times
/// with tags `v3`, `v4`, ...: every update's new connections must all succeed, and its
/// long-lived ones end by the drain.
pub fn rolling_update_without_failed_connections(node: &Node, client: &Client) {
    let n: u32 = std::env::var("ISTHMUS_CLUSTER_ROLLING_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let runs: Vec<Rolled> = (2..n + 2)
        .map(|v| rolling_update(node, client, &format!("v{v}")))
        .collect();
    if n > 1 {
        println!(
            "figure: {n} rolling updates: new connections failed per update {:?} of {:?}",
            runs.iter().map(|r| r.failed).collect::<Vec<_>>(),
            runs.iter().map(|r| r.attempted).collect::<Vec<_>>()
        );
    }
    for r in &runs {
        assert_eq!(
            r.failed, 0,
            "new connections failed during the rolling update: {:?}\n{}",
            r.errors, r.report
        );
        assert!(
            r.reset.is_empty(),
            "long-lived connections not closed by the drain: curl exit codes {:?}",
            r.reset
        );
        assert_eq!(r.drained, 3);
    }
}

fn rolling_update(node: &Node, client: &Client, tag: &str) -> Rolled {
    // The same binary under a new tag (a new image for the DaemonSet, no second build).
    let mut build = std::process::Command::new(format!("{ROOT}/scripts/image.sh"));
    build
        .arg(tag)
        .env("ISTHMUS_IMAGE_VERSION", format!("e2e-{tag}"))
        .env("ISTHMUS_IMAGE_NO_BUILD", "1");
    let t = Instant::now();
    let out = build.output().unwrap();
    println!(
        "figure: scripts/image.sh {tag} (same binary, new tag): {:.1?}",
        t.elapsed()
    );
    assert!(
        out.status.success(),
        "scripts/image.sh {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = node.script(&[
        "load",
        &format!("{ROOT}/target/image/isthmus-{tag}.oci.tar"),
    ]);
    assert!(
        out.status.success(),
        "load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let old = proxy_pods(node);
    let old_ips = node.pods_jsonpath(
        SYSTEM,
        "app.kubernetes.io/name=isthmus-proxy",
        "{.items[*].status.podIP}",
    );
    let mut watches = open_watches(node, client, 3);
    let load = Load::start(client, 2);
    // Some traffic before the update starts.
    poll(node, "the load running", LONG, POLL, || {
        let a = load.attempted.load(std::sync::atomic::Ordering::Relaxed);
        if a >= 20 {
            Ok(())
        } else {
            Err(format!("{a} attempted"))
        }
    });
    let routes = node.jsonpath(SYSTEM, "cm/isthmus-proxy-routes", "{.data.proxy\\.json}");
    assert!(routes.contains(SNI), "{routes}");
    let dropped_before = drops::read(node);
    let kube_proxy_before = drops::kube_proxy(node);
    let t0 = Instant::now();
    // What an operator does: the Extension's image tag changes, gardener-operator upgrades.
    let helm = node.helm_upgrade(&["--set", &format!("image.tag={tag}")]);
    // helm's three-way merge leaves the controller's routes alone (the chart renders them
    // back with lookup; before, every upgrade reset the file to the bootstrap).
    let after = node.jsonpath(SYSTEM, "cm/isthmus-proxy-routes", "{.data.proxy\\.json}");
    assert_eq!(
        after, routes,
        "helm upgrade changed the controller's routes"
    );
    node.rolled_out(SYSTEM, "ds/isthmus-proxy", 300);
    let rolled = t0.elapsed();
    poll(node, "the old proxy pods gone", LONG, POLL, || {
        let now = proxy_pods(node);
        if old.iter().any(|o| now.contains(o)) {
            Err(format!("{now:?}"))
        } else {
            Ok(())
        }
    });
    let (drained, reset) = ended(node, &mut watches);
    let (attempted, failed, errors) = load.stop();
    // Read in every run: what a passing one drops is the baseline for a failing one.
    println!(
        "figure: the rolling update to {tag}: the node's DROP/REJECT rules that counted packets {:?}; kube-proxy before {kube_proxy_before:?}, after {:?}",
        drops::read(node).grown_since(&dropped_before),
        drops::kube_proxy(node),
    );
    println!(
        "figure: rolling update to a new image through helm upgrade (helm {helm:.1?}): rollout {rolled:.1?}, old pod gone {:.1?}; new connections {attempted} attempted, {failed} failed; long-lived connections {} closed by the drain, {} reset/failed {reset:?}",
        t0.elapsed(),
        drained,
        reset.len()
    );
    // Taken now: the failed connection's new pod is still the one running.
    let report = if failed > 0 {
        let r = why_a_connection_failed(node, &old_ips);
        println!(
            "figure: the rolling update to {tag}: {failed} new connections failed: {errors:?}\n{r}"
        );
        r
    } else {
        String::new()
    };
    Rolled {
        attempted,
        failed,
        errors,
        report,
        drained,
        reset,
    }
}

pub fn drain_on_delete(node: &Node, client: &Client) {
    let pod = proxy_pods(node).into_iter().next().unwrap();
    let mut watches = open_watches(node, client, 2);
    // Every update of the pod until it is gone: the container's terminated state shows
    // whether it exited by itself (0) or was killed at the end of the grace period (137).
    let status = node
        .kubectl_command(&[
            "-n", SYSTEM, "get", "pod", &pod, "--watch", "-o",
            "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}/{.status.containerStatuses[0].state.terminated.reason}{\"\\n\"}",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    node.kubectl(&["-n", SYSTEM, "delete", "pod", &pod, "--wait=false"]);
    poll(node, "the deleted proxy pod gone", LONG, POLL, || {
        if proxy_pods(node).contains(&pod) {
            Err(pod.clone())
        } else {
            Ok(())
        }
    });
    let gone = t0.elapsed();
    let (drained, failed) = ended(node, &mut watches);
    let mut status = status;
    let _ = status.kill();
    let seen = String::from_utf8_lossy(&status.wait_with_output().unwrap().stdout).into_owned();
    let exits: Vec<&str> = seen.lines().filter(|l| *l != "/").collect();
    println!(
        "figure: proxy pod deleted with 2 open connections: gone after {gone:.1?} (grace period {GRACE:?}, exit {exits:?}); {drained} closed by the drain, {} failed {failed:?}",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "connections reset instead of drained: {failed:?}"
    );
    assert!(
        exits.iter().all(|e| e.starts_with("0/")) && !exits.is_empty(),
        "the proxy did not exit 0 within its grace period (killed?): {seen:?}"
    );
    node.rolled_out(SYSTEM, "ds/isthmus-proxy", 180);
}
