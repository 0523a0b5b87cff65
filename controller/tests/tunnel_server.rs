//! Issue 46 points 2 and 3, the bodies: the tunnel server the controller runs for the example
//! destination migration is a control-plane component of the shoot as gardenlet makes
//! `vpn-seed-server` (gardener v1.149.3 `pkg/component/networking/vpn/seedserver/`): labels,
//! priority `gardener-system-300`, probes on `/healthz`, a grace period above the drain, a PDB
//! that lets a drain evict it, gardener-resource-manager's annotations for exactly its peers,
//! the shoot Prometheus' `ServiceMonitor`, a configuration its own loader takes; and what the
//! controller refuses in a spec asking for one. Against a real kube-apiserver:
//! `apiserver_tunnel_server.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tunnel;

use isthmus_config::TunnelServerConfig;
use isthmus_controller::crd::{EtcdMigrationSpec, ProxyProtocol, Role};
use isthmus_controller::plan::{validate, SeedRules};
use isthmus_controller::tunnel_server::{kinds, objects, CONFIG_KEY};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use tunnel::{example, owner, proxies, settings};

const NS: &str = "shoot--foo--bar";

fn bodies() -> Vec<Value> {
    objects(&example().spec, NS, &owner(), &proxies(), &settings()).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
}

fn matches(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

#[test]
fn every_object_is_a_control_plane_part_of_the_shoot_owned_by_the_migration() {
    let docs = bodies();
    let got: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().into(),
                d["metadata"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = kinds(true)
        .into_iter()
        .map(|(_, k, n)| (k.into(), n.into()))
        .collect();
    assert_eq!(got, want);
    for d in &docs {
        let meta = &d["metadata"];
        assert_eq!(meta["namespace"], NS, "{}", meta["name"]);
        assert_eq!(meta["labels"]["gardener.cloud/role"], "controlplane");
        assert_eq!(meta["labels"]["isthmus.dev/migration"], "etcd-main");
        assert_eq!(
            meta["ownerReferences"],
            json!([{"apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
                    "name": "etcd-main", "uid": owner().uid, "controller": true}])
        );
    }
    // Without spec.vpn.server: none.
    let mut spec = example().spec;
    spec.vpn.as_mut().unwrap().server = None;
    assert!(objects(&spec, NS, &owner(), &proxies(), &settings())
        .unwrap()
        .is_empty());
    // Without the ServiceMonitor's CRD (a plain cluster): none of it.
    let plain = isthmus_controller::tunnel_server::TunnelServers {
        service_monitor: false,
        ..settings()
    };
    let docs = objects(&example().spec, NS, &owner(), &proxies(), &plain).unwrap();
    assert!(docs.iter().all(|d| d["kind"] != "ServiceMonitor"));
}

/// The server's own loader takes the file; it trusts the proxies' PROXY v2 header, admits
/// the spec's names on each endpoint, and serves its admin endpoint where the kubelet probes.
fn config(docs: &[Value]) -> TunnelServerConfig {
    let text = find(docs, "ConfigMap", "isthmus-tunnel-server")["data"][CONFIG_KEY]
        .as_str()
        .unwrap()
        .to_string();
    isthmus_config::parse::<TunnelServerConfig>(CONFIG_KEY, &text).unwrap()
}

#[test]
fn the_deployment_runs_at_the_shoot_control_plane_priority_with_healthz_probes() {
    let docs = bodies();
    let c = config(&docs);
    let d = find(&docs, "Deployment", "isthmus-tunnel-server");
    let pod = &d["spec"]["template"];
    let spec = &pod["spec"];
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(spec["priorityClassName"], "gardener-system-300");
    assert_eq!(
        pod["metadata"]["labels"]["gardener.cloud/role"],
        "controlplane"
    );
    assert!(matches(
        &d["spec"]["selector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "isthmus:0.1.0");
    assert_eq!(container["args"][0], "tunnel-server");
    // Probes: /healthz (not /readyz: ready only with an agent, which reaches the pod only
    // once it is ready) on the admin port the config binds beyond loopback.
    let metrics = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .unwrap();
    assert_eq!(metrics["containerPort"], c.admin.address.port());
    assert!(c.admin.address.ip().is_unspecified(), "{}", c.admin.address);
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            container[probe]["httpGet"],
            json!({"path": "/healthz", "port": "metrics"}),
            "{probe}"
        );
        // Slow is not dead on a busy seed (docs/probes.md).
        assert_eq!(container[probe]["timeoutSeconds"], 5, "{probe}");
    }
    assert_eq!(container["livenessProbe"]["failureThreshold"], 5);
    assert!(!d.to_string().contains("/readyz"));
    // The grace period outlasts the drain, during which the admin endpoint keeps answering.
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace > c.drain_timeout.get().as_secs(), "{grace}");
    // Requests, no limit; the hardened pod of every isthmus container.
    assert!(container["resources"]["limits"].is_null());
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(spec["automountServiceAccountToken"], false);
    // Exactly the Secrets the spec names are mounted, at the paths the config reads.
    let mut secrets = BTreeSet::new();
    for v in spec["volumes"].as_array().unwrap() {
        for s in v["projected"]["sources"].as_array().into_iter().flatten() {
            secrets.insert(s["secret"]["name"].as_str().unwrap().to_string());
        }
    }
    let server = example().spec.vpn.unwrap().server.unwrap();
    let named: BTreeSet<String> = [
        &server.agents.tls_secret,
        &server.agents.client_ca.secret,
        &server.connect.tls_secret,
        &server.connect.client_ca.secret,
    ]
    .into_iter()
    .cloned()
    .collect();
    assert_eq!(secrets, named);
    let mounts: BTreeSet<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for f in [&c.agents.tls.cert, &c.agents.tls.client_ca] {
        assert!(
            mounts.contains(f.parent().unwrap().to_str().unwrap()),
            "{f:?}"
        );
    }
    // A new configuration rolls the pod.
    assert!(pod["metadata"]["annotations"]["checksum/config"].is_string());
}

#[test]
fn the_config_trusts_the_proxies_and_admits_only_the_named_clients() {
    let docs = bodies();
    let c = config(&docs);
    let server = example().spec.vpn.unwrap().server.unwrap();
    let trusted: Vec<String> = c
        .agents
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(trusted, ["10.244.0.0/16"]);
    assert_eq!(
        c.agents.tls.allowed_client_names,
        server.agents.client_names
    );
    let connect = c.connect.tls.clone().unwrap();
    assert_eq!(connect.allowed_client_names, server.connect.client_names);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    assert_eq!(c.agents.address.port(), 9443);
    assert_eq!(c.connect.address.unwrap().port(), 8132);
}

/// Drains are not blocked: one replica, and the budget allows one unavailable
/// (`minAvailable: 1` would allow no eviction at all).
#[test]
fn the_budget_never_blocks_a_drain() {
    let docs = bodies();
    let pdb = find(&docs, "PodDisruptionBudget", "isthmus-tunnel-server");
    let replicas = find(&docs, "Deployment", "isthmus-tunnel-server")["spec"]["replicas"]
        .as_i64()
        .unwrap();
    assert!(pdb["spec"]["minAvailable"].is_null());
    let max_unavailable = pdb["spec"]["maxUnavailable"].as_i64().unwrap();
    assert!(max_unavailable >= 1 && replicas - max_unavailable < replicas);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    let pod = &find(&docs, "Deployment", "isthmus-tunnel-server")["spec"]["template"];
    assert!(matches(
        &pdb["spec"]["selector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
}

/// gardener-resource-manager's annotations: the proxies' namespace reaches the agents' port
/// and nothing else; the shoot's Prometheus (`to-all-scrape-targets`) the metrics port.
#[test]
fn the_services_admit_exactly_their_peers() {
    let docs = bodies();
    const NP: &str = "networking.resources.gardener.cloud/";
    let agents = find(&docs, "Service", "isthmus-tunnel-server");
    let ports = |s: &Value| -> Vec<(String, i64)> {
        s["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().into(),
                    p["targetPort"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(ports(agents), [("agents".to_string(), 9443)]);
    let a = &agents["metadata"]["annotations"];
    let selectors: Value =
        serde_json::from_str(a[format!("{NP}namespace-selectors")].as_str().unwrap()).unwrap();
    assert_eq!(
        selectors,
        json!([{"matchLabels": {"kubernetes.io/metadata.name": "isthmus-system"}}])
    );
    assert_eq!(
        a[format!("{NP}pod-label-selector-namespace-alias")],
        "all-shoots"
    );
    assert_eq!(a.as_object().unwrap().len(), 2, "{a}");
    // The proxies' VPN route leads to this Service's port.
    let target = example().spec.vpn.unwrap().target;
    assert_eq!(
        target,
        format!("isthmus-tunnel-server.{NS}.svc.cluster.local:9443")
    );

    let connect = find(&docs, "Service", "isthmus-tunnel-connect");
    assert_eq!(
        ports(connect),
        [("connect".to_string(), 8132), ("metrics".to_string(), 9902)]
    );
    let c = &connect["metadata"]["annotations"];
    assert!(c[format!("{NP}namespace-selectors")].is_null(), "{c}");
    // The CONNECT front is no webhook target: that would admit every webhook caller of the
    // namespace (issue 47 point 7); its policies are the controller's (below).
    assert_eq!(c.as_object().unwrap().len(), 1, "{c}");
    let allowed: Value = serde_json::from_str(
        c[format!("{NP}from-all-scrape-targets-allowed-ports")]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(allowed, json!([{"port": 9902, "protocol": "TCP"}]));
    let pod = &find(&docs, "Deployment", "isthmus-tunnel-server")["spec"]["template"];
    for s in [agents, connect] {
        assert!(matches(&s["spec"]["selector"], &pod["metadata"]["labels"]));
    }
}

/// Issue 47 point 7, kept now that the controller makes the server: the CONNECT front admits
/// this namespace's kube-apiserver (`app=kubernetes,role=apiserver`) on its port only, and
/// lets it out there (a seed's shoot namespace denies egress by default).
#[test]
fn only_the_own_kube_apiserver_reaches_the_connect_front() {
    let docs = bodies();
    let pod = &find(&docs, "Deployment", "isthmus-tunnel-server")["spec"]["template"];
    let apiserver = json!({"matchLabels": {"app": "kubernetes", "role": "apiserver"}});
    let port = json!([{"port": 8132, "protocol": "TCP"}]);
    let ingress = find(&docs, "NetworkPolicy", "isthmus-tunnel-server-connect");
    let spec = &ingress["spec"];
    assert!(matches(
        &spec["podSelector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        spec["ingress"],
        json!([{"from": [{"podSelector": apiserver}], "ports": port}])
    );
    let egress = find(
        &docs,
        "NetworkPolicy",
        "isthmus-kube-apiserver-to-tunnel-server",
    );
    let spec = &egress["spec"];
    assert_eq!(spec["podSelector"], apiserver);
    assert_eq!(spec["policyTypes"], json!(["Egress"]));
    assert!(matches(
        &spec["egress"][0]["to"][0]["podSelector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    assert_eq!(spec["egress"][0]["ports"], port);
    assert_eq!(spec["egress"].as_array().unwrap().len(), 1);
}

/// Issue 46: the kube-apiserver's egress policy only where the namespace denies egress (the
/// controller's `--tunnel-kube-apiserver-egress-policy`, the chart's Gardener path): without
/// it every other object is the same, and the policy is still among the kinds the adapter
/// deletes (one an earlier run wrote goes).
#[test]
fn the_egress_policy_only_where_the_namespace_denies_egress() {
    let egress = "isthmus-kube-apiserver-to-tunnel-server";
    let plain = isthmus_controller::tunnel_server::TunnelServers {
        kube_apiserver_egress: false,
        ..settings()
    };
    let without = objects(&example().spec, NS, &owner(), &proxies(), &plain).unwrap();
    let mut with = bodies();
    assert!(with.iter().any(|d| d["metadata"]["name"] == egress));
    with.retain(|d| d["metadata"]["name"] != egress);
    assert_eq!(without, with);
    assert!(kinds(false)
        .iter()
        .any(|(_, kind, name)| *kind == "NetworkPolicy" && *name == egress));
}

/// The CONNECT front's ingress policy selects the server's pods, so without the resource
/// manager (the chart's plain path) nothing would admit the proxies at the agents' port: the
/// controller writes the policy the resource manager makes from the agents' Service — the
/// proxies' namespace (its labels), pods carrying the alias' label, the agents' port only.
#[test]
fn the_proxies_reach_the_agents_port_without_the_resource_manager() {
    let docs = bodies();
    let pod = &find(&docs, "Deployment", "isthmus-tunnel-server")["spec"]["template"];
    let policy = find(&docs, "NetworkPolicy", "isthmus-tunnel-server-agents");
    let spec = &policy["spec"];
    assert!(matches(
        &spec["podSelector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));
    assert_eq!(spec["policyTypes"], json!(["Ingress"]));
    let label = "networking.resources.gardener.cloud/to-all-shoots-isthmus-tunnel-server-tcp-9443";
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "isthmus-system"}},
                "podSelector": {"matchLabels": {label: "allowed"}},
            }],
            "ports": [{"port": 9443, "protocol": "TCP"}],
        }])
    );
    // The label the chart gives the proxy pods, and the Service's alias for the resource manager.
    let agents = find(&docs, "Service", "isthmus-tunnel-server");
    assert_eq!(
        agents["metadata"]["annotations"]
            ["networking.resources.gardener.cloud/pod-label-selector-namespace-alias"],
        "all-shoots"
    );
    assert_eq!(
        isthmus_controller::tunnel_server::proxy_label("all-shoots"),
        label
    );
}

/// The shoot Prometheus (`serviceMonitorSelector: prometheus=shoot`, its namespace) scrapes
/// the metrics port of the connect Service only, keeping the series the seed's alert and
/// dashboard read.
#[test]
fn the_shoot_prometheus_scrapes_the_metrics_port() {
    let docs = bodies();
    let sm = find(&docs, "ServiceMonitor", "shoot-isthmus-tunnel-server");
    assert_eq!(sm["metadata"]["labels"]["prometheus"], "shoot");
    let select = &sm["spec"]["selector"]["matchLabels"];
    let connect = find(&docs, "Service", "isthmus-tunnel-connect");
    let agents = find(&docs, "Service", "isthmus-tunnel-server");
    assert!(matches(select, &connect["metadata"]["labels"]));
    assert!(!matches(select, &agents["metadata"]["labels"]));
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    let keep = endpoint["metricRelabelings"][0]["regex"].as_str().unwrap();
    for series in [
        "isthmus_tunnel_sessions",
        "isthmus_tunnel_refused_total",
        "isthmus_tunnel_connects_total",
        "isthmus_tunnel_ping_rtt_seconds_bucket",
        "isthmus_tunnel_bytes_total",
        "isthmus_tunnel_streams_in_flight",
    ] {
        assert!(
            keep.contains(&format!("|{series}|"))
                || keep.contains(&format!("({series}|"))
                || keep.contains(&format!("|{series})")),
            "{series} not kept: {keep}"
        );
    }
}

fn problems(spec: &EtcdMigrationSpec, rules: &SeedRules) -> Vec<(String, &'static str)> {
    validate(spec, NS, rules)
        .into_iter()
        .map(|p| (p.field, p.reason))
        .collect()
}

fn running(trusted: &[&str]) -> SeedRules {
    SeedRules {
        tunnel_servers: Some(trusted.iter().map(|s| s.to_string()).collect()),
        ..SeedRules::default()
    }
}

#[test]
fn what_the_controller_refuses_in_a_spec_asking_for_a_server() {
    let ok = example().spec;
    assert_eq!(problems(&ok, &running(&["10.244.0.0/16"])), []);
    // A controller that runs none (the lab's): refused, not half done.
    assert_eq!(
        problems(&ok, &SeedRules::default()),
        [("spec.vpn.server".to_string(), "TunnelServersDisabled")]
    );
    // The VPN route's PROXY v2 header with nobody trusted: every agent would be refused.
    assert_eq!(
        problems(&ok, &running(&[])),
        [("spec.vpn.proxyProtocol".to_string(), "NoTrustedProxies")]
    );
    let mut none = ok.clone();
    none.vpn.as_mut().unwrap().proxy_protocol = ProxyProtocol::None;
    assert_eq!(problems(&none, &running(&[])), []);
    // The route must lead to the server the controller runs.
    let mut elsewhere = ok.clone();
    elsewhere.vpn.as_mut().unwrap().target =
        format!("isthmus-tunnel-connect.{NS}.svc.cluster.local:8132");
    assert_eq!(
        problems(&elsewhere, &running(&["10.244.0.0/16"])),
        [("spec.vpn.target".to_string(), "TargetNotTunnelServer")]
    );
    // One CA for both endpoints: an agent's name must not open the CONNECT front.
    let mut same = ok.clone();
    let server = same.vpn.as_mut().unwrap().server.as_mut().unwrap();
    server.connect.client_names.push("vpn-shoot-tmp".into());
    assert_eq!(
        problems(&same, &running(&["10.244.0.0/16"])),
        [(
            "spec.vpn.server.connect.clientNames".to_string(),
            "RolesNotApart"
        )]
    );
    // What the server's loader refuses (a wildcard; an older CRD would let it through).
    let mut wild = ok.clone();
    wild.vpn
        .as_mut()
        .unwrap()
        .server
        .as_mut()
        .unwrap()
        .agents
        .client_names = vec!["*.shoot".into()];
    assert_eq!(
        problems(&wild, &running(&["10.244.0.0/16"])),
        [("spec.vpn.server".to_string(), "ServerConfigRefused")]
    );
    // The source seed runs no temporary VPN server.
    let mut source = ok;
    source.role = Role::Source;
    source.destination = None;
    assert!(problems(&source, &running(&["10.244.0.0/16"]))
        .contains(&("spec.vpn.server".to_string(), "UnexpectedField")));
}

/// gardenlet's grant gains what creating these objects needs, by name, and no Secret.
#[test]
fn the_grant_names_the_servers_objects() {
    use isthmus_controller::access::{grant, Subject};
    let [role, _] = grant(
        &example().spec,
        NS,
        &Subject::default(),
        &["etcd-client-1".into()],
    );
    let rules = role["rules"].as_array().unwrap();
    let names = |resource: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r["resources"][0] == resource)
            .flat_map(|r| r["resourceNames"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("deployments"), ["isthmus-tunnel-server"]);
    assert_eq!(names("poddisruptionbudgets"), ["isthmus-tunnel-server"]);
    assert_eq!(names("configmaps"), ["isthmus-tunnel-server"]);
    assert_eq!(names("servicemonitors"), ["shoot-isthmus-tunnel-server"]);
    assert_eq!(
        names("networkpolicies"),
        [
            "isthmus-tunnel-server-connect",
            "isthmus-kube-apiserver-to-tunnel-server",
            "isthmus-tunnel-server-agents"
        ]
    );
    assert_eq!(
        names("services"),
        [
            "isthmus-etcd",
            "isthmus-tunnel-server",
            "isthmus-tunnel-connect"
        ]
    );
    assert_eq!(names("secrets"), ["etcd-client-1"]);
    for r in rules {
        assert!(
            !r["resourceNames"].as_array().unwrap_or(&vec![]).is_empty()
                || r["resources"][0] == "events",
            "{r}"
        );
    }
    // A migration without a server gets none of it.
    let mut spec = example().spec;
    spec.vpn.as_mut().unwrap().server = None;
    let [role, _] = grant(&spec, NS, &Subject::default(), &[]);
    let text = role.to_string();
    assert!(
        !text.contains("deployments") && !text.contains("isthmus-tunnel"),
        "{text}"
    );
}
