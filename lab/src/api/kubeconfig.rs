//! Kubeconfig files for the lab's API servers (a bearer token, the server's CA file) and
//! clients from them.

use crate::error::{Error, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

/// Writes a kubeconfig for `server` (its CA file `ca`) with a bearer `token`.
pub fn write_kubeconfig(
    path: &std::path::Path,
    server: &str,
    ca: &std::path::Path,
    token: &str,
) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters:\n- name: lab\n  \
         cluster:\n    server: {server}\n    certificate-authority: {}\ncontexts:\n\
         - name: lab\n  context:\n    cluster: lab\n    user: user\nusers:\n- name: user\n  \
         user:\n    token: {token}\n",
        ca.display()
    );
    std::fs::write(path, text).map_err(|e| Error::io(path.display(), e))
}

/// A client from a kubeconfig file.
pub async fn kubeconfig_client(path: &std::path::Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(path).map_err(|e| Error::State(format!("{e}")))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::State(format!("{}: {e}", path.display())))?;
    Client::try_from(config).map_err(|e| Error::State(format!("{}: {e}", path.display())))
}
