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
//!
//! The way back is not through isthmus: druid v0.38.1 advertises the destination's members by
//! their in-cluster names only (docs/etcd-druid-contract.md), which do not resolve in seed a,
//! so no source member can dial one. etcd's peer transport carries both directions over
//! connections the destination's members dial (a member receives a peer's messages over the
//! stream it dialed to that peer, and sends over pipeline POSTs when the peer never dialed
//! it), so the join works one way, as run on the seeds (2026-11-29: 6 voters, Shrink done).
//! Not when the leader must send a snapshot (its raft log compacted after druid's
//! `snapshot-count`, 10000 entries by default): the snapshot sender dials the learner. This
//! test never writes past one (3000–4000 keys from `Expose` to `Shrink`): it fails if the
//! source's raft index is past druid's count before a member joins (`join_watch.rs`).

use super::join_expose::{self, Across};
use super::join_observe::Sides;
use super::join_tls::DOMAIN;
use super::node::{probe_failures, source_ranges_value, Node, SYSTEM};
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
    seed.rolled_out(SYSTEM, "deploy/isthmus-controller", 240);
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
/// rewrite of the whole domain to its own proxies) ([`set_corefile`]).
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
    let block = zone_block(&zone, &ip, 53);
    set_corefile(seed, &format!("{}\n{block}", corefile.trim_end()));
    println!(
        "figure: seeds M2: seed {} answers *.{zone} with {ip}",
        seed.seed
    );
}

/// The server block of `zone` in a Corefile (port `port`): every name answered with `ip` (A),
/// none with an IPv6 address (AAAA empty, not SERVFAIL: the link carries IPv4 only).
pub fn zone_block(zone: &str, ip: &str, port: u16) -> String {
    format!(
        "{zone}:{port} {{\n    errors\n    template IN A {{\n        answer \"{{{{ .Name }}}} 30 IN A {ip}\"\n    }}\n    template IN AAAA {{\n        rcode NOERROR\n    }}\n}}\n"
    )
}

/// [`zone_block`] served by the node's CoreDNS build (on 127.0.0.1, a free port) beside the
/// node's rewrite of the internal domain (scripts/cluster/addons.yaml, its `rewrite` block as
/// it is; the proxies' Service name answered by `hosts`, since no API server runs here): the
/// other seed's names answer with its address, A only, and the rest of the domain still with
/// the seed's own proxies.
pub fn zone_beside_the_rewrite() {
    let coredns = isthmus_testkit::cache::built(
        Some("ISTHMUS_COREDNS"),
        isthmus_testkit::cache::dir().join("coredns-v1.12.1/coredns"),
        "scripts/cluster.sh up (scripts/build-go-tool.sh)",
    );
    let addons = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/addons.yaml"),
    )
    .unwrap();
    let start = addons.find("rewrite stop {").expect("the node's rewrite");
    let len = addons[start..].find("\n        }").expect("its end") + "\n        }".len();
    let rewrite = &addons[start..start + len];
    assert!(rewrite.contains("internal\\.example\\.com"), "{rewrite}");
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let own = "10.96.7.7";
    let corefile = format!(
        ".:{port} {{\n    {rewrite}\n    hosts {{\n        {own} isthmus-proxy.isthmus-system.svc.cluster.local\n    }}\n}}\n{}",
        zone_block(&format!("seed-a.{DOMAIN}"), "10.200.1.5", port)
    );
    let dir = isthmus_testkit::Scratch::new("seeds-coredns");
    std::fs::write(dir.join("Corefile"), &corefile).unwrap();
    let mut child = std::process::Command::new(coredns)
        .args(["-conf", "Corefile"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ask = |name: &str, qtype: u16| -> Result<(u8, Vec<[u8; 4]>), String> {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .map_err(|e| e.to_string())?;
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(u8::try_from(label.len()).unwrap());
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        sock.send_to(&q, ("127.0.0.1", port))
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).map_err(|e| e.to_string())?;
        let answer = &buf[..n];
        // The answers' A records: TYPE 1, CLASS 1, TTL, RDLENGTH 4, then the address.
        let addrs = answer
            .windows(14)
            .filter(|w| w[..4] == [0, 1, 0, 1] && w[8..10] == [0, 4])
            .map(|w| [w[10], w[11], w[12], w[13]])
            .collect();
        Ok((answer[3] & 0x0f, addrs))
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    let other = format!("etcd-main-0.shoot--isthmus--src.seed-a.{DOMAIN}");
    let first = loop {
        match ask(&other, 1) {
            Ok(a) => break a,
            Err(e) if Instant::now() >= deadline => {
                let _ = child.kill();
                panic!("CoreDNS on 127.0.0.1:{port} did not answer: {e}\n{corefile}")
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    };
    let aaaa = ask(&other, 28);
    let mine = ask(
        &format!("etcd-main-0.shoot--isthmus--dst.seed-b.{DOMAIN}"),
        1,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(first, (0, vec![[10, 200, 1, 5]]), "{other} (A)\n{corefile}");
    assert_eq!(aaaa, Ok((0, vec![])), "{other} (AAAA)");
    assert_eq!(
        mine,
        Ok((0, vec![[10, 96, 7, 7]])),
        "the seed's own name (A)"
    );
}

/// The migration's etcd part from seed a to seed b (both up with isthmus, the link up).
pub fn m2_across(a: &Node, b: &Node) {
    m2_across_from(a, b, join_expose::start(a));
}

/// [`m2_across`] with the source `Etcd` already started in seed a (the node test starts it
/// beside etcd-druid's example). Seed a's CoreDNS answers seed b's names only while it runs:
/// its Corefile is put back afterwards, so later steps on seed a resolve as before.
pub fn m2_across_from(a: &Node, b: &Node, source: join_expose::Source) {
    m2_across_with(a, b, source, None, (&|| {}, &|| {}), None);
}

/// [`m2_across_from`] with `vpn` as the destination migration's `spec.vpn` (none: no
/// temporary VPN), calling `before_shrink` once the destination's members are voters and
/// `after_shrink` once the source's are gone ([`Across`]), recording each step in `steps`.
pub fn m2_across_with(
    a: &Node,
    b: &Node,
    source: join_expose::Source,
    vpn: Option<&serde_json::Value>,
    (before_shrink, after_shrink): (&dyn Fn(), &dyn Fn()),
    steps: Option<&isthmus_lab::report::steps::Recorder>,
) {
    let t0 = Instant::now();
    admit(a, b);
    admit(b, a);
    if let Some(s) = steps {
        s.step(
            "chart values: each seed admits the other",
            t0,
            Instant::now(),
            &[],
        );
    }
    let corefile = a.jsonpath("kube-system", "configmap/coredns", "{.data.Corefile}");
    let resolve = || {
        resolve_in(b, a);
        resolve_in(a, b);
    };
    let (src_from, dst_from) = (link_address(a), link_address(b));
    let across = Across {
        src_from: &src_from,
        dst_from: &dst_from,
        resolve: &resolve,
        before_shrink,
        after_shrink,
        steps,
        vpn,
    };
    join_expose::through_the_proxy(&Sides { src: a, dst: b }, source, Some(&across));
    println!(
        "figure: seeds M2: admitted, joined across the link and shrunk: {:.1?}",
        t0.elapsed()
    );
    for seed in [a, b] {
        println!(
            "figure: seeds M2: seed {}'s isthmus pods (failed readiness probes, failed liveness probes, restarts): {:?}",
            seed.seed,
            probe_failures(seed, SYSTEM)
        );
    }
    set_corefile(a, &corefile);
}

/// `seed`'s CoreDNS serving `corefile`, read by a restarted CoreDNS (a rollout: the new pod is
/// Ready before the old one goes, so the seed's DNS never stops answering).
fn set_corefile(seed: &Node, corefile: &str) {
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coredns", "namespace": "kube-system"},
        "data": {"Corefile": corefile},
    });
    seed.apply(&cm.to_string());
    seed.kubectl(&["-n", "kube-system", "rollout", "restart", "deploy/coredns"]);
    seed.rolled_out("kube-system", "deploy/coredns", 240);
}

/// Seed b (`scripts/cluster.sh --seed b up`: its node, etcd-druid and isthmus by the chart)
/// linked to seed a at the demo's RTT (`link up --seeds a,b --rtt 50ms`), for the node test's
/// M2 across two real seeds (issue 45 point 5). Dropping it takes seed b and the link down,
/// also after a failed assertion.
pub struct SeedB(Node);

impl SeedB {
    /// Brings seed b up and links it (seed a is up): panics with the scripts' output.
    pub fn up() -> Self {
        let b = SeedB(Node::seed('b'));
        let _ = b.0.command().arg("down").output();
        for args in [
            &["up"][..],
            &["link", "up", "--seeds", "a,b", "--rtt", "50ms"],
        ] {
            let t = Instant::now();
            let out = b.0.command().args(args).output().unwrap();
            assert!(
                out.status.success(),
                "scripts/cluster.sh --seed b {args:?}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            println!(
                "figure: seeds M2: scripts/cluster.sh --seed b {}: {:.1?}",
                args.join(" "),
                t.elapsed()
            );
        }
        b
    }

    pub fn node(&self) -> &Node {
        &self.0
    }
}

impl Drop for SeedB {
    fn drop(&mut self) {
        let _ = self.0.command().arg("down").output();
        let _ = self.0.command().args(["link", "down"]).output();
    }
}
