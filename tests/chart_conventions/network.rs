//! How the chart's objects find each other and the world: the extension namespace by its
//! registration label, the proxy Service's IP families and the pods' listen address.

use super::common::chart::{
    args, check_bootstrap_routes, find, load_balancer, render, render_text, tunnel_objects, SEED,
};
use super::PLAIN;
use serde_json::{json, Value};

const DUAL_STACK: &str = "gardener.seed.networks.ipFamilies={IPv4,IPv6}";

#[test]
fn the_extension_namespace_is_selected_by_its_registration_label_not_its_name() {
    // gardenlet's namespace is extension-<installation>, renamed with every install: the
    // controller's per-shoot Service admits the proxies by the registration label (the
    // release name is the registration's).
    let docs = render(&SEED, &[]);
    let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    assert!(
        a.contains(
            &"--proxy-namespace-labels=controllerregistration.core.gardener.cloud/name=isthmus"
                .to_owned()
        ),
        "{a:?}"
    );
    // Nothing of the chart, nor the load balancer and tunnel server the controller makes with
    // its flags, names the release namespace in a selector.
    let by_name = r#""kubernetes.io/metadata.name":"extension-isthmus""#;
    let made = [vec![load_balancer(&docs)], tunnel_objects(&docs)].concat();
    for d in docs.iter().chain(&made) {
        let text = serde_json::to_string(d).unwrap().replace("\\\"", "\"");
        assert!(
            !text.contains(by_name),
            "{}/{} selects the namespace by name",
            d["kind"],
            d["metadata"]["name"]
        );
    }
    // A plain install keeps its namespace: by name there (no registration label).
    let docs = render(&[PLAIN], &[]);
    let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    assert!(a.contains(
        &"--proxy-namespace-labels=kubernetes.io/metadata.name=extension-isthmus".to_owned()
    ));
}

/// The bootstrap file's listener and admin addresses.
fn bootstrap_addresses(docs: &[Value]) -> Vec<String> {
    let file: Value = serde_json::from_str(
        find(docs, "ConfigMap", "isthmus-proxy-routes")["data"]["proxy.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let mut out = vec![file["admin"]["address"].as_str().unwrap().to_owned()];
    for l in file["listeners"].as_array().unwrap() {
        out.push(l["address"].as_str().unwrap().to_owned());
    }
    out
}

#[test]
fn a_dual_stack_seed_gets_both_families_as_istio_ingressgateway_and_pods_listen_on_both() {
    use isthmus_controller::crd::PortScheme;
    use isthmus_controller::proxy_config::{render as render_file, Layout};
    // Single stack (the seed's ipFamilies [IPv4]): the cluster's default, IPv4 wildcards.
    let docs = render(&SEED, &[]);
    let svc = load_balancer(&docs);
    assert!(svc["spec"]["ipFamilyPolicy"].is_null() && svc["spec"]["ipFamilies"].is_null());
    assert!(bootstrap_addresses(&docs)
        .iter()
        .all(|a| a.starts_with("0.0.0.0:")));
    // Dual stack: [IPv6, IPv4] with PreferDualStack (istio-ingress's service.yaml), and every
    // listener, the admin port and the controller's metrics on `::`.
    let docs = render(&SEED, &[DUAL_STACK]);
    let svc = load_balancer(&docs);
    assert_eq!(svc["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv6", "IPv4"]));
    let addresses = bootstrap_addresses(&docs);
    assert!(
        addresses.iter().all(|a| a.starts_with("[::]:")),
        "{addresses:?}"
    );
    let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    assert!(a.contains(&"--listen-address=::".to_owned()), "{a:?}");
    assert!(
        a.contains(&"--metrics-address=[::]:8080".to_owned()),
        "{a:?}"
    );
    // The tunnel servers the controller runs bind there too: one socket for both families.
    let server = find(&tunnel_objects(&docs), "ConfigMap", "isthmus-tunnel-server")["data"]
        ["server.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let c: isthmus_config::TunnelServerConfig =
        isthmus_config::parse("server.yaml", &server).unwrap();
    let bound = [
        c.agents.address.to_string(),
        c.admin.address.to_string(),
        format!("{:?}", c.connect.address),
    ];
    assert!(
        bound[..2].iter().all(|a| a.starts_with("[::]:")),
        "{bound:?}"
    );
    assert!(bound[2].contains("[::]:8132"), "{bound:?}");
    // The controller's file binds where the bootstrap did (what it renders from that flag).
    let admin: std::net::SocketAddr = "[::]:9901".parse().unwrap();
    let layout = Layout::standard(PortScheme::default(), 3, 8443, admin);
    let file: Value = serde_json::from_str(&render_file(&layout, &[]).unwrap().text).unwrap();
    let mut rendered = vec![file["admin"]["address"].as_str().unwrap().to_owned()];
    for l in file["listeners"].as_array().unwrap() {
        rendered.push(l["address"].as_str().unwrap().to_owned());
    }
    rendered.sort();
    let mut bootstrap = addresses.clone();
    bootstrap.sort();
    assert_eq!(rendered, bootstrap);
    // The proxy takes that file.
    check_bootstrap_routes(&docs);
    // IPv6 only: the cluster's default family, the IPv6 wildcard.
    let docs = render(&SEED, &["gardener.seed.networks.ipFamilies={IPv6}"]);
    let svc = load_balancer(&docs);
    assert!(svc["spec"]["ipFamilyPolicy"].is_null());
    assert!(bootstrap_addresses(&docs)
        .iter()
        .all(|a| a.starts_with("[::]:")));
    // The operator's choice wins; a wrong one names the value.
    let docs = render(
        &SEED,
        &[DUAL_STACK, "proxy.service.ipFamilyPolicy=RequireDualStack"],
    );
    assert_eq!(
        load_balancer(&docs)["spec"]["ipFamilyPolicy"],
        "RequireDualStack"
    );
    let err = render_text(&SEED, &["proxy.service.ipFamilies={IPv5}"]).unwrap_err();
    assert!(
        err.contains("proxy.service.ipFamilies: want IPv4 or IPv6"),
        "{err}"
    );
}
