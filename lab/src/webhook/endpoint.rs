//! The HTTPS webhook of the shoot: answers every request with an allowing AdmissionReview,
//! `/slow` after [`SLOW`]. It is served by the lab process on the host end of the shoot's
//! veth, where the shoot's agents dial it. A review from a real kube-apiserver carries
//! `request.uid`, which the answer must echo; those reviews are counted ([`Served`]), per
//! caller: the client certificate it presented, so that each seed's kube-apiserver is told
//! apart (tests/seeds/shoot_webhook.rs, where the webhook runs on its own).

use super::http::{answer_json, read_request};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// How long `/slow` takes: streams are open when a session drains.
pub(super) const SLOW: Duration = Duration::from_millis(300);

/// The answer an admission webhook gives.
pub(super) const ALLOWED: &str =
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true}}"#;

/// AdmissionReviews with a `request.uid` (kube-apiserver's) answered, and connections that
/// failed before an answer (TLS, a short request), per caller.
pub type Served = Arc<Reviews>;

/// See [`Served`]. Callers are keyed by the leaf certificate they presented (DER; empty
/// without one).
#[derive(Debug, Default)]
pub struct Reviews {
    answered: Mutex<BTreeMap<Vec<u8>, Vec<Answered>>>,
    failed: Mutex<usize>,
}

/// One answered review: when its connection was accepted, and how long the webhook took from
/// there to its answer (the TLS handshake, which crosses the tunnel to the caller and back,
/// and the request's read; not the caller's own wait).
#[derive(Debug, Clone, Copy)]
pub struct Answered {
    pub accepted: Instant,
    pub ms: f64,
}

impl Reviews {
    /// Every caller's answered reviews.
    pub fn total(&self) -> usize {
        self.answered().values().map(Vec::len).sum()
    }

    /// Answered reviews of the caller that presented `cert` (DER).
    pub fn from(&self, cert: &[u8]) -> usize {
        self.answered().get(cert).map_or(0, Vec::len)
    }

    /// Each answered review of the caller that presented `cert`, in the order answered.
    pub fn answered_to(&self, cert: &[u8]) -> Vec<Answered> {
        self.answered().get(cert).cloned().unwrap_or_default()
    }

    /// Connections that ended without an answer.
    pub fn failed(&self) -> usize {
        *self.failed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answered(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<Answered>>> {
        self.answered.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves the webhook on `listen` (port 0: any) until `stop`; returns the bound address.
pub async fn start(
    listen: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    stop: CancellationToken,
    served: Served,
) -> Result<SocketAddr> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| Error::io(format!("webhook listen {listen}"), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("webhook listener", e))?;
    let acceptor = TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = stop.cancelled() => return,
                r = listener.accept() => match r {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook accept failed");
                        isthmus_admin::backoff::after_accept_error(&e).await;
                        continue;
                    }
                },
            };
            let acceptor = acceptor.clone();
            let served = served.clone();
            tokio::spawn(async move {
                if let Err(e) = serve(acceptor, tcp, &served).await {
                    // The caller records the failure; this says what the webhook saw.
                    tracing::warn!(error = %e, "webhook connection failed");
                    *served.failed.lock().unwrap_or_else(PoisonError::into_inner) += 1;
                }
            });
        }
    });
    Ok(addr)
}

async fn serve(acceptor: TlsAcceptor, tcp: TcpStream, served: &Reviews) -> std::io::Result<()> {
    let accepted = Instant::now();
    let mut io = acceptor.accept(tcp).await?;
    let tls_ms = crate::clock::ms(accepted.elapsed());
    let (head, body) = read_request(&mut io).await?;
    // Where a slow shoot API write spends its time (RUST_LOG=isthmus_lab::webhook=debug):
    // when its review reached the webhook, against kube-apiserver's audit log.
    tracing::debug!(
        review = %review_name(&body),
        tls_ms,
        read_ms = crate::clock::ms(accepted.elapsed()),
        "webhook review"
    );
    if head.starts_with("POST /slow ") {
        tokio::time::sleep(SLOW).await;
    }
    match uid(&body) {
        Some(uid) => {
            let caller = io
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec())
                .unwrap_or_default();
            let review = serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": true},
            })
            .to_string();
            answer_json(&mut io, &review).await?;
            let ms = crate::clock::ms(accepted.elapsed());
            served
                .answered()
                .entry(caller)
                .or_default()
                .push(Answered { accepted, ms });
            Ok(())
        }
        None => answer_json(&mut io, ALLOWED).await,
    }
}

/// `OPERATION name` of an AdmissionReview's request (empty for the lab caller's).
fn review_name(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let r = &v["request"];
    format!(
        "{} {}",
        r["operation"].as_str().unwrap_or(""),
        r["name"].as_str().unwrap_or("")
    )
}

/// The `request.uid` of an AdmissionReview, if it has one.
fn uid(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    Some(v.get("request")?.get("uid")?.as_str()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::{start, Served};
    use isthmus_testkit::TestPki;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Each caller's reviews under the certificate it presented.
    #[tokio::test]
    async fn reviews_are_counted_per_client_certificate() {
        let pki = TestPki::new();
        let tls = pki.server_config(&pki.server_cert(&["webhook.lab"]), true, &["http/1.1"]);
        let stop = tokio_util::sync::CancellationToken::new();
        let served = Served::default();
        let addr = start(
            ([127, 0, 0, 1], 0).into(),
            tls,
            stop.clone(),
            served.clone(),
        )
        .await
        .unwrap();
        let callers = [pki.client_cert("a"), pki.client_cert("b")];
        for (caller, n) in callers.iter().zip([2, 1]) {
            for _ in 0..n {
                let config = pki.client_config(Some(caller), &["http/1.1"]);
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("webhook.lab").unwrap();
                let mut io = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await
                    .unwrap();
                let body = r#"{"kind":"AdmissionReview","request":{"uid":"1"}}"#;
                let req = format!(
                    "POST /validate HTTP/1.1\r\nHost: webhook.lab\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                io.write_all(req.as_bytes()).await.unwrap();
                let mut answer = String::new();
                io.read_to_string(&mut answer).await.unwrap();
                assert!(answer.contains(r#""uid":"1""#), "{answer}");
            }
        }
        stop.cancel();
        let [a, b] = callers.each_ref().map(|c| served.from(&c.chain[0]));
        assert_eq!((a, b, served.total(), served.failed()), (2, 1, 3, 0));
        // Each answered review's time: it took the handshake and the request at least.
        let times = served.answered_to(&callers[0].chain[0]);
        assert_eq!(times.len(), 2);
        assert!(times.iter().all(|t| t.ms > 0.0), "{times:?}");
    }

    #[test]
    fn a_review_from_kube_apiserver_has_its_uid_echoed_and_the_labs_own_has_none() {
        let review =
            br#"{"kind":"AdmissionReview","request":{"uid":"705ab4f5","operation":"CREATE"}}"#;
        assert_eq!(super::uid(review).as_deref(), Some("705ab4f5"));
        assert_eq!(super::uid(br#"{"kind":"AdmissionReview"}"#), None);
        assert_eq!(super::uid(b"not json"), None);
    }
}
