//! The kube-apiserver-like callers: HTTP CONNECT with mTLS to a seed's tunnel server, then TLS
//! to the webhook through the tunnel, `POST` an AdmissionReview; every call is recorded.
//! Like kube-apiserver for an admission webhook, a failed call is not retried.

use super::certs::LabTls;
use super::http::{read_head, status};
use super::{Call, Via, WEBHOOK_NAME};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

/// Pause between two calls of a worker: continuous, without starving etcd of the 2 cores.
const PAUSE: Duration = Duration::from_millis(40);
/// Longest a single call may take before it counts as failed (kube-apiserver's default
/// webhook timeout is 10 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Parallel callers.
const WORKERS: usize = 2;

/// Where the callers send their calls: the source kube-apiserver only, both (the destination
/// kube-apiserver runs too, over the temporary agent), or the destination only (after the DNS
/// move).
pub(super) const ROUTE_SOURCE: u8 = 0;
pub(super) const ROUTE_BOTH: u8 = 1;
pub(super) const ROUTE_DESTINATION: u8 = 2;

/// What the callers share with the lab.
#[derive(Debug, Clone)]
pub(super) struct Callers {
    pub(super) epoch: Instant,
    pub(super) tls: LabTls,
    /// The CONNECT endpoints of the source and destination tunnel servers.
    pub(super) connects: [SocketAddr; 2],
    /// The webhook as the agents reach it (the CONNECT target).
    pub(super) webhook: SocketAddr,
    pub(super) route: Arc<AtomicU8>,
    pub(super) calls: Arc<Mutex<Vec<Call>>>,
    pub(super) stop: CancellationToken,
}

impl Callers {
    /// Starts the workers; they run until `stop`, finishing the call in flight.
    pub(super) fn spawn(&self) -> Vec<JoinHandle<()>> {
        (0..WORKERS)
            .map(|w| {
                let c = self.clone();
                tokio::spawn(async move { c.work(w).await })
            })
            .collect()
    }

    async fn work(self, w: usize) {
        let mut i = w;
        while !self.stop.is_cancelled() {
            let via = match self.route.load(Ordering::Relaxed) {
                ROUTE_SOURCE => Via::Source,
                ROUTE_BOTH if i.is_multiple_of(2) => Via::Source,
                _ => Via::Destination,
            };
            // Every other call is slow in the webhook, so that streams are open when a
            // session drains (the drain must let them finish).
            let slow = (i / 2) % 2 == 1;
            i += 1;
            let connect = self.connects[usize::from(via == Via::Destination)];
            let start = Instant::now();
            let result = tokio::time::timeout(CALL_TIMEOUT, self.call(connect, slow))
                .await
                .unwrap_or_else(|_| Err("timed out".into()));
            // A slow call is held SLOW (300 ms) by the webhook on purpose; counted in, it made
            // a second band at 3.3 RTT + 300 ms (~460 ms at 50 ms RTT), read as "9 RTT" (issue
            // 17). The latency recorded is the call's own: the tunnel, the link, the handshakes.
            let held = if slow {
                super::endpoint::SLOW
            } else {
                Duration::ZERO
            };
            let latency = start.elapsed().saturating_sub(held);
            self.calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Call {
                    start_ms: crate::clock::ms(start - self.epoch),
                    latency_ms: crate::clock::ms(latency),
                    via,
                    ok: result.is_ok(),
                    error: result.err(),
                });
            tokio::time::sleep(PAUSE).await;
        }
    }

    /// One call as kube-apiserver makes it.
    async fn call(&self, connect: SocketAddr, slow: bool) -> Result<(), String> {
        let tcp = TcpStream::connect(connect)
            .await
            .map_err(|e| format!("connect endpoint: {e}"))?;
        let name = ServerName::try_from(super::VPN_NAME).map_err(|e| e.to_string())?;
        let mut proxy = TlsConnector::from(self.tls.connect.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("connect endpoint TLS: {e}"))?;
        let target = self.webhook;
        let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        proxy
            .write_all(req.as_bytes())
            .await
            .map_err(|e| format!("CONNECT: {e}"))?;
        let head = read_head(&mut proxy)
            .await
            .map_err(|e| format!("CONNECT answer: {e}"))?;
        if status(&head) != Some(200) {
            return Err(format!("CONNECT answered {:?}", head.lines().next()));
        }
        let name = ServerName::try_from(WEBHOOK_NAME).map_err(|e| e.to_string())?;
        let mut io = TlsConnector::from(self.tls.to_webhook.clone())
            .connect(name, proxy)
            .await
            .map_err(|e| format!("webhook TLS: {e}"))?;
        let path = if slow { "/slow" } else { "/validate" };
        let body = r#"{"kind":"AdmissionReview"}"#;
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {WEBHOOK_NAME}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        io.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("request: {e}"))?;
        let mut answer = Vec::new();
        io.read_to_end(&mut answer)
            .await
            .map_err(|e| format!("answer: {e}"))?;
        let answer = String::from_utf8_lossy(&answer);
        if status(&answer) == Some(200) && answer.ends_with(super::endpoint::ALLOWED) {
            Ok(())
        } else {
            Err(format!("webhook answered {:?}", answer.lines().next()))
        }
    }
}
