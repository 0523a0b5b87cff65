//! The rendered proxy config is valid for the proxy's own loader, stable, and hashed the way
//! the proxy reports it.

mod common;

use common::{spec, NS};
use isthmus_controller::crd::{PortScheme, Role, Step};
use isthmus_controller::plan::routes;
use isthmus_controller::proxy_config::{render, rolled_out, Layout};
use std::net::SocketAddr;

fn layout() -> Layout {
    Layout::standard(
        PortScheme::default(),
        3,
        8443,
        SocketAddr::from(([0, 0, 0, 0], 9901)),
    )
}

#[test]
fn renders_a_config_the_proxy_accepts() {
    let mut all = routes(&spec(Role::Destination, Step::Join), NS, true);
    let mut other = spec(Role::Source, Step::Expose);
    other.etcd_name = "etcd-events".into();
    all.extend(routes(&other, "shoot--other", false));
    let r = render(&layout(), &all).unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.yaml", &r.text)
        .unwrap_or_else(|e| panic!("{e}\n{}", r.text));
    assert_eq!(r.hash, isthmus_config::hash_bytes(r.text.as_bytes()));
    let names: Vec<&str> = parsed.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "client-2377",
            "client-2378",
            "client-2379",
            "peer-2380",
            "peer-2381",
            "peer-2382",
            "vpn-8443"
        ]
    );
    // Two shoots share the peer-2380 listener, told apart by SNI.
    let peer0 = &parsed.listeners[3];
    assert_eq!(peer0.routes.len(), 2);
    assert_eq!(parsed.upstreams.len(), 6 + 6 + 1);
}

#[test]
fn equal_inputs_give_equal_bytes_and_order_does_not_matter() {
    let mut a = routes(&spec(Role::Source, Step::Expose), NS, false);
    let r1 = render(&layout(), &a).unwrap();
    a.reverse();
    let r2 = render(&layout(), &a).unwrap();
    assert_eq!(r1, r2);
    let empty = render(&layout(), &[]).unwrap();
    assert_ne!(empty.hash, r1.hash);
    assert!(isthmus_config::parse_proxy("p", &empty.text).is_ok());
}

#[test]
fn rollout_needs_every_pod_on_the_new_hash() {
    let ok = |h: &str| Ok::<String, ()>(h.to_string());
    assert!(rolled_out("h1", &[ok("h1"), ok("h1")]));
    assert!(!rolled_out("h1", &[ok("h1"), ok("h0")]));
    assert!(!rolled_out("h1", &[ok("h1"), Err(())]));
    assert!(!rolled_out::<()>("h1", &[]));
}

#[test]
fn listeners_allow_the_other_seeds_sources_and_trust_only_the_load_balancer() {
    let mut a = spec(Role::Source, Step::Expose);
    a.allowed_sources = vec!["198.51.100.0/24".into()];
    let mut b = spec(Role::Source, Step::Expose);
    b.etcd_name = "etcd-events".into();
    b.allowed_sources = vec!["192.0.2.7".into()];
    let mut all = routes(&a, NS, false);
    all.extend(routes(&b, NS, false));
    let mut l = layout();
    l.trusted_proxies = vec!["10.250.0.0/16".into()];
    let r = render(&l, &all).unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.yaml", &r.text)
        .unwrap_or_else(|e| panic!("{e}\n{}", r.text));
    let peer = parsed
        .listeners
        .iter()
        .find(|l| l.name == "peer-2380")
        .unwrap();
    let allowed: Vec<String> = peer.allowed_sources.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        allowed.len(),
        2,
        "the union of both migrations: {allowed:?}"
    );
    assert_eq!(peer.trusted_proxies.len(), 1);
    assert_eq!(
        peer.proxy_protocol,
        isthmus_config::ProxyProtocolMode::Accept
    );
    // A migration without allowedSources on the same listener opens it to any source.
    let mut c = spec(Role::Source, Step::Expose);
    c.etcd_name = "etcd-other".into();
    all.extend(routes(&c, NS, false));
    let r = render(&layout(), &all).unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.yaml", &r.text).unwrap();
    let peer = parsed
        .listeners
        .iter()
        .find(|l| l.name == "peer-2380")
        .unwrap();
    assert!(peer.allowed_sources.is_empty());
    assert_eq!(peer.proxy_protocol, isthmus_config::ProxyProtocolMode::None);
}
