//! Gardener's seed conventions in the rendered chart (issue 46 point 3; Gardener v1.149.3's
//! docs/development/priority-classes.md, component-checklist.md, high-availability-of-components.md,
//! docs/extensions/logging-and-monitoring.md, docs/operations/network_policies.md, and
//! istio-ingressgateway's chart as the precedent of a seed's data plane). Their effect on a
//! cluster (the resource manager applying them, its high-availability webhook, the fluent-bit
//! kinds' schemas): tests/gardenlet_install.rs and tests/chart_apiserver.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "chart_conventions/logging.rs"]
mod logging;
#[path = "chart_conventions/network.rs"]
mod network;

use common::chart::{find, render, render_text, SEED};
use serde_json::{json, Value};

const PLAIN: &str = "examples/plain-values.yaml";

fn pod_spec<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    &find(docs, kind, name)["spec"]["template"]["spec"]
}

#[test]
fn the_proxy_runs_as_a_seed_data_plane_and_the_controller_as_an_extension() {
    let docs = render(&SEED, &[]);
    // istio-ingressgateway's class for the data plane; gardener-system-900 ("Extensions")
    // for the controller, below it and above etcd-druid and the shoots' control planes.
    assert_eq!(
        pod_spec(&docs, "DaemonSet", "isthmus-proxy")["priorityClassName"],
        "gardener-system-critical"
    );
    assert_eq!(
        pod_spec(&docs, "Deployment", "isthmus-controller")["priorityClassName"],
        "gardener-system-900"
    );
    // A plain cluster has neither class.
    let docs = render(&[PLAIN], &[]);
    for (kind, name) in [
        ("DaemonSet", "isthmus-proxy"),
        ("Deployment", "isthmus-controller"),
    ] {
        assert!(pod_spec(&docs, kind, name)["priorityClassName"].is_null());
    }
}

#[test]
fn no_memory_limit_and_vpas_without_a_ceiling_with_a_catch_all_off() {
    let docs = render(&SEED, &[]);
    for (kind, name, container) in [
        ("DaemonSet", "isthmus-proxy", "proxy"),
        ("Deployment", "isthmus-controller", "controller"),
    ] {
        let c = &pod_spec(&docs, kind, name)["containers"][0];
        assert_eq!(c["name"], container);
        // Requests only: no memory limit (gardener#14197: istio-ingressgateway's OOM kills).
        assert!(c["resources"]["limits"].is_null(), "{name}: {c:#}");
        assert!(c["resources"]["requests"]["memory"].is_string(), "{name}");
        let vpa = find(&docs, "VerticalPodAutoscaler", name);
        let policies = vpa["spec"]["resourcePolicy"]["containerPolicies"]
            .as_array()
            .unwrap();
        assert_eq!(policies.len(), 2, "{name}: {policies:#?}");
        let own = &policies[0];
        assert_eq!(own["containerName"], container);
        assert_eq!(own["controlledValues"], "RequestsOnly");
        assert_eq!(own["controlledResources"], json!(["cpu", "memory"]));
        assert!(own["minAllowed"]["memory"].is_string(), "{name}: a floor");
        assert!(own["maxAllowed"].is_null(), "{name}: no ceiling");
        assert!(own.get("mode").is_none() || own["mode"] == "Auto");
        assert_eq!(policies[1], json!({"containerName": "*", "mode": "Off"}));
    }
}

/// Slow is not dead (docs/probes.md): under CI's load the pods' health endpoints answered in
/// over 1 s, kubelet's default timeout, while they served. A liveness kill of the proxy drops
/// every connection it carries, and a readiness miss takes the node's only proxy out of the
/// load balancer, so every probe waits 5 s and a restart takes 5 misses
/// (gardener-resource-manager's liveness). The drain still shows at once: one 503 is enough.
#[test]
fn probes_wait_out_a_busy_node_and_a_drain_shows_at_once() {
    let docs = render(&SEED, &[]);
    for (kind, name) in [
        ("DaemonSet", "isthmus-proxy"),
        ("Deployment", "isthmus-controller"),
    ] {
        let c = &pod_spec(&docs, kind, name)["containers"][0];
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(c[probe]["timeoutSeconds"], 5, "{name} {probe}: {c:#}");
        }
        assert_eq!(c["livenessProbe"]["failureThreshold"], 5, "{name}");
    }
    let proxy = &pod_spec(&docs, "DaemonSet", "isthmus-proxy")["containers"][0];
    assert_eq!(proxy["readinessProbe"]["failureThreshold"], 1);
}

#[test]
fn the_controller_is_spread_by_the_resource_managers_webhook_not_by_hand() {
    let docs = render(&SEED, &[]);
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert_eq!(
        ctl["metadata"]["labels"]["high-availability-config.resources.gardener.cloud/type"],
        "controller"
    );
    let spec = &ctl["spec"]["template"]["spec"];
    assert!(
        spec["topologySpreadConstraints"].is_null() && spec["affinity"].is_null(),
        "hand-written spread under gardenlet: {spec:#}"
    );
    let pdb = find(&docs, "PodDisruptionBudget", "isthmus-controller");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    // Without gardenlet nothing injects it: the chart spreads the replicas itself.
    let docs = render(&[PLAIN], &[]);
    let spread = &pod_spec(&docs, "Deployment", "isthmus-controller")["topologySpreadConstraints"];
    assert_eq!(spread[0]["topologyKey"], "kubernetes.io/hostname");
}

#[test]
fn the_example_extension_pins_the_image_by_digest() {
    let text = std::fs::read_to_string(common::chart::chart_dir().join("examples/extension.yaml"))
        .unwrap();
    let ext = &isthmus_testkit::tools::yaml_docs(&text)[0];
    let digest = ext["spec"]["deployment"]["extension"]["values"]["image"]["digest"]
        .as_str()
        .unwrap();
    assert!(
        digest.len() == 71
            && digest.starts_with("sha256:")
            && digest[7..]
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "{digest}"
    );
    // Every container of the seed's render runs exactly that image.
    let docs = render(&SEED, &[]);
    for (kind, name) in [
        ("DaemonSet", "isthmus-proxy"),
        ("Deployment", "isthmus-controller"),
    ] {
        assert_eq!(
            pod_spec(&docs, kind, name)["containers"][0]["image"],
            format!("registry.example.com/isthmus/isthmus:0.1.0@{digest}")
        );
    }
    let err = render_text(&[], &["image.digest=latest"]).unwrap_err();
    assert!(err.contains("image.digest: want sha256:"), "{err}");
}

/// How many waves of pod starts a DaemonSet rollout over `nodes` takes with `max_surge` as
/// rendered (an integer or a percentage): `isthmus_testkit::gardenlet::surge_waves`, which the
/// node test applies to its measured window.
fn waves(nodes: u64, max_surge: &Value) -> u64 {
    let surge = match max_surge {
        Value::String(p) => p.clone(),
        other => other.to_string(),
    };
    isthmus_testkit::gardenlet::surge_waves(nodes, &surge)
}

#[test]
fn a_proxy_rollout_swaps_a_quarter_of_the_nodes_at_once_and_never_leaves_a_node_without_a_proxy() {
    let docs = render(&SEED, &[]);
    let rolling = &find(&docs, "DaemonSet", "isthmus-proxy")["spec"]["updateStrategy"];
    assert_eq!(rolling["type"], "RollingUpdate");
    let r = &rolling["rollingUpdate"];
    assert_eq!(
        r["maxUnavailable"], 0,
        "a node without a Ready proxy drops connections"
    );
    // gardener-resource-manager reports the ManagedResource Progressing (the Seed's
    // ExtensionsReady not True) until every node runs the new pod: a 50-node seed waits 4
    // pod starts instead of 50 (one node at a time).
    let fifty = waves(50, &r["maxSurge"]);
    assert_eq!(fifty, 4, "{r}");
    assert_eq!(waves(50, &json!(1)), 50);
    assert_eq!(waves(3, &r["maxSurge"]), 3);
    println!("figure: a 50-node seed's proxy rollout takes {fifty} waves of pod starts with maxSurge {} (50 with 1)", r["maxSurge"]);
    let err = render_text(&[], &["proxy.rollingUpdate.maxUnavailable=1"]).unwrap_err();
    assert!(
        err.contains("proxy.rollingUpdate.maxUnavailable: want 0"),
        "{err}"
    );
}

#[test]
fn nothing_per_shoot_is_in_the_managed_resource() {
    // What gardenlet hands the resource manager (the seed's values and the Extension's): only
    // seed-wide objects, in the release namespace, the dashboard's (garden) or cluster-scoped.
    // A shoot's problem cannot then make the ManagedResource, and the Seed, unhealthy.
    let docs = render(&SEED, &[]);
    for d in &docs {
        let ns = d["metadata"]["namespace"].as_str();
        assert!(
            matches!(ns, None | Some("extension-isthmus" | "garden")),
            "{}/{} in {ns:?}",
            d["kind"],
            d["metadata"]["name"]
        );
        if matches!(
            d["kind"].as_str(),
            Some("Deployment" | "DaemonSet" | "StatefulSet")
        ) {
            assert_eq!(ns, Some("extension-isthmus"));
        }
    }
}
