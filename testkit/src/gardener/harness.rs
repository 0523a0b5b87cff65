//! Gardener's own etcd deploy for tests: runs `gardener-etcd` (`scripts/gardener-etcd/`: Gardener
//! v1.149.3's `pkg/component/etcd/etcd` `Deploy` with its secrets manager, as gardenlet deploys
//! an HA shoot's `etcd-main`, and Gardener's health checks as oracles) against an API server,
//! and hands back its JSON answers.
//!
//! The binary is built by `scripts/build-gardener-etcd.sh` into the cache
//! (`<cache>/gardener-etcd-v1.149.3/`); [`binary`] runs that script once per process, which
//! returns at once when the cached binary was built from the current source (the harness'
//! source lives in this repository, so an edit must not leave a stale binary behind).
//! `ISTHMUS_GARDENER_ETCD` overrides the binary (the script is then not run).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use tokio::process::Command;

/// The Gardener the harness is built from (`scripts/gardener-etcd/go.mod`).
pub const GARDENER_VERSION: &str = "v1.149.3";

/// The harness binary, built or found fresh by `scripts/build-gardener-etcd.sh` (once per
/// process); panics with the script's output when it fails.
pub fn binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("ISTHMUS_GARDENER_ETCD") {
            return PathBuf::from(p);
        }
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-gardener-etcd.sh");
        crate::tools::run_ok(&mut std::process::Command::new(&script));
        crate::cache::dir()
            .join(format!("gardener-etcd-{GARDENER_VERSION}"))
            .join("gardener-etcd")
    })
    .clone()
}

/// The CRDs whose objects `Deploy` writes (`scripts/upstream-crds.sh`): etcd-druid's `Etcd`
/// (api v0.38.1), and from Gardener's seed CRDs `VerticalPodAutoscaler`, `ServiceMonitor`,
/// `PrometheusRule`.
pub fn crd_paths() -> Vec<PathBuf> {
    let dir = crate::cache::upstream_crds();
    [
        "druid.gardener.cloud_etcds.yaml",
        "autoscaling.k8s.io_verticalpodautoscalers.yaml",
        "monitoring.coreos.com_servicemonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
    ]
    .iter()
    .map(|f| {
        let p = dir.join(f);
        assert!(
            p.is_file(),
            "{} is missing: run scripts/upstream-crds.sh",
            p.display()
        );
        p
    })
    .collect()
}

/// One answer of the harness: its exit code (0 done and healthy, 1 a Gardener oracle or step
/// said no, 2 any other error), its JSON document and its log (stderr).
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: i32,
    pub json: Value,
    pub log: String,
}

/// The harness pointed at one shoot control-plane namespace of one API server.
#[derive(Debug, Clone)]
pub struct GardenerEtcd {
    kubeconfig: PathBuf,
    namespace: String,
}

impl GardenerEtcd {
    pub fn new(kubeconfig: &Path, namespace: &str) -> GardenerEtcd {
        GardenerEtcd {
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: namespace.to_owned(),
        }
    }

    /// `gardener-etcd COMMAND --kubeconfig K --namespace N ARGS...`.
    pub async fn run(&self, command: &str, args: &[&str]) -> Answer {
        let bin = binary();
        let out = Command::new(&bin)
            .arg(command)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "gardener-etcd {command}: no JSON on stdout ({e}):\n{}\n{log}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        Answer {
            code: out.status.code().unwrap_or(-1),
            json,
            log,
        }
    }

    async fn ok(&self, command: &str, args: &[&str]) -> Value {
        let a = self.run(command, args).await;
        assert_eq!(
            a.code, 0,
            "gardener-etcd {command} {args:?}: {:#}\n{}",
            a.json, a.log
        );
        a.json
    }

    /// gardenlet's deploy of etcd-main (creates or updates); panics unless it succeeds.
    pub async fn deploy(&self, args: &[&str]) -> Value {
        self.ok("deploy", args).await
    }

    /// The same deploy on an `Etcd` that must exist: a later shoot reconcile.
    pub async fn redeploy(&self, args: &[&str]) -> Value {
        self.ok("redeploy", args).await
    }

    /// Gardener's `CheckEtcdObject` and `health.CheckEtcd` on the live `Etcd`, once; with the
    /// waiter's timestamp guard when `timestamp` is given.
    pub async fn check(&self, timestamp: Option<&str>) -> Answer {
        match timestamp {
            Some(t) => self.run("check", &["--timestamp", t]).await,
            None => self.run("check", &[]).await,
        }
    }

    /// Gardener's waiter (`Wait`: `CheckEtcdObject` every `interval` until `timeout`), with
    /// its timestamp guard when `timestamp` is given.
    pub async fn wait(&self, timestamp: Option<&str>, interval: &str, timeout: &str) -> Answer {
        let mut args = vec!["--interval", interval, "--timeout", timeout];
        if let Some(t) = timestamp {
            args.extend(["--timestamp", t]);
        }
        self.run("wait", &args).await
    }

    /// gardenlet's `Scale(replicas)`, refused (code 1) when the live timestamp is not
    /// `expect_timestamp` or the reconcile request is still pending.
    pub async fn scale(&self, replicas: i32, expect_timestamp: Option<&str>) -> Answer {
        let r = replicas.to_string();
        let mut args = vec!["--replicas", r.as_str()];
        if let Some(t) = expect_timestamp {
            args.extend(["--expect-timestamp", t]);
        }
        self.run("scale", &args).await
    }
}
