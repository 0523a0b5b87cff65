//! Reading each proxy pod's configuration hash from its `/config/hash` (a few dozen bytes;
//! the full `/config` of a proxy with thousands of routes is megabytes, and the rollout check
//! asks every pod every reconcile). Behind a trait so tests can script the answers.

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;

/// Why a pod's hash could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// Connection or HTTP failure.
    #[error("GET {PATH} from {0}: {1}")]
    Http(SocketAddr, String),
    /// The answer was not `{"hash": "..."}` (or longer than [`MAX_BODY`]).
    #[error("bad {PATH} answer from {0}: {1}")]
    Body(SocketAddr, String),
    /// No answer in time.
    #[error("GET {PATH} from {0} timed out")]
    Timeout(SocketAddr),
}

/// The proxy's admin path that answers `{"hash": "<sha256 of the file in effect>"}`.
pub const PATH: &str = "/config/hash";

/// The most bytes of an answer read: a hash and its JSON, with room to spare.
pub const MAX_BODY: usize = 4096;

/// Fetches the config hash a proxy pod serves.
pub trait HashFetcher: Send + Sync + std::fmt::Debug {
    /// `GET http://<addr>/config/hash` → the `hash` field.
    fn fetch(&self, addr: SocketAddr) -> BoxFuture<'_, Result<String, ProbeError>>;
}

/// The real fetcher: plain HTTP/1.1 to the pod IP (the admin port is cluster-internal).
#[derive(Debug, Clone)]
pub struct HttpFetcher {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<bytes::Bytes>>,
    timeout: Duration,
}

impl HttpFetcher {
    /// A fetcher whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            timeout,
        }
    }

    async fn get(&self, addr: SocketAddr) -> Result<String, ProbeError> {
        let http = |e: String| ProbeError::Http(addr, e);
        let uri: hyper::Uri = format!("http://{addr}{PATH}")
            .parse()
            .map_err(|e| http(format!("{e}")))?;
        let resp = self
            .client
            .get(uri)
            .await
            .map_err(|e| http(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(http(format!("status {}", resp.status())));
        }
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| ProbeError::Body(addr, e.to_string()))?
            .to_bytes();
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| ProbeError::Body(addr, e.to_string()))?;
        v.get("hash")
            .and_then(|h| h.as_str())
            .map(String::from)
            .ok_or_else(|| ProbeError::Body(addr, "no string field `hash`".into()))
    }
}

impl HashFetcher for HttpFetcher {
    fn fetch(&self, addr: SocketAddr) -> BoxFuture<'_, Result<String, ProbeError>> {
        Box::pin(async move {
            tokio::time::timeout(self.timeout, self.get(addr))
                .await
                .unwrap_or(Err(ProbeError::Timeout(addr)))
        })
    }
}
