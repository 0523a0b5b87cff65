//! The pinned command-line tools of the chart and monitoring tests, as `scripts/build-helm.sh`
//! and `scripts/build-prometheus.sh` leave them in the cache (see [`crate::cache`]), and the
//! seed CRDs Gardener installs that the chart's objects need (`scripts/upstream-crds.sh`).

use std::path::PathBuf;
use std::process::Command;

/// The pinned helm (built from `helm.sh/helm/v4`; the library Gardener v1.149.3 renders with).
pub const HELM_VERSION: &str = "v4.2.3";
/// The pinned Prometheus (Go module `github.com/prometheus/prometheus` v0.310.0).
pub const PROMETHEUS_VERSION: &str = "v3.10.0";

fn cached(dir: &str, name: &str, script: &str) -> PathBuf {
    crate::tier::full_only(&format!("{name} (the one-time build {script})"));
    crate::cache::built(None, crate::cache::dir().join(dir).join(name), script)
}

/// `helm`, overridable with `ISTHMUS_HELM`.
pub fn helm() -> PathBuf {
    crate::tier::full_only("helm (the one-time build scripts/build-helm.sh)");
    if let Some(p) = std::env::var_os("ISTHMUS_HELM") {
        return PathBuf::from(p);
    }
    cached(
        &format!("helm-{HELM_VERSION}"),
        "helm",
        "scripts/build-helm.sh",
    )
}

/// `prometheus`.
pub fn prometheus() -> PathBuf {
    cached(
        &format!("prometheus-{PROMETHEUS_VERSION}"),
        "prometheus",
        "scripts/build-prometheus.sh",
    )
}

/// `promtool`.
pub fn promtool() -> PathBuf {
    cached(
        &format!("prometheus-{PROMETHEUS_VERSION}"),
        "promtool",
        "scripts/build-prometheus.sh",
    )
}

/// Runs a command; panics with its output unless it exits 0. Returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The CRDs of a Gardener seed that the chart's objects use (from Gardener v1.149.3):
/// `VerticalPodAutoscaler`, `PodMonitor`, `PrometheusRule`, fluent-operator's `ClusterParser`
/// and `ClusterFilter`; and the garden's `Extension`.
pub fn seed_crd_paths() -> Vec<PathBuf> {
    crate::cache::upstream_crd_paths(&[
        "autoscaling.k8s.io_verticalpodautoscalers.yaml",
        "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
        // The shoot Prometheus' ServiceMonitor of a tunnel server (deploy/examples/tunnel-server.yaml).
        "monitoring.coreos.com_servicemonitors.yaml",
        "fluentbit.fluent.io_clusterparsers.yaml",
        "fluentbit.fluent.io_clusterfilters.yaml",
        "operator.gardener.cloud_extensions.yaml",
    ])
}

/// The objects of a multi-document YAML text (empty documents dropped), as JSON values.
pub fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("parsing YAML: {e}"));
    docs.into_iter().filter(|d| d.is_object()).collect()
}
