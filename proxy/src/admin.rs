//! Admin HTTP: `/metrics`, `/healthz`, `/readyz`, `/config` (the routes and server of
//! `isthmus-admin`, shared with the tunnel and the controller).

use isthmus_admin::http1::Gate;
use isthmus_admin::Endpoints;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the admin endpoint reports; implemented by the proxy (and reusable by other
/// components that serve the same endpoints).
pub trait AdminState: Send + Sync + 'static {
    /// `/readyz` answers 200 when true, 503 otherwise.
    fn ready(&self) -> bool;
    /// The JSON body of `/config`.
    fn config_json(&self) -> serde_json::Value;
}

/// Serves admin HTTP on `listener` until `stop` fires, under the limits of `gate`.
pub async fn serve(
    listener: TcpListener,
    state: Arc<dyn AdminState>,
    registry: Arc<Registry>,
    gate: Arc<Gate>,
    stop: CancellationToken,
) {
    let ready = state.clone();
    let endpoints = Endpoints {
        registry,
        ready: Some((Arc::new(move || ready.ready()), "draining\n")),
        config: Some(Arc::new(move || state.config_json())),
    };
    isthmus_admin::serve(listener, endpoints, gate, stop).await;
}
