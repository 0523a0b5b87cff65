//! The client that writes through the join (`join_expose.rs`): one key after another, each
//! attempt a fresh `etcdctl put` (Debian's v3.4: clientv3 and its retry interceptor, which
//! retries a put only when it cannot have reached a member, `clientv3/retry.go`
//! `isSafeRetryMutableRPC`), with the deadlines a seed's kube-apiserver gives its etcd client:
//! 20 s to dial (k8s.io/apiserver v0.34.4 `pkg/storage/storagebackend/factory/etcd3.go`
//! `dialTimeout`) and 34 s per write (`pkg/endpoints/handlers/create.go`
//! `requestTimeoutUpperBound`), through the client Service, the endpoint Gardener gives it.
//!
//! A put that etcd answers with an error is tried again, as the lab's careful client retries a
//! 5xx (docs/lab.md "Load"), until 34 s have passed since the first attempt: putting the same
//! value under the same key twice is idempotent, so a retry cannot write what the first
//! attempt did not mean. It is needed for one thing etcd does by design: a proposal a follower
//! forwarded to a leader that is handing over leadership (druid's roll stops the leader with
//! SIGTERM, and etcd's `Stop` transfers leadership first) is dropped with no answer, and the
//! follower answers `request timed out` after 7 s (docs/lab.md "A write in flight at a leader
//! change"). Such a write counts as retried, with its first error; it fails only when no
//! attempt is acknowledged within the 34 s.

use super::node::{etcdctl, Node};
use isthmus_testkit::Scratch;
use std::process::{Child, Stdio};
use std::time::Duration;

/// The writer's keys as the cluster holds them.
pub(super) fn keys(
    node: &Node,
    endpoint: &str,
    flags: &[String],
) -> std::collections::BTreeSet<u64> {
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["get", "--prefix", "isthmus-writer/", "--keys-only"]);
    etcdctl(node, endpoint, Duration::from_secs(30), &args)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("isthmus-writer/")?.parse().ok())
        .collect()
}

/// A client writing one key after another through `endpoints`, each write a fresh
/// Debian `etcdctl put` in the node's network namespace, with the flags of `flags` (TLS):
/// `ok N MS AT` is an acknowledged write that took MS milliseconds from its first attempt at
/// AT (Unix milliseconds; `ok N MS AT retried TIME ERROR` when an earlier attempt failed with
/// ERROR), `fail N TIME
/// ERROR` one that no attempt got acknowledged within 34 s. Keys are numbered from
/// `after + 1`: a writer on another seed's node carries on where the first stopped (the
/// destination's, as a shoot's kube-apiserver is pointed there).
pub(super) struct Writer {
    dir: Scratch,
    child: Child,
}

const WRITER: &str = r#"d=$1; i=$2
while [ ! -e "$d/stop" ]; do
  i=$((i+1))
  t0=$(date +%s%N); first=""
  while :; do
    # shellcheck disable=SC2046 # the flags are words without blanks
    if etcdctl $(cat "$d/flags") --endpoints "$(cat "$d/endpoints")" --dial-timeout 20s \
        --command-timeout 34s put "isthmus-writer/$i" "$i" >/dev/null 2>"$d/err"; then
      echo "ok $i $(( ($(date +%s%N) - t0) / 1000000 )) $((t0 / 1000000))${first:+ retried $first}"
      break
    fi
    [ -n "$first" ] || first="$(date -u +%T.%N) $(tr '\n' ' ' <"$d/err")"
    if [ $(( ($(date +%s%N) - t0) / 1000000000 )) -ge 34 ]; then
      echo "fail $i $first"
      break
    fi
    sleep 0.2 # a retry policy's pause, so a refusal does not spin
  done
done >>"$d/log""#;

/// What the writer did: the acknowledged writes (number, milliseconds, first attempt's Unix
/// milliseconds) and the failures' lines.
pub(super) struct Written {
    pub ok: Vec<(u64, u64, u64)>,
    /// Acknowledged after a failed attempt: the number and the first attempt's error.
    pub retried: Vec<(u64, String)>,
    pub failed: Vec<String>,
}

impl Written {
    /// The last key number acknowledged or failed (the next writer starts after it).
    pub fn last(&self) -> u64 {
        let failed = self
            .failed
            .iter()
            .filter_map(|l| l.split(' ').nth(1)?.parse().ok());
        self.ok.iter().map(|o| o.0).chain(failed).max().unwrap_or(0)
    }

    /// This and `later` (a writer that carried on after this one) as one.
    pub fn then(mut self, later: Written) -> Written {
        self.ok.extend(later.ok);
        self.retried.extend(later.retried);
        self.failed.extend(later.failed);
        self
    }

    /// The acknowledged writes that took longer than `over`, slowest first.
    pub fn slow(&self, over: Duration) -> Vec<(u64, u64)> {
        let ms = u64::try_from(over.as_millis()).unwrap();
        let mut s: Vec<(u64, u64)> = self
            .ok
            .iter()
            .filter(|w| w.1 > ms)
            .map(|w| (w.0, w.1))
            .collect();
        s.sort_by_key(|w| std::cmp::Reverse(w.1));
        s
    }
}

impl Writer {
    pub(super) fn with_flags(node: &Node, endpoints: &str, flags: &[String], after: u64) -> Self {
        let dir = Scratch::new("cluster-join-writer");
        std::fs::write(dir.join("endpoints"), endpoints).unwrap();
        std::fs::write(dir.join("flags"), flags.join(" ")).unwrap();
        let child = node
            .command()
            .args(["node", "sh", "-c", WRITER, "sh"])
            .arg(dir.path())
            .arg(after.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Writer { dir, child }
    }

    /// Stops the writer after its current write.
    pub(super) fn stop(mut self) -> Written {
        std::fs::write(self.dir.join("stop"), "").unwrap();
        self.child.wait().unwrap();
        self.peek()
    }

    /// What the writer did so far.
    pub(super) fn peek(&self) -> Written {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let mut w = Written {
            ok: Vec::new(),
            retried: Vec::new(),
            failed: Vec::new(),
        };
        // A line still being written is not one yet.
        let lines = log.split_inclusive('\n').filter(|l| l.ends_with('\n'));
        for line in lines.map(str::trim_end) {
            let ok = line.strip_prefix("ok ").and_then(|r| {
                let mut f = r.splitn(4, ' ');
                let n: u64 = f.next()?.parse().ok()?;
                let ms: u64 = f.next()?.parse().ok()?;
                let at: u64 = f.next()?.parse().ok()?;
                let retried = f
                    .next()
                    .map(|e| e.trim_start_matches("retried ").to_owned());
                Some((n, ms, at, retried))
            });
            match ok {
                Some((n, ms, at, retried)) => {
                    w.ok.push((n, ms, at));
                    w.retried.extend(retried.map(|e| (n, e)));
                }
                None => w.failed.push(line.to_owned()),
            }
        }
        w
    }
}

/// A failed step stops the loop too (it runs outside the node's cgroup, which `down` empties).
impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("stop"), "");
        let _ = self.child.wait();
    }
}
