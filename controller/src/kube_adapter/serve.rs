//! The controller's own HTTP endpoint: `/metrics` (Prometheus text) and `/healthz`, and
//! connecting to the API server. Small on purpose: one listener, no routing framework.

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use isthmus_config::HttpLimits;
use isthmus_proxy::http1::Gate;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `/metrics` and `/healthz` on `listener` until the task is dropped, with the limits
/// every isthmus HTTP endpoint has (`isthmus_proxy::http1`: header read timeout, head size
/// cap, a connection cap that closes the oldest connection), so no client can hold it.
pub async fn serve_metrics(listener: TcpListener, registry: Arc<Registry>) {
    serve_metrics_with(listener, registry, HttpLimits::default()).await;
}

/// [`serve_metrics`] with explicit limits.
pub async fn serve_metrics_with(
    listener: TcpListener,
    registry: Arc<Registry>,
    limits: HttpLimits,
) {
    let make = move || {
        let registry = registry.clone();
        service_fn(move |req: Request<hyper::body::Incoming>| {
            let r = answer(req.uri().path(), &registry);
            async move { Ok::<_, Infallible>(r) }
        })
    };
    let never = tokio_util::sync::CancellationToken::new();
    isthmus_proxy::http1::serve(listener, Gate::new(limits), make, never).await;
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
