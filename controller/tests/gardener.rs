//! The JSON shapes written to and read from `DNSRecord` and `Etcd` round-trip, in both
//! etcd-druid API generations.

mod common;

use common::{source_members, spec, NS};
use isthmus_controller::crd::{DruidApi, MemberUrls, Role, Step};
use isthmus_controller::gardener::{dnsrecord_body, dnsrecord_observe, etcd_body, etcd_observe};
use isthmus_controller::plan::{self, EtcdAction, EtcdFields};
use serde_json::json;
use std::collections::BTreeMap;

#[test]
fn dnsrecord_round_trip() {
    let mut obs = common::observed("t0");
    obs.lb_address = Some("203.0.113.7".into());
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    let d = &p.dns_records[0];
    let mut body = dnsrecord_body(NS, "etcd-main", d);
    assert_eq!(body["spec"]["recordType"], "A");
    assert_eq!(
        body["metadata"]["annotations"]["gardener.cloud/operation"],
        "reconcile"
    );
    body["metadata"]["generation"] = json!(2);
    body["status"] = json!({"observedGeneration": 2, "lastOperation": {"state": "Succeeded"}});
    let o = dnsrecord_observe(&body);
    assert_eq!(o.spec, d.spec);
    assert!(o.ready());
    assert_eq!(o.timestamp.as_deref(), Some("t0"));
}

fn fields() -> EtcdFields {
    EtcdFields {
        replicas: Some(2),
        member_name_prefix: Some("dest".into()),
        bootstrap_members: source_members(),
        advertise: vec![MemberUrls {
            name: "dest-etcd-main-0".into(),
            peer_urls: vec!["https://x:2380".into()],
            client_urls: vec![],
        }],
        skip_client_san_verification: Some(true),
    }
}

#[test]
fn etcd_round_trip_legacy_and_new_api() {
    for api in [
        DruidApi::AdditionalAdvertisePeerUrls,
        DruidApi::AdditionalAdvertisedUrls,
    ] {
        let body = etcd_body("etcd-main", NS, api, &fields(), &BTreeMap::new());
        assert_eq!(etcd_observe(&body, api).fields, fields(), "{api:?}");
    }
    let legacy = etcd_body(
        "etcd-main",
        NS,
        DruidApi::AdditionalAdvertisePeerUrls,
        &fields(),
        &BTreeMap::new(),
    );
    assert_eq!(
        legacy["spec"]["etcd"]["additionalAdvertisePeerUrls"][0]["memberName"],
        "dest-etcd-main-0"
    );
    assert_eq!(
        legacy["spec"]["etcd"]["peerUrlTls"]["skipClientSANVerification"],
        true
    );
    assert_eq!(legacy["spec"]["memberNamePrefix"], "dest");
    assert_eq!(
        legacy["spec"]["etcd"]["bootstrapWithExistingCluster"]["clientEndpoints"][2],
        format!("https://etcd-main-2.{NS}.seed-a.internal.example.com:2377")
    );
    let new = etcd_body(
        "etcd-main",
        NS,
        DruidApi::AdditionalAdvertisedUrls,
        &fields(),
        &BTreeMap::new(),
    );
    assert_eq!(
        new["spec"]["etcd"]["additionalAdvertisedURLs"]["peerURLs"]["members"][0]["name"],
        "dest-etcd-main-0"
    );
}

#[test]
fn release_body_owns_nothing() {
    let body = etcd_body(
        "etcd-main",
        NS,
        DruidApi::default(),
        &EtcdFields::default(),
        &BTreeMap::new(),
    );
    assert_eq!(body.get("spec"), None);
    assert_eq!(body["metadata"]["name"], "etcd-main");
}

#[test]
fn observe_reads_status() {
    let obj = json!({
        "metadata": {"generation": 7, "annotations": {"gardener.cloud/timestamp": "t"}},
        "spec": {"replicas": 3},
        "status": {"observedGeneration": 7, "readyReplicas": 3,
                   "members": [{"name": "etcd-main-0"}, {"name": "etcd-main-1"}]},
    });
    let o = etcd_observe(&obj, DruidApi::default());
    assert!(o.synced());
    assert_eq!(
        (o.ready_replicas, o.members.len(), o.fields.replicas),
        (3, 2, Some(3))
    );
    // A plan over this observation applies our fields without touching replicas.
    let mut obs = common::observed("t0");
    obs.etcd = Some(o);
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    let EtcdAction::Apply { fields, .. } = p.etcd else {
        panic!("expected apply")
    };
    assert_eq!(fields.replicas, None);
}

#[test]
fn joined_source_members_count_until_druid_clears_them() {
    let obj = json!({
        "metadata": {"generation": 3},
        "status": {"observedGeneration": 3, "readyReplicas": 3,
                   "members": [{"name": "dest-etcd-main-0"}],
                   "bootstrapWithExistingClusterMembers": [
                       {"name": "etcd-main-0", "joinedAt": "2026-01-01T00:00:00Z"},
                       {"name": "dest-etcd-main-0"}]},
    });
    let o = etcd_observe(&obj, DruidApi::default());
    assert_eq!(o.members, vec!["dest-etcd-main-0", "etcd-main-0"]);
}
