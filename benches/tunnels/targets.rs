//! The shoot's targets, run as a child process (this bench binary re-executed) inside the
//! shoot's network namespace, so that every peer — including OpenVPN's TUN route — reaches the
//! same processes: an HTTPS admission webhook and a byte source.
//!
//! Fixed ports are safe here: the namespace exists for one bench run alone.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// Set (to the scratch directory holding `webhook.crt`/`webhook.key`) in the child's environment.
pub const ROLE_ENV: &str = "TUNNELS_BENCH_TARGETS";
/// The HTTPS webhook: answers every POST with an allowing AdmissionReview and closes.
pub const WEBHOOK_PORT: u16 = 8443;
/// Sends the number of bytes asked for (8-byte big-endian request); 0 means hold the stream
/// open idle until the client closes it.
pub const SOURCE_PORT: u16 = 8444;
pub const WEBHOOK_NAME: &str = "webhook.bench";
pub const ALLOWED: &str =
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true}}"#;

/// The child's `main`: serves until its standard input closes (the bench process ended).
pub fn child_main(dir: &Path) {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join("webhook.crt"))
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("webhook.key")).unwrap();
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let webhook = TcpListener::bind(("0.0.0.0", WEBHOOK_PORT)).await.unwrap();
        let source = TcpListener::bind(("0.0.0.0", SOURCE_PORT)).await.unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        tokio::spawn(async move {
            while let Ok((s, _)) = webhook.accept().await {
                let a = acceptor.clone();
                tokio::spawn(async move {
                    let _ = s.set_nodelay(true);
                    let _ = serve_webhook(a, s).await;
                });
            }
        });
        tokio::spawn(async move {
            while let Ok((s, _)) = source.accept().await {
                tokio::spawn(serve_source(s));
            }
        });
        println!("ready");
        // Ends with the parent: its end of our stdin closes.
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {}
        })
        .await
        .unwrap();
    });
}

async fn serve_webhook(acceptor: TlsAcceptor, tcp: TcpStream) -> std::io::Result<()> {
    let mut io = acceptor.accept(tcp).await?;
    // The lab's webhook speaks the same HTTP; what a request asks is not looked at.
    isthmus_lab::webhook::read_request(&mut io).await?;
    isthmus_lab::webhook::answer_json(&mut io, ALLOWED).await
}

async fn serve_source(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    crate::byte_source::serve(&mut s).await;
}
