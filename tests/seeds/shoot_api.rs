//! The shoot's kube-apiserver as a pod in a real seed (issue 45 point 3): a Deployment of the
//! node's own kube-apiserver build (`isthmus.local/kube-apiserver`, scripts/cluster/images.sh)
//! in the seed's shoot namespace with Gardener's labels, on that namespace's `Etcd` client
//! Service with the etcd client certificate the migration's Secrets hold, serving TLS for the
//! shoot API's name and both seeds' LoadBalancer addresses, token authentication for the lab's
//! load (as `lab/src/api/files.rs` does), behind a `LoadBalancer` Service.
//!
//! The one NetworkPolicy it adds: ingress to the kube-apiserver pod on its port from anywhere,
//! as Gardener admits the world to a shoot's API server (`allow-kube-apiserver`). The source
//! namespace's boundary (`join_tls.rs`) admits only its own pods and the proxies', so without
//! it the load balancer's connections are dropped; its egress to etcd needs nothing (the
//! boundary admits the namespace's own pods, and no policy limits egress).

use super::join_tls::ETCD;
use super::node::{poll, Node, POLL};
use super::shoot_logs::Logs;
use isthmus_lab::api::API_NAME;
use isthmus_testkit::flags::{ApiServerAuth, ApiServerFlags};
use isthmus_testkit::TestPki;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

pub const NAME: &str = "kube-apiserver";
const IMAGE: &str = "isthmus.local/kube-apiserver:v1.34.4";
/// The Service's port, and the pod's (nonroot: no port below 1024).
const PORT: u16 = 443;
const POD_PORT: u16 = 6443;
/// Where the pod mounts its Secrets (its own: [`ShootFiles`]).
pub const TLS: &str = "/srv/kubernetes/tls";
const ETCD_CA: &str = "/srv/kubernetes/etcd-ca";
const ETCD_CLIENT: &str = "/srv/kubernetes/etcd-client";

/// What both seeds' kube-apiservers read (one Secret, applied in each shoot namespace) and
/// what the load's clients present.
pub struct ShootFiles {
    pub ca_pem: String,
    pub token: String,
    secret: serde_json::Value,
    /// Files of one namespace's Secret only (each seed's egress to its own tunnel server,
    /// `shoot_webhook.rs`), by namespace.
    pub per_namespace: std::collections::BTreeMap<String, serde_json::Value>,
    /// Further flags of kube-apiserver (their files under [`TLS`]).
    pub args: Vec<String>,
}

impl ShootFiles {
    /// A serving certificate of `pki` for the shoot API's name and `addresses` (both seeds'
    /// load balancers), a service-account key pair and a token of `system:masters`.
    pub fn new(pki: &TestPki, addresses: &[&str]) -> Self {
        let mut names = vec![API_NAME];
        names.extend_from_slice(addresses);
        let serving = pki.server_cert(&names);
        // kube-apiserver reads a certificate as the public key (client-go keyutil).
        let sa = pki.client_cert("service-account-issuer");
        let token = isthmus_lab::api::files::random_token();
        let secret = json!({
            "tls.crt": serving.cert_pem, "tls.key": serving.key_pem,
            "sa.crt": sa.cert_pem, "sa.key": sa.key_pem,
            "tokens.csv": format!("{token},isthmus-lab,isthmus-lab,system:masters\n"),
            "audit-policy.yaml": isthmus_lab::api::files::AUDIT_POLICY,
        });
        Self {
            ca_pem: pki.ca_pem(),
            token,
            secret,
            per_namespace: std::collections::BTreeMap::new(),
            args: Vec::new(),
        }
    }
}

/// The shoot API's `LoadBalancer` Service in `ns` of `seed`: its address once assigned.
pub fn service(seed: &Node, ns: &str) -> String {
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": ns, "labels": labels()},
        "spec": {
            "type": "LoadBalancer", "selector": labels(),
            "ports": [{"name": "https", "port": PORT, "targetPort": POD_PORT}],
        },
    });
    seed.apply(&svc.to_string());
    poll(
        seed,
        "the shoot API's load balancer address",
        Duration::from_secs(120),
        POLL,
        || {
            let ip = seed.jsonpath(
                ns,
                &format!("svc/{NAME}"),
                "{.status.loadBalancer.ingress[0].ip}",
            );
            ip.parse::<std::net::Ipv4Addr>()
                .map(|_| ip.clone())
                .map_err(|_| ip)
        },
    )
}

fn labels() -> serde_json::Value {
    json!({"app": "kubernetes", "role": "apiserver"})
}

/// kube-apiserver in `ns` of `seed`, on that namespace's `Etcd`: applied, then waited for
/// until Ready; returns how long that took and its output, followed into `log`.
pub fn deploy(seed: &Node, ns: &str, files: &ShootFiles, log: &Path) -> (Duration, Logs) {
    let t0 = Instant::now();
    let mut data = files.secret.clone();
    if let (Some(d), Some(Value::Object(own))) = (data.as_object_mut(), files.per_namespace.get(ns))
    {
        d.extend(own.clone());
    }
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": NAME, "namespace": ns}, "stringData": data,
    });
    seed.apply(&secret.to_string());
    seed.apply(&policy(ns).to_string());
    seed.apply(&deployment(ns, &files.args).to_string());
    seed.rolled_out(ns, &format!("deploy/{NAME}"), 240);
    let took = t0.elapsed();
    (took, Logs::follow(seed, ns, log))
}

/// The Deployment goes and its pod with it (kubelet's SIGTERM, the pod's grace): returns how
/// long until no pod is left.
pub fn remove(seed: &Node, ns: &str) -> Duration {
    let t0 = Instant::now();
    seed.kubectl(&["-n", ns, "delete", "deploy", NAME, "--wait=true"]);
    poll(
        seed,
        "the shoot kube-apiserver's pod gone",
        Duration::from_secs(120),
        POLL,
        || {
            let pods = seed.pods_jsonpath(
                ns,
                "app=kubernetes,role=apiserver",
                "{.items[*].metadata.name}",
            );
            pods.trim().is_empty().then_some(()).ok_or(pods)
        },
    );
    t0.elapsed()
}

fn policy(ns: &str) -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "allow-kube-apiserver", "namespace": ns},
        "spec": {
            "podSelector": {"matchLabels": labels()},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": POD_PORT}]}],
        },
    })
}

fn deployment(ns: &str, extra: &[String]) -> serde_json::Value {
    let mut args = ApiServerFlags {
        etcd_servers: format!("https://{ETCD}-client:2379"),
        address: [0, 0, 0, 0].into(),
        port: POD_PORT,
        cert_dir: "/tmp/certs".into(),
        serving: (
            format!("{TLS}/tls.crt").into(),
            format!("{TLS}/tls.key").into(),
        ),
        auth: ApiServerAuth::TokenFile(format!("{TLS}/tokens.csv").into()),
        issuer: format!("https://{API_NAME}"),
        service_account: (
            format!("{TLS}/sa.crt").into(),
            format!("{TLS}/sa.key").into(),
        ),
    }
    .args();
    args.extend([
        format!("--etcd-cafile={ETCD_CA}/ca.crt"),
        format!("--etcd-certfile={ETCD_CLIENT}/tls.crt"),
        format!("--etcd-keyfile={ETCD_CLIENT}/tls.key"),
        format!("--audit-policy-file={TLS}/audit-policy.yaml"),
        "--audit-log-path=-".into(),
    ]);
    args.extend_from_slice(extra);
    let volume = |name: &str, secret: &str| json!({"name": name, "secret": {"secretName": secret}});
    let mount = |name: &str, path: &str| json!({"name": name, "mountPath": path, "readOnly": true});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": ns, "labels": labels()},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels()},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "automountServiceAccountToken": false,
                    "containers": [{
                        "name": NAME, "image": IMAGE, "imagePullPolicy": "Never", "args": args,
                        "ports": [{"name": "https", "containerPort": POD_PORT}],
                        "readinessProbe": {
                            "httpGet": {"scheme": "HTTPS", "path": "/readyz", "port": POD_PORT},
                            "periodSeconds": 1, "failureThreshold": 3,
                        },
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                        "volumeMounts": [
                            mount("tls", TLS), mount("etcd-ca", ETCD_CA),
                            mount("etcd-client", ETCD_CLIENT),
                        ],
                    }],
                    "volumes": [
                        volume("tls", NAME), volume("etcd-ca", "etcd-ca"),
                        volume("etcd-client", "etcd-client"),
                    ],
                },
            },
        },
    })
}
