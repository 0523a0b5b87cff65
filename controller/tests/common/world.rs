//! The adapter's test world: a scripted API server's answers for a seed where the DNS
//! provider, the proxies and etcd-druid have done what a given step asked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a panic is a test failure

use super::apiserver::{expect, mock, serve, Exchange, Seen};
use super::{spec, NS};
use futures::future::BoxFuture;
use http::Method;
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationStatus, Role, Step};
use isthmus_controller::gardener::{dnsrecord_body, etcd_body};
use isthmus_controller::kube_adapter::probe::{HashFetcher, ProbeError};
use isthmus_controller::kube_adapter::{reconcile, Context, Error, Metrics, Settings};
use isthmus_controller::plan::{self, Observed};
use isthmus_controller::proxy_config::Layout;
use kube::runtime::controller::Action;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const T0: &str = "2026-01-01T00:00:00Z";
pub const LB: &str = "203.0.113.7";
pub const DNS: &str =
    "/apis/extensions.gardener.cloud/v1alpha1/namespaces/shoot--foo--bar/dnsrecords";
pub const ETCD: &str =
    "/apis/druid.gardener.cloud/v1alpha1/namespaces/shoot--foo--bar/etcds/etcd-main";
pub const MIGS: &str = "/apis/isthmus.dev/v1alpha1/etcdmigrations";
pub const MIG: &str =
    "/apis/isthmus.dev/v1alpha1/namespaces/shoot--foo--bar/etcdmigrations/etcd-main";
pub const SVC: &str = "/api/v1/namespaces/isthmus-system/services/isthmus-proxy";
pub const CM: &str = "/api/v1/namespaces/isthmus-system/configmaps/isthmus-proxy-routes";
pub const PODS: &str = "/api/v1/namespaces/isthmus-system/pods";

/// Proxy pods that load whatever ConfigMap the scripted server last received (or lag).
#[derive(Debug)]
pub struct Proxies {
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

pub fn context(
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

pub fn migration(role: Role, step: Step, finalizer: bool) -> EtcdMigration {
    let mut m = EtcdMigration::new("etcd-main", spec(role, step));
    m.metadata.namespace = Some(NS.into());
    m.metadata.generation = Some(1);
    m.metadata.resource_version = Some("10".into());
    if finalizer {
        m.metadata.finalizers = Some(vec!["isthmus.dev/cleanup".into()]);
    }
    m
}

pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

pub fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "isthmus-proxy", "namespace": "isthmus-system"},
           "status": {"loadBalancer": {"ingress": [{"ip": LB}]}}})
}

pub fn pods() -> Value {
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
pub fn converged(role: Role, step: Step, prior: &[Step]) -> (Vec<Value>, Option<Value>) {
    let mut obs = Observed {
        namespace: NS.into(),
        now: T0.into(),
        generation: Some(1),
        lb_address: Some(LB.into()),
        ..Observed::default()
    };
    if role == Role::Source {
        obs.etcd = Some(super::source_etcd());
    }
    for s in prior.iter().chain([&step]) {
        super::converge(&spec(role, *s), &mut obs, 10);
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

pub fn not_found() -> Exchange {
    expect(Method::GET, ETCD).fail(404, "NotFound")
}

/// The observe + proxy part every Apply pass starts with.
pub fn observe(
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

pub fn status_check(
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

pub async fn run(
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

pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
    out
}
