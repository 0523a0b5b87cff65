//! Issue 47 points 2 and 7, on the rendered chart: the tunnel servers' configuration is the
//! chart's (trust for the proxies' PROXY v2 header, client names on both endpoints), trust in
//! a PROXY header is narrowed to the load balancer, both NetworkPolicy modes admit the same
//! clients to the CONNECT front, and the controller's egress and the PodMonitor's namespaces
//! are bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::chart::{args, find, render, render_text, SEED, TUNNEL};
use isthmus_config::TunnelServerConfig;
use serde_json::{json, Value};

const PLAIN: &str = "examples/plain-values.yaml";

fn tunnel_config(docs: &[Value]) -> TunnelServerConfig {
    let cm = find(docs, "ConfigMap", "isthmus-tunnel-server");
    let text = cm["data"]["server.yaml"].as_str().unwrap();
    isthmus_config::parse("server.yaml", text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Point 2: with the VPN route's PROXY v2 default, a tunnel server must believe the proxies'
/// header, or every agent is refused. The chart renders that trust (the seed's pod network,
/// where the proxies dial from) with each server, the file loads with the server's own
/// loader, and both endpoints admit only the named client certificates.
#[test]
fn tunnel_servers_trust_the_proxies_and_admit_only_named_clients() {
    let docs = render(&SEED, &TUNNEL);
    let c = tunnel_config(&docs);
    let trusted: Vec<String> = c
        .agents
        .trusted_proxies
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(trusted, ["100.96.0.0/11"], "gardener.seed.networks.pods");
    assert_eq!(c.agents.tls.allowed_client_names, ["agent.shoot--foo--bar"]);
    let connect = c.connect.tls.as_ref().unwrap();
    assert_eq!(
        connect.allowed_client_names,
        ["kube-apiserver.shoot--foo--bar"]
    );
    assert_ne!(
        connect.client_ca, c.agents.tls.client_ca,
        "one CA per endpoint"
    );
    assert_eq!(c.admin.address.to_string(), "0.0.0.0:9902");
    // The Deployment reads that file, the TLS files from the Secret, and rolls when it changes.
    let dep = find(&docs, "Deployment", "isthmus-tunnel-server");
    let t = &dep["spec"]["template"];
    assert_eq!(
        args(t)[..3],
        [
            "tunnel-server",
            "--config",
            "/etc/isthmus/config/server.yaml"
        ]
    );
    let volumes = &t["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["name"], "isthmus-tunnel-server");
    assert_eq!(volumes[1]["secret"]["secretName"], "isthmus-tunnel-server");
    assert!(t["metadata"]["annotations"]["checksum/config"].is_string());
    // tunnel.trustedProxies wins over the seed's pod network.
    let mut sets = TUNNEL.to_vec();
    sets.push("tunnel.trustedProxies[0]=100.96.4.0/24");
    let c = tunnel_config(&render(&SEED, &sets));
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

/// The peers a NetworkPolicy admits to the CONNECT port (8132) of the tunnel servers.
fn connect_peers(docs: &[Value]) -> Vec<Value> {
    let mut peers = Vec::new();
    for p in docs.iter().filter(|d| {
        d["kind"] == "NetworkPolicy"
            && d["metadata"]["namespace"] == "shoot--foo--bar"
            && d["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
                == "isthmus-tunnel-server"
    }) {
        for rule in p["spec"]["ingress"].as_array().into_iter().flatten() {
            if rule["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["port"] == 8132)
            {
                peers.extend(rule["from"].as_array().unwrap().iter().cloned());
            }
        }
    }
    peers
}

/// Point 7: under gardener-resource-manager the tunnel Service's all-webhook-targets
/// annotation admitted every pod carrying that label (and, through its namespace selector,
/// pods of the release namespace); the explicit policies admit the own namespace's
/// kube-apiserver only. Both modes now admit exactly that, and the resource-manager mode
/// lets the kube-apiserver out to the front.
#[test]
fn both_network_policy_modes_admit_only_the_own_kube_apiserver_to_connect() {
    let grm = render(&SEED, &TUNNEL);
    let mut explicit_sets = TUNNEL.to_vec();
    explicit_sets.push("networkPolicy.explicit=true");
    let explicit = render(&SEED, &explicit_sets);
    let own = json!([{"podSelector": {"matchLabels": {"app": "kubernetes", "role": "apiserver"}}}]);
    assert_eq!(json!(connect_peers(&explicit)), own);
    assert_eq!(json!(connect_peers(&grm)), own);
    let svc = find(&grm, "Service", "isthmus-tunnel-server");
    let annotations = svc["metadata"]["annotations"].as_object().unwrap();
    assert!(
        !annotations.keys().any(|k| k.contains("webhook-targets")),
        "{annotations:?}"
    );
    let egress = find(
        &grm,
        "NetworkPolicy",
        "isthmus-kube-apiserver-to-tunnel-server",
    );
    assert_eq!(
        egress["spec"]["podSelector"]["matchLabels"],
        json!({"app": "kubernetes", "role": "apiserver"})
    );
    assert_eq!(
        egress["spec"]["egress"][0]["ports"],
        json!([{"port": 8132, "protocol": "TCP"}])
    );
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

/// Point 7: the PodMonitor scrapes the listed tunnel servers' namespaces, not any pod of the
/// seed labelled as a tunnel server.
#[test]
fn the_pod_monitor_scrapes_only_the_listed_namespaces() {
    let mut sets = TUNNEL.to_vec();
    sets.extend([
        "tunnel.servers[1].namespace=shoot--b",
        "tunnel.servers[1].agentClientNames[0]=agent.shoot--b",
        "tunnel.servers[1].connectClientNames[0]=kube-apiserver.shoot--b",
    ]);
    let docs = render(&SEED, &sets);
    let pm = find(&docs, "PodMonitor", "isthmus-tunnel-server");
    assert_eq!(
        pm["spec"]["namespaceSelector"],
        json!({"matchNames": ["shoot--foo--bar", "shoot--b"]})
    );
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
        let docs = render(values, &TUNNEL_TRUSTED);
        for (id, t) in common::chart::pod_templates(&docs) {
            for c in t["spec"]["containers"].as_array().unwrap() {
                assert_eq!(c["image"], want.as_str(), "{id}");
            }
        }
    }
    assert_ne!(app_version, "latest");
}

/// A tunnel server with its names and trust, for renders without gardenlet's values.
const TUNNEL_TRUSTED: [&str; 4] = [
    TUNNEL[0],
    TUNNEL[1],
    TUNNEL[2],
    "tunnel.trustedProxies[0]=10.244.0.0/16",
];
