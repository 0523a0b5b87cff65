//! Seed a's stand-in for Gardener's regular VPN server, `vpn-seed-server` (gardener v1.149.3
//! `pkg/component/networking/vpn/seedserver`), which cannot run here: it is OpenVPN behind the
//! istio ingress gateway, whose SNI route and `X-Gardener-Destination` CONNECT need istio.
//!
//! It is an `isthmus tunnel-server` Deployment in the source namespace, its objects rendered by
//! the controller's own code (`isthmus_controller::tunnel_server::objects`, what seed b's
//! controller applies) from the same `spec.vpn.server` shape (`shoot_webhook.rs`), minus what
//! only the controller's run needs (owner, PodDisruptionBudget, the agents' ClusterIP Service
//! and its policy from the proxies), plus a `LoadBalancer` Service of its own,
//! `vpn-seed-server` (port 8443 to the agents' port), where the regular agent connects before
//! the load starts, as a shoot's `vpn-shoot` reaches its seed's ingress. Its one NetworkPolicy:
//! the agents' port from anywhere (`allow-vpn-seed-server`), since the source namespace's
//! boundary (`join_tls.rs`) admits only its own pods and the proxies', and the load balancer's
//! connections come from neither; the server still admits only the agent's certificate. The
//! CONNECT front needs nothing more: the boundary admits the namespace's own pods (the
//! kube-apiserver), and the controller's `isthmus-tunnel-server-connect` admits it too.

use super::join_observe::SRC;
use super::join_tls::{DOMAIN, ETCD};
use super::node::{Node, SYSTEM};
use super::shoot_webhook::{
    lb_address, seed_name, vpn_spec, AGENT, STAND_IN, STAND_IN_POLICY, VPN_A, VPN_PORT,
};
use isthmus_controller::crd::EtcdMigrationSpec;
use isthmus_controller::tunnel_server::{
    self as server, objects, Owner, Proxies, TunnelServers, AGENTS_PORT,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Seed a's stand-in for `vpn-seed-server` ([module docs](self)): applied, rolled out, its
/// load balancer's address.
pub fn stand_in(a: &Node) -> String {
    let image = a.jsonpath(
        SYSTEM,
        "ds/isthmus-proxy",
        "{.spec.template.spec.containers[0].image}",
    );
    for body in stand_in_objects(a, image) {
        a.apply(&body.to_string());
    }
    a.rolled_out(SRC, &format!("deploy/{}", server::NAME), 240);
    lb_address(a, SRC, STAND_IN)
}

/// The stand-in's objects in seed `a` running `image`, in the order they are applied.
fn stand_in_objects(a: &Node, image: String) -> Vec<Value> {
    let spec: EtcdMigrationSpec = serde_json::from_value(json!({
        "role": "destination", "step": "Join", "etcdName": ETCD, "seedName": seed_name(a),
        "internalDomain": DOMAIN,
        "dns": {"type": "local", "secretRef": {"name": "dns-internal", "namespace": SRC}},
        "loadBalancer": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "vpn": vpn_spec(SRC, VPN_A, a),
    }))
    .unwrap();
    let labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), SYSTEM.to_owned())]);
    let settings = TunnelServers {
        image,
        // Agents reach it through its own load balancer: no proxy sends a PROXY header.
        trusted_proxies: Vec::new(),
        priority_class: String::new(),
        service_monitor: false,
        listen: Ipv4Addr::UNSPECIFIED.into(),
        kube_apiserver_egress: false,
    };
    let owner = Owner {
        name: STAND_IN.into(),
        uid: String::new(),
    };
    let proxies = Proxies {
        namespace_labels: &labels,
        alias: "all-shoots",
    };
    let mut out = Vec::new();
    for mut body in objects(&spec, SRC, &owner, &proxies, &settings).unwrap() {
        let (kind, name) = (body["kind"].clone(), body["metadata"]["name"].clone());
        let only_controllers = kind == "PodDisruptionBudget"
            || (kind == "Service" && name == server::NAME)
            || (kind == "NetworkPolicy" && name == server::AGENTS_POLICY);
        if only_controllers {
            continue;
        }
        if let Some(m) = body["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
        out.push(body);
    }
    out.extend([
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": STAND_IN, "namespace": SRC},
            "spec": {
                "type": "LoadBalancer", "selector": server::selector(),
                "ports": [{"name": "agents", "port": VPN_PORT, "targetPort": AGENTS_PORT}],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": STAND_IN_POLICY, "namespace": SRC},
            "spec": {
                "podSelector": {"matchLabels": server::selector()},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": AGENTS_PORT}]}],
            },
        }),
    ]);
    out
}

/// Seed a's stand-in as [`stand_in`] applies it, without a node: the controller's server
/// (its configuration, CONNECT front and its policy, Deployment) without its owner, behind a
/// load balancer of its own; the configuration admits the agents' and the source
/// kube-apiserver's names and trusts no proxy.
pub fn the_stand_in_is_the_controllers_server() {
    let objects = stand_in_objects(&Node::seed('a'), "isthmus:latest".into());
    let names: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "ConfigMap/isthmus-tunnel-server",
            "Service/isthmus-tunnel-connect",
            "NetworkPolicy/isthmus-tunnel-server-connect",
            "Deployment/isthmus-tunnel-server",
            "Service/vpn-seed-server",
            "NetworkPolicy/allow-vpn-seed-server",
        ]
    );
    assert!(objects
        .iter()
        .all(|o| o["metadata"].get("ownerReferences").is_none()));
    let config = objects[0]["data"][server::CONFIG_KEY].as_str().unwrap();
    assert!(
        config.contains(AGENT) && config.contains("kube-apiserver.seed-a"),
        "{config}"
    );
    assert!(!config.contains("trusted_proxies"), "{config}");
    assert_eq!(
        objects[3]["spec"]["template"]["spec"]["containers"][0]["image"],
        "isthmus:latest"
    );
}
