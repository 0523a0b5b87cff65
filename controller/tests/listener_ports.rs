//! Issue 47 point 1: a migration whose listener no proxy could bind — the admin port, a port
//! below 1024, a port the layout (or an older migration) binds under another name — is that
//! migration's problem, not the seed's. Before, a listener on a layout port under another name
//! made the whole file fail to render (no migration of the seed got routes), and the admin
//! port or port 80 went into the file (every proxy pod flapped, or crash-looped).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{spec, NS};
use isthmus_controller::crd::{EtcdMigrationSpec, Role, Step};
use isthmus_controller::plan::routes;
use isthmus_controller::proxy_config::{render, render_claims, Claim, Layout};
use std::net::SocketAddr;

fn layout() -> Layout {
    Layout::standard(
        isthmus_controller::crd::PortScheme::default(),
        3,
        8443,
        SocketAddr::from(([0, 0, 0, 0], 9901)),
    )
}

fn claim(owner: &str, ns: &str, s: &EtcdMigrationSpec) -> Claim {
    Claim {
        owner: owner.into(),
        routes: routes(s, ns, true),
    }
}

fn bad_vpn_port(port: u16) -> EtcdMigrationSpec {
    let mut s = spec(Role::Destination, Step::Join);
    s.vpn.as_mut().unwrap().port = port;
    s.vpn.as_mut().unwrap().target = "vpn-seed-server.shoot--bad.svc.cluster.local:9443".into();
    s.vpn.as_mut().unwrap().dns_name = "vpn-bad.shoot--bad.internal.example.com".into();
    s.etcd_name = "etcd-bad".into();
    s
}

/// One bad and one good migration on a seed: the bad one is left out, the good one is served
/// exactly as if it were alone, whatever the bad one's listener problem is.
#[test]
fn a_migration_whose_listener_cannot_be_bound_is_left_out_and_the_others_served() {
    let good = spec(Role::Destination, Step::Join);
    let alone = render(&layout(), &routes(&good, NS, true)).unwrap();
    // peer-2381 is the layout's: a listener vpn-2381 beside it is refused by the loader
    // (one address, two listeners), which used to fail the whole file.
    for (port, why) in [
        (2381, "listener \"peer-2381\""),
        (9901, "admin port"),
        (80, "below 1024"),
    ] {
        for order in [0, 1] {
            let mut claims = vec![
                claim(&format!("{NS}/etcd-main"), NS, &good),
                claim("shoot--bad/etcd-bad", "shoot--bad", &bad_vpn_port(port)),
            ];
            if order == 1 {
                claims.reverse();
            }
            let outcome = render_claims(&layout(), &claims)
                .unwrap_or_else(|e| panic!("vpn port {port}: the whole file failed: {e}"));
            assert_eq!(outcome.left_out.len(), 1, "{port}: {:?}", outcome.left_out);
            let left = &outcome.left_out[0];
            assert_eq!(left.owner, "shoot--bad/etcd-bad", "{port}");
            assert!(left.message.contains(why), "{port}: {left}");
            assert!(
                outcome.conflicts.is_empty(),
                "{port}: {:?}",
                outcome.conflicts
            );
            assert_eq!(outcome.rendered, alone, "{port}: the good one is served");
        }
    }
}

/// Two migrations wanting one port under two listener names: the older keeps the port, the
/// younger's route on it is a `RouteConflict`, and the file renders with everything else.
#[test]
fn a_port_two_migrations_want_under_two_names_stays_with_the_older() {
    let mut older = spec(Role::Destination, Step::Join);
    older.vpn.as_mut().unwrap().port = 9000;
    let mut younger = spec(Role::Source, Step::Expose);
    younger.etcd_name = "etcd-events".into();
    younger.ports.peer_base = 9000;
    younger.ports.client_base = 8990;
    let claims = [
        claim(&format!("{NS}/etcd-main"), NS, &older),
        claim("shoot--b/etcd-events", "shoot--b", &younger),
    ];
    let outcome = render_claims(&layout(), &claims).unwrap();
    assert!(outcome.left_out.is_empty(), "{:?}", outcome.left_out);
    assert_eq!(outcome.conflicts.len(), 1, "{:?}", outcome.conflicts);
    let c = &outcome.conflicts[0];
    assert_eq!(
        (c.owner.as_str(), c.held_by.as_str(), c.listener.as_str()),
        (
            "shoot--b/etcd-events",
            "shoot--foo--bar/etcd-main",
            "peer-9000"
        )
    );
    assert_eq!(c.port_held_by.as_deref(), Some("vpn-9000"));
    let parsed = isthmus_config::parse_proxy("proxy.json", &outcome.rendered.text).unwrap();
    let names: Vec<&str> = parsed.listeners.iter().map(|l| l.name.as_str()).collect();
    assert!(
        names.contains(&"vpn-9000") && !names.contains(&"peer-9000"),
        "{names:?}"
    );
    // The younger's other members are served.
    for l in ["peer-9001", "client-8990"] {
        assert!(names.contains(&l), "{l} missing: {names:?}");
    }
}
