//! M2 across two real seeds (issue 45 point 3, its first step): the source `Etcd` in seed a,
//! the destination in seed b, each seed's own isthmus controller (installed by the chart with
//! `up`) driving its side's `EtcdMigration`, the test playing the orchestrator as on one node
//! (`tests/cluster/join_expose.rs`, the same code with [`Sides`] on two nodes). The
//! destination's backup-restore, etcd and controller reach the source members by their exposed
//! names through the link (`scripts/cluster.sh link`) to seed a's proxy LoadBalancer and proxy
//! pods; a writer through seed a's client Service (then seed b's) sees 0 failed, 0 lost.
//!
//! What crossing the link takes, besides one node's M2:
//! - each seed's CoreDNS answers the other seed's exposed names
//!   (`*.seed-<x>.internal.example.com`) with that seed's load balancer address, a zone of its
//!   own beside the node's rewrite to its own proxies ([`resolve_in`]: the DNS provider's
//!   stand-in, what a DNS extension's record in a shared zone does);
//! - the other seed's connections arrive masqueraded from the link's address in the seed's
//!   segment (`10.(200+i).2.2`, scripts/cluster/link.sh): admitted by the load balancer's
//!   `loadBalancerSourceRanges` and the migration's `allowedSources`, and seed b's controller
//!   may reach seed a's load balancer range (`controller.loadBalancerCIDRs`, which the chart's
//!   explicit NetworkPolicy turns into its egress);
//! - one `TestPki` (one CA) signs both seeds' Secrets, as one Gardener project's etcd CA would.

use super::join_expose::{self, Across};
use super::join_observe::Sides;
use super::join_tls::DOMAIN;
use super::node::{source_ranges_value, Node, SYSTEM};
use serde_json::json;
use std::time::Instant;

fn index(seed: &Node) -> u32 {
    u32::from(seed.seed) - u32::from('a')
}

/// Where the other seeds' connections arrive from in `seed` (the link's end of its segment).
fn link_address(seed: &Node) -> String {
    format!("10.{}.2.2/32", 200 + index(seed))
}

/// `seed`'s LoadBalancer range (scripts/cluster.sh "Seeds").
fn lb_range(seed: &Node) -> String {
    format!("10.{}.1.0/24", 200 + index(seed))
}

/// Each seed admits the other's connections, and may reach its load balancer (chart values,
/// as an operator sets them in the Extension).
fn admit(seed: &Node, other: &Node) {
    let t = Instant::now();
    let cidrs = serde_json::to_string(&[lb_range(other)]).unwrap();
    seed.helm_upgrade(&[
        "--set-json",
        &source_ranges_value(&[&link_address(seed)]),
        "--set-json",
        &format!("controller.loadBalancerCIDRs={cidrs}"),
    ]);
    seed.kubectl(&[
        "-n",
        SYSTEM,
        "rollout",
        "status",
        "deploy/isthmus-controller",
        "--timeout=240s",
    ]);
    println!(
        "figure: seeds M2: seed {} admits {} and reaches {}: {:.1?}",
        seed.seed,
        link_address(seed),
        lb_range(other),
        t.elapsed()
    );
}

/// `other`'s exposed names answered in `seed` with `other`'s load balancer address: a zone
/// `seed-<other>.internal.example.com` in `seed`'s Corefile (more specific than the node's
/// rewrite of the whole domain to its own proxies), read by a restarted CoreDNS (a rollout:
/// the new pod is Ready before the old one goes, so the seed's DNS never stops answering).
fn resolve_in(seed: &Node, other: &Node) {
    let ip = other.jsonpath(
        SYSTEM,
        "svc/isthmus-proxy",
        "{.status.loadBalancer.ingress[0].ip}",
    );
    assert!(
        ip.parse::<std::net::Ipv4Addr>().is_ok(),
        "seed {}'s load balancer address: {ip:?}",
        other.seed
    );
    let corefile = seed.jsonpath("kube-system", "configmap/coredns", "{.data.Corefile}");
    assert!(
        corefile.contains(".:53"),
        "seed {}'s Corefile: {corefile}",
        seed.seed
    );
    let zone = format!("seed-{}.{DOMAIN}", other.seed);
    let block = format!(
        "{zone}:53 {{\n    errors\n    template IN A {{\n        answer \"{{{{ .Name }}}} 30 IN A {ip}\"\n    }}\n    template IN AAAA {{\n        rcode NOERROR\n    }}\n}}\n"
    );
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coredns", "namespace": "kube-system"},
        "data": {"Corefile": format!("{}\n{block}", corefile.trim_end())},
    });
    seed.apply(&cm.to_string());
    seed.kubectl(&["-n", "kube-system", "rollout", "restart", "deploy/coredns"]);
    seed.kubectl(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "deploy/coredns",
        "--timeout=240s",
    ]);
    println!(
        "figure: seeds M2: seed {} answers *.{zone} with {ip}",
        seed.seed
    );
}

/// The migration's etcd part from seed a to seed b (both up with isthmus, the link up).
pub fn m2_across(a: &Node, b: &Node) {
    let t0 = Instant::now();
    admit(a, b);
    admit(b, a);
    let source = join_expose::start(a);
    let resolve = || {
        resolve_in(b, a);
        resolve_in(a, b);
    };
    let (src_from, dst_from) = (link_address(a), link_address(b));
    let across = Across {
        src_from: &src_from,
        dst_from: &dst_from,
        resolve: &resolve,
    };
    join_expose::through_the_proxy(&Sides { src: a, dst: b }, source, Some(&across));
    println!(
        "figure: seeds M2: admitted, joined across the link and shrunk: {:.1?}",
        t0.elapsed()
    );
}
