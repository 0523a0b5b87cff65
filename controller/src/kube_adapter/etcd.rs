//! etcd's own API, as the controller needs it: member list and leader (the truth about who
//! votes), leadership transfer and learner removal. Spoken as etcd's JSON gateway
//! (`POST /v3/...`, served on the client port since etcd 3.4) over HTTP/1.1 and mutual TLS, so
//! the controller links no gRPC stack. It reaches etcd through the client exposure: the
//! exposed client URLs of this seed's members and the source members' `clientUrls`.

use crate::plan::{EtcdCluster, EtcdMember};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long one request to one endpoint may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why etcd could not be asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// The TLS material is unusable.
    #[error("etcd client TLS material: {0}")]
    Tls(String),
    /// No endpoint answered.
    #[error("no etcd endpoint answered ({0})")]
    Unreachable(String),
    /// etcd answered with an error or something unreadable.
    #[error("etcd {path} at {endpoint}: {message}")]
    Answer {
        /// The endpoint.
        endpoint: String,
        /// The API path.
        path: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// A client of one etcd cluster through a list of endpoints (`https://host:port`).
#[derive(Clone)]
pub struct EtcdClient {
    tls: Arc<rustls::ClientConfig>,
    /// `host:port` → address to dial instead of resolving (like curl's `--connect-to`);
    /// empty in a cluster, where the exposed names resolve through DNS.
    connect_to: Arc<BTreeMap<String, SocketAddr>>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("connect_to", &self.connect_to)
            .finish_non_exhaustive()
    }
}

impl EtcdClient {
    /// A client presenting `cert`/`key` (PEM) and trusting `ca` (PEM).
    pub fn new(
        ca: &[u8],
        cert: &[u8],
        key: &[u8],
        connect_to: BTreeMap<String, SocketAddr>,
    ) -> Result<Self, EtcdError> {
        let tls = |e: &dyn std::fmt::Display| EtcdError::Tls(e.to_string());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca) {
            roots.add(c.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| tls(&e))?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| tls(&e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls(&e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls(&e))?;
        Ok(Self {
            tls: Arc::new(config),
            connect_to: Arc::new(connect_to),
        })
    }

    /// Members and leader, from the first endpoint that answers both calls.
    pub async fn cluster(&self, endpoints: &[String]) -> Result<EtcdCluster, EtcdError> {
        let mut errors = Vec::new();
        for ep in endpoints {
            match self.cluster_at(ep).await {
                Ok(c) => return Ok(c),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(EtcdError::Unreachable(errors.join("; ")))
    }

    async fn cluster_at(&self, endpoint: &str) -> Result<EtcdCluster, EtcdError> {
        let list = self
            .call(endpoint, "/v3/cluster/member/list", json!({}))
            .await?;
        let status = self
            .call(endpoint, "/v3/maintenance/status", json!({}))
            .await?;
        let members = list
            .get("members")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(member).collect())
            .unwrap_or_default();
        let leader = status.get("leader").and_then(as_u64).filter(|l| *l != 0);
        let version = status
            .get("version")
            .and_then(Value::as_str)
            .map(String::from);
        Ok(EtcdCluster {
            members,
            leader,
            version,
        })
    }

    /// Transfers leadership to `to`; `leader_endpoint` must reach the current leader (etcd
    /// accepts the call only there).
    pub async fn move_leader(&self, leader_endpoint: &str, to: u64) -> Result<(), EtcdError> {
        let body = json!({"targetID": to.to_string()});
        self.call(leader_endpoint, "/v3/maintenance/transfer-leadership", body)
            .await
            .map(drop)
    }

    /// Removes member `id` through the first endpoint that accepts it.
    pub async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        let mut errors = Vec::new();
        for ep in endpoints {
            let body = json!({"ID": id.to_string()});
            match self.call(ep, "/v3/cluster/member/remove", body).await {
                Ok(_) => return Ok(()),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(EtcdError::Unreachable(errors.join("; ")))
    }

    async fn call(
        &self,
        endpoint: &str,
        path: &'static str,
        body: Value,
    ) -> Result<Value, EtcdError> {
        let answer = |message: String| EtcdError::Answer {
            endpoint: endpoint.to_string(),
            path,
            message,
        };
        tokio::time::timeout(REQUEST_TIMEOUT, self.post(endpoint, path, body))
            .await
            .map_err(|_| answer(format!("no answer within {REQUEST_TIMEOUT:?}")))?
            .map_err(answer)
    }

    async fn post(&self, endpoint: &str, path: &str, body: Value) -> Result<Value, String> {
        let authority = endpoint
            .strip_prefix("https://")
            .ok_or("only https:// endpoints")?
            .trim_end_matches('/');
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .to_string();
        let stream = match self.connect_to.get(authority) {
            Some(addr) => tokio::net::TcpStream::connect(addr).await,
            None => tokio::net::TcpStream::connect(authority).await,
        }
        .map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("status {status}, unreadable body: {e}"))?;
        if !status.is_success() {
            let msg = v.get("error").or_else(|| v.get("message")).cloned();
            return Err(format!("status {status}: {}", msg.unwrap_or(v)));
        }
        Ok(v)
    }
}

/// The gateway writes uint64 as a JSON string.
fn as_u64(v: &Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
}

fn member(v: &Value) -> Option<EtcdMember> {
    Some(EtcdMember {
        id: v.get("ID").and_then(as_u64)?,
        name: v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .into(),
        peer_urls: v
            .get("peerURLs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|u| u.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        is_learner: v.get("isLearner").and_then(Value::as_bool).unwrap_or(false),
    })
}
