//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use isthmus_config::HttpLimits;
use isthmus_proxy::http1::Gate;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Whether the component is ready (server: ≥ 1 live agent session).
pub type ReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;

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
    let make = move || {
        let (registry, ready) = (registry.clone(), ready.clone());
        hyper::service::service_fn(move |req| {
            let r = answer(&req, &registry, &ready);
            async move { Ok::<_, Infallible>(r) }
        })
    };
    isthmus_proxy::http1::serve(listener, Gate::new(limits), make, shutdown).await;
}

fn answer(
    req: &Request<hyper::body::Incoming>,
    registry: &Registry,
    ready: &ReadyFn,
) -> Response<Full<Bytes>> {
    let (status, body) = match req.uri().path() {
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => (StatusCode::OK, text),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        "/healthz" => (StatusCode::OK, "ok\n".into()),
        "/readyz" if ready() => (StatusCode::OK, "ready\n".into()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
        _ => (StatusCode::NOT_FOUND, "not found\n".into()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}
