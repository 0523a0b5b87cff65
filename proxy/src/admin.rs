//! Admin HTTP: `/metrics`, `/healthz`, `/readyz`, `/config`, `/config/hash` (the routes and
//! server of `isthmus-admin`, shared with the tunnel and the controller).

use isthmus_admin::http1::Gate;
use isthmus_admin::{ConfigSource, Endpoints};
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
    /// The hash of the configuration in effect (`/config/hash`), without building the
    /// whole `/config`.
    fn config_hash(&self) -> String;
}

/// The state's configuration as `isthmus-admin` asks for it.
struct Config(Arc<dyn AdminState>);

impl ConfigSource for Config {
    fn hash(&self) -> String {
        self.0.config_hash()
    }
    fn json(&self) -> serde_json::Value {
        self.0.config_json()
    }
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
        ready: Some((
            Arc::new(move || ready.ready()),
            "not ready: warming up or draining\n",
        )),
        config: Some(Arc::new(Config(state))),
    };
    isthmus_admin::serve(listener, endpoints, gate, stop).await;
}
