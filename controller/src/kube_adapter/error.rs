//! The adapter's errors, each with a short label for the failure metric.

use crate::proxy_config::RenderError;

/// Why a reconciliation failed. All of them are retried with backoff by `error_policy`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API server refused or failed a request.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Adding or removing our finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// The proxy config could not be rendered.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// `EtcdMigration` is namespaced; an object without a namespace is a bug upstream.
    #[error("EtcdMigration has no namespace")]
    NoNamespace,
    /// Cleanup issued deletes and waits for the objects to disappear.
    #[error("cleanup waits for {0} DNSRecord(s) to be deleted")]
    CleanupPending(usize),
    /// A body could not be (de)serialised.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The etcd client TLS Secret is missing a key or holds unusable material.
    #[error("etcd client TLS: {0}")]
    EtcdTls(String),
    /// A rendered proxy file failed the proxy's own validation.
    #[error("rendered proxy config is invalid: {0}")]
    InvalidRoutes(String),
    /// A tunnel server's objects could not be built.
    #[error("tunnel server: {0}")]
    TunnelServer(String),
    /// The on-demand load balancer's template is missing or not a LoadBalancer Service.
    #[error("load balancer: {0}")]
    LoadBalancer(String),
}

impl Error {
    /// The reason of `ObjectsApplied=False`: how the API server refused.
    pub fn apply_reason(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "FieldConflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 422 => "Invalid",
            Error::Kube(kube::Error::Api(s)) if s.code == 403 => "Forbidden",
            _ => "ApplyFailed",
        }
    }

    /// Metric label: which kind of failure, without unbounded values.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code >= 500 => "api_server_error",
            Error::Kube(kube::Error::Api(_)) => "api_rejected",
            Error::Kube(_) => "api_transport",
            Error::Finalizer(_) => "finalizer",
            Error::Render(_) => "render",
            Error::NoNamespace => "no_namespace",
            Error::CleanupPending(_) => "cleanup_pending",
            Error::Json(_) => "json",
            Error::EtcdTls(_) => "etcd_tls",
            Error::InvalidRoutes(_) => "invalid_routes",
            Error::TunnelServer(_) => "tunnel_server",
            Error::LoadBalancer(_) => "load_balancer",
        }
    }
}
