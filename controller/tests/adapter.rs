//! The kube-rs adapter against a scripted API server (kube-rs's `tower-test` pattern): passes of
//! a source and a destination migration through their steps, aborts, and the watch mappers.
//! Every request is asserted (verb, path, field manager, body) and answered.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure

mod common;

use common::apiserver::expect;
use common::world::*;
use common::{source_members, NS};
use http::Method;
use isthmus_controller::crd::{EtcdMigrationStatus, Role, Step};
use isthmus_controller::gardener::etcd_body;
use isthmus_controller::plan::EtcdFields;
use kube::runtime::controller::Action;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn adds_the_finalizer_first() {
    let m = migration(Role::Source, Step::Expose, false);
    let mut with = serde_json::to_value(migration(Role::Source, Step::Expose, true)).unwrap();
    with["metadata"]["resourceVersion"] = json!("11");
    let script = vec![expect(Method::PATCH, MIG)
        .check(|b| {
            assert!(b.to_string().contains("isthmus.dev/cleanup"), "{b}");
        })
        .reply(with)];
    let (r, _, _) = run(m, script, false).await;
    assert_eq!(r.unwrap(), Action::await_change());
}

#[tokio::test]
async fn source_expose_converged_pass() {
    let m = migration(Role::Source, Step::Expose, true);
    let (records, etcd) = converged(Role::Source, Step::Expose, &[]);
    let mut script = observe(
        &m,
        records,
        etcd,
        Some("etcd-main-0.shoot--foo--bar.seed-a.internal.example.com"),
    );
    for i in 0..3 {
        script.push(
            expect(Method::PATCH, format!("{DNS}/isthmus-etcd-main-{i}"))
                .ssa()
                .check(|b| {
                    assert_eq!(
                        b["metadata"]["labels"]["isthmus.dev/migration"],
                        "etcd-main"
                    );
                    assert_eq!(
                        b["metadata"]["annotations"].get("gardener.cloud/operation"),
                        None,
                        "no re-trigger"
                    );
                    assert_eq!(b["spec"]["values"][0], LB);
                }),
        );
    }
    script.push(expect(Method::PATCH, ETCD).ssa().check(|b| {
        assert_eq!(
            b["spec"]["etcd"]["peerUrlTls"]["skipClientSANVerification"],
            true
        );
        assert_eq!(
            b["spec"]["etcd"]["additionalAdvertisePeerUrls"][1]["urls"][0],
            "https://etcd-main-1.shoot--foo--bar.seed-a.internal.example.com:2381"
        );
        assert_eq!(b["spec"].get("replicas"), None, "replicas stay gardenlet's");
    }));
    script.push(status_check(
        &m,
        "SourceEtcdPreparedForPeerJoin",
        "True",
        true,
    ));
    let (r, _, registry) = run(m, script, false).await;
    assert_eq!(r.unwrap(), Action::requeue(Duration::from_secs(300)));
    assert!(encode(&registry).contains(
        r#"isthmus_controller_reconciliations_total{role="source",step="Expose",ready="true"} 1"#
    ));
}

#[tokio::test]
async fn source_expose_waits_for_lagging_proxies() {
    let m = migration(Role::Source, Step::Expose, true);
    let (records, etcd) = converged(Role::Source, Step::Expose, &[]);
    let mut script = observe(&m, records, etcd, Some("seed-a"));
    for i in 0..3 {
        script.push(expect(Method::PATCH, format!("{DNS}/isthmus-etcd-main-{i}")).ssa());
    }
    script.push(expect(Method::PATCH, ETCD).ssa());
    script.push(status_check(
        &m,
        "SourceEtcdPreparedForPeerJoin",
        "Progressing",
        false,
    ));
    let (r, _, _) = run(m, script, true).await;
    assert_eq!(r.unwrap(), Action::requeue(Duration::from_secs(5)));
}

#[tokio::test]
async fn source_complete_confirms_and_deletes() {
    let m = migration(Role::Source, Step::Complete, true);
    let (records, etcd) = converged(Role::Source, Step::Shrink, &[Step::Expose]);
    let mut script = observe(&m, records, etcd, None);
    for i in 0..3 {
        let path = format!("{DNS}/isthmus-etcd-main-{i}");
        script.push(expect(Method::PATCH, path.clone()).check(|b| {
            assert_eq!(
                b["metadata"]["annotations"]["confirmation.gardener.cloud/deletion"],
                "true"
            );
        }));
        script.push(expect(Method::DELETE, path));
    }
    script.push(
        expect(Method::PATCH, ETCD)
            .ssa()
            .check(|b| assert_eq!(b.get("spec"), None, "release owns nothing")),
    );
    script.push(status_check(&m, "SourceSeedCleanUp", "Progressing", false));
    let (r, _, _) = run(m, script, false).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn destination_join_creates_etcd_and_vpn_record() {
    let m = migration(Role::Destination, Step::Join, true);
    let (records, _) = converged(Role::Destination, Step::Expose, &[]);
    let mut script = observe(&m, records, None, Some("vpn-tmp.foo.example.com"));
    for i in 0..3 {
        script.push(expect(Method::PATCH, format!("{DNS}/isthmus-etcd-main-{i}")).ssa());
    }
    script.push(
        expect(Method::PATCH, format!("{DNS}/isthmus-vpn"))
            .ssa()
            .check(|b| {
                assert_eq!(b["spec"]["name"], "vpn-tmp.foo.example.com");
                assert_eq!(
                    b["metadata"]["annotations"]["gardener.cloud/operation"],
                    "reconcile"
                );
                assert_eq!(b["metadata"]["annotations"]["gardener.cloud/timestamp"], T0);
            }),
    );
    script.push(expect(Method::PATCH, ETCD).ssa().check(|b| {
        assert_eq!(b["spec"]["replicas"], 2);
        assert_eq!(b["spec"]["memberNamePrefix"], "dest");
        let members: Vec<&str> = b["spec"]["etcd"]["bootstrapWithExistingCluster"]["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            members,
            source_members()
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            b["metadata"]["annotations"]["gardener.cloud/operation"],
            "reconcile"
        );
    }));
    script.push(status_check(
        &m,
        "DestinationEtcdPeersJoined",
        "Progressing",
        false,
    ));
    let (r, _, _) = run(m, script, false).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn destination_shrink_converged_pass() {
    let m = migration(Role::Destination, Step::Shrink, true);
    let (records, etcd) = converged(
        Role::Destination,
        Step::Shrink,
        &[Step::Expose, Step::Join, Step::Grow],
    );
    let mut script = observe(&m, records, etcd, Some("seed-b"));
    for name in [
        "isthmus-etcd-main-0",
        "isthmus-etcd-main-1",
        "isthmus-etcd-main-2",
        "isthmus-vpn",
    ] {
        script.push(expect(Method::PATCH, format!("{DNS}/{name}")).ssa());
    }
    script.push(expect(Method::PATCH, ETCD).ssa().check(|b| {
        assert_eq!(b["spec"]["replicas"], 3);
        assert_eq!(
            b["spec"]["etcd"].get("bootstrapWithExistingCluster"),
            None,
            "cleared for druid"
        );
    }));
    script.push(status_check(&m, "EtcdMigrationComplete", "True", true));
    let (r, _, _) = run(m, script, false).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn destination_abort_confirms_and_deletes_etcd() {
    let m = migration(Role::Destination, Step::Abort, true);
    // Join applied; members never became ready, so abort is allowed.
    let (records, _) = converged(Role::Destination, Step::Expose, &[]);
    let mut etcd = etcd_body(
        "etcd-main",
        NS,
        Default::default(),
        &EtcdFields {
            replicas: Some(2),
            ..Default::default()
        },
        &Default::default(),
    );
    etcd["metadata"]["generation"] = json!(1);
    let mut script = observe(&m, records, Some(etcd), None);
    for i in 0..3 {
        let path = format!("{DNS}/isthmus-etcd-main-{i}");
        script.push(expect(Method::PATCH, path.clone()));
        script.push(expect(Method::DELETE, path));
    }
    script.push(expect(Method::PATCH, ETCD).check(|b| {
        assert_eq!(
            b["metadata"]["annotations"]["confirmation.gardener.cloud/deletion"],
            "true"
        );
    }));
    script.push(expect(Method::DELETE, ETCD));
    script.push(status_check(
        &m,
        "LiveMigrationAborted",
        "Progressing",
        false,
    ));
    let (r, _, _) = run(m, script, false).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn destination_abort_after_join_is_refused_and_keeps_join() {
    let mut m = migration(Role::Destination, Step::Abort, true);
    let (records, etcd) = converged(Role::Destination, Step::Join, &[Step::Expose]);
    let mut status = EtcdMigrationStatus {
        step: Some(Step::Join),
        ..Default::default()
    };
    status.conditions.push(isthmus_controller::crd::Condition {
        type_: "DestinationEtcdPeersJoined".into(),
        status: "True".into(),
        reason: "PeersJoinedSuccessfully".into(),
        message: String::new(),
        last_transition_time: T0.into(),
        last_update_time: T0.into(),
    });
    m.status = Some(status);
    let mut script = observe(&m, records, etcd, Some("seed-b"));
    for name in [
        "isthmus-etcd-main-0",
        "isthmus-etcd-main-1",
        "isthmus-etcd-main-2",
        "isthmus-vpn",
    ] {
        script.push(expect(Method::PATCH, format!("{DNS}/{name}")).ssa());
    }
    script.push(
        expect(Method::PATCH, ETCD)
            .ssa()
            .check(|b| assert_eq!(b["spec"]["replicas"], 2)),
    );
    script.push(status_check(&m, "LiveMigrationAborted", "False", true));
    let (r, _, _) = run(m, script, false).await;
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn watch_mappers_find_the_migration() {
    use isthmus_controller::kube_adapter::{etcd_users, record_owner};
    use kube::api::DynamicObject;
    let record: DynamicObject = serde_json::from_value(json!({
        "metadata": {"name": "isthmus-etcd-main-0", "namespace": NS, "labels": {"isthmus.dev/migration": "etcd-main"}}
    })).unwrap();
    let owner = record_owner(&record).unwrap();
    assert_eq!(
        (owner.name.as_str(), owner.namespace.as_deref()),
        ("etcd-main", Some(NS))
    );
    let unlabelled: DynamicObject =
        serde_json::from_value(json!({"metadata": {"name": "x", "namespace": NS}})).unwrap();
    assert!(record_owner(&unlabelled).is_none());

    let etcd: DynamicObject =
        serde_json::from_value(json!({"metadata": {"name": "etcd-main", "namespace": NS}}))
            .unwrap();
    let mut other_ns = migration(Role::Source, Step::Expose, true);
    other_ns.metadata.namespace = Some("shoot--other".into());
    let mut other_etcd = migration(Role::Source, Step::Expose, true);
    other_etcd.metadata.name = Some("events".into());
    other_etcd.spec.etcd_name = "etcd-events".into();
    let all = vec![
        Arc::new(migration(Role::Source, Step::Expose, true)),
        Arc::new(other_ns),
        Arc::new(other_etcd),
    ];
    let users = etcd_users(&all, &etcd);
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].name, "etcd-main");
}
