//! deploy/ agrees with the code: the Service and DaemonSet ports are the controller's port
//! layout, the bootstrap proxy config is valid, the examples are valid `EtcdMigration`s, and
//! the grace period outlasts the proxy's drain.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure

use isthmus_controller::crd::{EtcdMigration, PortScheme};
use isthmus_controller::proxy_config::Layout;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn deploy(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn docs(file: &str) -> Vec<Value> {
    deploy(file)
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap()
}

#[test]
fn proxy_ports_match_the_controller_layout() {
    let d = docs("proxy.yaml");
    let layout = Layout::standard(
        PortScheme::default(),
        3,
        8443,
        "0.0.0.0:9901".parse().unwrap(),
    );
    let want: BTreeSet<(String, u64)> = layout
        .listeners
        .iter()
        .map(|(n, p)| (n.clone(), u64::from(*p)))
        .collect();
    // The load balancer the controller makes on demand from the template deploy/ carries.
    let template = d
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "isthmus-proxy-service")
        .unwrap();
    let (_, lb) = isthmus_controller::load_balancer::service(
        template["data"]["service.yaml"].as_str().unwrap(),
        "isthmus-system",
    )
    .unwrap();
    let svc: BTreeSet<(String, u64)> = lb["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["port"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(svc, want);
    let ds = find(&d, "DaemonSet");
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let ports: BTreeSet<(String, u64)> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] != "admin")
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, want);
    assert_eq!(lb["spec"]["externalTrafficPolicy"], "Local");
}

#[test]
fn grace_period_outlasts_prestop_and_drain() {
    let d = docs("proxy.yaml");
    let spec = &find(&d, "DaemonSet")["spec"]["template"]["spec"];
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    let pre_stop = spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap();
    let text = find(&d, "ConfigMap")["data"]["proxy.json"]
        .as_str()
        .unwrap();
    let cfg = isthmus_config::parse_proxy("deploy/proxy.json", text).unwrap();
    let drain = cfg.drain_delay.get().as_secs() + cfg.drain_timeout.get().as_secs();
    assert!(
        grace > pre_stop + drain,
        "grace {grace}s <= preStop {pre_stop}s + drain {drain}s"
    );
    assert_eq!(
        cfg.admin.address.port(),
        9901,
        "the controller probes the admin port"
    );
}

#[test]
fn examples_are_valid_etcdmigrations() {
    for f in [
        "examples/etcdmigration-source.yaml",
        "examples/etcdmigration-destination.yaml",
    ] {
        let m: EtcdMigration =
            serde_saphyr::from_str(&deploy(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(
            m.metadata.namespace.as_deref(),
            Some("shoot--foo--bar"),
            "{f}"
        );
    }
}

/// `examples/access-*.yaml` are what `access::grant` gives for the example migrations: the
/// Role and RoleBinding gardenlet creates in the shoot's namespace with each of them.
#[test]
fn access_examples_are_current() {
    use isthmus_controller::access::{grant_yaml, Subject};
    for role in ["source", "destination"] {
        let example = format!("examples/etcdmigration-{role}.yaml");
        let m: EtcdMigration = serde_saphyr::from_str(&deploy(&example)).unwrap();
        let ns = m.metadata.namespace.clone().unwrap();
        let header = format!(
            "# Generated from {example} by isthmus_controller::access::grant; do not edit.\n\
             # Regenerate: ISTHMUS_UPDATE_EXAMPLES=1 cargo test -p isthmus-controller --test deploy\n\
             # What the orchestrator (gardenlet) creates in the shoot's namespace together with the\n\
             # EtcdMigration, and deletes once the EtcdMigration is gone (its finalizer needs it):\n\
             # the controller's writes there, and its Secret reads, by name where RBAC allows: the\n\
             # etcd client Secrets the Etcd's spec.etcd.clientUrlTls names (Gardener's secrets\n\
             # manager's etcd-client-<hash> and ca-etcd-bundle-<hash>, renamed on each rotation:\n\
             # gardenlet grants the current names with the Etcd that references them).\n"
        );
        use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
        let secrets = [ETCD_CA_BUNDLE_SECRET.into(), ETCD_CLIENT_SECRET.into()];
        let generated = grant_yaml(&m.spec, &ns, &Subject::default(), &secrets, &header).unwrap();
        current(&format!("access-{role}.yaml"), &generated);
    }
}

/// `examples/tunnel-server.yaml` is what the controller creates in the shoot's namespace for
/// the example destination migration (`isthmus_controller::tunnel_server::objects`), with
/// the flags the chart gives it (image, the pod network as trusted proxies, priority class).
#[test]
fn tunnel_server_example_is_current() {
    use isthmus_controller::tunnel_server::{objects, Owner, Proxies, TunnelServers};
    let example = "examples/etcdmigration-destination.yaml";
    let m: EtcdMigration = serde_saphyr::from_str(&deploy(example)).unwrap();
    let ns = m.metadata.namespace.clone().unwrap();
    let settings = TunnelServers {
        image: "isthmus:latest".into(),
        trusted_proxies: vec!["10.244.0.0/16".into()],
        priority_class: "gardener-system-300".into(),
        service_monitor: true,
        listen: std::net::Ipv4Addr::UNSPECIFIED.into(),
        kube_apiserver_egress: true,
    };
    let owner = Owner {
        name: m.metadata.name.clone().unwrap(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
    };
    let namespace_labels = isthmus_controller::network::namespace_name_labels("isthmus-system");
    let proxies = Proxies {
        namespace_labels: &namespace_labels,
        alias: "all-shoots",
    };
    let docs = objects(&m.spec, &ns, &owner, &proxies, &settings)
        .unwrap()
        .iter()
        .map(serde_saphyr::to_string)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let generated = format!(
        "# Generated from {example} by isthmus_controller::tunnel_server::objects; do not edit.\n\
         # Regenerate: ISTHMUS_UPDATE_EXAMPLES=1 cargo test -p isthmus-controller --test deploy\n\
         # What the controller creates in the shoot's namespace on the destination seed while the\n\
         # temporary VPN's route is served (Join to Shrink), owned by the EtcdMigration (the uid\n\
         # here is a placeholder), and deletes after: the tunnel server (controller/README.md,\n\
         # \"The temporary VPN's tunnel server\"), with the flags the chart gives it on a Gardener\n\
         # seed: --tunnel-image=isthmus:latest, --tunnel-trusted-proxies=10.244.0.0/16 (the pod\n\
         # network), priority class gardener-system-300, the shoot Prometheus' ServiceMonitor, the\n\
         # kube-apiserver's egress policy (--tunnel-kube-apiserver-egress-policy=true).\n{}",
        docs.join("---\n")
    );
    current("tunnel-server.yaml", &generated);
}

/// `deploy/examples/<name>` holds `generated` (written there with `ISTHMUS_UPDATE_EXAMPLES`).
fn current(name: &str, generated: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/examples")
        .join(name);
    if std::env::var_os("ISTHMUS_UPDATE_EXAMPLES").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale; regenerate with:\n  ISTHMUS_UPDATE_EXAMPLES=1 cargo test -p isthmus-controller --test deploy",
        path.display()
    );
}
