//! The pinned kube-controller-manager (`<cache>/kubernetes-v1.34.4/`, the same build as the
//! fixture's kube-apiserver) with only the controllers an uninstall needs when there is no
//! node: the namespace controller (a deleted namespace is emptied and removed) and the
//! garbage collector (foreground deletions, which gardener-resource-manager uses for
//! Deployments and DaemonSets, finish; dependents go with their owners).

use crate::{KubeApiServer, Logged};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The controllers it runs.
pub const CONTROLLERS: &str = "namespace-controller,garbage-collector-controller";

fn binary() -> PathBuf {
    let p = crate::cache::dir()
        .join(format!("kubernetes-{}", crate::cache::KUBE_VERSION))
        .join("kube-controller-manager");
    crate::cache::built(None, p, "scripts/build-kubernetes.sh")
}

/// A running kube-controller-manager; killed on drop.
#[derive(Debug)]
pub struct ControllerManager {
    process: Logged,
}

impl ControllerManager {
    /// Starts it against `server` with the admin kubeconfig; no serving port (nothing probes
    /// it), no leader election.
    pub fn start(server: &KubeApiServer) -> ControllerManager {
        let mut cmd = Command::new(binary());
        cmd.arg(format!(
            "--kubeconfig={}",
            server.admin_kubeconfig().display()
        ))
        .arg(format!("--controllers={CONTROLLERS}"))
        .args(["--secure-port=0", "--leader-elect=false"])
        .stdout(Stdio::null());
        ControllerManager {
            process: Logged::spawn(cmd),
        }
    }

    /// Its log lines; panics with them if it has exited.
    pub fn lines(&mut self) -> Vec<String> {
        assert!(
            !self.process.exited(),
            "kube-controller-manager exited:\n{}",
            self.process.lines().join("\n")
        );
        self.process.lines()
    }
}
