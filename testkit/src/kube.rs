//! A real kube-apiserver (and its etcd) for tests: the pinned Kubernetes v1.34.4 built from the
//! published Go module by `scripts/build-kubernetes.sh`, on OS-chosen loopback ports, with
//! rcgen certificates, `--authorization-mode=RBAC` and service-account signing keys (so
//! TokenRequest works and a ServiceAccount's client is subject to RBAC exactly as in a cluster).
//!
//! Storage: etcd v3.6.16 built from the published module `go.etcd.io/etcd/server/v3` by
//! `scripts/build-etcd.sh` (wrapper module `scripts/etcd/`, binary in [`crate::cache`]),
//! overridable with `ISTHMUS_ETCD`.
//!
//! Finding -- why not Debian's etcd 3.4.23 (`/usr/bin/etcd`): kube-apiserver v1.34.4 starts on
//! it and CRUD, CRDs with CEL rules, RBAC, TokenRequest and list+watch all work, but its etcd
//! feature check logs `RequestWatchProgress feature is not supported` (etcd 3.4 before 3.4.31
//! has no progress requests), and then every streaming-list watch (`sendInitialEvents=true`:
//! the WatchList feature, on by default in 1.34, what client-go informers and kube-runtime's
//! `watcher::Config::streaming_lists()` use) fails with "a watch stream was requested by the
//! client but the required storage feature RequestWatchProgress is disabled" (500), and
//! consistent lists bypass the watch cache. Seeds run etcd 3.5/3.6, so the fixture does too:
//! `tests/kube_apiserver.rs` fails on 3.4.23 (`ISTHMUS_ETCD=/usr/bin/etcd`) and passes on 3.6.16.
//! Debian's etcd stays what the proxy and lab tests migrate.
//!
//! Binaries: `<cache>/kubernetes-v1.34.4/kube-apiserver` ([`crate::cache`], outside any clone's
//! `target/`), overridable with `ISTHMUS_KUBE_APISERVER`. The upstream CRDs come from
//! `<cache>/upstream-crds/` (`scripts/upstream-crds.sh`). Logs and certificates live in a [`Scratch`] directory
//! (`ISTHMUS_KEEP_SCRATCH=1` keeps it).

use crate::flags::{ApiServerAuth, ApiServerFlags, CLUSTER_ISSUER};
use crate::{free_port, CertKey, Scratch, TestPki};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};
use std::fmt;
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub use crate::cache::{ETCD_VERSION, KUBE_VERSION};

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const ATTEMPTS: usize = 5;

/// A running etcd + kube-apiserver pair; both processes are killed on drop.
pub struct KubeApiServer {
    scratch: Scratch,
    etcd: Child,
    apiserver: Option<Child>,
    port: u16,
    etcd_url: String,
    version: String,
    startup: Duration,
    admin_kubeconfig: PathBuf,
    spawns: usize,
}

impl fmt::Debug for KubeApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeApiServer")
            .field("url", &self.url())
            .field("etcd", &self.etcd_url)
            .field("version", &self.version)
            .field("startup", &self.startup)
            .field("dir", &self.scratch.path())
            .finish()
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        if let Some(a) = self.apiserver.as_mut() {
            let _ = a.start_kill();
        }
        let _ = self.etcd.start_kill();
    }
}

fn kube_apiserver_binary() -> PathBuf {
    crate::cache::built(
        Some("ISTHMUS_KUBE_APISERVER"),
        crate::cache::kube_apiserver(),
        "scripts/build-kubernetes.sh",
    )
}

fn etcd_binary() -> PathBuf {
    crate::cache::built(
        Some("ISTHMUS_ETCD"),
        crate::cache::etcd(),
        "scripts/build-etcd.sh",
    )
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Spawns `cmd` (killed on drop) with its output appended to `log`.
fn spawn_logged(cmd: &mut Command, log: &Path) -> Child {
    let f = File::options().create(true).append(true).open(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"))
}

/// Polls `ready` every `every` until it says so (true) or `child` exits (false); panics with
/// `not_ready` and the tail of `log` after [`READY_TIMEOUT`].
async fn wait_ready<F, Fut>(
    not_ready: &str,
    child: &mut Child,
    log: &Path,
    every: Duration,
    mut ready: F,
) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if ready().await {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "{not_ready} after {READY_TIMEOUT:?}; {}:\n{}",
            log.display(),
            tail(log, 40)
        );
        tokio::time::sleep(every).await;
    }
}

fn bind_failed(log: &Path) -> bool {
    std::fs::read_to_string(log).is_ok_and(|t| t.contains("address already in use"))
}

/// Writes a kubeconfig (JSON, which is YAML) for `server` trusting `ca`, with `user` fields
/// (`client-certificate`/`client-key` paths, or `token`).
fn write_kubeconfig(path: &Path, server: &str, ca: &Path, user: Value) {
    let kc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testkit", "cluster": {
            "server": server,
            "certificate-authority": ca,
        }}],
        "users": [{"name": "testkit", "user": user}],
        "contexts": [{"name": "testkit", "context": {"cluster": "testkit", "user": "testkit"}}],
        "current-context": "testkit",
    });
    std::fs::write(path, serde_json::to_vec_pretty(&kc).unwrap()).unwrap();
}

/// A TokenRequest token (valid 24 h) for ServiceAccount `namespace/name`, asked with `client`:
/// what a pod of that ServiceAccount gets mounted. `None` if the answer has no status.
pub async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, kube::Error> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let tr = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = sas
        .create_token_request(name, &PostParams::default(), &tr)
        .await?;
    Ok(answer.status.map(|s| s.token))
}

/// A client from a kubeconfig file (such as [`KubeApiServer::admin_kubeconfig`] writes).
pub async fn client_from_kubeconfig(path: &Path) -> Client {
    // kube builds its rustls config with the process-default provider; make it ring's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", path.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    Client::try_from(config).unwrap()
}

/// Whether `GET /readyz` answers `ok` within 5 s.
pub async fn readyz(client: &Client) -> bool {
    let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
    // Bounded: a half-started server may accept a connection and answer late.
    tokio::time::timeout(Duration::from_secs(5), client.request_text(req))
        .await
        .is_ok_and(|r| r.is_ok_and(|t| t.trim() == "ok"))
}

impl KubeApiServer {
    /// etcd + kube-apiserver on OS-chosen loopback ports; ready (`GET /readyz` is `ok`) when it
    /// returns. Panics with the tail of the apiserver log if not ready within 60 s.
    pub async fn start() -> KubeApiServer {
        crate::tier::full_only("kube-apiserver (the one-time Kubernetes build)");
        let apiserver_bin = kube_apiserver_binary();
        let etcd_bin = etcd_binary();
        let scratch = Scratch::new("kube-apiserver");

        // PKI: one CA for serving, client certificates and (as the apiserver's client CA) admin.
        let pki = TestPki::new();
        let ca = pki.write_ca(scratch.path());
        let serving = pki.server_cert(&[
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "10.0.0.1",
        ]);
        serving.write(scratch.path(), "apiserver");
        let admin: CertKey = pki.client_cert_in_group("testkit-admin", "system:masters");
        let (admin_crt, admin_key) = admin.write(scratch.path(), "admin");
        let sa_key = rcgen::KeyPair::generate().unwrap();
        std::fs::write(scratch.join("sa.key"), sa_key.serialize_pem()).unwrap();
        std::fs::write(scratch.join("sa.pub"), sa_key.public_key_pem()).unwrap();

        let t0 = Instant::now();
        let (etcd, etcd_url) = start_etcd(&etcd_bin, &scratch).await;

        let admin_kubeconfig = scratch.join("admin.kubeconfig");
        let mut server = KubeApiServer {
            scratch,
            etcd,
            apiserver: None,
            port: 0,
            etcd_url,
            version: String::new(),
            startup: Duration::ZERO,
            admin_kubeconfig,
            spawns: 0,
        };
        for attempt in 1..=ATTEMPTS {
            server.port = free_port();
            write_kubeconfig(
                &server.admin_kubeconfig,
                &server.url(),
                &ca,
                json!({"client-certificate": admin_crt, "client-key": admin_key}),
            );
            match server.spawn_apiserver(&apiserver_bin).await {
                Ok(()) => break,
                Err(log) if attempt < ATTEMPTS && bind_failed(&log) => continue,
                Err(log) => panic!(
                    "kube-apiserver exited before it was ready; {}:\n{}",
                    log.display(),
                    tail(&log, 40)
                ),
            }
        }
        server.startup = t0.elapsed();
        let info = server.admin().await.apiserver_version().await.unwrap();
        server.version = info.git_version;
        server
    }

    fn apiserver_log(&self) -> PathBuf {
        self.scratch
            .join(&format!("kube-apiserver.{}.log", self.spawns))
    }

    fn apiserver_args(&self) -> Vec<String> {
        let f = |name: &str| self.scratch.join(name);
        ApiServerFlags {
            etcd_servers: self.etcd_url.clone(),
            address: IpAddr::from([127, 0, 0, 1]),
            port: self.port,
            cert_dir: f("certs"),
            serving: (f("apiserver.crt"), f("apiserver.key")),
            auth: ApiServerAuth::ClientCa(f("ca.crt")),
            issuer: CLUSTER_ISSUER.into(),
            service_account: (f("sa.pub"), f("sa.key")),
        }
        .args()
    }

    /// Spawns kube-apiserver on `self.port` and waits until it is ready. Err(log path) if the
    /// process exits first.
    async fn spawn_apiserver(&mut self, bin: &Path) -> Result<(), PathBuf> {
        self.spawns += 1;
        let log = self.apiserver_log();
        let child = spawn_logged(Command::new(bin).args(self.apiserver_args()), &log);
        self.apiserver = Some(child);
        let client = self.admin().await;
        let child = self.apiserver.as_mut().expect("spawned above");
        let every = Duration::from_millis(50);
        if wait_ready("kube-apiserver not ready", child, &log, every, || {
            readyz(&client)
        })
        .await
        {
            return Ok(());
        }
        self.apiserver = None;
        Err(log)
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The server's `gitVersion` from `/version` (`v1.34.4`).
    pub fn version(&self) -> String {
        self.version.clone()
    }

    /// From spawning etcd to kube-apiserver's `/readyz` answering `ok` (about 3-5 s on the
    /// 2-core CI machine).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The scratch directory (certificates, kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        self.scratch.path()
    }

    /// A client authenticated with the admin certificate (`O=system:masters`).
    pub async fn admin(&self) -> Client {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// A kubeconfig file for the admin (for spawning binaries).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.admin_kubeconfig.clone()
    }

    /// Creates the namespace and ServiceAccount if missing, returns a client authenticated with
    /// a TokenRequest token for it (so RBAC applies exactly as in a cluster).
    pub async fn service_account(&self, namespace: &str, name: &str) -> Client {
        let path = self.service_account_kubeconfig(namespace, name).await;
        client_from_kubeconfig(&path).await
    }

    /// Like [`service_account`](Self::service_account), but returns a kubeconfig file (with the
    /// token) for spawning binaries.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let admin = self.admin().await;
        self.apply_values(
            &admin,
            vec![
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": name, "namespace": namespace}}),
            ],
        )
        .await;
        let token = service_account_token(&admin, namespace, name)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
            .unwrap_or_else(|| panic!("TokenRequest for {namespace}/{name} has no status"));
        let path = self
            .scratch
            .join(&format!("sa-{namespace}-{name}.kubeconfig"));
        write_kubeconfig(
            &path,
            &self.url(),
            &self.scratch.join("ca.crt"),
            json!({ "token": token }),
        );
        path
    }

    /// Applies every document of a (multi-document) YAML file with server-side apply (field
    /// manager "testkit", force, `fieldValidation=Strict`), as admin; for
    /// CustomResourceDefinitions waits until Established. Returns the applied objects as
    /// `Kind/namespace/name` (`Kind/name` for cluster-scoped ones).
    pub async fn apply_yaml(&self, path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        self.apply_yaml_str(&text).await
    }

    /// [`apply_yaml`](Self::apply_yaml) on a string.
    pub async fn apply_yaml_str(&self, yaml: &str) -> Vec<String> {
        crate::apply::try_apply_yaml(&self.admin().await, yaml, "testkit")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn apply_values(&self, client: &Client, docs: Vec<Value>) -> Vec<String> {
        let mut applied = Vec::new();
        for doc in docs {
            applied.push(apply_one(client, doc).await);
        }
        applied
    }

    /// The pinned upstream CRDs from `target/upstream-crds/`: etcd-druid's `Etcd` and
    /// Gardener's `DNSRecord`.
    pub fn upstream_crd_paths() -> Vec<PathBuf> {
        crate::cache::upstream_crd_paths(&[
            "druid.gardener.cloud_etcds.yaml",
            "extensions.gardener.cloud_dnsrecords.yaml",
        ])
    }

    /// Stops (SIGKILL) and restarts kube-apiserver on the same port and etcd data (for "API
    /// server restarted mid-step" tests); waits until it is ready again.
    pub async fn restart(&mut self) {
        if let Some(mut a) = self.apiserver.take() {
            let _ = a.kill().await;
        }
        let bin = kube_apiserver_binary();
        if let Err(log) = self.spawn_apiserver(&bin).await {
            panic!(
                "kube-apiserver exited after restart; {}:\n{}",
                log.display(),
                tail(&log, 40)
            );
        }
    }
}

/// etcd on free loopback ports (client and peer), data in the scratch dir; retried with new
/// ports when a port was taken in between.
async fn start_etcd(bin: &Path, scratch: &Scratch) -> (Child, String) {
    for attempt in 1..=ATTEMPTS {
        let (client_port, peer_port) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = scratch.join(&format!("etcd.{attempt}.log"));
        let data = scratch.join(&format!("etcd.{attempt}"));
        let mut child = spawn_logged(
            Command::new(bin)
                .arg("--name=testkit")
                .arg(format!("--data-dir={}", data.display()))
                .arg(format!("--listen-client-urls={url}"))
                .arg(format!("--advertise-client-urls={url}"))
                .arg(format!("--listen-peer-urls={peer}"))
                .arg(format!("--initial-advertise-peer-urls={peer}"))
                .arg(format!("--initial-cluster=testkit={peer}"))
                .arg("--listen-metrics-urls="),
            &log,
        );
        let addr = format!("127.0.0.1:{client_port}").parse().unwrap();
        let healthy = || async {
            matches!(crate::http_get(addr, "/health").await, Ok((200, body)) if body.contains("true"))
        };
        let every = Duration::from_millis(20);
        if wait_ready("etcd not healthy", &mut child, &log, every, healthy).await {
            return (child, url);
        }
        if attempt == ATTEMPTS || !bind_failed(&log) {
            panic!("etcd exited; {}:\n{}", log.display(), tail(&log, 40));
        }
    }
    unreachable!()
}

/// Server-side applies one object (field manager "testkit"); for a CRD, waits until it is
/// Established. Returns `Kind/namespace/name` or `Kind/name`.
async fn apply_one(client: &Client, doc: Value) -> String {
    crate::apply::try_apply(client, &doc, "testkit")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A minimal valid etcd-druid `Etcd` (druid.gardener.cloud/v1alpha1) under the pinned CRD:
/// the required `labels`, `backup`, `etcd`, `replicas`, with TLS for peer and client URLs (so
/// `https://` peer URLs pass the CEL rules).
pub fn minimal_etcd(name: &str, namespace: &str, replicas: i32) -> Value {
    let mut spec = etcd_spec(name);
    spec["replicas"] = json!(replicas);
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// [`minimal_etcd`]'s spec without `replicas`: what gardenlet templates an `Etcd` from. Its
/// client TLS names Gardener's Secrets ([`crate::gardener`]).
pub fn etcd_spec(name: &str) -> Value {
    use crate::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
    json!({
        "labels": {"app": "etcd-statefulset", "name": name},
        "backup": {},
        "etcd": {
            "peerUrlTls": {
                "tlsCASecretRef": {"name": format!("{name}-peer-ca"), "dataKey": "bundle.crt"},
                "serverTLSSecretRef": {"name": format!("{name}-peer-server")},
            },
            "clientUrlTls": {
                "tlsCASecretRef": {"name": ETCD_CA_BUNDLE_SECRET, "dataKey": "bundle.crt"},
                "serverTLSSecretRef": {"name": format!("{name}-server")},
                "clientTLSSecretRef": {"name": ETCD_CLIENT_SECRET},
            },
        },
    })
}
