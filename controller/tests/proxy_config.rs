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
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text)
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
    assert!(isthmus_config::parse_proxy("p.json", &empty.text).is_ok());
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
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text)
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
    // Each route carries its own migration's sources (not the union of the listener).
    let route = |sni_prefix: &str| {
        peer.routes
            .iter()
            .find(|r| r.sni.as_ref().unwrap().as_str().starts_with(sni_prefix))
            .unwrap()
    };
    assert_eq!(
        route("etcd-main-0").allowed_sources[0].to_string(),
        "198.51.100.0/24"
    );
    assert_eq!(
        route("etcd-events-0").allowed_sources[0].to_string(),
        "192.0.2.7/32"
    );
    // A migration without allowedSources opens nothing (issue 25 point 5): its routes admit
    // nobody (the seed's default is none), the listener keeps the others' union.
    let mut c = spec(Role::Source, Step::Expose);
    c.etcd_name = "etcd-other".into();
    all.extend(routes(&c, NS, false));
    let r = render(&layout(), &all).unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text).unwrap();
    assert_eq!(
        parsed.routes_without_allowed_sources,
        isthmus_config::UnlistedSources::Deny
    );
    let peer = parsed
        .listeners
        .iter()
        .find(|l| l.name == "peer-2380")
        .unwrap();
    assert_eq!(peer.allowed_sources.len(), 2);
    let other = peer
        .routes
        .iter()
        .find(|r| r.sni.as_ref().unwrap().as_str().starts_with("etcd-other-0"))
        .unwrap();
    assert!(other.allowed_sources.is_empty(), "admits nobody");
    assert_eq!(peer.proxy_protocol, isthmus_config::ProxyProtocolMode::None);
    // With a seed-wide default, that migration's routes admit the default.
    let mut l = layout();
    l.default_allowed_sources = vec!["203.0.113.0/24".into()];
    let parsed =
        isthmus_config::parse_proxy("proxy.json", &render(&l, &all).unwrap().text).unwrap();
    let peer = parsed
        .listeners
        .iter()
        .find(|l| l.name == "peer-2380")
        .unwrap();
    let other = peer
        .routes
        .iter()
        .find(|r| r.sni.as_ref().unwrap().as_str().starts_with("etcd-other-0"))
        .unwrap();
    assert_eq!(other.allowed_sources[0].to_string(), "203.0.113.0/24");
    assert_eq!(peer.allowed_sources.len(), 3);
}

#[test]
fn exposure_restricted_says_whether_members_admit_only_listed_sources() {
    use isthmus_controller::proxy_config::exposure;
    let mut l = layout();
    let v = exposure(&["198.51.100.0/24".into()], &l);
    assert_eq!((v.status, v.reason), ("True", "AllowedSources"));
    let v = exposure(&[], &l);
    assert_eq!((v.status, v.reason), ("True", "NoSourceAllowed"));
    l.default_allowed_sources = vec!["203.0.113.0/24".into()];
    assert_eq!(exposure(&[], &l).reason, "SeedDefault");
    let v = exposure(&["10.0.0.0/8".into(), "::/0".into()], &l);
    assert_eq!((v.status, v.reason), ("False", "OpenToAnySource"));
    assert!(v.message.contains("::/0"), "{}", v.message);
}

#[test]
fn the_file_is_json_from_the_proxy_schema_and_reads_back_equal() {
    let all = routes(&spec(Role::Destination, Step::Join), NS, true);
    let r = render(&layout(), &all).unwrap();
    let value: serde_json::Value = serde_json::from_str(&r.text).unwrap();
    assert_eq!(value["listeners"][0]["name"], "client-2377");
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text).unwrap();
    assert_eq!(isthmus_controller::proxy_config::write(&parsed).unwrap(), r);
}

#[test]
fn a_problem_is_traced_to_the_migration_at_its_field_path_and_only_it_is_left_out() {
    use isthmus_controller::proxy_config::{render_claims, Claim};
    let good = routes(&spec(Role::Source, Step::Expose), NS, false);
    let mut bad_spec = spec(Role::Destination, Step::Join);
    bad_spec.vpn.as_mut().unwrap().target =
        "vpn-seed-server.shoot--b.svc.cluster.local:99999".into();
    let bad = routes(&bad_spec, "shoot--b", true);
    let claims = [
        Claim {
            owner: format!("{NS}/etcd-main"),
            routes: good.clone(),
        },
        Claim {
            owner: "shoot--b/etcd-main".into(),
            routes: bad,
        },
    ];
    let outcome = render_claims(&layout(), &claims).unwrap();
    assert_eq!(outcome.left_out.len(), 1, "{:?}", outcome.left_out);
    let left = &outcome.left_out[0];
    assert_eq!(left.owner, "shoot--b/etcd-main");
    assert!(
        left.path.starts_with("upstreams[") && left.path.ends_with("].endpoints[0]"),
        "{left}"
    );
    assert!(left.message.contains("port must be 1-65535"), "{left}");
    // The file holds exactly the good migration's routes.
    assert_eq!(outcome.rendered, render(&layout(), &good).unwrap());
    let e = render(&layout(), &claims[1].routes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("].endpoints[0]: invalid endpoint"), "{e}");
}

#[test]
fn the_older_migration_keeps_a_vpn_name_two_migrations_want() {
    use isthmus_controller::proxy_config::{render_claims, Claim};
    let older = spec(Role::Destination, Step::Join);
    let mut younger = spec(Role::Destination, Step::Join);
    younger.vpn.as_mut().unwrap().target = "vpn-seed-server.shoot--b.svc.cluster.local:9443".into();
    let claims = [
        Claim {
            owner: format!("{NS}/etcd-main"),
            routes: routes(&older, NS, true),
        },
        Claim {
            owner: "shoot--b/etcd-main".into(),
            routes: routes(&younger, "shoot--b", true),
        },
    ];
    let outcome = render_claims(&layout(), &claims).unwrap();
    assert!(outcome.left_out.is_empty());
    assert_eq!(outcome.conflicts.len(), 1, "{:?}", outcome.conflicts);
    let c = &outcome.conflicts[0];
    assert_eq!(
        (
            c.owner.as_str(),
            c.held_by.as_str(),
            c.listener.as_str(),
            c.sni.as_str()
        ),
        (
            "shoot--b/etcd-main",
            "shoot--foo--bar/etcd-main",
            "vpn-8443",
            "vpn-tmp.foo.internal.example.com"
        )
    );
    let parsed = isthmus_config::parse_proxy("proxy.json", &outcome.rendered.text).unwrap();
    let vpn = parsed
        .listeners
        .iter()
        .find(|l| l.name == "vpn-8443")
        .unwrap();
    assert_eq!(vpn.routes.len(), 1);
    assert_eq!(vpn.routes[0].upstream, format!("{NS}.vpn"));
    // The younger's member routes are in (they conflict with nothing).
    assert_eq!(
        parsed
            .listeners
            .iter()
            .map(|l| l.routes.len())
            .sum::<usize>(),
        13
    );
    // The same upstream name to another place is a conflict too (two migrations of one
    // namespace with different VPN targets).
    let mut same_ns = spec(Role::Destination, Step::Join);
    same_ns.etcd_name = "etcd-events".into();
    same_ns.vpn.as_mut().unwrap().target = "other.shoot--foo--bar.svc.cluster.local:9443".into();
    same_ns.vpn.as_mut().unwrap().dns_name = "vpn-2.foo.internal.example.com".into();
    let claims = [
        claims[0].clone(),
        Claim {
            owner: format!("{NS}/etcd-events"),
            routes: routes(&same_ns, NS, true),
        },
    ];
    let outcome = render_claims(&layout(), &claims).unwrap();
    assert_eq!(outcome.conflicts.len(), 1, "{:?}", outcome.conflicts);
    assert_eq!(outcome.conflicts[0].sni, "vpn-2.foo.internal.example.com");
}

#[test]
fn internet_facing_listeners_get_a_per_source_cap_and_upstreams_an_idle_timeout() {
    use isthmus_controller::proxy_config::{connections_per_source, IDLE_TIMEOUT};
    let mut all = routes(&spec(Role::Destination, Step::Join), NS, true);
    for i in 0..9 {
        let mut other = spec(Role::Source, Step::Expose);
        other.etcd_name = format!("etcd-{i}");
        all.extend(routes(&other, NS, false));
    }
    let r = render(&layout(), &all).unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text).unwrap();
    for l in &parsed.listeners {
        assert_eq!(
            l.max_connections_per_source,
            Some(connections_per_source(l.routes.len())),
            "{}",
            l.name
        );
    }
    let peer = parsed
        .listeners
        .iter()
        .find(|l| l.name == "peer-2380")
        .unwrap();
    assert_eq!(peer.routes.len(), 10);
    assert_eq!(peer.max_connections_per_source, Some(640));
    let vpn = parsed
        .listeners
        .iter()
        .find(|l| l.name == "vpn-8443")
        .unwrap();
    assert_eq!(vpn.max_connections_per_source, Some(256));
    assert!(parsed
        .upstreams
        .iter()
        .all(|u| u.idle_timeout == Some(IDLE_TIMEOUT)));
    assert_eq!(IDLE_TIMEOUT.to_string(), "3h");
}

/// Issue 47 point 2: the VPN upstream sends a PROXY v2 header by default (the tunnel server's
/// per-source handshake shares then see each agent's address, not the proxy's, so one stranger
/// sending ClientHellos for the VPN name no longer evicts the agent's handshakes), on the VPN
/// upstream only (etcd speaks TLS from the first byte); `proxyProtocol: none` still turns it
/// off. A spec without the field — as the API server stores it, or as an older orchestrator
/// writes it — means v2.
#[test]
fn the_vpn_upstream_sends_proxy_v2_by_default_and_nothing_when_told_none() {
    use isthmus_config::SendProxyProtocol;
    use isthmus_controller::crd::{EtcdMigrationSpec, ProxyProtocol};
    let sent = |spec: &EtcdMigrationSpec| {
        let r = render(&layout(), &routes(spec, NS, true)).unwrap();
        let parsed = isthmus_config::parse_proxy("proxy.json", &r.text)
            .unwrap_or_else(|e| panic!("{e}\n{}", r.text));
        parsed
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), u.send_proxy_protocol))
            .collect::<Vec<_>>()
    };
    let vpn = format!("{NS}.vpn");
    // The spec as JSON without `proxyProtocol`.
    let mut json = serde_json::to_value(spec(Role::Destination, Step::Join)).unwrap();
    json["vpn"].as_object_mut().unwrap().remove("proxyProtocol");
    let s: EtcdMigrationSpec = serde_json::from_value(json).unwrap();
    assert_eq!(s.vpn.as_ref().unwrap().proxy_protocol, ProxyProtocol::V2);
    let on = sent(&s);
    assert_eq!(on.len(), 7);
    for (name, p) in &on {
        let want = if *name == vpn {
            SendProxyProtocol::V2
        } else {
            SendProxyProtocol::None
        };
        assert_eq!(*p, want, "{name}");
    }
    // The same through the file's text, as an operator reads the ConfigMap.
    let text = render(&layout(), &routes(&s, NS, true)).unwrap().text;
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let upstream = file["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == vpn.as_str())
        .unwrap();
    assert_eq!(upstream["send_proxy_protocol"], "v2", "{upstream}");
    // The CRD defaults the field to v2 as well (what `kubectl apply` without it stores).
    let crd = isthmus_controller::crd::crd_yaml().unwrap();
    let at = crd.find("proxyProtocol:").unwrap();
    let field = &crd[at..at + crd[at..].find("target:").unwrap()];
    assert!(field.contains("default: v2"), "{field}");
    // `none` is still there for a server that cannot trust the proxies.
    let mut s = s;
    s.vpn.as_mut().unwrap().proxy_protocol = ProxyProtocol::None;
    let off = sent(&s);
    assert!(
        off.iter().all(|(_, p)| *p == SendProxyProtocol::None),
        "{off:?}"
    );
}

/// Two migrations that name the same VPN upstream with different PROXY settings conflict like
/// two endpoints would: the older keeps it.
#[test]
fn a_vpn_upstream_wanted_with_and_without_proxy_v2_stays_with_the_older() {
    use isthmus_controller::crd::ProxyProtocol;
    use isthmus_controller::proxy_config::{render_claims, Claim};
    let older = spec(Role::Destination, Step::Join);
    let mut younger = older.clone();
    younger.vpn.as_mut().unwrap().proxy_protocol = ProxyProtocol::None;
    let claims = [
        Claim {
            owner: format!("{NS}/older"),
            routes: routes(&older, NS, true),
        },
        Claim {
            owner: format!("{NS}/younger"),
            routes: routes(&younger, NS, true),
        },
    ];
    let outcome = render_claims(&layout(), &claims).unwrap();
    assert_eq!(outcome.conflicts.len(), 1, "{:?}", outcome.conflicts);
    assert_eq!(outcome.conflicts[0].owner, format!("{NS}/younger"));
    assert_eq!(outcome.conflicts[0].held_by, format!("{NS}/older"));
}

/// Issue 47, point 7: the world-open VPN listener gets a cap of its own, so its strangers
/// cannot take the proxy's `max_connections` from the etcd listeners, which keep none.
#[test]
fn the_vpn_listener_has_a_connection_cap_of_its_own() {
    let r = render(
        &layout(),
        &routes(&spec(Role::Destination, Step::Join), NS, true),
    )
    .unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text).unwrap();
    for l in &parsed.listeners {
        let want = l.name.starts_with("vpn-").then_some(512);
        assert_eq!(l.max_connections, want, "{}", l.name);
    }
}

/// Issue 47, point 2: the VPN upstream caps what one client address forwards to the tunnel
/// server; etcd's upstreams do not.
#[test]
fn the_vpn_upstream_caps_connections_per_source() {
    let r = render(
        &layout(),
        &routes(&spec(Role::Destination, Step::Join), NS, true),
    )
    .unwrap();
    let parsed = isthmus_config::parse_proxy("proxy.json", &r.text).unwrap();
    let mut vpn = 0;
    for u in &parsed.upstreams {
        let want = u.name.ends_with(".vpn").then_some(16);
        vpn += usize::from(want.is_some());
        assert_eq!(u.max_connections_per_source, want, "{}", u.name);
    }
    assert_eq!(vpn, 1);
}
