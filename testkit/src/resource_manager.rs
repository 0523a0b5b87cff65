//! The real gardener-resource-manager (Gardener v1.149.3, built from its Go module by
//! `scripts/build-go-tool.sh` through the wrapper module `scripts/gardener-resource-manager/`)
//! as a seed runs it, against a [`KubeApiServer`] without a node: its ManagedResource
//! controller (class `seed`), health controller, garbage collector and NetworkPolicy
//! controller, configured as gardenlet configures the seed's instance
//! (`pkg/component/shared/resourcemanager.go` `runtimeGardenerResourceManagerDefaultValues`,
//! `pkg/component/gardener/resourcemanager` `ensureConfigMap`).
//!
//! Of its webhooks, the one an extension's chart relies on: high-availability-config (the
//! replicas and spread of Deployments labelled `high-availability-config.resources.gardener.cloud/type`
//! in namespaces labelled `…/consider`), registered with the API server as the seed's
//! MutatingWebhookConfiguration registers it (`NewHighAvailabilityConfigMutatingWebhook` and
//! `buildWebhookNamespaceSelector` of `pkg/component/gardener/resourcemanager`), by URL.
//!
//! Differences from a seed, each because there is no pod here: a node process (with a token of
//! its ServiceAccount, bound to cluster-admin: the seed's ClusterRole is nearly as wide), no
//! leader election, the other webhooks off (projected tokens, seccomp profiles and the like
//! act on pods, which never run here), the webhook reached at 127.0.0.1 by URL instead of
//! its Service. Its serving certificate comes from rcgen. Its log is kept
//! ([`ResourceManager::lines`]).

mod ha_webhook;

use crate::{free_port, KubeApiServer, Logged, Scratch, TestPki};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The pinned version (`scripts/gardener-resource-manager/go.mod`).
pub const VERSION: &str = "v1.149.3";

/// The binary, built once per machine (idempotent script; `ISTHMUS_GRM` overrides it).
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("ISTHMUS_GRM") {
        return PathBuf::from(p);
    }
    let script = root().join("scripts/build-go-tool.sh");
    crate::tools::run_ok(Command::new(script).args([
        "gardener-resource-manager",
        VERSION,
        "github.com/gardener/gardener/cmd/gardener-resource-manager",
        "--version",
    ]));
    crate::cache::dir()
        .join(format!("gardener-resource-manager-{VERSION}"))
        .join("gardener-resource-manager")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A file of the pinned Gardener module (in the Go module cache, where the build put it).
pub fn gardener_file(path: &str) -> PathBuf {
    let dir = crate::tools::run_ok(
        Command::new("go")
            .args([
                "list",
                "-mod=readonly",
                "-m",
                "-f",
                "{{.Dir}}",
                "github.com/gardener/gardener",
            ])
            .env("GOFLAGS", "")
            .current_dir(root().join("scripts/gardener-resource-manager")),
    );
    Path::new(dir.trim()).join(path)
}

/// A running gardener-resource-manager; killed on drop.
#[derive(Debug)]
pub struct ResourceManager {
    process: Logged,
    _scratch: Scratch,
}

impl ResourceManager {
    /// Installs its `ManagedResource` CRD (from the module) into `server`, starts it for seed
    /// `cluster_id` and waits until `/readyz` answers 200.
    pub async fn start(server: &KubeApiServer, cluster_id: &str) -> ResourceManager {
        let bin = binary();
        server
            .apply_yaml(&gardener_file(
                "example/seed-crds/10-crd-resources.gardener.cloud_managedresources.yaml",
            ))
            .await;
        // A seed's instance authenticates as its ServiceAccount, bound to a ClusterRole nearly
        // as wide as cluster-admin (and Gardener's client refuses certificate files).
        server
            .apply_yaml_str(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                 metadata: {name: gardener-resource-manager}\n\
                 roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n\
                 subjects: [{kind: ServiceAccount, name: gardener-resource-manager, namespace: garden}]\n",
            )
            .await;
        let kubeconfig = server
            .service_account_kubeconfig("garden", "gardener-resource-manager")
            .await;
        let scratch = Scratch::new("grm");
        std::fs::create_dir_all(scratch.join("tls")).unwrap();
        let pki = TestPki::new();
        pki.server_cert(&["127.0.0.1", "gardener-resource-manager"])
            .write(&scratch.join("tls"), "tls");
        for _ in 0..5 {
            let (health, webhooks) = (free_port(), free_port());
            let config = scratch.join("config.yaml");
            std::fs::write(
                &config,
                config_yaml(&kubeconfig, &scratch, cluster_id, health, webhooks),
            )
            .unwrap();
            // It logs to stderr, but prints the error it exits with to stdout.
            let stdout = std::fs::File::create(scratch.join("stdout")).unwrap();
            let mut cmd = Command::new(&bin);
            cmd.arg("--config").arg(&config).stdout(stdout);
            let mut process = Logged::spawn(cmd);
            let addr: SocketAddr = ([127, 0, 0, 1], health).into();
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if let Ok((200, _)) = crate::http_get(addr, "/readyz").await {
                    server
                        .apply_yaml_str(&ha_webhook::registration(webhooks, &pki.ca_pem()))
                        .await;
                    ha_webhook::answers(server).await;
                    return ResourceManager {
                        process,
                        _scratch: scratch,
                    };
                }
                if process.exited() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "gardener-resource-manager not ready after 120 s:\n{}",
                    log(&process, &scratch)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let log = log(&process, &scratch);
            assert!(
                log.contains("address already in use"),
                "gardener-resource-manager exited:\n{log}"
            );
        }
        panic!("gardener-resource-manager: no free ports in 5 attempts");
    }

    /// Its log lines (JSON).
    pub fn lines(&self) -> Vec<String> {
        self.process.lines()
    }
}

/// Its log and what it printed on stdout.
fn log(process: &Logged, scratch: &Scratch) -> String {
    let stdout = std::fs::read_to_string(scratch.join("stdout")).unwrap_or_default();
    format!("{}\n{stdout}", process.lines().join("\n"))
}

/// The seed instance's configuration (see the module doc) with loopback ports.
fn config_yaml(
    kubeconfig: &Path,
    scratch: &Scratch,
    cluster_id: &str,
    health: u16,
    webhooks: u16,
) -> String {
    let metrics = free_port();
    let tls = scratch.join("tls");
    format!(
        r#"apiVersion: resourcemanager.config.gardener.cloud/v1alpha1
kind: ResourceManagerConfiguration
sourceClientConnection:
  kubeconfig: {kubeconfig}
  qps: 100
  burst: 130
# A seed's instance leaves the target unset, which defaults to the pod's in-cluster
# configuration: the same cluster, named here.
targetClientConnection:
  kubeconfig: {kubeconfig}
  qps: 100
  burst: 130
leaderElection:
  leaderElect: false
  resourceLock: leases
  resourceName: gardener-resource-manager
  resourceNamespace: garden
server:
  webhooks:
    bindAddress: 127.0.0.1
    port: {webhooks}
    tls:
      serverCertDir: {tls}
  healthProbes:
    bindAddress: 127.0.0.1
    port: {health}
  metrics:
    bindAddress: 127.0.0.1
    port: {metrics}
logLevel: info
logFormat: json
webhooks:
  highAvailabilityConfig:
    enabled: true
controllers:
  clusterID: {cluster_id}
  resourceClass: seed
  garbageCollector:
    enabled: true
    syncPeriod: 12h
  health:
    syncPeriod: 1m
  managedResource:
    concurrentSyncs: 20
    syncPeriod: 1h
  networkPolicy:
    enabled: true
    concurrentSyncs: 20
    namespaceSelectors:
      - matchLabels: {{gardener.cloud/role: shoot}}
      - matchLabels: {{gardener.cloud/role: extension}}
      - matchLabels: {{gardener.cloud/role: istio-system}}
      - matchLabels: {{gardener.cloud/role: istio-ingress}}
      - matchExpressions: [{{key: handler.exposureclass.gardener.cloud/name, operator: Exists}}]
      - matchLabels: {{kubernetes.io/metadata.name: garden}}
    ingressControllerSelector:
      namespace: garden
      podSelector:
        matchLabels: {{app: nginx-ingress, component: controller}}
"#,
        kubeconfig = kubeconfig.display(),
        tls = tls.display(),
    )
}
