//! The shoot's control plane on the migrating etcd: real kube-apiservers (one per seed), the
//! shoot API's DNS name moving between them, API load and a watch through that name, and an
//! admission webhook with `failurePolicy: Fail` that kube-apiserver calls through the isthmus
//! tunnel (`--egress-selector-config-file`, `cluster` over HTTPConnect with mTLS to its seed's
//! tunnel server). Any tunnel outage is therefore a failed API write.
//!
//! Order, as in GEP-0039: the source kube-apiserver serves from the start against the source
//! members; at `DestinationKubeAPIServerReady` the destination one starts against the
//! destination members (then part of the 5-member cluster); at `MigrateDNSRecords` the name
//! moves; the source kube-apiserver stops (SIGTERM, graceful) before `Shrink` removes the
//! members it reads from.

pub mod files;
pub mod load;
pub mod report;
pub mod server;
pub mod watch;

use crate::error::{Error, Result};
use crate::seeds::Seed;
use crate::webhook::{Egress, WebhookLab, WEBHOOK_SERVICE};
use files::Files;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use load::{Load, Recording, NAMESPACE};
use report::{ApiReport, ControlPlane, Objects};
use server::ApiServer;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use watch::{Seen, Watch};

/// Where `scripts/build-kubernetes.sh` puts kube-apiserver (the machine's build cache).
pub fn default_binary() -> PathBuf {
    isthmus_testkit::cache::kube_apiserver()
}

/// The shoot API's DNS name (in the serving certificate; the lab's clients resolve it through
/// [`Dns`]).
pub const API_NAME: &str = "api.shoot.lab";
/// How long the first write through the webhook may take after the configuration is created
/// (kube-apiserver picks it up from its informer).
const WEBHOOK_READY: Duration = Duration::from_secs(30);
/// How long the watch may take to catch up with the last acknowledged write at the end.
const WATCH_CATCH_UP: Duration = Duration::from_secs(30);

/// The shoot API's DNS name: which seed's kube-apiserver it points at. Clients resolve it per
/// request; a watch re-resolves when it reconnects.
#[derive(Clone)]
pub struct Dns {
    clients: Arc<[Client; 2]>,
    current: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("current", &self.resolve().1)
            .finish_non_exhaustive()
    }
}

impl Dns {
    /// A client for the kube-apiserver the name points at now, and that seed's label.
    pub fn resolve(&self) -> (Client, &'static str) {
        let i = self.current.load(Ordering::Relaxed).min(1);
        (self.clients[i].clone(), ["source", "destination"][i])
    }
}

/// The shoot's kube-apiservers, the load and the watch.
#[derive(Debug)]
pub struct ShootApi {
    bin: PathBuf,
    files: Files,
    dns: Dns,
    egress: [Egress; 2],
    /// Field order is drop order: the load and the watch (which stop when dropped) before the
    /// servers (killed when dropped).
    load: Option<Load>,
    watch: Option<Watch>,
    servers: [Option<ApiServer>; 2],
    version: String,
    /// How long the destination kube-apiserver took to be ready, if it became ready.
    destination_ready_ms: Option<f64>,
    /// AdmissionReviews answered before the load started (the set-up's probe writes).
    webhook_calls_at_start: usize,
}

impl ShootApi {
    /// Starts the source kube-apiserver in `source` against `etcd`, creates the load's
    /// namespace, the webhook's Service and configuration, checks a write goes through the
    /// webhook, then starts the watch and the load.
    pub async fn start(
        epoch: Instant,
        bin: &Path,
        dir: &Path,
        seeds: [&Seed; 2],
        webhook: &WebhookLab,
        etcd: &[String],
        interval: Duration,
    ) -> Result<Self> {
        let egress = [0, 1].map(|i| webhook.kube_apiserver_egress(i));
        let [Some(e0), Some(e1)] = egress else {
            return Err(Error::State("the tunnel has no server per seed".into()));
        };
        let dir = dir.join("kube-apiserver");
        let files = Files::new(&dir, &[seeds[0].seed_ip, seeds[1].seed_ip], &e0)?;
        files.write_egress(&seeds[0].label, &e0)?;
        files.write_egress(&seeds[1].label, &e1)?;
        let mut clients = Vec::new();
        for seed in seeds {
            clients.push(client(&files, seed).await?);
        }
        let [c0, c1]: [Client; 2] = clients
            .try_into()
            .map_err(|_| Error::State("two seeds, two clients".into()))?;
        let dns = Dns {
            clients: Arc::new([c0.clone(), c1]),
            current: Arc::new(AtomicUsize::new(0)),
        };
        let source = ApiServer::start(bin, seeds[0], &files, etcd, &c0).await?;
        let version = c0
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .map_err(|e| kube_err("version", e))?;
        let mut api = Self {
            bin: bin.to_path_buf(),
            files,
            dns,
            egress: [e0, e1],
            load: None,
            watch: None,
            servers: [Some(source), None],
            version,
            destination_ready_ms: None,
            webhook_calls_at_start: 0,
        };
        api.setup(&c0, webhook).await?;
        api.watch = Some(
            Watch::start(api.dns.clone())
                .await
                .map_err(|e| kube_err("first list", e))?,
        );
        api.load = Some(Load::start(epoch, api.dns.clone(), interval));
        Ok(api)
    }

    /// The objects the shoot's API needs for the run, then one write through the webhook.
    async fn setup(&mut self, c: &Client, webhook: &WebhookLab) -> Result<()> {
        let pp = PostParams::default();
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": NAMESPACE }
        }))
        .map_err(json_err)?;
        Api::<Namespace>::all(c.clone())
            .create(&pp, &ns)
            .await
            .map_err(|e| kube_err("namespace", e))?;
        Api::<ConfigMap>::namespaced(c.clone(), NAMESPACE)
            .create(&pp, &load::config_map(load::COUNTER, 0))
            .await
            .map_err(|e| kube_err("counter", e))?;
        let hook = self.egress[0].webhook;
        // An ExternalName Service: kube-apiserver's service resolver turns it into
        // `https://<address>:<port>`, dialled through the `cluster` egress (the tunnel), where
        // the shoot's agents reach the webhook.
        let (svc_ns, svc_name) = WEBHOOK_SERVICE;
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": { "name": svc_name, "namespace": svc_ns },
            "spec": { "type": "ExternalName", "externalName": hook.ip().to_string(),
                      "ports": [{ "port": hook.port() }] }
        }))
        .map_err(json_err)?;
        Api::<Service>::namespaced(c.clone(), svc_ns)
            .create(&pp, &svc)
            .await
            .map_err(|e| kube_err("webhook service", e))?;
        let ca = std::fs::read(&self.egress[0].ca)
            .map_err(|e| Error::io(self.egress[0].ca.display(), e))?;
        let mut vwc: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "isthmus-lab" },
            "webhooks": [{
                "name": "validate.lab.isthmus.dev",
                "clientConfig": {
                    "service": { "namespace": svc_ns, "name": svc_name,
                                 "path": "/validate", "port": hook.port() },
                },
                "rules": [{ "operations": ["CREATE", "UPDATE"], "apiGroups": [""],
                            "apiVersions": ["v1"], "resources": ["configmaps"] }],
                "namespaceSelector": { "matchLabels":
                    { "kubernetes.io/metadata.name": NAMESPACE } },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }]
        }))
        .map_err(json_err)?;
        // `caBundle` is bytes: k8s-openapi's ByteString encodes it (base64) on the wire.
        for w in vwc.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ByteString(ca.clone()));
        }
        Api::<ValidatingWebhookConfiguration>::all(c.clone())
            .create(&pp, &vwc)
            .await
            .map_err(|e| kube_err("webhook configuration", e))?;
        // Until kube-apiserver's informer has the configuration, writes skip the webhook.
        let cms = Api::<ConfigMap>::namespaced(c.clone(), NAMESPACE);
        let deadline = Instant::now() + WEBHOOK_READY;
        let mut n = 0;
        while webhook.kube_apiserver_calls() == 0 {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: "a write through the webhook (kube-apiserver → tunnel → shoot)".into(),
                    after: WEBHOOK_READY,
                });
            }
            n += 1;
            let probe = load::config_map(&format!("probe-{n}"), 0);
            let _ = cms.create(&pp, &probe).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.webhook_calls_at_start = webhook.kube_apiserver_calls();
        Ok(())
    }

    /// `DestinationKubeAPIServerReady`: the destination kube-apiserver against `etcd`. Ok with
    /// the time it took, or Err with why it did not become ready (at high RTT its start-up
    /// LISTs may not finish: the GEP's reason for its RTT limit). Other errors are errors.
    pub async fn start_destination(
        &mut self,
        seed: &Seed,
        etcd: &[String],
    ) -> Result<std::result::Result<f64, String>> {
        let t0 = Instant::now();
        let c = self.dns.clients[1].clone();
        match ApiServer::start(&self.bin, seed, &self.files, etcd, &c).await {
            Ok(s) => {
                self.servers[1] = Some(s);
                let took = crate::client::ms(t0.elapsed());
                self.destination_ready_ms = Some(took);
                Ok(Ok(took))
            }
            Err(e @ (Error::Timeout { .. } | Error::Command { .. })) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// `MigrateDNSRecords`: the shoot API's name points at the destination.
    pub fn move_dns(&self) {
        self.dns.current.store(1, Ordering::Relaxed);
    }

    /// The source kube-apiserver stops (its members are about to be removed); says how.
    pub async fn stop_source(&mut self) -> Result<String> {
        match self.servers[0].take() {
            Some(s) => s.stop().await,
            None => Ok("not running".into()),
        }
    }

    /// Stops the load, lets the watch catch up, reads every acknowledged object back through
    /// the name and returns the report's API part (violations appended to `violations`).
    pub async fn finish(
        mut self,
        webhook: Option<&WebhookLab>,
        phases: &[(String, f64, f64)],
        fault: Option<&crate::report::Fault>,
        violations: &mut Vec<String>,
    ) -> Result<(ApiReport, Objects, ControlPlane)> {
        let rec = match self.load.take() {
            Some(l) => l.stop().await,
            None => Recording::default(),
        };
        // Counted once the load has stopped: every acknowledged write's call is in.
        let webhook_calls = webhook.map(|w| w.kube_apiserver_calls()).unwrap_or(0);
        let last = rec.acks.iter().map(|a| a.rv).max().unwrap_or(0);
        let seen = match self.watch.take() {
            Some(w) => w.stop_after(last, WATCH_CATCH_UP).await,
            None => Seen::default(),
        };
        let (client, _) = self.dns.resolve();
        let stored = Api::<ConfigMap>::namespaced(client, NAMESPACE)
            .list(&ListParams::default())
            .await
            .map_err(|e| kube_err("final read", e))?;
        let objects = Objects::check(&rec, &stored.items);
        let calls = webhook_calls.saturating_sub(self.webhook_calls_at_start);
        let api = ApiReport::new(&rec, &seen, calls, phases);
        api.violations(&objects, &rec, fault, violations);
        Ok((
            api,
            objects,
            ControlPlane {
                kube_apiserver: self.version.clone(),
                destination_ready_ms: self.destination_ready_ms,
                kube_apiservers: "one per seed, real (k8s.io/kubernetes), on the migrating etcd"
                    .into(),
            },
        ))
    }
}

async fn client(files: &Files, seed: &Seed) -> Result<Client> {
    let path = files.dir.join(format!("shoot-{}.kubeconfig", seed.label));
    let server = format!("https://{}:{}", seed.seed_ip, server::PORT);
    write_kubeconfig(&path, &server, &files.dir.join("ca.crt"), &files.token)?;
    kubeconfig_client(&path).await
}

/// Writes a kubeconfig for `server` (its CA file `ca`) with a bearer `token`.
pub(crate) fn write_kubeconfig(
    path: &std::path::Path,
    server: &str,
    ca: &std::path::Path,
    token: &str,
) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters:\n- name: lab\n  \
         cluster:\n    server: {server}\n    certificate-authority: {}\ncontexts:\n\
         - name: lab\n  context:\n    cluster: lab\n    user: user\nusers:\n- name: user\n  \
         user:\n    token: {token}\n",
        ca.display()
    );
    std::fs::write(path, text).map_err(|e| Error::io(path.display(), e))
}

/// A client from a kubeconfig file.
pub async fn kubeconfig_client(path: &std::path::Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(path).map_err(|e| Error::State(format!("{e}")))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::State(format!("{}: {e}", path.display())))?;
    Client::try_from(config).map_err(|e| Error::State(format!("{}: {e}", path.display())))
}

fn kube_err(what: &str, e: kube::Error) -> Error {
    Error::State(format!("shoot API {what}: {e}"))
}

fn json_err(e: serde_json::Error) -> Error {
    Error::State(format!("shoot API object: {e}"))
}
