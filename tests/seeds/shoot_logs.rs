//! A shoot kube-apiserver pod's output, kept while its pod runs (`kubectl logs -f` into a
//! file), for its audit events: when the server received and answered each of the load's
//! requests (`lab/src/api/audit.rs`).

use super::node::{Node, POLL};
use super::shoot_api::NAME;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// kube-apiserver's output as `kubectl logs -f` streams it into a file until the container
/// ends: klog's lines and the audit events (`--audit-log-path=-`, the lab's policy), which
/// say when the server received and answered each of the load's requests (`api::audit`).
pub struct Logs {
    child: Child,
    path: PathBuf,
}

impl Logs {
    pub fn follow(seed: &Node, ns: &str, path: &Path) -> Self {
        let out = std::fs::File::create(path).unwrap();
        let child = seed
            .kubectl_command(&["-n", ns, "logs", "-f", &format!("deploy/{NAME}")])
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            path: path.to_path_buf(),
        }
    }

    /// The file, once the stream has ended (the pod is gone) or after `timeout` (it is cut).
    pub fn finish(mut self, timeout: Duration) -> PathBuf {
        let deadline = Instant::now() + timeout;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        self.path.clone()
    }
}

/// At most `max` of kube-apiserver's own error and warning lines (klog's `E`/`W`, not the audit
/// events) in the file at `path`, logged while the load ran (`from_unix_ms`, `secs` long; the
/// pod's clock is UTC), that name the webhook, etcd or a timeout: where a slow or failed
/// request's time went, which the audit event does not say (`api::audit`). Its start's
/// failed connections to etcd, before the load, are not in it.
pub fn troubles(path: &Path, from_unix_ms: f64, secs: f64, max: usize) -> Vec<String> {
    const DAY: f64 = 86_400.0;
    let start = (from_unix_ms / 1000.0).rem_euclid(DAY);
    // `W1130 07:13:28.893553 …`: the time of day from the 7th character.
    let during = |l: &str| {
        let t = l.get(6..21).unwrap_or_default();
        let mut hms = t.split(':').map(|f| f.parse::<f64>().ok());
        match (
            hms.next().flatten(),
            hms.next().flatten(),
            hms.next().flatten(),
        ) {
            (Some(h), Some(m), Some(s)) => {
                (h * 3600.0 + m * 60.0 + s - start).rem_euclid(DAY) <= secs
            }
            _ => false,
        }
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with('E') || l.starts_with('W'))
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            ["webhook", "etcd", "timeout", "deadline"]
                .iter()
                .any(|w| l.contains(w))
        })
        .filter(|l| during(l))
        .take(max)
        .map(|l| l.chars().take(400).collect())
        .collect()
}

#[test]
fn troubles_are_the_loads_own() {
    let dir = isthmus_testkit::Scratch::new("seeds-troubles");
    let path = dir.join("log");
    std::fs::write(
        &path,
        "W1130 07:13:28.893553       1 logging.go:55] etcd-main-client:2379 failed\n\
         {\"kind\":\"Event\",\"etcd\":1}\n\
         E1130 07:20:01.000000       1 dispatcher.go:214] failed calling webhook: context deadline exceeded\n\
         I1130 07:20:02.000000       1 a.go:1] etcd fine\n\
         E1130 07:40:00.000000       1 a.go:1] etcd after the load\n",
    )
    .unwrap();
    // The load: 07:15:00 UTC on 2026-11-30, 20 minutes.
    let from = 1_796_022_900_000.0;
    let lines = troubles(&path, from, 1200.0, 10);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("failed calling webhook"));
}

impl Drop for Logs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
