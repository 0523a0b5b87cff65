//! The kube-rs adapter against a scripted API server: a source run, a destination run, a 409
//! conflict, a transient 500, and deletion through the finalizer. Every request is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test]: a panic is a failure

mod common;

use common::apiserver::{expect, mock, serve, Exchange, Seen};
use common::{source_members, spec, NS};
use futures::future::BoxFuture;
use http::Method;
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationStatus, Role, Step};
use isthmus_controller::gardener::{dnsrecord_body, etcd_body};
use isthmus_controller::kube_adapter::probe::{HashFetcher, ProbeError};
use isthmus_controller::kube_adapter::{
    error_policy, reconcile, Context, Error, Metrics, Settings,
};
use isthmus_controller::plan::{self, EtcdAction, EtcdFields, Observed};
use isthmus_controller::proxy_config::Layout;
use kube::runtime::controller::Action;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: &str = "2026-01-01T00:00:00Z";
const LB: &str = "203.0.113.7";
const DNS: &str = "/apis/extensions.gardener.cloud/v1alpha1/namespaces/shoot--foo--bar/dnsrecords";
const ETCD: &str = "/apis/druid.gardener.cloud/v1alpha1/namespaces/shoot--foo--bar/etcds/etcd-main";
const MIGS: &str = "/apis/isthmus.dev/v1alpha1/etcdmigrations";
const MIG: &str = "/apis/isthmus.dev/v1alpha1/namespaces/shoot--foo--bar/etcdmigrations/etcd-main";
const SVC: &str = "/api/v1/namespaces/isthmus-system/services/isthmus-proxy";
const CM: &str = "/api/v1/namespaces/isthmus-system/configmaps/isthmus-proxy-routes";
const PODS: &str = "/api/v1/namespaces/isthmus-system/pods";

/// Proxy pods that load whatever ConfigMap the scripted server last received (or lag).
#[derive(Debug)]
struct Proxies {
    seen: Arc<Mutex<Seen>>,
    lagging: bool,
}

impl HashFetcher for Proxies {
    fn fetch(&self, _addr: SocketAddr) -> BoxFuture<'_, Result<String, ProbeError>> {
        let text = self
            .seen
            .lock()
            .unwrap()
            .proxy_text
            .clone()
            .unwrap_or_default();
        let lagging = self.lagging;
        Box::pin(async move {
            if lagging {
                Ok("old".into())
            } else {
                Ok(isthmus_config::hash_bytes(text.as_bytes()))
            }
        })
    }
}

fn context(
    client: kube::Client,
    seen: Arc<Mutex<Seen>>,
    lagging: bool,
) -> (Arc<Context>, Registry) {
    let mut registry = Registry::default();
    let metrics = Metrics::new(&mut registry);
    let settings = Settings {
        proxy_namespace: "isthmus-system".into(),
        proxy_configmap: "isthmus-proxy-routes".into(),
        proxy_selector: "app.kubernetes.io/name=isthmus-proxy".into(),
        proxy_admin_port: 9901,
        layout: Layout::standard(
            Default::default(),
            3,
            8443,
            SocketAddr::from(([0, 0, 0, 0], 9901)),
        ),
        namespace: None,
        poll: Duration::from_secs(5),
        resync: Duration::from_secs(300),
    };
    let mut ctx = Context::new(
        client,
        settings,
        metrics,
        Arc::new(Proxies { seen, lagging }),
    );
    ctx.now = Arc::new(|| T0.to_string());
    (Arc::new(ctx), registry)
}

fn migration(role: Role, step: Step, finalizer: bool) -> EtcdMigration {
    let mut m = EtcdMigration::new("etcd-main", spec(role, step));
    m.metadata.namespace = Some(NS.into());
    m.metadata.generation = Some(1);
    m.metadata.resource_version = Some("10".into());
    if finalizer {
        m.metadata.finalizers = Some(vec!["isthmus.dev/cleanup".into()]);
    }
    m
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "isthmus-proxy", "namespace": "isthmus-system"},
           "status": {"loadBalancer": {"ingress": [{"ip": LB}]}}})
}

fn pods() -> Value {
    let pod = |n: &str, ip: &str| {
        json!({"metadata": {"name": n, "namespace": "isthmus-system"},
                                         "status": {"phase": "Running", "podIP": ip}})
    };
    list(
        "PodList",
        vec![
            pod("isthmus-proxy-a", "10.0.0.1"),
            pod("isthmus-proxy-b", "10.0.0.2"),
            json!({"metadata": {"name": "pending"}, "status": {"phase": "Pending"}}),
        ],
    )
}

/// The DNS records and Etcd as they look once everything `step` wants is done.
fn converged(role: Role, step: Step, prior: &[Step]) -> (Vec<Value>, Option<Value>) {
    let mut obs = Observed {
        namespace: NS.into(),
        now: T0.into(),
        generation: Some(1),
        lb_address: Some(LB.into()),
        ..Observed::default()
    };
    if role == Role::Source {
        obs.etcd = Some(common::source_etcd());
    }
    for s in prior.iter().chain([&step]) {
        common::converge(&spec(role, *s), &mut obs, 10);
    }
    let p = plan::plan(&spec(role, step), &obs);
    let records = p
        .dns_records
        .iter()
        .map(|d| {
            let mut b = dnsrecord_body(NS, "etcd-main", d);
            b["metadata"]["generation"] = json!(1);
            b["status"] = json!({"observedGeneration": 1, "lastOperation": {"state": "Succeeded"}});
            b
        })
        .collect();
    let etcd = obs.etcd.map(|e| {
        let mut b = etcd_body("etcd-main", NS, Default::default(), &e.fields, &Default::default());
        b["metadata"]["generation"] = json!(e.generation);
        if let Some(ts) = e.timestamp {
            b["metadata"]["annotations"]["gardener.cloud/timestamp"] = json!(ts);
        }
        b["status"] = json!({"observedGeneration": e.generation, "readyReplicas": e.ready_replicas,
                             "members": e.members.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
        b
    });
    (records, etcd)
}

fn not_found() -> Exchange {
    expect(Method::GET, ETCD).fail(404, "NotFound")
}

/// The observe + proxy part every Apply pass starts with.
fn observe(
    m: &EtcdMigration,
    records: Vec<Value>,
    etcd: Option<Value>,
    routes_contain: Option<&'static str>,
) -> Vec<Exchange> {
    let mig = serde_json::to_value(m).unwrap();
    vec![
        expect(Method::GET, SVC).reply(service()),
        expect(Method::GET, DNS)
            .query("labelSelector=isthmus.dev%2Fmigration%3Detcd-main")
            .reply(list("DNSRecordList", records)),
        match etcd {
            Some(e) => expect(Method::GET, ETCD).reply(e),
            None => not_found(),
        },
        expect(Method::GET, MIGS).reply(list("EtcdMigrationList", vec![mig])),
        expect(Method::PATCH, CM).ssa().check(move |b| {
            let text = b["data"]["proxy.yaml"].as_str().unwrap();
            isthmus_config::parse_proxy("cm", text).unwrap();
            if let Some(sni) = routes_contain {
                assert!(text.contains(sni), "ConfigMap lacks {sni}:\n{text}");
            } else {
                assert!(!text.contains("sni:"), "ConfigMap still routes:\n{text}");
            }
        }),
        expect(Method::GET, PODS)
            .query("labelSelector=app.kubernetes.io%2Fname%3Disthmus-proxy")
            .reply(pods()),
    ]
}

fn status_check(
    m: &EtcdMigration,
    cond: &'static str,
    status: &'static str,
    ready: bool,
) -> Exchange {
    let reply = serde_json::to_value(m).unwrap();
    expect(Method::PATCH, format!("{MIG}/status"))
        .ssa()
        .reply(reply)
        .check(move |b| {
            let s: EtcdMigrationStatus = serde_json::from_value(b["status"].clone()).unwrap();
            assert_eq!(s.step_ready, ready, "{s:?}");
            let c = s
                .conditions
                .iter()
                .find(|c| c.type_ == cond)
                .unwrap_or_else(|| panic!("no {cond} in {s:?}"));
            assert_eq!(c.status, status, "{c:?}");
        })
}

async fn run(
    m: EtcdMigration,
    script: Vec<Exchange>,
    lagging: bool,
) -> (Result<Action, Error>, Arc<Context>, Registry) {
    let (client, handle) = mock();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (ctx, registry) = context(client, seen.clone(), lagging);
    let server = tokio::spawn(serve(handle, script, seen));
    let result = tokio::time::timeout(Duration::from_secs(10), reconcile(Arc::new(m), ctx.clone()))
        .await
        .expect("reconcile hung: a scripted answer is missing");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("script not consumed")
        .unwrap();
    (result, ctx, registry)
}

fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}

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
