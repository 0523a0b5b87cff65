//! The seed world's one error type: each failure says which part and which call.

use std::time::Duration;

/// What went wrong in a stand-in or the etcd harness.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An etcd API call failed (after the harness' retries where it retries).
    #[error("etcd {op}: {source}")]
    Etcd {
        op: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A call to a seed's API server failed.
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A process (an etcd member, `kill`) could not be started or failed.
    #[error("command `{command}` failed: {detail}")]
    Command { command: String, detail: String },
    /// Something waited for did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
    /// The cluster or an object is not in the state a step needs.
    #[error("{0}")]
    State(String),
}

/// The seed world's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn etcd(op: impl Into<String>, source: etcd_client::Error) -> Self {
        Self::Etcd {
            op: op.into(),
            source,
        }
    }
    pub(crate) fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_string(),
            source,
        }
    }
    pub(crate) fn kube(what: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            what: what.into(),
            source,
        }
    }
}
