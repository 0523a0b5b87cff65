//! The admin HTTP endpoint: `/metrics`, `/healthz`, `/readyz`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Whether the component is ready (server: ≥ 1 live agent session).
pub type ReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// Serves admin HTTP on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    ready: ReadyFn,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (registry, ready) = (registry.clone(), ready.clone());
        let service = hyper::service::service_fn(move |req| {
            let r = answer(&req, &registry, &ready);
            async move { Ok::<_, Infallible>(r) }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
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
