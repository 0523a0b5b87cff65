//! One shoot kube-apiserver: the real binary (built from `k8s.io/kubernetes`, see
//! `scripts/build-kubernetes.sh`) as a process inside a seed's namespace, serving on the
//! seed's address, its storage the migrating etcd members of that seed, its `cluster` egress the
//! seed's tunnel server. Stopped with SIGTERM, as a pod is: in-flight requests finish, watches
//! end, clients reconnect elsewhere.

use super::files::Files;
use crate::error::{Error, Result};
use crate::seeds::Seed;
use isthmus_testkit::flags::{ApiServerAuth, ApiServerFlags};
use kube::Client;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// The shoot API's port on a seed's address.
pub const PORT: u16 = 6443;
/// How long a kube-apiserver may take to become ready. Start-up LISTs every resource from
/// etcd; at 150 ms RTT with a remote leader that is several seconds.
const READY: Duration = Duration::from_secs(90);
/// How long a stopping kube-apiserver may take before SIGKILL: a pod's default
/// `terminationGracePeriodSeconds`, which is what kubelet gives it when its Deployment scales
/// to 0. (kube-apiserver waits for open HTTP/1.1 watch connections to end on their own.)
const GRACE: Duration = Duration::from_secs(30);

/// A running kube-apiserver; killed on drop if not stopped.
#[derive(Debug)]
pub struct ApiServer {
    pub label: String,
    pub addr: SocketAddr,
    pub log: PathBuf,
    child: Option<Child>,
}

impl ApiServer {
    /// Starts kube-apiserver in `seed` against `etcd` (client URLs) and waits until `/readyz`
    /// answers `ok` through `client`. The egress and admission files are per seed.
    pub async fn start(
        bin: &Path,
        seed: &Seed,
        files: &Files,
        etcd: &[String],
        client: &Client,
    ) -> Result<Self> {
        let mut args = ApiServerFlags {
            etcd_servers: etcd.join(","),
            address: seed.seed_ip.into(),
            port: PORT,
            cert_dir: files.dir.join(format!("certs-{}", seed.label)),
            serving: files.serving.clone(),
            auth: ApiServerAuth::TokenFile(files.tokens.clone()),
            issuer: format!("https://{}", super::API_NAME),
            service_account: (files.sa.1.clone(), files.sa.0.clone()),
        }
        .args();
        let d = |f: &Path| f.display().to_string();
        args.extend([
            // etcd 3.4.23 (Debian's, the lab's members) has no RequestWatchProgress: without
            // this, kube-apiserver 1.34's streaming LIST (WatchList) answers 500.
            "--feature-gates=WatchList=false".into(),
            format!(
                "--egress-selector-config-file={}",
                d(&files.egress(&seed.label))
            ),
            format!("--admission-control-config-file={}", d(&files.admission)),
            format!("--audit-policy-file={}", d(&files.audit_policy)),
            format!("--audit-log-path={}", d(&files.audit_log(&seed.label))),
            // (The default `blocking` mode: each event is a line appended as the request
            // ends, so a kube-apiserver killed at the end of a run has written them all.)
        ]);
        let addr = SocketAddr::from((seed.seed_ip, PORT));
        let log = files.dir.join(format!("kube-apiserver-{}.log", seed.label));
        Self::spawn(bin, seed, addr, &args, log, client).await
    }

    /// Starts `bin` with `args` inside `seed` (serving on `addr`, logging to `log`) and waits
    /// until `/readyz` answers `ok` through `client`.
    pub async fn spawn(
        bin: &Path,
        seed: &Seed,
        addr: SocketAddr,
        args: &[String],
        log: PathBuf,
        client: &Client,
    ) -> Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| Error::io(log.display(), e))?;
        let err = out.try_clone().map_err(|e| Error::io(log.display(), e))?;
        let child = seed
            .command(&bin.display().to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Command {
                command: format!("{} in {}", bin.display(), seed.label),
                detail: e.to_string(),
            })?;
        let mut s = Self {
            label: seed.label.clone(),
            addr,
            log,
            child: Some(child),
        };
        s.wait_ready(client).await?;
        Ok(s)
    }

    async fn wait_ready(&mut self, client: &Client) -> Result<()> {
        let deadline = Instant::now() + READY;
        loop {
            if isthmus_testkit::kube::readyz(client).await {
                return Ok(());
            }
            if let Some(c) = &mut self.child {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(Error::Command {
                        command: format!("kube-apiserver in {}", self.label),
                        detail: format!("exited with {status}: see {}", self.log.display()),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "kube-apiserver in {} to be ready (see {})",
                        self.label,
                        self.log.display()
                    ),
                    after: READY,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops it as kubelet stops a pod: SIGTERM (in-flight requests finish), SIGKILL after
    /// [`GRACE`]. Says which it took and how long.
    pub async fn stop(mut self) -> Result<String> {
        let Some(mut child) = self.child.take() else {
            return Ok("not running".into());
        };
        isthmus_testkit::stop_like_kubelet(&mut child, GRACE)
            .await
            .map_err(|e| Error::Command {
                command: "stopping kube-apiserver".into(),
                detail: e.to_string(),
            })
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
