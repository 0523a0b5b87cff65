//! The lab's one error type: every failure says which part of the lab it came from.

use std::time::Duration;

/// What went wrong while building or driving the lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Network namespaces could not be created (not root, no iproute2): the lab needs them.
    #[error("network namespaces are unavailable (the lab needs root and iproute2): {0}")]
    Namespaces(String),
    /// A host command (`ip`, `kill`, `etcd`, the proxy) failed to start or failed.
    #[error("command `{command}` failed: {detail}")]
    Command { command: String, detail: String },
    /// A file in the lab's scratch directory could not be written or read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// An etcd API call failed after the lab's retries.
    #[error("etcd {op}: {source}")]
    Etcd {
        op: String,
        #[source]
        source: etcd_client::Error,
    },
    /// Something the lab waits for did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
    /// The cluster is not in the state a step needs (e.g. a removal would break quorum).
    #[error("cluster state: {0}")]
    State(String),
    /// The TLS material for the lab could not be generated.
    #[error("pki: {0}")]
    Pki(#[from] rcgen::Error),
    /// The in-process tunnel (webhook part) could not be set up, e.g. its TLS configuration.
    #[error("tunnel: {0}")]
    Tunnel(#[from] isthmus_tunnel::Error),
    /// A part of the seed world (the etcd harness, a stand-in) failed.
    #[error("{0}")]
    Seed(#[from] isthmus_seed_world::Error),
}

/// The lab's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_string(),
            source,
        }
    }
    pub(crate) fn etcd(op: impl Into<String>, source: etcd_client::Error) -> Self {
        Self::Etcd {
            op: op.into(),
            source,
        }
    }
}
