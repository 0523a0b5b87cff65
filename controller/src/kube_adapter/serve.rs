//! The controller's own HTTP endpoint: `/metrics` (Prometheus text) and `/healthz`, and
//! connecting to the API server. Small on purpose: one listener, no routing framework.

use isthmus_admin::http1::Gate;
use isthmus_admin::Endpoints;
use isthmus_config::HttpLimits;
use prometheus_client::registry::Registry;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `/metrics` and `/healthz` on `listener` until the task is dropped, with the routes
/// and limits every isthmus HTTP endpoint has (`isthmus-admin`: header read timeout, head
/// size cap, a connection cap that closes the oldest connection), so no client can hold it.
pub async fn serve_metrics(listener: TcpListener, registry: Arc<Registry>) {
    serve_metrics_with(listener, registry, HttpLimits::default()).await;
}

/// [`serve_metrics`] with explicit limits.
pub async fn serve_metrics_with(
    listener: TcpListener,
    registry: Arc<Registry>,
    limits: HttpLimits,
) {
    let never = tokio_util::sync::CancellationToken::new();
    isthmus_admin::serve(
        listener,
        Endpoints::metrics(registry),
        Gate::new(limits),
        never,
    )
    .await;
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
