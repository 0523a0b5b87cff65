//! The tunnel server's fixtures shared by `tunnel_server.rs` and `apiserver_tunnel_server.rs`:
//! the example destination migration (`deploy/examples/etcdmigration-destination.yaml`,
//! which asks for a server) and the settings a seed's controller runs with.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use isthmus_controller::crd::EtcdMigration;
use isthmus_controller::tunnel_server::{Owner, Proxies, TunnelServers};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;

/// The example destination `EtcdMigration` (namespace `shoot--foo--bar`).
pub fn example() -> EtcdMigration {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/examples/etcdmigration-destination.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// What the chart gives the controller on a seed whose pod network is 10.244.0.0/16.
pub fn settings() -> TunnelServers {
    TunnelServers {
        image: "isthmus:0.1.0".into(),
        trusted_proxies: vec!["10.244.0.0/16".into()],
        priority_class: "gardener-system-300".into(),
        service_monitor: true,
        listen: std::net::Ipv4Addr::UNSPECIFIED.into(),
        kube_apiserver_egress: true,
    }
}

/// The proxies' namespace, by its name (a plain install).
pub static PROXY_NAMESPACE: LazyLock<BTreeMap<String, String>> =
    LazyLock::new(|| isthmus_controller::network::namespace_name_labels("isthmus-system"));

pub fn proxies() -> Proxies<'static> {
    Proxies {
        namespace_labels: &PROXY_NAMESPACE,
        alias: "all-shoots",
    }
}

pub fn owner() -> Owner {
    Owner {
        name: "etcd-main".into(),
        uid: "0d7c5f3e-1111-4222-8333-444455556666".into(),
    }
}
