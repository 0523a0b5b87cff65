//! The admin routes every component serves the same way: `/metrics` (OpenMetrics text of the
//! component's registry), `/healthz`, and, where the component has them, `/readyz`, `/config`
//! and `/config/hash`. Only `GET` and `HEAD`.
//!
//! `/metrics` and `/config` can be megabytes (thousands of routes): each is encoded by one
//! request at a time, and a body a slow client still holds is handed to the next ones
//! ([`SharedBody`]). `/config/hash` is the small answer for whoever only compares the hash
//! (the controller's rollout check).

use crate::bodies::SharedBody;
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

/// The configuration a component serves.
pub trait ConfigSource: Send + Sync {
    /// The hash of the configuration in effect: `/config/hash` answers `{"hash": …}`.
    fn hash(&self) -> String;
    /// The whole JSON body of `/config` (it includes the hash).
    fn json(&self) -> serde_json::Value;
}

/// What one component's admin endpoint serves.
#[derive(Clone)]
pub struct Endpoints {
    /// Encoded for `/metrics`.
    pub registry: Arc<Registry>,
    /// `/readyz`: `200 ready` when the function says so, else `503` with the given body
    /// (`"draining\n"`); `None`: no `/readyz`.
    pub ready: Option<(ReadyFn, &'static str)>,
    /// `/config` and `/config/hash`; `None`: neither.
    pub config: Option<Arc<dyn ConfigSource>>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("readyz", &self.ready.is_some())
            .field("config", &self.config.is_some())
            .finish_non_exhaustive()
    }
}

/// [`Endpoints`] with the bodies it shares between requests.
#[derive(Debug)]
struct Served {
    endpoints: Endpoints,
    metrics: SharedBody,
    config: SharedBody,
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

    fn not_found(&self) -> String {
        let mut s = String::from("not found; try /metrics, /healthz");
        if self.ready.is_some() {
            s += ", /readyz";
        }
        if self.config.is_some() {
            s += ", /config, /config/hash";
        }
        s + "\n"
    }
}

impl Served {
    fn new(endpoints: Endpoints) -> Self {
        Served {
            endpoints,
            metrics: SharedBody::default(),
            config: SharedBody::default(),
        }
    }

    /// The answer to one request.
    async fn answer(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        self.answer_to(req.method(), req.uri().path()).await
    }

    async fn answer_to(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        }
        let e = &self.endpoints;
        match (path, &e.ready, &e.config) {
            ("/metrics", _, _) => {
                let encode = || {
                    let mut body = String::new();
                    prometheus_client::encoding::text::encode(&mut body, &e.registry).ok()?;
                    Some(Bytes::from(body))
                };
                match self.metrics.get(encode).await {
                    Some(body) => reply(StatusCode::OK, OPENMETRICS, body),
                    None => text(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n"),
                }
            }
            ("/healthz", _, _) => text(StatusCode::OK, "ok\n"),
            ("/readyz", Some((ready, _)), _) if ready() => text(StatusCode::OK, "ready\n"),
            ("/readyz", Some((_, not_ready)), _) => {
                text(StatusCode::SERVICE_UNAVAILABLE, not_ready)
            }
            ("/config", _, Some(config)) => {
                let encode = || {
                    let body = serde_json::to_string_pretty(&config.json()).ok()?;
                    Some(Bytes::from(body + "\n"))
                };
                let body = self.config.get(encode).await.unwrap_or_default();
                reply(StatusCode::OK, "application/json", body)
            }
            ("/config/hash", _, Some(config)) => {
                let body = serde_json::json!({ "hash": config.hash() }).to_string() + "\n";
                reply(StatusCode::OK, "application/json", Bytes::from(body))
            }
            _ => reply(
                StatusCode::NOT_FOUND,
                TEXT,
                Bytes::from(self.endpoints.not_found()),
            ),
        }
    }
}

/// Serves `endpoints` on `listener` until `stop` fires, under the limits of `gate`.
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    gate: Arc<Gate>,
    stop: CancellationToken,
) {
    let served = Arc::new(Served::new(endpoints));
    let make = move || {
        let served = served.clone();
        hyper::service::service_fn(move |req| {
            let served = served.clone();
            async move { Ok::<_, Infallible>(served.answer(&req).await) }
        })
    };
    http1::serve(listener, gate, make, stop).await;
}

const TEXT: &str = "text/plain; charset=utf-8";

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    reply(status, TEXT, Bytes::from_static(body.as_bytes()))
}

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
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

    struct Fixed;

    impl ConfigSource for Fixed {
        fn hash(&self) -> String {
            "abc".into()
        }
        fn json(&self) -> serde_json::Value {
            serde_json::json!({"hash": "abc", "config": {"big": "x".repeat(100_000)}})
        }
    }

    async fn body(r: Response<Full<Bytes>>) -> Bytes {
        use http_body_util::BodyExt;
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn routes_a_component_has_and_not_the_others() {
        let mut e = Endpoints::metrics(Arc::new(Registry::default()));
        async fn status(e: &Endpoints, m: Method, p: &str) -> u16 {
            Served::new(e.clone())
                .answer_to(&m, p)
                .await
                .status()
                .as_u16()
        }
        assert_eq!(status(&e, Method::GET, "/metrics").await, 200);
        assert_eq!(status(&e, Method::GET, "/healthz").await, 200);
        assert_eq!(status(&e, Method::GET, "/readyz").await, 404);
        assert_eq!(status(&e, Method::POST, "/metrics").await, 405);
        e.ready = Some((Arc::new(|| false), "draining\n"));
        assert_eq!(status(&e, Method::GET, "/readyz").await, 503);
        assert_eq!(status(&e, Method::GET, "/config").await, 404);
        assert_eq!(status(&e, Method::GET, "/config/hash").await, 404);
        e.config = Some(Arc::new(Fixed));
        assert_eq!(status(&e, Method::GET, "/config").await, 200);
        assert_eq!(
            e.not_found(),
            "not found; try /metrics, /healthz, /readyz, /config, /config/hash\n"
        );
    }

    #[tokio::test]
    async fn the_hash_alone_is_small() {
        let mut e = Endpoints::metrics(Arc::new(Registry::default()));
        e.config = Some(Arc::new(Fixed));
        let served = Served::new(e);
        let hash = body(served.answer_to(&Method::GET, "/config/hash").await).await;
        assert_eq!(&hash[..], b"{\"hash\":\"abc\"}\n");
        let full = body(served.answer_to(&Method::GET, "/config").await).await;
        assert!(full.len() > 100_000);
    }
}
