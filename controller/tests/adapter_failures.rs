//! The kube-rs adapter when things go wrong, against the scripted API server: a 409 conflict,
//! a transient 500, and deletion through the finalizer while the DNS provider is still busy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure

mod common;

use common::apiserver::{expect, Exchange};
use common::world::*;
use common::{spec, NS};
use http::Method;
use isthmus_controller::crd::{EtcdMigration, Role, Step};
use isthmus_controller::gardener::etcd_body;
use isthmus_controller::kube_adapter::error_policy;
use isthmus_controller::plan::{self, EtcdAction, EtcdFields, Observed};
use kube::runtime::controller::Action;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn conflict_is_an_error_with_backoff_and_metric() {
    let m = migration(Role::Source, Step::Expose, true);
    let (records, etcd) = converged(Role::Source, Step::Expose, &[]);
    let mut script = observe(&m, records, etcd, Some("seed-a"));
    for i in 0..3 {
        script.push(expect(Method::PATCH, format!("{DNS}/isthmus-etcd-main-{i}")).ssa());
    }
    script.push(expect(Method::PATCH, ETCD).ssa().fail(409, "Conflict"));
    let (r, ctx, registry) = run(m.clone(), script, false).await;
    let err = r.unwrap_err();
    assert_eq!(err.label(), "conflict");
    let m = Arc::new(m);
    assert_eq!(
        error_policy(m.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        error_policy(m, &err, ctx),
        Action::requeue(Duration::from_secs(2))
    );
    assert!(encode(&registry).contains(r#"isthmus_controller_failures_total{reason="conflict"} 2"#));
}

#[tokio::test]
async fn transient_500_fails_the_pass_and_the_next_pass_succeeds() {
    let m = migration(Role::Source, Step::Expose, true);
    let script = vec![expect(Method::GET, SVC).fail(500, "InternalError")];
    let (r, _, _) = run(m.clone(), script, false).await;
    assert_eq!(r.unwrap_err().label(), "api_server_error");

    let (records, etcd) = converged(Role::Source, Step::Expose, &[]);
    let mut script = observe(&m, records, etcd, Some("seed-a"));
    for i in 0..3 {
        script.push(expect(Method::PATCH, format!("{DNS}/isthmus-etcd-main-{i}")).ssa());
    }
    script.push(expect(Method::PATCH, ETCD).ssa());
    script.push(status_check(
        &m,
        "SourceEtcdPreparedForPeerJoin",
        "True",
        true,
    ));
    let (r, _, _) = run(m, script, false).await;
    assert!(r.is_ok(), "{r:?}");
}

fn deleting(m: &EtcdMigration) -> EtcdMigration {
    let mut m = m.clone();
    m.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        T0.parse().unwrap(),
    ));
    m
}

/// Cleanup's requests up to the Etcd release.
fn cleanup_script(m: &EtcdMigration, records: Vec<Value>, etcd: Value) -> Vec<Exchange> {
    let mut s = vec![expect(Method::GET, DNS).reply(list("DNSRecordList", records.clone()))];
    for r in &records {
        let path = format!("{DNS}/{}", r["metadata"]["name"].as_str().unwrap());
        s.push(expect(Method::PATCH, path.clone()).check(|b| {
            assert_eq!(
                b["metadata"]["annotations"]["confirmation.gardener.cloud/deletion"],
                "true"
            );
        }));
        s.push(expect(Method::DELETE, path));
    }
    s.push(expect(Method::GET, MIGS).reply(list(
        "EtcdMigrationList",
        vec![serde_json::to_value(m).unwrap()],
    )));
    s.push(expect(Method::PATCH, CM).ssa().check(|b| {
        assert!(
            !b["data"]["proxy.yaml"].as_str().unwrap().contains("sni:"),
            "routes of a deleted migration"
        );
    }));
    s.push(expect(Method::GET, PODS).reply(pods()));
    s.push(expect(Method::GET, ETCD).reply(etcd));
    s.push(
        expect(Method::PATCH, ETCD)
            .ssa()
            .check(|b| assert_eq!(b.get("spec"), None)),
    );
    s
}

#[tokio::test]
async fn deletion_runs_cleanup_then_removes_the_finalizer() {
    let m = deleting(&migration(Role::Source, Step::Expose, true));
    let (records, etcd) = converged(Role::Source, Step::Expose, &[]);
    let etcd = etcd.unwrap();
    // Pass 1: records deleted but still present (the DNS provider's own finalizer): wait.
    let (r, _, _) = run(m.clone(), cleanup_script(&m, records, etcd.clone()), false).await;
    assert_eq!(r.unwrap_err().label(), "cleanup_pending");
    // Pass 2: records gone: our finalizer is removed.
    let mut script = cleanup_script(&m, vec![], etcd);
    script.push(
        expect(Method::PATCH, MIG)
            .check(|b| {
                let ops = b.as_array().expect("JSON patch");
                assert!(
                    ops.iter()
                        .any(|op| op["op"] == "remove" && op["path"] == "/metadata/finalizers/0"),
                    "{b}"
                );
            })
            .reply(serde_json::to_value(&m).unwrap()),
    );
    let (r, _, _) = run(m, script, false).await;
    assert_eq!(r.unwrap(), Action::await_change());
}

#[tokio::test]
async fn released_fields_body_matches_planner_release() {
    // The planner's Release and cleanup's release are the same empty intent.
    let body = etcd_body(
        "etcd-main",
        NS,
        Default::default(),
        &EtcdFields::default(),
        &Default::default(),
    );
    assert_eq!(body["metadata"]["annotations"], json!({}));
    let p = plan::plan(
        &spec(Role::Source, Step::Abort),
        &Observed {
            etcd: Some(common::source_etcd()),
            ..common::observed(T0)
        },
    );
    assert_eq!(p.etcd, EtcdAction::Release);
}
