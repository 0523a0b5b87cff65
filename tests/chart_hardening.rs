//! Issue 47 points 2 and 7, on the rendered chart: the tunnel servers the controller runs
//! with the chart's flags trust the proxies' PROXY v2 header and admit only named clients,
//! their CONNECT front only the shoot's kube-apiserver in both NetworkPolicy modes, trust in
//! a PROXY header is narrowed to the load balancer, and the controller's egress is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::chart::{args, find, render, render_text, tunnel_objects, tunnel_servers, SEED};
use isthmus_config::TunnelServerConfig;
use serde_json::{json, Value};

const PLAIN: &str = "examples/plain-values.yaml";

/// The configuration of the example migration's tunnel server, as the controller the chart
/// renders (its flags) would write it.
fn tunnel_config(docs: &[Value]) -> TunnelServerConfig {
    let objects = tunnel_objects(docs);
    let cm = find(&objects, "ConfigMap", "isthmus-tunnel-server");
    let text = cm["data"]["server.yaml"].as_str().unwrap();
    isthmus_config::parse("server.yaml", text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Point 2: with the VPN route's PROXY v2 default, a tunnel server must believe the proxies'
/// header, or every agent is refused. The chart gives the controller that trust (the seed's
/// pod network, where the proxies dial from); the file it writes loads with the server's own
/// loader, and both endpoints admit only the spec's client names.
#[test]
fn tunnel_servers_trust_the_proxies_and_admit_only_named_clients() {
    let docs = render(&SEED, &[]);
    let c = tunnel_config(&docs);
    let trusted: Vec<String> = c
        .agents
        .trusted_proxies
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(trusted, ["100.96.0.0/11"], "gardener.seed.networks.pods");
    assert_eq!(c.agents.tls.allowed_client_names, ["vpn-shoot-tmp"]);
    let connect = c.connect.tls.as_ref().unwrap();
    assert_eq!(connect.allowed_client_names, ["kube-apiserver-http-proxy"]);
    assert_eq!(c.admin.address.to_string(), "0.0.0.0:9902");
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    // tunnel.trustedProxies wins over the seed's pod network.
    let c = tunnel_config(&render(&SEED, &["tunnel.trustedProxies[0]=100.96.4.0/24"]));
    assert_eq!(c.agents.trusted_proxies[0].to_string(), "100.96.4.0/24");
    // The plain example (deploy/) works out of the box too.
    let c = tunnel_config(&render(&[PLAIN], &[]));
    assert_eq!(c.agents.trusted_proxies[0].to_string(), "10.244.0.0/16");
}

/// Point 7: a PROXY header counts from the load balancer's ranges only. The seed's node
/// network is no longer the default (any hostNetwork pod there could name any client), so
/// PROXY on without ranges fails the render, and a catch-all range is refused.
#[test]
fn proxy_headers_count_only_from_the_load_balancers_ranges() {
    let err = render_text(&[SEED[0]], &[]).unwrap_err();
    assert!(
        err.contains("no trusted proxies") && err.contains("proxy.proxyProtocol.trustedProxies"),
        "{err}"
    );
    let docs = render(&SEED, &[]);
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    let flags: Vec<String> = args(&ctl["spec"]["template"]);
    assert!(
        flags.contains(&"--trusted-proxies=10.250.0.0/26".to_owned()),
        "{flags:?}"
    );
    assert!(
        !flags.iter().any(|f| f.contains("10.250.0.0/16")),
        "{flags:?}"
    );
    // Off: no flag, and no ranges needed.
    let docs = render(&[SEED[0]], &["proxy.proxyProtocol.enabled=false"]);
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert!(!args(&ctl["spec"]["template"])
        .iter()
        .any(|a| a.starts_with("--trusted-proxies")));
}

/// Point 7: in both NetworkPolicy modes the CONNECT front admits the shoot namespace's
/// kube-apiserver only: the controller the chart renders makes the front's own policies with
/// each server (the kube-apiserver's egress policy on the Gardener path only), and its Service is no `all-webhook-targets` target (whose policies admit
/// every webhook caller of the namespace).
#[test]
fn both_network_policy_modes_admit_only_the_own_kube_apiserver_to_connect() {
    let own = json!([{"podSelector": {"matchLabels": {"app": "kubernetes", "role": "apiserver"}}}]);
    for explicit in ["false", "true"] {
        let docs = render(&SEED, &[&format!("networkPolicy.explicit={explicit}")]);
        let objects = tunnel_objects(&docs);
        let ingress = find(&objects, "NetworkPolicy", "isthmus-tunnel-server-connect");
        assert_eq!(ingress["spec"]["ingress"][0]["from"], own, "{explicit}");
        assert_eq!(
            ingress["spec"]["ingress"][0]["ports"],
            json!([{"port": 8132, "protocol": "TCP"}])
        );
        // The kube-apiserver's egress to it only where the shoot namespaces deny egress
        // (gardener-resource-manager's path; elsewhere it would be its only egress).
        let egress = objects
            .iter()
            .find(|d| d["metadata"]["name"] == "isthmus-kube-apiserver-to-tunnel-server");
        match explicit {
            "false" => assert_eq!(
                egress.unwrap()["spec"]["podSelector"],
                own[0]["podSelector"]
            ),
            _ => assert!(egress.is_none()),
        }
        // The front's ingress policy selects the server's pods: the proxy pods the chart
        // renders must still be admitted at the agents' port, with or without the resource
        // manager.
        let agents = find(&objects, "NetworkPolicy", "isthmus-tunnel-server-agents");
        let proxy = find(&docs, "DaemonSet", "isthmus-proxy");
        let labels = &proxy["spec"]["template"]["metadata"]["labels"];
        let from = &agents["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"];
        assert!(
            from.as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| &labels[k] == v),
            "{explicit}: {from} vs the proxy pods' {labels}"
        );
        for name in ["isthmus-tunnel-server", "isthmus-tunnel-connect"] {
            let annotations = &find(&objects, "Service", name)["metadata"]["annotations"];
            assert!(
                !annotations
                    .as_object()
                    .unwrap()
                    .keys()
                    .any(|k| k.contains("webhook-targets")),
                "{name}: {annotations}"
            );
        }
    }
}

/// Point 7: the controller's egress is the API server, DNS, the proxy pods and the load
/// balancer's addresses, not the internet: no public/private-networks labels, the load
/// balancer's CIDRs (when its traffic leaves the seed) on the client ports only, and in
/// explicit mode the API server's addresses when given.
#[test]
fn the_controllers_egress_is_the_api_server_and_the_load_balancer() {
    let docs = render(&SEED, &[]);
    let labels =
        &find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]["metadata"]["labels"];
    for l in labels.as_object().unwrap().keys() {
        assert!(
            !l.contains("public-networks") && !l.contains("private-networks"),
            "{l}"
        );
    }
    assert!(!docs
        .iter()
        .any(|d| d["metadata"]["name"] == "isthmus-controller-to-load-balancer"));
    let docs = render(&SEED, &["controller.loadBalancerCIDRs[0]=203.0.113.10/32"]);
    let p = find(
        &docs,
        "NetworkPolicy",
        "isthmus-controller-to-load-balancer",
    );
    assert_eq!(
        p["spec"]["egress"],
        json!([{"to": [{"ipBlock": {"cidr": "203.0.113.10/32"}}],
                "ports": [{"port": 2379, "protocol": "TCP"}, {"port": 2378, "protocol": "TCP"},
                          {"port": 2377, "protocol": "TCP"}]}])
    );
    // Explicit mode: client ports to the proxy pods and those addresses only; the API server's
    // ports to its addresses.
    let docs = render(
        &[PLAIN],
        &[
            "controller.loadBalancerCIDRs[0]=203.0.113.10/32",
            "networkPolicy.apiServerCIDRs[0]=192.0.2.1/32",
        ],
    );
    let p = find(&docs, "NetworkPolicy", "isthmus-controller");
    let egress = p["spec"]["egress"].as_array().unwrap();
    for rule in egress {
        let to = rule["to"]
            .as_array()
            .unwrap_or_else(|| panic!("a rule to anywhere: {rule}"));
        assert!(!to.is_empty(), "{rule}");
    }
    assert_eq!(
        egress[0]["to"],
        json!([{"ipBlock": {"cidr": "192.0.2.1/32"}}])
    );
    assert_eq!(
        egress[2]["to"],
        json!([{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "isthmus-proxy"}}},
               {"ipBlock": {"cidr": "203.0.113.10/32"}}])
    );
}

/// Point 7, now: no seed PodMonitor reaches into shoot namespaces; each tunnel server's own
/// ServiceMonitor is for its shoot's Prometheus (the controller's flag), off where a plain
/// cluster has no prometheus-operator.
#[test]
fn tunnel_servers_are_scraped_by_their_shoots_prometheus() {
    let docs = render(&SEED, &[]);
    assert!(!docs.iter().any(|d| d["kind"] == "PodMonitor"));
    assert!(tunnel_servers(&docs).service_monitor);
    assert!(!tunnel_servers(&render(&[PLAIN], &[])).service_monitor);
}

/// The Extension example carries the operator's values the tests render with.
#[test]
fn the_extension_example_carries_the_values_the_tests_use() {
    let dir = common::chart::chart_dir();
    let read = |f: &str| -> Value {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        isthmus_testkit::tools::yaml_docs(&text).remove(0)
    };
    assert_eq!(
        read("examples/extension.yaml")["spec"]["deployment"]["extension"]["values"],
        read(SEED[1])
    );
}

/// Issue 47 point 9: every container's image is a release by default (the chart's
/// appVersion), never `latest`; a tag still wins when given.
#[test]
fn the_default_image_is_a_release() {
    let chart = std::fs::read_to_string(common::chart::chart_dir().join("Chart.yaml")).unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion: "))
        .unwrap()
        .trim_matches('"');
    for (values, want) in [
        (&[][..], format!("isthmus:{app_version}")),
        (&[PLAIN][..], "isthmus:latest".to_owned()),
    ] {
        let docs = render(values, &[]);
        for (id, t) in common::chart::pod_templates(&docs) {
            for c in t["spec"]["containers"].as_array().unwrap() {
                assert_eq!(c["image"], want.as_str(), "{id}");
            }
        }
        // The tunnel servers the controller runs: the same image.
        assert_eq!(tunnel_servers(&docs).image, want);
    }
    assert_ne!(app_version, "latest");
}
