//! Admin HTTP: `/metrics`, `/healthz`, `/readyz`, `/config`.

use crate::http1::{self, Gate};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
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
    let make = move || {
        let (state, registry) = (state.clone(), registry.clone());
        hyper::service::service_fn(move |req| {
            let response = route(&req, state.as_ref(), &registry);
            async move { Ok::<_, std::convert::Infallible>(response) }
        })
    };
    http1::serve(listener, gate, make, stop).await;
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
