//! isthmus in a real Kubernetes node (`scripts/cluster.sh`: kubelet, kube-proxy, containerd,
//! CoreDNS, kube-router for NetworkPolicy and LoadBalancer addresses, a default StorageClass,
//! the real etcd-druid), installed as gardener-operator installs it (the image from
//! `scripts/image.sh`; `helm install` of the chart's archive with a seed's injected values),
//! end to end: probes, etcd-druid's own example `Etcd` becoming Ready, a TLS druid `Etcd`
//! exposed through the proxy pods by the controller and a second one, in a second real seed
//! (`scripts/cluster.sh --seed b up`, linked at 50 ms RTT: `seeds/join.rs`), joining it there
//! with `bootstrapWithExistingCluster` (the real druid and backup-restore of seed b add and
//! promote the learners through seed a's proxy pods while a client writes through the
//! cluster: 0 failed, 0 lost; the source members then removed by seed-world's stand-in of
//! etcd-druid#1426; seed b and the link then go down); the shoot's `Etcd` (gardenlet's,
//! one TLS member), made by the same druid beside those and kept by it for every later step
//! (no etcd of the test's own, druid never stood down): an `EtcdMigration` turned into routes
//! by the controller and delivered by the real kubelet, druid rolling the member onto its
//! exposed peer URL, a TLS client outside the cluster reaching that etcd pod through the
//! LoadBalancer by SNI, the NetworkPolicies from both sides, the Lease hand-over, a rolling
//! update to a new image through `helm upgrade` under load and a drain, the controller's
//! tunnel server (from a destination migration's `spec.vpn.server`) and the agents as pods
//! with the agent's session through the proxy's VPN route to that etcd, the LoadBalancer made on demand with the first migration and gone after the last,
//! `helm uninstall` leaving only what must stay; then isthmus installed again exactly as
//! gardenlet installs an Extension (the `gardenlet-install` harness: Gardener v1.149.3's
//! renderer, `extension-isthmus-<random>`, a ManagedResource applied by the node's real
//! gardener-resource-manager): the proxies Ready, the Lease held, a migration's routes served,
//! a DaemonSet rollout reported Progressing (the Seed's not-ready window, scaled to a 50-node
//! seed by the chart's `maxSurge`), the ManagedResource's deletion keeping the CRD and the
//! `EtcdMigration`; then `down` leaving the host as it was (sysctls, namespaces, cgroups,
//! mounts). One test, steps in order on one node (two for the migration's etcd part); each
//! step prints its figures.
//! Needs root and what `scripts/install-deps.sh` installs; `ISTHMUS_CLUSTER_KEEP=1` leaves the
//! node up afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cluster/checks.rs"]
mod checks;
#[path = "cluster/drops.rs"]
mod drops;
#[path = "cluster/druid.rs"]
mod druid;
#[path = "cluster/etcd_logs.rs"]
mod etcd_logs;
#[path = "cluster/gardenlet.rs"]
mod gardenlet;
#[path = "cluster/grm.rs"]
mod grm;
#[path = "cluster/host.rs"]
mod host;
// M2 across seeds a and b; what only the seeds test calls stays unused here.
#[allow(dead_code)]
#[path = "seeds/join.rs"]
mod across;
#[path = "cluster/join_expose.rs"]
mod join_expose;
#[path = "cluster/join_observe.rs"]
mod join_observe;
#[path = "cluster/join_shrink.rs"]
mod join_shrink;
#[path = "cluster/join_tls.rs"]
mod join_tls;
#[path = "cluster/join_watch.rs"]
mod join_watch;
#[path = "cluster/join_writer.rs"]
mod join_writer;
#[path = "cluster/node.rs"]
mod node;
#[path = "cluster/policies.rs"]
mod policies;
#[path = "cluster/release.rs"]
mod release;
#[path = "cluster/routes.rs"]
mod routes;
#[path = "cluster/shoot.rs"]
mod shoot;
#[path = "cluster/traffic.rs"]
mod traffic;
#[path = "cluster/tunnel.rs"]
mod tunnel;
#[path = "cluster/upgrade.rs"]
mod upgrade;

use node::Node;
use std::time::{Instant, SystemTime};

#[test]
fn isthmus_in_a_real_node() {
    isthmus_testkit::tier::needs_root("the node of scripts/cluster.sh");
    let t0 = Instant::now();
    let wall0 = SystemTime::now();
    let (node, up, before) = Node::up();
    println!("figure: scripts/cluster.sh up (node, image loaded, chart installed, proxy Ready): {up:.1?}");
    checks::first_pod_ready(&node, wall0);
    checks::proxy_ready_through_probes(&node, node::SYSTEM);
    checks::proxy_threads_run_as_batch(&node);
    // gardenlet's `Etcd` of the shoot, made by druid beside the druid step's.
    let shoot = shoot::Shoot::start(&node);
    druid::stock_etcd_becomes_ready(&node);
    shoot.ready(&node);
    let client = checks::migration_routes_reach_etcd(&node, &shoot);
    checks::source_ranges_and_allowed_sources(&node, &client);
    routes::delivery_figures(&node);
    policies::network_policies(&node);
    checks::lease_hand_over(&node);
    upgrade::rolling_update_without_failed_connections(&node, &client);
    upgrade::drain_on_delete(&node, &client);
    tunnel::agent_session_through_the_proxy(&node, &client.lb, &shoot);
    grm::policies_through_gardener_resource_manager(&node, &client);
    release::uninstall(&node);
    gardenlet::installed_as_gardenlet_installs_it(&node, &shoot);
    if std::env::var_os("ISTHMUS_CLUSTER_KEEP").is_none() {
        node.down_and_check(&before);
    }
    println!("figure: the end-to-end test took {:.1?}", t0.elapsed());
}

/// The migration's etcd part through isthmus alone (`join_expose.rs`, a step of the test
/// above), to iterate on it on a node that is already up (`flock -o /tmp/isthmus-node.lock
/// scripts/cluster.sh up`), left up afterwards: `cargo test --test cluster
/// m2_on_a_running_node -- --ignored --nocapture`.
#[test]
#[ignore = "needs a node that is up"]
fn m2_on_a_running_node() {
    isthmus_testkit::tier::needs_root("the node of scripts/cluster.sh");
    let node = Node::handle();
    let source = join_expose::start(&node);
    let sides = join_observe::Sides {
        src: &node,
        dst: &node,
    };
    join_expose::through_the_proxy(&sides, source, None);
}
