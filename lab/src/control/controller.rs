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
    /// How to start it again (a killed pod's replacement).
    command: Vec<std::ffi::OsString>,
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
        let mut c = seed.command(&bin.display().to_string());
        c.arg("controller")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--identity", identity])
            .args(["--lease-seconds", &LEASE_SECONDS.to_string()])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics_port}")])
            // The seed's tunnel ingress is its own proxy in the lab (`crate::webhook`); the
            // migration's proxy keeps the VPN listener on a port nothing dials.
            .args(["--vpn-port", &crate::proxy::UNUSED_VPN_PORT.to_string()]);
        // No --tunnel-image: the lab's tunnel servers are processes it starts itself, so the
        // controller runs none (its migrations name them in vpn.target, without vpn.server);
        // no --proxy-service-template: each seed's proxy address is there from the start.
        let command: Vec<std::ffi::OsString> = std::iter::once(c.get_program().to_owned())
            .chain(c.get_args().map(ToOwned::to_owned))
            .collect();
        let mut r = Self {
            identity: identity.into(),
            log,
            child: None,
            command,
        };
        r.spawn()?;
        Ok(r)
    }

    fn spawn(&mut self) -> Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| Error::io(self.log.display(), e))?;
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| Error::State("empty controller command".into()))?;
        let child = std::process::Command::new(program)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .map_err(|e| Error::Command {
                command: format!("controller {}", self.identity),
                detail: e.to_string(),
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts it again after [`Replica::kill`] (the Deployment's replacement pod).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }

    /// `kill -9`, as a node failure ends a pod.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
