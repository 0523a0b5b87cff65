//! Issue 44 point 3 through isthmus (M2, work in progress): two druid `Etcd`s with peer and
//! client TLS (`join_tls.rs`) in two namespaces that play two seeds, the isthmus controller
//! driving their `EtcdMigration`s while the test plays the orchestrator (as lab/src/migrate/
//! does: it advances the source and the destination and gives the destination the source's
//! members, `source_members_as_etcd_lists_them`). At `Expose` the controller sets the
//! source's `additionalAdvertisePeerURLs` and `skipClientSANVerification` and asks druid to
//! reconcile: druid rolls the members, and each one's backup-restore updates its peer URLs in
//! etcd (`pkg/server/backuprestoreserver.go` `updatePeerURLIfChanged`). At `Join` the
//! controller creates the destination `Etcd` with `bootstrapWithExistingCluster`: its
//! backup-restore adds each member as a learner through the proxy's client routes, and the
//! destination's members reach the source's through the proxy's peer routes only (the
//! source's namespace admits other namespaces' traffic from the proxies only; the way back
//! is direct until druid advertises a prefixed member's exposed URL, docs/etcd-druid-
//! contract.md "Through the proxy"). One controller, the chart's, serves both sides: a second
//! one would write the same proxy route ConfigMap (both "seeds" share this node's proxies).
//! The `DNSRecord`s are made Succeeded by seed-world's DNS provider stand-in; the names
//! resolve through the node's CoreDNS (scripts/cluster/addons.yaml). A client writes through
//! the source all along. Prints each step's duration and the connections the proxy forwarded.

use super::join_observe::{cleanup, forwarded, members, reached, set_step, status, DST, SRC, STEP};
use super::join_tls::{self, DOMAIN, ETCD, POD_NETWORK};
use super::join_writer::{keys_with, Writer};
use super::node::{poll, Node, SYSTEM};
use super::traffic::POLL;
use isthmus_seed_world::dns::DnsProviderTask;
use isthmus_testkit::TestPki;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn migration(role: &str, ns: &str, seed: &str, step: &str, destination: Option<Value>) -> Value {
    let mut spec = json!({
        "role": role, "step": step, "etcdName": ETCD, "seedName": seed,
        "internalDomain": DOMAIN, "members": 3,
        "dns": {"type": "local", "secretRef": {"name": "dns-internal", "namespace": ns}},
        "loadBalancer": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "allowedSources": [POD_NETWORK],
    });
    if let Some(d) = destination {
        spec["destination"] = d;
    }
    json!({
        "apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
        "metadata": {"name": ETCD, "namespace": ns}, "spec": spec,
    })
}

/// What the orchestrator copies to the destination: the source's `status.exposedMembers`, but
/// with each member's peer URLs as etcd lists them. etcd v3.5 starts a joining member only if
/// its `initial-cluster` names each existing member with exactly the peer URLs the cluster
/// holds (`etcdserver/api/membership` `ValidateClusterAndAssignIDs`, `pkg/netutil`
/// `URLStringsEqual`: a different count fails before any name is resolved), and druid v0.38.1
/// writes the bootstrap members' `peerUrls` into it as they are
/// (`configmap/etcdconfig.go` `prepareInitialCluster`), while `additionalAdvertisePeerURLs`
/// makes a source member hold its in-cluster URL and its exposed one; `exposedMembers` has the
/// exposed one only (first run: "PeerURLs: no match found for existing member"). The
/// controller should report them so (next step); the test reads them from etcd meanwhile.
fn source_members_as_etcd_lists_them(node: &Node, src: &super::join_tls::Tls) -> Value {
    let list = members(node, src).unwrap();
    let mut exposed = status(node, SRC)["exposedMembers"].clone();
    for m in exposed.as_array_mut().unwrap() {
        let (_, _, urls) = list.iter().find(|l| m["name"] == l.0.as_str()).unwrap();
        let mut urls = urls.clone();
        urls.sort();
        m["peerUrls"] = json!(urls);
    }
    exposed
}

pub fn through_the_proxy(node: &Node) {
    let t0 = Instant::now();
    let pki = TestPki::new();
    let src = join_tls::namespace(node, &pki, SRC, "seed-a", "source", true);
    join_tls::apply_etcd(node, SRC);
    poll(node, "the source Etcd Ready", STEP, POLL, || {
        let r = node.jsonpath(SRC, &format!("etcd/{ETCD}"), "{.status.ready}");
        (r == "true").then_some(()).ok_or(r)
    });
    println!(
        "figure: M2: the TLS source Etcd Ready: {:.1?}",
        t0.elapsed()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(isthmus_testkit::kube::client_from_kubeconfig(
        &node.kubeconfig(),
    ));
    let _dns_src = {
        let _g = rt.enter();
        DnsProviderTask::spawn(client.clone(), SRC)
    };
    let ip = node.jsonpath(SRC, &format!("svc/{ETCD}-client"), "{.spec.clusterIP}");
    let src_url = format!("https://{ip}:2379");
    let writer = Writer::with_flags(&src_url, &src.etcdctl_flags());

    // Expose: druid rolls the source onto its exposed peer URLs.
    node.apply(&migration("source", SRC, "seed-a", "Expose", None).to_string());
    let took = reached(node, SRC, "Expose");
    println!("figure: M2: source Expose (routes served, druid's roll onto the exposed peer URLs, records Succeeded): {took:.1?}");
    let list = members(node, &src).unwrap();
    for (name, _, urls) in &list {
        assert!(
            urls.iter().any(|u| u.contains(DOMAIN)),
            "{name} advertises no exposed peer URL: {list:?}"
        );
    }
    println!("figure: M2: source members after Expose: {list:?}");

    // The destination seed's namespace (no boundary there yet: druid v0.38.1 never advertises
    // a prefixed member's additional peer URLs, so the source reaches the destination's
    // members by their in-cluster names only; see source_members_as_etcd_lists_them), and
    // its exposure.
    let _dst = join_tls::namespace(node, &pki, DST, "seed-b", "destination", false);
    let _dns_dst = {
        let _g = rt.enter();
        DnsProviderTask::spawn(client, DST)
    };
    let mut template = join_tls::etcd_spec(3);
    template.as_object_mut().unwrap().remove("replicas");
    let destination = json!({
        "memberNamePrefix": "seed-b",
        "sourceMembers": source_members_as_etcd_lists_them(node, &src),
        "etcdVersion": "3.5",
        "etcdTemplate": {"labels": template["labels"], "spec": template},
    });
    node.apply(&migration("destination", DST, "seed-b", "Expose", Some(destination)).to_string());
    let took = reached(node, DST, "Expose");
    println!("figure: M2: destination Expose (routes served, records Succeeded): {took:.1?}");

    set_step(node, SRC, "Join");
    reached(node, SRC, "Join");
    let joined = Instant::now();
    set_step(node, DST, "Join");
    let mut seen: std::collections::BTreeMap<String, (Duration, Option<Duration>)> =
        Default::default();
    poll(node, "the destination joined", STEP, POLL, || {
        for (name, learner, _) in members(node, &src)?
            .iter()
            .filter(|m| m.0.starts_with("seed-b"))
        {
            let e = seen.entry(name.clone()).or_insert((joined.elapsed(), None));
            if !learner && e.1.is_none() {
                e.1 = Some(joined.elapsed());
            }
        }
        let s = status(node, DST);
        if s["step"] == "Join" && s["stepReady"] == true {
            Ok(())
        } else {
            Err(s.to_string())
        }
    });
    println!(
        "figure: M2: destination Join through the proxy (Etcd created by the controller to its 2 members voters): {:.1?}",
        joined.elapsed()
    );
    for (name, (learner, voter)) in &seen {
        let voter = voter.unwrap_or_default();
        println!("figure: M2: join of {name} through the proxy: listed at +{learner:.1?}, voter at +{voter:.1?}");
    }
    let through = forwarded(node);
    println!("figure: M2: peer connections the proxies forwarded, per exposed name: {through:?}");
    // The destination's members reach the source's only through the proxy (the boundary).
    for i in 0..3 {
        let name = format!("{ETCD}-{i}.{SRC}.seed-a.{DOMAIN}");
        assert!(
            through.iter().any(|(r, n)| *r == name && *n > 0.0),
            "no peer connection to {name} through the proxy: {through:?}"
        );
    }
    let (ok, failed) = writer.stop();
    let stored = keys_with(node, &src_url, &src.etcdctl_flags());
    let lost: Vec<&u64> = ok.iter().filter(|n| !stored.contains(n)).collect();
    println!(
        "figure: M2: writer through Expose's roll and the join: {} acknowledged, {} failed, {} lost",
        ok.len(),
        failed.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    // Not yet asserted: Expose's roll restarts each source member behind the client Service,
    // and a write that meets the restarting one fails (1 of 8774 on the node, 2026-11-29).
    if !failed.is_empty() {
        println!("figure: M2: the failed writes: {failed:?}");
    }
    cleanup(node);
    println!("figure: M2: the step took {:.1?}", t0.elapsed());
}
