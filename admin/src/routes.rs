//! The admin routes every component serves the same way: `/metrics` (OpenMetrics text of the
//! component's registry), `/healthz`, and, where the component has them, `/readyz` and
//! `/config`. Only `GET` and `HEAD`.

use crate::http1::{self, Gate};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether the component is ready.
pub type ReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;
/// The JSON body of `/config`.
pub type ConfigFn = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// What one component's admin endpoint serves.
#[derive(Clone)]
pub struct Endpoints {
    /// Encoded for `/metrics`.
    pub registry: Arc<Registry>,
    /// `/readyz`: `200 ready` when the function says so, else `503` with the given body
    /// (`"draining\n"`); `None`: no `/readyz`.
    pub ready: Option<(ReadyFn, &'static str)>,
    /// `/config`; `None`: no `/config`.
    pub config: Option<ConfigFn>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("readyz", &self.ready.is_some())
            .field("config", &self.config.is_some())
            .finish_non_exhaustive()
    }
}

impl Endpoints {
    /// `/metrics` and `/healthz` only.
    pub fn metrics(registry: Arc<Registry>) -> Self {
        Endpoints {
            registry,
            ready: None,
            config: None,
        }
    }

    /// The answer to one request.
    pub fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        self.answer_to(req.method(), req.uri().path())
    }

    fn answer_to(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
        }
        match (path, &self.ready, &self.config) {
            ("/metrics", _, _) => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, &self.registry) {
                    Ok(()) => reply(StatusCode::OK, OPENMETRICS, body),
                    Err(_) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "encoding failed\n".into(),
                    ),
                }
            }
            ("/healthz", _, _) => text(StatusCode::OK, "ok\n".into()),
            ("/readyz", Some((ready, _)), _) if ready() => text(StatusCode::OK, "ready\n".into()),
            ("/readyz", Some((_, not_ready)), _) => {
                text(StatusCode::SERVICE_UNAVAILABLE, (*not_ready).into())
            }
            ("/config", _, Some(config)) => {
                let body = serde_json::to_string_pretty(&config()).unwrap_or_default();
                reply(StatusCode::OK, "application/json", body + "\n")
            }
            _ => text(StatusCode::NOT_FOUND, self.not_found()),
        }
    }

    fn not_found(&self) -> String {
        let mut s = String::from("not found; try /metrics, /healthz");
        if self.ready.is_some() {
            s += ", /readyz";
        }
        if self.config.is_some() {
            s += ", /config";
        }
        s + "\n"
    }
}

/// Serves `endpoints` on `listener` until `stop` fires, under the limits of `gate`.
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    gate: Arc<Gate>,
    stop: CancellationToken,
) {
    let endpoints = Arc::new(endpoints);
    let make = move || {
        let endpoints = endpoints.clone();
        hyper::service::service_fn(move |req| {
            let response = endpoints.answer(&req);
            async move { Ok::<_, Infallible>(response) }
        })
    };
    http1::serve(listener, gate, make, stop).await;
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_a_component_has_and_not_the_others() {
        let mut e = Endpoints::metrics(Arc::new(Registry::default()));
        let status = |e: &Endpoints, m: Method, p: &str| e.answer_to(&m, p).status().as_u16();
        assert_eq!(status(&e, Method::GET, "/metrics"), 200);
        assert_eq!(status(&e, Method::GET, "/healthz"), 200);
        assert_eq!(status(&e, Method::GET, "/readyz"), 404);
        assert_eq!(status(&e, Method::POST, "/metrics"), 405);
        e.ready = Some((Arc::new(|| false), "draining\n"));
        assert_eq!(status(&e, Method::GET, "/readyz"), 503);
        assert_eq!(status(&e, Method::GET, "/config"), 404);
        e.config = Some(Arc::new(|| serde_json::json!({})));
        assert_eq!(status(&e, Method::GET, "/config"), 200);
        assert_eq!(
            e.not_found(),
            "not found; try /metrics, /healthz, /readyz, /config\n"
        );
    }
}
