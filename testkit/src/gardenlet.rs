//! gardenlet's install path for tests: runs `gardenlet-install`
//! (`scripts/gardener-harness/gardenlet-install/`: Gardener v1.149.3's ControllerInstallation
//! reconciler for a seed: the chart rendered with
//! `pkg/chartrenderer` into `extension-<name>-<random>`, handed to gardener-resource-manager as
//! a `ManagedResource` of class `seed` in `garden`; its deletion path; the care controller's
//! reading of the result) against an API server, and hands back its JSON answers.
//!
//! The binary is built by `scripts/build-gardener-harness.sh gardenlet-install` into the cache
//! (`<cache>/gardener-harness-v1.149.3/`); [`binary`] runs that script once per process, which
//! returns at once when the cached binary was built from the current source.
//! `ISTHMUS_GARDENLET_INSTALL` overrides the binary (the script is then not run).

use crate::go_harness::Harness;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The Gardener the harness (and the resource manager) is built from.
pub use crate::go_harness::GARDENER_VERSION;

pub use crate::go_harness::Answer;

const HARNESS: Harness = Harness {
    name: "gardenlet-install",
    env: "ISTHMUS_GARDENLET_INSTALL",
};

/// The harness binary, built or found fresh by `scripts/build-gardener-harness.sh
/// gardenlet-install` (once per process); panics with the script's output when it fails.
pub fn binary() -> PathBuf {
    HARNESS.binary()
}

/// The harness pointed at one seed cluster and one ControllerRegistration name.
#[derive(Debug, Clone)]
pub struct GardenletInstall {
    kubeconfig: PathBuf,
    name: String,
}

impl GardenletInstall {
    pub fn new(kubeconfig: &Path, name: &str) -> GardenletInstall {
        GardenletInstall {
            kubeconfig: kubeconfig.to_owned(),
            name: name.to_owned(),
        }
    }

    /// Runs `gardenlet-install CMD --kubeconfig K --name N ARGS…`.
    pub async fn run(&self, cmd: &str, args: &[&str]) -> Answer {
        HARNESS
            .run(cmd, &self.kubeconfig, ["--name", &self.name], args)
            .await
    }

    /// `install --chart CHART --values V…`; panics unless it exits 0.
    pub async fn install(&self, chart: &Path, values: &[PathBuf]) -> Value {
        let mut args = vec!["--chart".to_owned(), chart.display().to_string()];
        for v in values {
            args.extend(["--values".to_owned(), v.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ok("install", &args).await
    }

    /// `uninstall`, looking every `interval` (gardenlet requeues every 5 s); panics unless it
    /// exits 0 (the ManagedResource and the namespace gone within `timeout`).
    pub async fn uninstall(&self, interval: Duration, timeout: Duration) -> Value {
        let (i, t) = (format!("{interval:?}"), format!("{timeout:?}"));
        self.ok("uninstall", &["--interval", &i, "--timeout", &t])
            .await
    }

    /// `status`: the care controller's conditions (exit 0 ready, 1 not).
    pub async fn status(&self) -> Answer {
        let a = self.run("status", &[]).await;
        assert!(
            a.code == 0 || a.code == 1,
            "gardenlet-install status: {a:?}"
        );
        a
    }

    async fn ok(&self, cmd: &str, args: &[&str]) -> Value {
        HARNESS
            .ok(cmd, &self.kubeconfig, ["--name", &self.name], args)
            .await
    }
}

/// One reading of `status` during a rollout: the ControllerInstallation's conditions as
/// gardenlet's care controller sets them, and whether the Seed's extensions check would count
/// the installation ready (what keeps `ExtensionsReady` True).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub at: Duration,
    pub healthy: bool,
    pub progressing: bool,
    pub ready: bool,
}

/// Reads `status` until `done()` says the rollout is over (then once more) or `timeout`; the
/// readings in order. For the node test: start it, roll the DaemonSet, and hand the readings
/// to [`not_ready_window`].
pub async fn watch_status<F, Fut>(
    h: &GardenletInstall,
    timeout: Duration,
    mut done: F,
) -> Vec<Sample>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let (start, mut samples) = (Instant::now(), Vec::new());
    loop {
        let over = done().await;
        let a = h.status().await;
        let c = &a.json["conditions"];
        samples.push(Sample {
            at: start.elapsed(),
            healthy: c["Healthy"]["status"] == "True",
            progressing: c["Progressing"]["status"] == "True",
            ready: a.json["extensionReady"] == true,
        });
        if over {
            return samples;
        }
        assert!(
            start.elapsed() < timeout,
            "rollout not over after {timeout:?}: {samples:?}"
        );
    }
}

/// From the first reading that is not ready to the first ready one after it: how long the
/// Seed's `ExtensionsReady` would not be True because of this installation. `None` if every
/// reading was ready; panics if the last one is not (the rollout did not settle).
pub fn not_ready_window(samples: &[Sample]) -> Option<Duration> {
    let last = samples.last().expect("no readings");
    assert!(
        last.ready,
        "the installation is not ready at the end: {samples:?}"
    );
    let first = samples.iter().position(|s| !s.ready)?;
    let back = samples[first..].iter().find(|s| s.ready)?;
    Some(back.at - samples[first].at)
}

/// What the node test asserts about a rollout's readings: the resource manager reported it
/// (`Progressing` True at least once, so the installation was not ready), and it settled
/// (ready at the end). Returns the not-ready window.
pub fn assert_rollout_reported(samples: &[Sample]) -> Duration {
    assert!(
        samples.iter().any(|s| s.progressing),
        "the ManagedResource never reported the rollout as Progressing: {samples:?}"
    );
    not_ready_window(samples).expect("Progressing implies not ready")
}

/// The example `Extension`'s `spec.deployment.extension.values`
/// (`charts/isthmus/examples/extension.yaml`): what gardener-operator puts into the
/// ControllerDeployment, so what gardenlet renders the chart with besides its injected values.
pub fn example_extension_values() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/isthmus/examples/extension.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    crate::tools::yaml_docs(&text)[0]["spec"]["deployment"]["extension"]["values"].clone()
}

/// How many waves a DaemonSet rollout with `maxSurge` (an integer or a percentage, as the
/// chart renders it) and `maxUnavailable: 0` takes on `nodes` nodes: the DaemonSet controller
/// scales a percentage up (`util.SurgeCount`: `GetScaledValueFromIntOrPercent(…, true)`) and
/// swaps that many nodes at once, each wave a new pod started and Ready.
pub fn surge_waves(nodes: u64, max_surge: &str) -> u64 {
    let surge = match max_surge.strip_suffix('%') {
        Some(p) => {
            let p: u64 = p
                .parse()
                .unwrap_or_else(|e| panic!("maxSurge {max_surge}: {e}"));
            (nodes * p).div_ceil(100)
        }
        None => max_surge
            .parse()
            .unwrap_or_else(|e| panic!("maxSurge {max_surge}: {e}")),
    };
    assert!(
        surge > 0,
        "maxSurge {max_surge} on {nodes} nodes swaps none"
    );
    nodes.div_ceil(surge)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ms: u64, progressing: bool) -> Sample {
        Sample {
            at: Duration::from_millis(ms),
            healthy: true,
            progressing,
            ready: !progressing,
        }
    }

    #[test]
    fn the_window_runs_from_the_first_unready_reading_to_the_first_ready_one_after() {
        let r = [
            s(0, false),
            s(100, true),
            s(200, true),
            s(900, false),
            s(1000, false),
        ];
        assert_eq!(assert_rollout_reported(&r), Duration::from_millis(800));
        assert_eq!(not_ready_window(&[s(0, false)]), None);
    }

    #[test]
    fn surge_waves_scale_a_percentage_up() {
        assert_eq!(surge_waves(50, "25%"), 4); // 13 at once
        assert_eq!(surge_waves(50, "1"), 50);
        assert_eq!(surge_waves(1, "25%"), 1);
        assert_eq!(surge_waves(3, "25%"), 3);
        assert_eq!(surge_waves(4, "25%"), 4);
    }

    #[test]
    #[should_panic(expected = "not ready at the end")]
    fn a_rollout_that_does_not_settle_fails() {
        not_ready_window(&[s(0, false), s(100, true)]);
    }
}
