//! Gardener's own etcd deploy for tests: runs `gardener-etcd`
//! (`scripts/gardener-harness/gardener-etcd/`: Gardener v1.149.3's `pkg/component/etcd/etcd`
//! `Deploy` with its secrets manager, as gardenlet deploys an HA shoot's `etcd-main`, and
//! Gardener's health checks as oracles) against an API server, and hands back its JSON answers.
//!
//! The binary is built by `scripts/build-gardener-harness.sh gardener-etcd` into the cache
//! (`<cache>/gardener-harness-v1.149.3/`); [`binary`] runs that script once per process, which
//! returns at once when the cached binary was built from the current source (the harness'
//! source lives in this repository, so an edit must not leave a stale binary behind).
//! `ISTHMUS_GARDENER_ETCD` overrides the binary (the script is then not run).

use crate::go_harness::Harness;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub use crate::go_harness::{Answer, GARDENER_VERSION};

const HARNESS: Harness = Harness {
    name: "gardener-etcd",
    env: "ISTHMUS_GARDENER_ETCD",
};

/// The harness binary, built or found fresh by `scripts/build-gardener-harness.sh
/// gardener-etcd` (once per process); panics with the script's output when it fails.
pub fn binary() -> PathBuf {
    HARNESS.binary()
}

/// The CRDs whose objects `Deploy` writes (`scripts/upstream-crds.sh`): etcd-druid's `Etcd`
/// (api v0.38.1), and from Gardener's seed CRDs `VerticalPodAutoscaler`, `ServiceMonitor`,
/// `PrometheusRule`.
pub fn crd_paths() -> Vec<PathBuf> {
    crate::cache::upstream_crd_paths(&[
        "druid.gardener.cloud_etcds.yaml",
        "autoscaling.k8s.io_verticalpodautoscalers.yaml",
        "monitoring.coreos.com_servicemonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
    ])
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
        HARNESS
            .run(command, &self.kubeconfig, self.scope(), args)
            .await
    }

    async fn ok(&self, command: &str, args: &[&str]) -> Value {
        HARNESS
            .ok(command, &self.kubeconfig, self.scope(), args)
            .await
    }

    fn scope(&self) -> [&str; 2] {
        ["--namespace", &self.namespace]
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
