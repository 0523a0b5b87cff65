//! The controller's own HTTP endpoint: `/metrics` (Prometheus text) and `/healthz`, and
//! connecting to the API server. Small on purpose: one listener, no routing framework.

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `/metrics` and `/healthz` on `listener` until the task is dropped.
pub async fn serve_metrics(listener: TcpListener, registry: Arc<Registry>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(answer(req.uri().path(), &registry)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics connection");
            }
        });
    }
}

fn answer(path: &str, registry: &Registry) -> Response<Full<Bytes>> {
    let (status, body) = match path {
        "/metrics" => {
            let mut out = String::new();
            match prometheus_client::encoding::text::encode(&mut out, registry) {
                Ok(()) => (StatusCode::OK, out),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}

/// Connecting to the API server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The kubeconfig could not be read.
    #[error("reading the kubeconfig")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// Neither in-cluster nor default kubeconfig worked, or the client could not be built.
    #[error("building the kubernetes client")]
    Client(#[from] kube::Error),
    /// In-cluster / default config inference failed.
    #[error("inferring the kubernetes config (in-cluster or default kubeconfig)")]
    Infer(#[from] kube::config::InferConfigError),
}

/// A client from `kubeconfig`, or else in-cluster config, or else `$KUBECONFIG`/`~/.kube/config`.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ConnectError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}
