//! The bodies the controller writes, sent to a real kube-apiserver (v1.34.4) that serves the
//! pinned upstream CRDs (etcd-druid api v0.38.1 `Etcd` with its CEL rules, Gardener v1.139.0
//! `DNSRecord`) and our `EtcdMigration` CRD, with `fieldValidation=Strict` as the controller
//! sends them. Each test names the upstream rule it proves the controller keeps.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test]: a panic is a failure

mod common;

type Mutation = Box<dyn Fn(&mut Value)>;

use common::{spec, NS};
use isthmus_controller::crd::{DruidApi, Role, Step};
use isthmus_controller::gardener::{dnsrecord_body, etcd_body, etcd_resource};
use isthmus_controller::kube_adapter::FIELD_MANAGER;
use isthmus_controller::plan::{self, EtcdAction, EtcdFields};
use isthmus_testkit::kube::{minimal_etcd, KubeApiServer};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use std::path::Path;

async fn world() -> (KubeApiServer, Client) {
    let k = KubeApiServer::start().await;
    for crd in KubeApiServer::upstream_crd_paths() {
        k.apply_yaml(&crd).await;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    k.apply_yaml(&root.join("deploy/crd-etcdmigration.yaml"))
        .await;
    k.apply_yaml_str(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"
    ))
    .await;
    let admin = k.admin().await;
    (k, admin)
}

fn etcds(c: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(c.clone(), NS, &etcd_resource())
}

fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).validation_strict()
}

/// gardenlet's source `Etcd`: 3 replicas, TLS, optionally Gardener's member-name prefix.
async fn gardenlet_source(c: &Client, prefix: Option<&str>) {
    let mut e = minimal_etcd("etcd-main", NS, 3);
    if let Some(p) = prefix {
        e["spec"]["memberNamePrefix"] = json!(p);
    }
    let obj: DynamicObject = serde_json::from_value(e).unwrap();
    etcds(c).create(&PostParams::default(), &obj).await.unwrap();
}

fn status_of(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("expected an API status, got {other}"),
    }
}

/// The source's Expose apply as the planner computes it over the observed `Etcd`.
fn source_expose_body(observed: &Value) -> Value {
    let s = spec(Role::Source, Step::Expose);
    let mut obs = common::observed("2026-01-01T00:00:00Z");
    obs.etcd = Some(isthmus_controller::gardener::etcd_observe(
        observed,
        s.druid_api,
    ));
    let p = plan::plan(&s, &obs);
    let EtcdAction::Apply { fields } = &p.etcd else {
        panic!("expected an apply, got {:?}", p.etcd)
    };
    etcd_body(&s, NS, fields)
}

#[tokio::test]
async fn source_fields_are_accepted_by_etcd_druids_crd() {
    let (_k, admin) = world().await;
    gardenlet_source(&admin, None).await;
    let current = serde_json::to_value(etcds(&admin).get("etcd-main").await.unwrap()).unwrap();
    let body = source_expose_body(&current);
    // The GEP's spelling (`additionalAdvertisePeerUrls`) is an unknown field: with strict
    // validation the API server refuses it instead of silently dropping it.
    let mut gep = body.clone();
    let list = gep["spec"]["etcd"]["additionalAdvertisePeerURLs"].take();
    gep["spec"]["etcd"]["additionalAdvertisePeerUrls"] = list;
    gep["spec"]["etcd"]
        .as_object_mut()
        .unwrap()
        .remove("additionalAdvertisePeerURLs");
    let err = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(gep))
        .await
        .unwrap_err();
    // (kube-apiserver answers an apply with an undeclared field with 500 "failed to create
    // typed patch object ... field not declared in schema".)
    let (code, msg) = status_of(&err);
    assert!(code >= 400, "{code}: {msg}");
    assert!(
        msg.contains("additionalAdvertisePeerUrls: field not declared"),
        "{msg}"
    );

    let applied = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("druid's CRD refused the source fields: {e}"));
    let v = serde_json::to_value(applied).unwrap();
    let urls = &v["spec"]["etcd"]["additionalAdvertisePeerURLs"];
    assert_eq!(urls.as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(urls[2]["memberName"], "etcd-main-2");
    assert_eq!(
        v["spec"]["etcd"]["peerUrlTls"]["skipClientSANVerification"],
        true
    );
    // gardenlet's fields are untouched.
    assert_eq!(v["spec"]["replicas"], 3);
    assert_eq!(
        v["spec"]["etcd"]["peerUrlTls"]["serverTLSSecretRef"]["name"],
        "etcd-main-peer-server"
    );
}

/// gardenlet's `Scale()` requires `gardener.cloud/timestamp` to be what gardenlet last wrote
/// (gardener v1.149.3 `pkg/component/etcd/etcd/etcd.go`): isthmus' applies leave it alone,
/// own none of it, and keep applying after gardenlet writes a new one.
#[tokio::test]
async fn gardenlets_timestamp_stays_gardenlets() {
    let (_k, admin) = world().await;
    gardenlet_source(&admin, None).await;
    let gardenlet = PatchParams {
        field_manager: Some("gardenlet".into()),
        ..PatchParams::default()
    };
    let stamp = |t: &str| json!({"metadata": {"annotations": {"gardener.cloud/timestamp": t}}, "spec": {"replicas": 3}});
    let t0 = "2026-01-01T00:00:00.123456789Z";
    etcds(&admin)
        .patch("etcd-main", &gardenlet, &Patch::Merge(stamp(t0)))
        .await
        .unwrap();
    let current = serde_json::to_value(etcds(&admin).get("etcd-main").await.unwrap()).unwrap();
    let applied = etcds(&admin)
        .patch(
            "etcd-main",
            &ssa(),
            &Patch::Apply(source_expose_body(&current)),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&applied).unwrap();
    assert_eq!(v["metadata"]["annotations"]["gardener.cloud/timestamp"], t0);
    let ours = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "isthmus")
        .cloned()
        .unwrap();
    assert!(
        !ours["fieldsV1"]
            .to_string()
            .contains("gardener.cloud/timestamp"),
        "isthmus owns the timestamp: {ours}"
    );
    // gardenlet's Scale(): its precondition holds, it writes a new stamp; isthmus' next apply
    // is no conflict and leaves it.
    let t1 = "2026-01-01T00:05:00.5Z";
    etcds(&admin)
        .patch("etcd-main", &gardenlet, &Patch::Merge(stamp(t1)))
        .await
        .unwrap();
    let current = serde_json::to_value(etcds(&admin).get("etcd-main").await.unwrap()).unwrap();
    let again = etcds(&admin)
        .patch(
            "etcd-main",
            &ssa(),
            &Patch::Apply(source_expose_body(&current)),
        )
        .await
        .unwrap_or_else(|e| panic!("apply after gardenlet's new timestamp: {e}"));
    let v = serde_json::to_value(&again).unwrap();
    assert_eq!(v["metadata"]["annotations"]["gardener.cloud/timestamp"], t1);
}

#[tokio::test]
async fn the_source_members_carry_the_etcds_member_name_prefix() {
    let (_k, admin) = world().await;
    gardenlet_source(&admin, Some("seed-a")).await;
    let current = serde_json::to_value(etcds(&admin).get("etcd-main").await.unwrap()).unwrap();
    let body = source_expose_body(&current);
    assert_eq!(
        body["spec"]["etcd"]["additionalAdvertisePeerURLs"][0]["memberName"],
        "seed-a-etcd-main-0"
    );
    // Names without the prefix break druid's rule (`<prefix>-<etcd name>-<i>`).
    let mut unprefixed = body.clone();
    for i in 0..3 {
        unprefixed["spec"]["etcd"]["additionalAdvertisePeerURLs"][i]["memberName"] =
            json!(format!("etcd-main-{i}"));
    }
    let err = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(unprefixed))
        .await
        .unwrap_err();
    let (code, msg) = status_of(&err);
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("must start with"), "{msg}");
    etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("prefixed names refused: {e}"));
}

/// The destination's Join as planned: created whole (template + bootstrap + prefix).
fn join_apply() -> (Value, EtcdFields) {
    let s = spec(Role::Destination, Step::Join);
    let mut obs = common::observed("2026-01-01T00:00:00Z");
    obs.lb_address = Some("198.51.100.9".into());
    // Exposure is ready: records done, routes served.
    let p = plan::plan(&s, &obs);
    common::apply(&mut obs, &p, common::ALL, Role::Destination);
    obs.etcd = None;
    let p = plan::plan(&s, &obs);
    let EtcdAction::Apply { fields } = &p.etcd else {
        panic!(
            "expected the destination Etcd to be created, got {:?}",
            p.etcd
        )
    };
    (etcd_body(&s, NS, fields), fields.clone())
}

#[tokio::test]
async fn the_destination_etcd_is_created_whole_and_grows_within_druids_rules() {
    let (_k, admin) = world().await;
    let (mut body, fields) = join_apply();
    // gardenlet's template: what druid requires of every Etcd.
    let tmpl = minimal_etcd("etcd-main", NS, 2);
    let mut tspec = tmpl["spec"].clone();
    tspec.as_object_mut().unwrap().remove("replicas");
    body["spec"]["labels"] = tspec["labels"].clone();
    body["spec"]["backup"] = tspec["backup"].clone();
    for k in ["peerUrlTls", "clientUrlTls"] {
        let mut t = tspec["etcd"][k].clone();
        if let Some(o) = body["spec"]["etcd"][k].as_object() {
            for (kk, vv) in o {
                t[kk] = vv.clone();
            }
        }
        body["spec"]["etcd"][k] = t;
    }
    // Only the members below replicas (2) are advertised: druid's index rule.
    assert_eq!(fields.advertise.len(), 2);
    let mut third = body.clone();
    third["spec"]["etcd"]["additionalAdvertisePeerURLs"]
        .as_array_mut()
        .unwrap()
        .push(json!({"memberName": "dest-etcd-main-2", "urls": ["https://x.example:2382"]}));
    let err = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(third))
        .await
        .unwrap_err();
    let (code, msg) = status_of(&err);
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("less than"), "{msg}");

    let created = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(body.clone()))
        .await
        .unwrap_or_else(|e| panic!("druid's CRD refused the destination Etcd: {e}"));
    let v = serde_json::to_value(created).unwrap();
    assert_eq!(v["spec"]["memberNamePrefix"], "dest");
    assert_eq!(
        v["spec"]["etcd"]["bootstrapWithExistingCluster"]["members"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );

    // Grow: replicas 3 and the third advertised member, same apply manager.
    let mut grow = body.clone();
    grow["spec"]["replicas"] = json!(3);
    grow["spec"]["etcd"]["additionalAdvertisePeerURLs"]
        .as_array_mut()
        .unwrap()
        .push(json!({"memberName": "dest-etcd-main-2", "urls": ["https://x.example:2382"]}));
    etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(grow.clone()))
        .await
        .unwrap_or_else(|e| panic!("Grow refused: {e}"));
    // Shrink: the bootstrap members go (removing the field is allowed).
    let mut shrink = grow.clone();
    shrink["spec"]["etcd"]
        .as_object_mut()
        .unwrap()
        .remove("bootstrapWithExistingCluster");
    let v = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(shrink))
        .await
        .unwrap_or_else(|e| panic!("Shrink refused: {e}"));
    let v = serde_json::to_value(v).unwrap();
    assert_eq!(
        v["spec"]["etcd"].get("bootstrapWithExistingCluster"),
        None,
        "released field is gone"
    );
}

#[tokio::test]
async fn bootstrap_cannot_be_added_to_an_existing_etcd() {
    let (_k, admin) = world().await;
    // gardenlet created the destination Etcd without the migration fields: druid refuses
    // adding bootstrapWithExistingCluster later, which is why the planner reports
    // EtcdCreatedWithoutBootstrap instead of applying.
    let obj: DynamicObject = serde_json::from_value(minimal_etcd("etcd-main", NS, 2)).unwrap();
    etcds(&admin)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    let late = json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": NS},
        "spec": {"etcd": {"bootstrapWithExistingCluster": {
            "members": [{"name": "etcd-main-0", "peerUrls": ["https://a.example:2380"]}],
            "clientEndpoints": ["https://a.example:2379"]}}},
    });
    let err = etcds(&admin)
        .patch("etcd-main", &ssa(), &Patch::Apply(late.clone()))
        .await
        .unwrap_err();
    let (code, msg) = status_of(&err);
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("cannot be added after"), "{msg}");

    let s = spec(Role::Destination, Step::Join);
    let current = serde_json::to_value(etcds(&admin).get("etcd-main").await.unwrap()).unwrap();
    let mut obs = common::observed("2026-01-01T00:00:00Z");
    obs.lb_address = Some("198.51.100.9".into());
    let p = plan::plan(&s, &obs);
    common::apply(&mut obs, &p, common::ALL, Role::Destination);
    obs.etcd = Some(isthmus_controller::gardener::etcd_observe(
        &current,
        DruidApi::default(),
    ));
    let p = plan::plan(&s, &obs);
    assert_eq!(p.etcd, EtcdAction::Keep);
    assert_eq!(
        common::condition(&p, "DestinationEtcdPeersJoined"),
        Some(("False", "EtcdCreatedWithoutBootstrap"))
    );
}

#[tokio::test]
async fn dns_records_are_accepted_by_gardeners_crd() {
    let (_k, admin) = world().await;
    let mut obs = common::observed("2026-01-01T00:00:00Z");
    obs.lb_address = Some("198.51.100.9".into());
    let p = plan::plan(&spec(Role::Destination, Step::Join), &obs);
    let api: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        NS,
        &isthmus_controller::gardener::dnsrecord_resource(),
    );
    for d in &p.dns_records {
        api.patch(
            &d.object_name,
            &ssa(),
            &Patch::Apply(dnsrecord_body(NS, "m", d)),
        )
        .await
        .unwrap_or_else(|e| panic!("Gardener's CRD refused {}: {e}", d.object_name));
    }
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 4);
}

#[tokio::test]
async fn invalid_etcdmigrations_are_refused_by_the_crd() {
    let (_k, admin) = world().await;
    let api: Api<isthmus_controller::crd::EtcdMigration> = Api::namespaced(admin.clone(), NS);
    let good =
        isthmus_controller::crd::EtcdMigration::new("good", spec(Role::Destination, Step::Expose));
    api.create(&PostParams::default(), &good).await.unwrap();
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "etcdName",
            Box::new(|v| v["spec"]["etcdName"] = json!("Etcd_Main")),
        ),
        (
            "internalDomain",
            Box::new(|v| v["spec"]["internalDomain"] = json!("bad domain")),
        ),
        (
            "peerBase",
            Box::new(|v| v["spec"]["ports"] = json!({"peerBase": 80, "clientBase": 79})),
        ),
        (
            "clientBase",
            Box::new(|v| v["spec"]["ports"] = json!({"peerBase": 2380, "clientBase": 2400})),
        ),
        (
            "dnsName",
            Box::new(|v| v["spec"]["vpn"]["dnsName"] = json!("no_dots")),
        ),
        (
            "peerUrls",
            Box::new(|v| {
                v["spec"]["destination"]["sourceMembers"][0]["peerUrls"] =
                    json!(["http://plain:2380"])
            }),
        ),
        (
            "destination",
            Box::new(|v| {
                v["spec"]["role"] = json!("source");
            }),
        ),
        (
            "overrideDefaultUrl",
            Box::new(|v| v["spec"]["overrideDefaultUrl"] = json!(true)),
        ),
        (
            "unknown field",
            Box::new(|v| v["spec"]["etcdNmae"] = json!("x")),
        ),
        // Issue 24: what the controller could only refuse later is refused by `kubectl apply`.
        (
            "allowedSources",
            Box::new(|v| v["spec"]["allowedSources"] = json!(["10.0.0.0/33"])),
        ),
        (
            "allowedSources",
            Box::new(|v| v["spec"]["allowedSources"] = json!(["10.0.0.1/8"])),
        ),
        (
            "allowedSources",
            Box::new(|v| v["spec"]["allowedSources"] = json!(["1.2.3"])),
        ),
        (
            "vpn.port",
            Box::new(|v| v["spec"]["vpn"]["port"] = json!(2381)),
        ),
        (
            "vpn.port",
            Box::new(|v| v["spec"]["vpn"]["port"] = json!(2377)),
        ),
        (
            "vpn.port",
            Box::new(|v| v["spec"]["vpn"]["port"] = json!(0)),
        ),
        // Issue 47 point 1: no listener on the admin port, below 1024, or on a port every
        // proxy binds under another name.
        (
            "vpn.port",
            Box::new(|v| v["spec"]["vpn"]["port"] = json!(9901)),
        ),
        (
            "vpn.port",
            Box::new(|v| v["spec"]["vpn"]["port"] = json!(1023)),
        ),
        (
            "vpn.port",
            Box::new(|v| v["spec"]["vpn"]["port"] = json!(2385)),
        ),
        (
            "ports",
            Box::new(|v| v["spec"]["ports"] = json!({"peerBase": 8443, "clientBase": 8000})),
        ),
        (
            "ports",
            Box::new(|v| v["spec"]["ports"] = json!({"peerBase": 9900, "clientBase": 8000})),
        ),
        (
            "ports",
            Box::new(|v| v["spec"]["ports"] = json!({"peerBase": 3000, "clientBase": 2381})),
        ),
        (
            "vpn.port",
            Box::new(|v| {
                v["spec"]["seedIngress"] = json!({"domain": "ingress.seed-b.example.com"});
                v["spec"]["vpn"]["port"] = json!(12381);
            }),
        ),
        // Issue 25 point 7: the VPN's target is a Service, never etcd's, never on its ports.
        (
            "target",
            Box::new(|v| v["spec"]["vpn"]["target"] = json!("10.0.0.12:9443")),
        ),
        (
            "target",
            Box::new(|v| v["spec"]["vpn"]["target"] = json!("vpn-seed-server:9443")),
        ),
        (
            "target",
            Box::new(|v| {
                v["spec"]["vpn"]["target"] = json!("vpn-seed-server.shoot--foo--bar.svc:2379")
            }),
        ),
        (
            "target",
            Box::new(|v| {
                v["spec"]["vpn"]["target"] = json!("etcd-main-peer.shoot--foo--bar.svc:8443")
            }),
        ),
        (
            "target",
            Box::new(|v| {
                v["spec"]["vpn"]["target"] = json!("vpn-seed-server.shoot--foo--bar.svc:70000")
            }),
        ),
        // Issue 47 point 5: the fully qualified Service name (the controller checks which
        // domain).
        (
            "target",
            Box::new(|v| {
                v["spec"]["vpn"]["target"] = json!("vpn-seed-server.shoot--foo--bar.svc:9443")
            }),
        ),
    ];
    for (what, mutate) in cases {
        let mut v = serde_json::to_value(&good).unwrap();
        v["metadata"] = json!({"name": "bad", "namespace": NS});
        mutate(&mut v);
        let r = api.patch("bad", &ssa(), &Patch::Apply(v)).await;
        let err = r.err().unwrap_or_else(|| panic!("{what}: accepted"));
        let (code, msg) = status_of(&err);
        let undeclared = code == 500 && msg.contains("not declared in schema");
        assert!(
            code == 422 || code == 400 || undeclared,
            "{what}: {code} {msg}"
        );
        assert!(
            what.contains(' ') || msg.contains(what.split('.').next_back().unwrap_or(what)),
            "{what}: the answer names the field: {msg}"
        );
    }
    // What the proxy accepts, the CRD accepts: networks, addresses, IPv6, another VPN port.
    let mut v = serde_json::to_value(&good).unwrap();
    v["metadata"] = json!({"name": "fine", "namespace": NS});
    v["spec"]["allowedSources"] = json!(["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"]);
    v["spec"]["vpn"]["port"] = json!(8444);
    v["spec"]["ports"] = json!({"peerBase": 3000, "clientBase": 2999});
    api.patch("fine", &ssa(), &Patch::Apply(v))
        .await
        .unwrap_or_else(|e| panic!("valid spec refused: {e}"));
    // The valid one is untouched.
    assert!(api.get("good").await.is_ok());
}
