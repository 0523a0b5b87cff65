//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz` (the routes and server of
//! `isthmus-admin`, shared with the proxy and the controller).

use isthmus_admin::http1::Gate;
use isthmus_admin::Endpoints;
use isthmus_config::HttpLimits;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Whether the component is ready (server: ≥ 1 live agent session).
pub type ReadyFn = isthmus_admin::routes::ReadyFn;

/// Serves admin HTTP on `listener` until `shutdown`, with the default [`HttpLimits`].
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    ready: ReadyFn,
    shutdown: CancellationToken,
) {
    serve_with_limits(listener, registry, ready, HttpLimits::default(), shutdown).await;
}

/// Serves admin HTTP on `listener` until `shutdown`: header timeout, head size cap and a
/// connection cap that closes the oldest connection, so `/readyz` answers under any load.
pub async fn serve_with_limits(
    listener: TcpListener,
    registry: Arc<Registry>,
    ready: ReadyFn,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let endpoints = Endpoints {
        registry,
        ready: Some((ready, "not ready\n")),
        config: None,
    };
    isthmus_admin::serve(listener, endpoints, Gate::new(limits), shutdown).await;
}
