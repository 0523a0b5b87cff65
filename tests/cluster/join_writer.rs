//! The client that writes through a join (`join.rs`, `join_expose.rs`): one key after another,
//! each a fresh `etcdctl put`, and what the cluster holds of them afterwards.

use super::node::{Node, ROOT};
use isthmus_testkit::Scratch;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The writer's keys as the cluster holds them.
pub(super) fn keys(node: &Node, endpoint: &str) -> std::collections::BTreeSet<u64> {
    keys_with(node, endpoint, &[])
}

/// [`keys`] with etcdctl's TLS flags.
pub(super) fn keys_with(
    node: &Node,
    endpoint: &str,
    flags: &[String],
) -> std::collections::BTreeSet<u64> {
    let mut args = vec!["node", "etcdctl"];
    args.extend(flags.iter().map(String::as_str));
    args.extend([
        "--endpoints",
        endpoint,
        "--command-timeout",
        "30s",
        "get",
        "--prefix",
        "isthmus-writer/",
        "--keys-only",
    ]);
    let out = node.script(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("isthmus-writer/")?.parse().ok())
        .collect()
}

/// A client writing one key after another through `endpoints` (a file it rereads, so the
/// test can point it at the destination as a shoot's kube-apiserver is), each write a fresh
/// Debian `etcdctl put` in the node's network namespace, with the flags of `flags` (TLS):
/// `ok N` is an acknowledged write.
pub(super) struct Writer {
    dir: Scratch,
    child: Child,
}

const WRITER: &str = r#"d=$1; i=0
while [ ! -e "$d/stop" ]; do
  i=$((i+1))
  # shellcheck disable=SC2046 # the flags are words without blanks
  if etcdctl $(cat "$d/flags") --endpoints "$(cat "$d/endpoints")" --dial-timeout 2s --command-timeout 5s \
      put "isthmus-writer/$i" "$i" >/dev/null 2>"$d/err"; then
    echo "ok $i"
  else
    echo "fail $i $(tr '\n' ' ' <"$d/err")"
  fi
done >>"$d/log""#;

impl Writer {
    pub(super) fn start(endpoints: &str) -> Self {
        Self::with_flags(endpoints, &[])
    }

    pub(super) fn with_flags(endpoints: &str, flags: &[String]) -> Self {
        let dir = Scratch::new("cluster-join-writer");
        std::fs::write(dir.join("endpoints"), endpoints).unwrap();
        std::fs::write(dir.join("flags"), flags.join(" ")).unwrap();
        let child = Command::new(Path::new(ROOT).join("scripts/cluster.sh"))
            .args(["node", "sh", "-c", WRITER, "sh"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Writer { dir, child }
    }

    pub(super) fn point_at(&self, endpoints: &str) {
        let tmp = self.dir.join("endpoints.new");
        std::fs::write(&tmp, endpoints).unwrap();
        std::fs::rename(tmp, self.dir.join("endpoints")).unwrap();
    }

    /// Stops the writer; the acknowledged writes' numbers and the failures' lines.
    pub(super) fn stop(mut self) -> (Vec<u64>, Vec<String>) {
        std::fs::write(self.dir.join("stop"), "").unwrap();
        self.child.wait().unwrap();
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for line in log.lines() {
            match line.strip_prefix("ok ") {
                Some(n) => ok.push(n.parse().unwrap()),
                None => failed.push(line.to_owned()),
            }
        }
        (ok, failed)
    }
}

/// A failed step stops the loop too (it runs outside the node's cgroup, which `down` empties).
impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("stop"), "");
        let _ = self.child.wait();
    }
}
