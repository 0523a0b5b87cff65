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
/// events) in the file at `path` that name the webhook, etcd or a timeout: where a slow or
/// failed request's time went, which the audit event does not say (`api::audit`).
pub fn troubles(path: &Path, max: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with('E') || l.starts_with('W'))
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            ["webhook", "etcd", "timeout", "deadline"]
                .iter()
                .any(|w| l.contains(w))
        })
        .take(max)
        .map(|l| l.chars().take(400).collect())
        .collect()
}

impl Drop for Logs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
