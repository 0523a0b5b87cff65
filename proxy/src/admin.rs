//! Admin HTTP: `/metrics`, `/healthz`, `/readyz`, `/config`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// What the admin endpoint reports; implemented by the proxy (and reusable by other
/// components that serve the same endpoints).
pub trait AdminState: Send + Sync + 'static {
    /// `/readyz` answers 200 when true, 503 otherwise.
    fn ready(&self) -> bool;
    /// The JSON body of `/config`.
    fn config_json(&self) -> serde_json::Value;
}

/// Serves admin HTTP on `listener` until `stop` fires.
pub async fn serve(
    listener: TcpListener,
    state: Arc<dyn AdminState>,
    registry: Arc<Registry>,
    stop: CancellationToken,
) {
    loop {
        let (sock, _) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (state, registry) = (state.clone(), registry.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = route(&req, state.as_ref(), &registry);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(sock), service)
                .await
            {
                debug!(error = %e, "admin connection");
            }
        });
    }
}

fn route(
    req: &Request<Incoming>,
    state: &dyn AdminState,
    registry: &Registry,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                ),
                Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n"),
            }
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if state.ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
        "/config" => {
            let body = serde_json::to_string_pretty(&state.config_json()).unwrap_or_default();
            reply(StatusCode::OK, "application/json", body + "\n")
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics, /healthz, /readyz, /config\n",
        ),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body.to_owned())
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    r
}
