//! An etcd member as a process inside its seed: how the lab starts it (the flags etcd-druid's
//! pods would carry, the lab's ports, peer mTLS from the lab's CA) and stops it (as kubelet
//! stops a pod, or as a crash does).

use crate::error::{Error, Result};
use crate::member::MemberRef;
use crate::seeds::Seed;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A running etcd process (killed on drop).
#[derive(Debug)]
pub struct Member {
    pub r: MemberRef,
    child: Child,
}

impl Member {
    /// Starts the member in `seed` advertising `peer_urls`; `cluster` is `--initial-cluster`,
    /// `state` `new`/`existing`.
    pub fn start(
        seed: &Seed,
        dir: &Path,
        r: MemberRef,
        peer_urls: &[String],
        cluster: &str,
        state: &str,
        pre_vote: bool,
    ) -> Result<Self> {
        let name = r.name();
        let d = |f: &str| dir.join(f).display().to_string();
        let log_path = dir.join(format!("{name}.log"));
        // Appended: a member restarted after a kill keeps the log of its first life.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(log_path.display(), e))?;
        let client = r.client_url(seed);
        let child = seed
            .command("etcd")
            .args(["--name", &name, "--data-dir", &d(&format!("{name}.data"))])
            .args([
                "--listen-peer-urls",
                &format!("https://127.0.0.1:{}", r.peer_port()),
            ])
            .args(["--initial-advertise-peer-urls", &peer_urls.join(",")])
            .args([
                "--listen-client-urls",
                &format!("{client},https://127.0.0.1:{}", r.tls_client_port()),
                "--advertise-client-urls",
                &client,
            ])
            // The TLS client listener (the client exposure, what the controller reads etcd's
            // member list through) takes client certificates of the lab CA only.
            .args(["--cert-file", &d(&format!("{name}.crt"))])
            .args(["--key-file", &d(&format!("{name}.key"))])
            .args(["--trusted-ca-file", &d("ca.crt"), "--client-cert-auth"])
            .args([
                "--initial-cluster",
                cluster,
                "--initial-cluster-state",
                state,
            ])
            .args(["--initial-cluster-token", "isthmus-lab"])
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
            // in the link-cut scenario. Pre-vote lets them rejoin quietly.
            .arg(format!("--pre-vote={pre_vote}"))
            .env("ETCD_UNSUPPORTED_ARCH", "")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Command {
                command: "etcd".into(),
                detail: e.to_string(),
            })?;
        Ok(Self { r, child })
    }

    /// Stops it as kubelet stops a pod: SIGTERM (a leader hands its leadership over first),
    /// SIGKILL after `grace`. Says which it took.
    pub async fn stop(&mut self, grace: Duration) -> Result<String> {
        let t0 = Instant::now();
        crate::seeds::run(
            std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]),
        )?;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => {
                    return Ok(format!(
                        "SIGTERM, exited after {:.1} s",
                        t0.elapsed().as_secs_f64()
                    ))
                }
                Ok(None) if t0.elapsed() < grace => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    self.kill9();
                    return Ok(format!("SIGTERM, SIGKILL after {} s", grace.as_secs()));
                }
            }
        }
    }

    /// `kill -9`: the process dies without a word to its peers (a crashed container).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Log path of a member (for error messages).
    pub fn log_path(dir: &Path, r: MemberRef) -> PathBuf {
        dir.join(format!("{}.log", r.name()))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name=peer-url,...` for `--initial-cluster`: every URL of every member.
pub fn initial_cluster(members: &[(MemberRef, Vec<String>)]) -> String {
    members
        .iter()
        .flat_map(|(m, urls)| urls.iter().map(move |u| format!("{}={u}", m.name())))
        .collect::<Vec<_>>()
        .join(",")
}
