//! What the controller refuses in a spec the API server accepted (`plan::validate`), each
//! problem named by its field: the `SpecInvalid` condition's content. The CRD refuses most of
//! these already (`apiserver_contracts.rs`); these are the controller's own checks, for an
//! older CRD and for what needs the namespace.

mod common;

use common::{spec, NS};
use isthmus_controller::crd::{EtcdMigrationSpec, Role, SeedIngress, Step};
use isthmus_controller::plan::{validate, SeedRules};

/// `(field, reason)` of every problem.
type Problems = Vec<(String, &'static str)>;

fn problems(s: &EtcdMigrationSpec) -> Problems {
    validate(s, NS, &SeedRules::default())
        .into_iter()
        .map(|p| (p.field, p.reason))
        .collect()
}

fn with(role: Role, change: impl FnOnce(&mut EtcdMigrationSpec)) -> EtcdMigrationSpec {
    let mut s = spec(role, Step::Expose);
    change(&mut s);
    s
}

fn one(field: &str, reason: &'static str) -> Problems {
    vec![(field.to_string(), reason)]
}

#[test]
fn valid_specs_pass() {
    for role in [Role::Source, Role::Destination] {
        assert_eq!(problems(&spec(role, Step::Expose)), vec![], "{role:?}");
    }
    let s = with(Role::Destination, |s| {
        s.allowed_sources = vec![
            "10.0.0.0/8".into(),
            "2001:db8::/32".into(),
            "192.0.2.7".into(),
        ];
        s.destination.as_mut().unwrap().join_timeout = Some("1h30m".into());
    });
    assert_eq!(problems(&s), vec![]);
}

/// Issue 24: `allowedSources: [10.0.0.0/33]` passed the CRD, and nothing said why nothing
/// happened.
#[test]
fn refused_specs_name_the_field_and_the_reason() {
    let cases: Vec<(&str, EtcdMigrationSpec, Problems)> = vec![
        (
            "prefix too long",
            with(Role::Source, |s| {
                s.allowed_sources = vec!["10.0.0.0/8".into(), "10.0.0.0/33".into()]
            }),
            one("spec.allowedSources[1]", "InvalidCIDR"),
        ),
        (
            "host bits",
            with(Role::Source, |s| {
                s.allowed_sources = vec!["10.0.0.1/8".into()]
            }),
            one("spec.allowedSources[0]", "InvalidCIDR"),
        ),
        (
            "join timeout overflows",
            with(Role::Destination, |s| {
                s.destination.as_mut().unwrap().join_timeout = Some("99999999999999999h".into())
            }),
            one("spec.destination.joinTimeout", "InvalidDuration"),
        ),
        (
            "VPN on a member port",
            with(Role::Destination, |s| s.vpn.as_mut().unwrap().port = 2381),
            one("spec.vpn.port", "PortConflict"),
        ),
        (
            "client ports above peer ports",
            with(Role::Source, |s| {
                s.ports.client_base = s.ports.peer_base + 10
            }),
            one("spec.ports.clientBase", "PortConflict"),
        ),
        (
            "exposed name label too long in this namespace",
            with(Role::Source, |s| {
                s.seed_name = "a-seed-whose-name-is-long-enough-to-break-labels".into();
                s.seed_ingress = Some(SeedIngress {
                    domain: "ingress.example.com".into(),
                });
            }),
            one("spec.seedName", "InvalidDNSName"),
        ),
        (
            "destination without its spec",
            with(Role::Destination, |s| s.destination = None),
            one("spec.destination", "MissingDestinationSpec"),
        ),
    ];
    for (what, s, want) in cases {
        assert_eq!(problems(&s), want, "{what}");
    }
    // The message says why, with the value.
    let s = with(Role::Source, |s| {
        s.allowed_sources = vec!["10.0.0.0/33".into()]
    });
    let p = &validate(&s, NS, &SeedRules::default())[0];
    assert!(p.to_string().starts_with("spec.allowedSources[0]: "), "{p}");
    assert!(p.message.contains("10.0.0.0/33"), "{p}");
}

/// Issue 25 point 7: the VPN route has no allow-list, so its target is held to a Service of
/// the migration's own namespace, and never etcd.
#[test]
fn the_vpn_target_stays_in_the_namespace_and_off_etcd() {
    let target = |t: &str| {
        with(Role::Destination, |s| {
            s.vpn.as_mut().unwrap().target = t.into()
        })
    };
    let ok = [
        "vpn-seed-server.shoot--foo--bar.svc.cluster.local:9443",
        "isthmus-tunnel.shoot--foo--bar.svc.cluster.local:8132",
    ];
    for t in ok {
        assert_eq!(problems(&target(t)), vec![], "{t}");
    }
    #[rustfmt::skip]
    let refused = [
        ("vpn-seed-server.shoot--other.svc.cluster.local:9443", "TargetOutsideNamespace"),
        ("kube-apiserver.garden.svc:443", "TargetOutsideNamespace"),
        ("anything.shoot--foo--bar.svc.cluster.local:2380", "EtcdPort"),
        ("etcd-main-client.shoot--foo--bar.svc:443", "EtcdService"),
        ("etcd-main-peer.shoot--foo--bar.svc.cluster.local:8443", "EtcdService"),
        ("10.0.0.12:9443", "InvalidTarget"),
        ("vpn-seed-server:9443", "InvalidTarget"),
        ("vpn-seed-server.shoot--foo--bar.svc.cluster.local:0", "InvalidTarget"),
        ("vpn-seed-server.shoot--foo--bar.svc", "InvalidTarget"),
        // Issue 47 point 5: exactly this cluster's Service name, nothing the proxy pods'
        // resolver would follow elsewhere.
        ("t.shoot--foo--bar.svc.10-1-2-3.sslip.io:443", "TargetOutsideCluster"),
        ("vpn-seed-server.shoot--foo--bar.svc:1194", "TargetOutsideCluster"),
        ("vpn-seed-server.shoot--foo--bar.svc.cluster.local.example.com:9443", "TargetOutsideCluster"),
        ("vpn-seed-server.shoot--foo--bar.svc.cluster:9443", "TargetOutsideCluster"),
    ];
    for (t, reason) in refused {
        assert_eq!(problems(&target(t)), one("spec.vpn.target", reason), "{t}");
    }
    // Every problem is named, not only the first.
    assert_eq!(
        problems(&target("etcd-main-client.shoot--foo--bar.svc:2379")),
        vec![
            ("spec.vpn.target".to_string(), "EtcdPort"),
            ("spec.vpn.target".to_string(), "EtcdService")
        ]
    );
}

/// Issue 47 point 1: a listener no proxy could bind is refused before it reaches the file:
/// the proxy's admin port (the controller's `--proxy-admin-port`, not only the default), a
/// port below 1024, a port the seed's layout binds under another name (its `--members` and
/// `--vpn-port`, not only the spec's own members).
#[test]
fn listener_ports_fit_the_seed_the_proxies_run_on() {
    let vpn = |port: u16| with(Role::Destination, |s| s.vpn.as_mut().unwrap().port = port);
    assert_eq!(problems(&vpn(9901)), one("spec.vpn.port", "PortConflict"));
    assert_eq!(problems(&vpn(80)), one("spec.vpn.port", "PortRange"));
    assert_eq!(problems(&vpn(1023)), one("spec.vpn.port", "PortRange"));
    assert_eq!(problems(&vpn(8444)), vec![]);
    let on = |rules: &SeedRules, s: &EtcdMigrationSpec| -> Problems {
        validate(s, NS, rules)
            .into_iter()
            .map(|p| (p.field, p.reason))
            .collect()
    };
    // Another admin port: that one is refused, 9901 is free.
    let layout = |members: u8, vpn_port: u16, admin: u16| {
        isthmus_controller::proxy_config::Layout::standard(
            Default::default(),
            members,
            vpn_port,
            std::net::SocketAddr::from(([0, 0, 0, 0], admin)),
        )
    };
    let rules = layout(3, 8443, 9000).rules();
    assert_eq!(on(&rules, &vpn(9000)), one("spec.vpn.port", "PortConflict"));
    assert_eq!(on(&rules, &vpn(9901)), vec![]);
    // A seed binding five members: 2383 is its peer-2383, though the spec has three.
    let rules = layout(5, 8443, 9901).rules();
    assert_eq!(on(&rules, &vpn(2383)), one("spec.vpn.port", "PortConflict"));
    let message = &validate(&vpn(2383), NS, &rules)[0].message;
    assert!(message.contains("peer-2383"), "{message}");
    // Member ports on the seed's VPN port or admin port.
    for peer_base in [8443, 9901] {
        let s = with(Role::Source, |s| {
            s.ports.peer_base = peer_base;
            s.ports.client_base = 8000;
        });
        assert_eq!(
            problems(&s),
            one("spec.ports", "PortConflict"),
            "{peer_base}"
        );
    }
    // The seed's VPN listener on another port: the spec's VPN gets its own listener.
    let rules = layout(3, 8444, 9901).rules();
    assert_eq!(on(&rules, &vpn(8443)), vec![]);
    assert_eq!(on(&rules, &vpn(8444)), vec![]);
}

/// Issue 47 point 5: the cluster domain is the controller's (`--cluster-domain`), not
/// whatever follows `.svc` in a spec.
#[test]
fn the_vpn_target_is_in_the_controllers_cluster_domain() {
    let target = |t: &str| {
        with(Role::Destination, |s| {
            s.vpn.as_mut().unwrap().target = t.into()
        })
    };
    let rules = SeedRules {
        cluster_domain: "example.internal".into(),
        ..SeedRules::default()
    };
    let on = |s: &EtcdMigrationSpec| -> Problems {
        validate(s, NS, &rules)
            .into_iter()
            .map(|p| (p.field, p.reason))
            .collect()
    };
    assert_eq!(
        on(&target(
            "isthmus-tunnel.shoot--foo--bar.svc.example.internal:8132"
        )),
        vec![]
    );
    assert_eq!(
        on(&target(
            "isthmus-tunnel.shoot--foo--bar.svc.cluster.local:8132"
        )),
        one("spec.vpn.target", "TargetOutsideCluster")
    );
    let p = &validate(&target("x.shoot--foo--bar.svc.evil.example:1"), NS, &rules)[0];
    assert!(
        p.message
            .contains("<service>.shoot--foo--bar.svc.example.internal:<port>"),
        "{p}"
    );
}

/// Issue 47 point 6: a migration names only its own namespace's DNS credentials, and a VPN
/// name under the seed's internal domain or a parent the controller allows.
#[test]
fn names_a_migration_may_claim() {
    let s = with(Role::Destination, |s| {
        s.dns.secret_ref.namespace = "shoot--other".into()
    });
    assert_eq!(
        problems(&s),
        one("spec.dns.secretRef.namespace", "SecretOutsideNamespace")
    );
    let vpn = |name: &str| {
        with(Role::Destination, |s| {
            s.vpn.as_mut().unwrap().dns_name = name.into()
        })
    };
    assert_eq!(
        problems(&vpn("vpn.shoot--foo--bar.seed-b.internal.example.com")),
        vec![]
    );
    for name in [
        "api.other-shoot.example.com",
        "internal.example.com",
        "evilinternal.example.com",
        "vpn.internal.example.com.attacker.io",
    ] {
        assert_eq!(
            problems(&vpn(name)),
            one("spec.vpn.dnsName", "VpnNameOutsideDomain"),
            "{name}"
        );
    }
    let rules = SeedRules {
        vpn_dns_parents: vec!["vpn.example.net".into()],
        ..SeedRules::default()
    };
    let ok = validate(&vpn("shoot--foo--bar.vpn.example.net"), NS, &rules);
    assert!(ok.is_empty(), "{ok:?}");
    let refused = validate(&vpn("shoot--foo--bar.example.net"), NS, &rules);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]
            .message
            .contains("internal.example.com, vpn.example.net"),
        "{}",
        refused[0]
    );
}
