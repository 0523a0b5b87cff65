//! The two `EtcdMigration` specs the lab drives (one per seed), from which the members get
//! their names (`crate::member`). The lab spells member names, DNS names and peer ports exactly
//! as the controller's planner does (`isthmus_controller::plan::names`, `PortScheme::default()`),
//! so the DNS records and routes the planner asks for are the ones the etcd members advertise.

use crate::side::Side;
use isthmus_controller::crd::{
    DestinationSpec, DnsProvider, DruidApi, EtcdMigrationSpec, EtcdTemplate, ObjectRef, PortScheme,
    Role, Step,
};

/// The shoot's namespace on both seeds.
pub const NAMESPACE: &str = "shoot--lab";
/// The internal domain of the exposed names.
pub const DOMAIN: &str = "lab.test";
/// The `Etcd` on both seeds (pods `etcd-main-0..2`).
pub const ETCD: &str = "etcd-main";
/// etcd-druid's `memberNamePrefix` of the destination: members `dest-etcd-main-0..2`.
pub const PREFIX: &str = "dest";
/// `DNSRecord` provider type: the seeds' hosts files.
pub const DNS_PROVIDER: &str = "hosts-file";

/// What a route open to any source lists (the tunnel's ingress: agents dial from anywhere).
pub const ANY_SOURCE: [&str; 2] = ["0.0.0.0/0", "::/0"];

/// The seed's name in the exposed DNS names.
pub fn seed_name(side: Side) -> &'static str {
    match side {
        Side::Source => "source",
        Side::Destination => "destination",
    }
}

/// The spec of `side` at `step`. The destination's `sourceMembers` start empty: the
/// orchestrator copies them from the source's `status.exposedMembers` before `Join`.
pub fn spec(side: Side, step: Step) -> EtcdMigrationSpec {
    let none = || ObjectRef {
        name: "-".into(),
        namespace: "-".into(),
    };
    EtcdMigrationSpec {
        role: match side {
            Side::Source => Role::Source,
            Side::Destination => Role::Destination,
        },
        step,
        etcd_name: ETCD.into(),
        seed_name: seed_name(side).into(),
        internal_domain: DOMAIN.into(),
        members: 3,
        dns: DnsProvider {
            provider_type: DNS_PROVIDER.into(),
            secret_ref: none(),
            zone: None,
        },
        load_balancer: ObjectRef {
            name: "isthmus-proxy".into(),
            namespace: seed_name(side).into(),
        },
        ports: PortScheme::default(),
        destination: (side == Side::Destination).then(|| DestinationSpec {
            member_name_prefix: PREFIX.into(),
            source_members: Vec::new(),
            // The lab's druid stand-in needs no template: it acts on the migration fields.
            etcd_template: Some(EtcdTemplate {
                labels: Default::default(),
                annotations: Default::default(),
                spec: serde_json::json!({}),
            }),
            join_timeout: None,
            etcd_version: None,
        }),
        // The temporary VPN is the webhook part (`webhook.rs`), on loopback: no record, no route.
        vpn: None,
        // Both seeds' `Etcd` is `etcd-main`: the in-cluster peer names are spelled alike in
        // both and each seed resolves them to its own pods, so the members advertise the
        // exposed URLs instead of (not beside) the in-cluster ones.
        druid_api: DruidApi::AdditionalAdvertisedUrls,
        override_default_url: true,
        seed_ingress: None,
        // The member routes admit only listed sources (the controller's default is none):
        // the lab's networks stand in for the other seed's egress — the seeds and their link
        // (10/8) and a seed's own loopback clients.
        allowed_sources: vec!["10.0.0.0/8".into(), "127.0.0.0/8".into()],
    }
}
