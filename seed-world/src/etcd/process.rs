//! An etcd member as a process where its seed runs it: how the harness starts it (the flags
//! etcd-druid's pods would carry, the harness' listeners, peer and client mTLS from the
//! cluster's CA: `<dir>/ca.crt`, `<dir>/<name>.crt`/`.key`) and stops it (as kubelet stops a
//! pod, or as a crash does).

use super::MemberDef;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running etcd process (killed on drop).
#[derive(Debug)]
pub struct MemberProcess {
    pub name: String,
    child: Child,
}

impl MemberProcess {
    /// Starts `def` advertising `peer_urls`, its files under `dir`; `cluster` is
    /// `--initial-cluster`, `state` `new`/`existing`.
    pub fn start(
        def: &MemberDef,
        dir: &Path,
        peer_urls: &[String],
        cluster: &str,
        state: &str,
        pre_vote: bool,
    ) -> Result<Self> {
        let name = def.name.as_str();
        let d = |f: &str| dir.join(f).display().to_string();
        let log_path = Self::log_path(dir, name);
        // Appended: a member restarted after a kill keeps the log of its first life.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(log_path.display(), e))?;
        let child = def
            .place
            .command("etcd")
            .args(["--name", name, "--data-dir", &d(&format!("{name}.data"))])
            .args(["--listen-peer-urls", &def.listen_peer_url])
            .args(["--initial-advertise-peer-urls", &peer_urls.join(",")])
            .args([
                "--listen-client-urls",
                &format!("{},{}", def.client_url, def.tls_client_url),
                "--advertise-client-urls",
                &def.client_url,
            ])
            // The TLS client listener (the client exposure, what the controller reads etcd's
            // member list through) takes client certificates of the cluster's CA only.
            .args(["--cert-file", &d(&format!("{name}.crt"))])
            .args(["--key-file", &d(&format!("{name}.key"))])
            .args(["--trusted-ca-file", &d("ca.crt"), "--client-cert-auth"])
            .args([
                "--initial-cluster",
                cluster,
                "--initial-cluster-state",
                state,
            ])
            .args(["--initial-cluster-token", "isthmus-seed-world"])
            .args(["--peer-cert-file", &d(&format!("{name}.crt"))])
            .args(["--peer-key-file", &d(&format!("{name}.key"))])
            .args([
                "--peer-trusted-ca-file",
                &d("ca.crt"),
                "--peer-client-cert-auth",
            ])
            // Peer traffic is source-NATed by the proxies: skip the client-cert SAN check
            // (TLS stays end-to-end between members).
            .arg("--experimental-peer-skip-client-san-verification")
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            // Without pre-vote, members cut off from the leader keep raising their term and, when
            // the link comes back, force an election: write stalls of 1.2 and 4.2 s measured
            // in the lab's link-cut scenario. Pre-vote lets them rejoin quietly.
            .arg(format!("--pre-vote={pre_vote}"))
            .env("ETCD_UNSUPPORTED_ARCH", "")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Command {
                command: format!("etcd {name} (Debian's etcd-server; util-linux, iproute2)"),
                detail: e.to_string(),
            })?;
        Ok(Self {
            name: name.to_string(),
            child,
        })
    }

    /// Stops it as kubelet stops a pod: SIGTERM (a leader hands its leadership over first),
    /// SIGKILL after `grace`. Says which it took.
    pub async fn stop(&mut self, grace: Duration) -> Result<String> {
        isthmus_testkit::stop_like_kubelet(&mut self.child, grace)
            .await
            .map_err(|e| Error::Command {
                command: format!("stopping etcd {}", self.name),
                detail: e.to_string(),
            })
    }

    /// `kill -9`: the process dies without a word to its peers (a crashed container).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The log of member `name` (for error messages).
    pub fn log_path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.log"))
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
