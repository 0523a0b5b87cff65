//! `isthmus controller` processes, the production binary, as a seed runs its Deployment's
//! replicas: inside the seed (its DNS view: the exposed names of its own members resolve to its
//! proxy, the other seed's through the link), authenticated with the ServiceAccount token of
//! `deploy/controller.yaml`, electing a leader through their Lease.

use crate::error::{Error, Result};
use crate::seeds::Seed;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// The Lease duration the lab runs with: a replica that dies is replaced within it (the
/// deployment's default is 15 s).
pub const LEASE_SECONDS: u64 = 6;

/// One replica.
#[derive(Debug)]
pub struct Replica {
    pub identity: String,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Replica {
    /// Starts replica `identity` (metrics on `metrics_port` inside the seed).
    pub fn start(
        bin: &Path,
        seed: &Seed,
        kubeconfig: &Path,
        identity: &str,
        metrics_port: u16,
        dir: &Path,
    ) -> Result<Self> {
        let log = dir.join(format!("controller-{identity}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| Error::io(log.display(), e))?;
        let child = seed
            .command(&bin.display().to_string())
            .arg("controller")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--identity", identity])
            .args(["--lease-seconds", &LEASE_SECONDS.to_string()])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics_port}")])
            // The seed's tunnel ingress is its own proxy in the lab (`crate::webhook`); the
            // migration's proxy keeps the VPN listener on a port nothing dials.
            .args(["--vpn-port", &crate::proxy::UNUSED_VPN_PORT.to_string()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .map_err(|e| Error::Command {
                command: format!("{} controller in {}", bin.display(), seed.label),
                detail: e.to_string(),
            })?;
        Ok(Self {
            identity: identity.into(),
            log,
            child: Some(child),
        })
    }

    /// `kill -9`, as a node failure ends a pod.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
