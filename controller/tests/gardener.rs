//! The JSON shapes written to and read from `DNSRecord` and `Etcd` round-trip, in both
//! etcd-druid API generations.

mod common;

use common::{source_members, spec, NS};
use isthmus_controller::crd::{DruidApi, EtcdMigrationSpec, MemberUrls, Role, Step};
use isthmus_controller::gardener::{dnsrecord_body, dnsrecord_observe, etcd_body, etcd_observe};
use isthmus_controller::plan::{self, EtcdAction, EtcdFields};
use serde_json::json;

#[test]
fn dnsrecord_round_trip() {
    let mut obs = common::observed("t0");
    obs.lb_address = Some("203.0.113.7".into());
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    let d = &p.dns_records[0];
    let mut body = dnsrecord_body(NS, "etcd-main", d);
    assert_eq!(body["spec"]["recordType"], "A");
    // The reconcile request is never part of the apply (`plan::request`).
    assert!(body["metadata"]["annotations"]
        .get("gardener.cloud/operation")
        .is_none());
    assert_eq!(
        body["metadata"]["annotations"]["gardener.cloud/timestamp"],
        "t0"
    );
    body["metadata"]["generation"] = json!(2);
    body["status"] = json!({"observedGeneration": 2, "lastOperation": {"state": "Succeeded"}});
    let o = dnsrecord_observe(&body);
    assert_eq!(o.spec, d.spec);
    assert!(o.ready());
    assert_eq!(o.timestamp.as_deref(), Some("t0"));
}

fn fields(client_urls: bool) -> EtcdFields {
    EtcdFields {
        replicas: Some(2),
        member_name_prefix: Some("dest".into()),
        bootstrap_members: source_members(),
        advertise: vec![MemberUrls {
            name: "dest-etcd-main-0".into(),
            peer_urls: vec!["https://x:2380".into()],
            client_urls: if client_urls {
                vec!["https://x:2379".into()]
            } else {
                vec![]
            },
        }],
        skip_client_san_verification: Some(true),
    }
}

fn dest(api: DruidApi) -> EtcdMigrationSpec {
    let mut s = spec(Role::Destination, Step::Join);
    s.druid_api = api;
    s
}

#[test]
fn etcd_round_trip_legacy_and_new_api() {
    for (api, clients) in [
        (DruidApi::AdditionalAdvertisePeerUrls, false),
        (DruidApi::AdditionalAdvertisedUrls, true),
    ] {
        let body = etcd_body(&dest(api), NS, &fields(clients));
        assert_eq!(etcd_observe(&body, api).fields, fields(clients), "{api:?}");
    }
    let legacy = etcd_body(
        &dest(DruidApi::AdditionalAdvertisePeerUrls),
        NS,
        &fields(false),
    );
    // etcd-druid's spelling (api v0.38): `…PeerURLs`, not the GEP's `…PeerUrls`.
    assert_eq!(
        legacy["spec"]["etcd"]["additionalAdvertisePeerURLs"][0]["memberName"],
        "dest-etcd-main-0"
    );
    assert_eq!(
        legacy["spec"]["etcd"].get("additionalAdvertisePeerUrls"),
        None
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
    // The destination body carries gardenlet's template: the first apply creates it whole.
    assert_eq!(legacy["spec"]["labels"]["app"], "etcd-statefulset");
    assert_eq!(legacy["metadata"]["labels"]["app"], "etcd-statefulset");

    let mut shared = dest(DruidApi::AdditionalAdvertisedUrls);
    shared.override_default_url = true;
    let new = etcd_body(&shared, NS, &fields(true));
    let urls = &new["spec"]["etcd"]["additionalAdvertisedURLs"];
    assert_eq!(urls["peerURLs"]["members"][0]["name"], "dest-etcd-main-0");
    assert_eq!(urls["peerURLs"]["overrideDefaultURL"], true);
    assert_eq!(
        urls["clientURLs"]["members"][0]["urls"][0],
        "https://x:2379"
    );
    assert_eq!(urls["clientURLs"]["overrideDefaultURL"], true);
}

#[test]
fn release_body_owns_nothing() {
    let body = etcd_body(
        &spec(Role::Source, Step::Complete),
        NS,
        &EtcdFields::default(),
    );
    assert_eq!(body.get("spec"), None);
    assert_eq!(body["metadata"]["name"], "etcd-main");
    assert_eq!(body["metadata"].get("labels"), None);
}

#[test]
fn observe_reads_status_as_gardener_does() {
    let mut obj = json!({
        "metadata": {"generation": 7, "annotations": {"gardener.cloud/timestamp": "t"}},
        "spec": {"replicas": 3},
        "status": {"observedGeneration": 7, "readyReplicas": 3, "ready": true,
                   "conditions": [{"type": "AllMembersUpdated", "status": "True"}],
                   "members": [{"name": "etcd-main-0"}, {"name": "etcd-main-1"}]},
    });
    let o = etcd_observe(&obj, DruidApi::default());
    assert!(o.synced() && o.gardener_ready());
    assert_eq!(
        (o.ready_replicas, o.members.len(), o.fields.replicas),
        (3, 2, Some(3))
    );
    // Each of Gardener's health checks alone makes it not ready.
    for key in ["druid.gardener.cloud/operation", "gardener.cloud/operation"] {
        let mut pending = obj.clone();
        pending["metadata"]["annotations"][key] = json!("reconcile");
        assert!(
            !etcd_observe(&pending, DruidApi::default()).gardener_ready(),
            "{key}"
        );
    }
    let mut failing = obj.clone();
    failing["status"]["lastErrors"] = json!([{"code": "ERR", "description": "x"}]);
    assert!(!etcd_observe(&failing, DruidApi::default()).gardener_ready());
    for (path, value) in [
        ("/status/ready", json!(false)),
        ("/status/conditions/0/status", json!("False")),
        ("/status/observedGeneration", json!(6)),
    ] {
        let mut bad = obj.clone();
        *bad.pointer_mut(path).unwrap_or_else(|| panic!("{path}")) = value;
        assert!(
            !etcd_observe(&bad, DruidApi::default()).gardener_ready(),
            "{path}"
        );
    }
    // A plan over this observation applies our fields without touching replicas.
    let mut obs = common::observed("t0");
    obs.etcd = Some(o);
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    let EtcdAction::Apply { fields, .. } = p.etcd else {
        panic!("expected apply")
    };
    assert_eq!(fields.replicas, None);
    obj["status"]["bootstrapWithExistingCluster"] =
        json!({"joinedAt": "2026-01-01T00:00:00Z", "members": []});
    assert_eq!(
        etcd_observe(&obj, DruidApi::default()).joined_at.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
}

#[test]
fn membership_is_not_read_from_a_draft_status_field() {
    // An earlier draft of druid listed joined source members in
    // `status.bootstrapWithExistingClusterMembers`; the merged API writes
    // `status.bootstrapWithExistingCluster` once. Neither says who is still a member: that is
    // etcd's own member list (`Observed::etcd_cluster`).
    let obj = json!({
        "metadata": {"generation": 3},
        "status": {"observedGeneration": 3, "readyReplicas": 3,
                   "members": [{"name": "dest-etcd-main-0"}],
                   "bootstrapWithExistingClusterMembers": [{"name": "etcd-main-0"}]},
    });
    let o = etcd_observe(&obj, DruidApi::default());
    assert_eq!(o.members, vec!["dest-etcd-main-0"]);
}

/// etcd-druid acts on `druid.gardener.cloud/operation: reconcile` and on the deprecated
/// `gardener.cloud/operation: reconcile`, and removes both (etcd-druid v0.38.1
/// `api/core/v1alpha1/helper.go`): either one is a request still pending, and a value druid
/// does not act on is none.
#[test]
fn either_operation_annotation_is_a_pending_request() {
    use isthmus_controller::plan::request::etcd_needs_request;
    let with = |annotations: serde_json::Value| {
        let obj = json!({
            "metadata": {"generation": 4, "annotations": annotations},
            "status": {"observedGeneration": 3},
        });
        etcd_observe(&obj, DruidApi::default())
    };
    for key in ["druid.gardener.cloud/operation", "gardener.cloud/operation"] {
        let o = with(json!({key: "reconcile"}));
        assert_eq!(o.operation.as_deref(), Some("reconcile"), "{key}");
        assert!(!etcd_needs_request(&o), "{key}: asked already");
    }
    let both = with(
        json!({"druid.gardener.cloud/operation": "x", "gardener.cloud/operation": "reconcile"}),
    );
    assert_eq!(both.operation.as_deref(), Some("reconcile"));
    let other = with(json!({"gardener.cloud/operation": "wait"}));
    assert_eq!(other.operation.as_deref(), Some("wait"));
    assert!(etcd_needs_request(&other), "druid acts on `reconcile` only");
    assert!(etcd_needs_request(&with(json!({}))));
}

/// The request is written after the apply, never owned by it, in neither spelling, and the
/// timestamp is gardenlet's: a template carrying them (copied from a live `Etcd`) must not make
/// the apply own them.
#[test]
fn etcd_body_never_carries_a_request() {
    let mut s = spec(Role::Destination, Step::Join);
    if let Some(t) = s
        .destination
        .as_mut()
        .and_then(|d| d.etcd_template.as_mut())
    {
        t.annotations
            .insert("gardener.cloud/operation".into(), "reconcile".into());
        t.annotations
            .insert("druid.gardener.cloud/operation".into(), "reconcile".into());
        t.annotations
            .insert("gardener.cloud/timestamp".into(), "t".into());
        t.annotations.insert("kept".into(), "yes".into());
    }
    let body = etcd_body(&s, NS, &fields(false));
    let a = &body["metadata"]["annotations"];
    assert!(a.get("gardener.cloud/operation").is_none(), "{a}");
    assert!(a.get("druid.gardener.cloud/operation").is_none(), "{a}");
    assert!(a.get("gardener.cloud/timestamp").is_none(), "{a}");
    assert_eq!(a["kept"], "yes");
}

/// The in-cluster peer URL etcd-druid gives a member carries the `Etcd`'s
/// `spec.etcd.serverPort` (etcd-druid v0.38.1 `getAdvertiseURLs`, default 2380), and the
/// other seed's `initial-cluster` must hold exactly the URLs etcd holds: the exposed members
/// report it with that port, read from the source `Etcd` or the destination's template.
#[test]
fn the_in_cluster_peer_url_carries_the_etcds_server_port() {
    let in_cluster = |p: &plan::Plan| p.status.exposed_members[1].peer_urls[0].clone();
    let mut obs = common::observed("t0");
    obs.lb_address = Some("203.0.113.7".into());
    let mut etcd = isthmus_testkit::kube::minimal_etcd("etcd-main", NS, 3);
    obs.etcd = Some(etcd_observe(&etcd, DruidApi::default()));
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    assert_eq!(
        in_cluster(&p),
        "https://etcd-main-1.etcd-main-peer.shoot--foo--bar.svc:2380",
        "druid's default"
    );
    etcd["spec"]["etcd"]["serverPort"] = json!(2390);
    obs.etcd = Some(etcd_observe(&etcd, DruidApi::default()));
    let p = plan::plan(&spec(Role::Source, Step::Expose), &obs);
    assert_eq!(
        in_cluster(&p),
        "https://etcd-main-1.etcd-main-peer.shoot--foo--bar.svc:2390"
    );

    // The destination before its `Etcd` exists: its template's port.
    let mut d = spec(Role::Destination, Step::Expose);
    if let Some(dst) = d.destination.as_mut() {
        let mut tspec = etcd["spec"].clone();
        tspec["etcd"]["serverPort"] = json!(2391);
        dst.etcd_template = Some(isthmus_controller::crd::EtcdTemplate {
            labels: Default::default(),
            annotations: Default::default(),
            spec: tspec,
        });
    }
    obs.etcd = None;
    let p = plan::plan(&d, &obs);
    assert!(
        in_cluster(&p).ends_with(".svc:2391"),
        "{:?}",
        p.status.exposed_members
    );
    assert!(plan::members(&d, NS)[1]
        .in_cluster_peer_url
        .ends_with(".svc:2391"));
}
