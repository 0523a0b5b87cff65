//! Reading each proxy pod's `/config` hash. Behind a trait so tests can script the answers.

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::time::Duration;

/// Why a pod's hash could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// Connection or HTTP failure.
    #[error("GET /config from {0}: {1}")]
    Http(SocketAddr, String),
    /// The answer was not `{"hash": "..."}`.
    #[error("bad /config answer from {0}: {1}")]
    Body(SocketAddr, String),
    /// No answer in time.
    #[error("GET /config from {0} timed out")]
    Timeout(SocketAddr),
}

/// Fetches the config hash a proxy pod serves.
pub trait HashFetcher: Send + Sync + std::fmt::Debug {
    /// `GET http://<addr>/config` → the `hash` field.
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
        let uri: hyper::Uri = format!("http://{addr}/config")
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
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| http(e.to_string()))?
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
