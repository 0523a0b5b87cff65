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

pub mod admission;
pub mod audit;
pub mod dns;
pub mod files;
pub mod kubeconfig;
pub mod load;
pub mod report;
pub mod server;
pub mod watch;

use crate::error::{Error, Result};
use crate::seeds::Seed;
use crate::webhook::{Egress, WebhookLab};
pub use dns::Dns;
use files::Files;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use kubeconfig::{kubeconfig_client, write_kubeconfig};
use load::{Load, Recording, NAMESPACE};
use report::{ApiReport, ControlPlane, Objects};
use server::ApiServer;
use std::path::{Path, PathBuf};
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
/// How long the watch may take to catch up with the last acknowledged write at the end.
const WATCH_CATCH_UP: Duration = Duration::from_secs(30);

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
    /// The run's start on the wall clock (ms since the Unix epoch): the audit logs' clock.
    epoch_unix_ms: f64,
    /// Each seed's kube-apiserver's audit log.
    audit_logs: [PathBuf; 2],
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
        let dns = Dns::new([c0.clone(), c1]);
        let source = ApiServer::start(bin, seeds[0], &files, etcd, &c0).await?;
        let version = c0
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .map_err(|e| kube_err("version", e))?;
        let audit_logs = seeds.map(|s| files.audit_log(&s.label));
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
            epoch_unix_ms: unix_ms() - crate::clock::ms(epoch.elapsed()),
            audit_logs,
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
        load_objects(c).await?;
        let e = &self.egress[0];
        admission::register(c, e.webhook, &e.ca).await?;
        admission::first_call(c, || webhook.kube_apiserver_calls()).await?;
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
        let c = self.dns.destination();
        match ApiServer::start(&self.bin, seed, &self.files, etcd, &c).await {
            Ok(s) => {
                self.servers[1] = Some(s);
                let took = crate::clock::ms(t0.elapsed());
                self.destination_ready_ms = Some(took);
                Ok(Ok(took))
            }
            Err(e @ (Error::Timeout { .. } | Error::Command { .. })) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// `MigrateDNSRecords`: the shoot API's name points at the destination.
    pub fn move_dns(&self) {
        self.dns.move_to_destination();
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
        events: &[crate::stats::Event],
        fault: Option<&crate::stats::Fault>,
        violations: &mut Vec<String>,
    ) -> Result<(ApiReport, Objects, ControlPlane)> {
        let mut rec = match self.load.take() {
            Some(l) => l.stop().await,
            None => Recording::default(),
        };
        let logs = self.audit_logs.each_ref().map(PathBuf::as_path);
        audit::attach(&mut rec.samples, &logs, self.epoch_unix_ms);
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
        let api = ApiReport::new(&rec, &seen, calls, phases, events);
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

/// What the load needs in the shoot's API before it starts: its namespace and the counter
/// (also for a kube-apiserver the lab does not run: tests/seeds/shoot_load.rs).
pub async fn load_objects(c: &Client) -> Result<()> {
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
    Ok(())
}

/// Now on the wall clock, ms since the Unix epoch.
fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, crate::clock::ms)
}

async fn client(files: &Files, seed: &Seed) -> Result<Client> {
    let path = files.dir.join(format!("shoot-{}.kubeconfig", seed.label));
    let server = format!("https://{}:{}", seed.seed_ip, server::PORT);
    write_kubeconfig(&path, &server, &files.dir.join("ca.crt"), &files.token)?;
    kubeconfig_client(&path).await
}

fn kube_err(what: &str, e: kube::Error) -> Error {
    Error::State(format!("shoot API {what}: {e}"))
}

fn json_err(e: serde_json::Error) -> Error {
    Error::State(format!("shoot API object: {e}"))
}
