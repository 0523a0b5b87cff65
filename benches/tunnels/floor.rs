//! The tunnel path's floor (`relays`): the hops a tunnel's bytes take here, with nothing of a
//! tunnel in them. Two processes (this bench binary re-executed) stand where the tunnel server
//! and agent stand: the front takes `CONNECT` on a Unix socket, as the isthmus server does,
//! and opens a TCP connection per stream across the same link and the same CONNECT proxy to
//! the back, which dials the target; both copy bytes 64 KiB at a time. No TLS, no HTTP/2, no
//! multiplexing: what a tunnel costs beyond this is its own work; what this costs is the
//! price of the hops (a Unix socket, three TCP connections, two more processes) on this
//! machine, which no tunnel on this path can go below.
//!
//! `tls-relays` (run only when named) are the same relays with TLS 1.3 between front and back,
//! as the tunnel's session has: rustls with the tunnel's provider (ring) and the tunnel's
//! buffers (64 KiB read under the TLS layer, 256 KiB of TLS queued for writing), one TLS
//! connection per stream, still no HTTP/2. What a tunnel that encrypts in user space with
//! rustls cannot go below; what isthmus costs beyond it is HTTP/2 and its own bookkeeping.
//! (A stream's TLS handshake makes its calls dearer than a tunnel's: read its throughput.)
//! `h2-relays` add HTTP/2 on one session ([`super::h2floor`]).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

/// `front:<unix socket> <back's address as reached through the link>` or `back:<address>`;
/// with TLS between them, `tls-front:<unix socket> <back's address> <CA file>` and
/// `tls-back:<address> <certificate file> <key file>`; with HTTP/2 over TLS ([`super::h2floor`]),
/// `h2-front:` and `h2-back:` with the same arguments.
pub const ROLE_ENV: &str = "TUNNELS_BENCH_RELAY";

/// Bytes per read, as the link relay and the CONNECT proxy.
const BUF: usize = 64 * 1024;

/// As the tunnel's sessions (`tunnel/src/http2.rs`): bytes read from the socket under the TLS
/// layer at once, and TLS bytes queued for writing.
const TLS_READ_BUF: usize = 64 * 1024;
const TLS_WRITE_BUF: usize = 256 * 1024;

/// The name the back's certificate carries.
pub const TLS_NAME: &str = "relay.test";

/// The child's `main`: one of the two relays, until killed.
pub fn child_main(role: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (kind, rest) = role.split_once(':').unwrap_or_default();
        let args: Vec<&str> = rest.split(' ').collect();
        match (kind, args.as_slice()) {
            ("front", [sock, back]) => front(sock, back.parse().unwrap(), None).await,
            ("back", [addr]) => back(addr.parse().unwrap(), None).await,
            ("tls-front", [sock, back, ca]) => {
                front(sock, back.parse().unwrap(), Some(connector(ca))).await
            }
            ("tls-back", [addr, cert, key]) => {
                back(addr.parse().unwrap(), Some(acceptor(cert, key))).await
            }
            ("h2-front", [sock, back, ca]) => {
                super::h2floor::front(sock, back.parse().unwrap(), ca).await
            }
            ("h2-back", [addr, cert, key]) => {
                super::h2floor::back(addr.parse().unwrap(), cert, key).await
            }
            _ => panic!("{ROLE_ENV}={role}"),
        }
    });
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub fn connector(ca: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(Path::new(ca)).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

pub fn acceptor(cert: &str, key: &str) -> TlsAcceptor {
    let certs = CertificateDer::pem_file_iter(Path::new(cert))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(Path::new(key)).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

/// Reads a head up to its blank line (small, byte by byte: once per stream).
pub async fn head<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 || head.len() > 8192 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

async fn copy<A, B>(mut a: A, mut b: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, BUF, BUF).await;
}

async fn front(sock: &str, back: SocketAddr, tls: Option<TlsConnector>) {
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).unwrap();
    while let Ok((mut c, _)) = l.accept().await {
        let tls = tls.clone();
        tokio::spawn(async move {
            let Ok(h) = head(&mut c).await else { return };
            let target = h.split_whitespace().nth(1).unwrap_or_default().to_owned();
            // Through the CONNECT proxy (which routes every CONNECT to the back), then the
            // target for the back (inside TLS when there is TLS).
            let target = format!("{target}\r\n\r\n");
            let Some(tls) = tls else {
                let Ok(mut u) = TcpStream::connect(back).await else {
                    return;
                };
                let _ = u.set_nodelay(true);
                let req = format!("CONNECT back HTTP/1.1\r\n\r\n{target}");
                if u.write_all(req.as_bytes()).await.is_err() || head(&mut u).await.is_err() {
                    return;
                }
                return answer_and_copy(c, u).await;
            };
            let Ok(mut s) = tls_to_back(back, &tls).await else {
                return;
            };
            if s.write_all(target.as_bytes()).await.is_err() {
                return;
            }
            answer_and_copy(c, s).await;
        });
    }
}

/// The way to the back with TLS between: TCP through the CONNECT proxy (which routes every
/// CONNECT to the back), then TLS 1.3 with the tunnel's session buffers.
pub async fn tls_to_back(
    back: SocketAddr,
    tls: &TlsConnector,
) -> std::io::Result<client::TlsStream<BufReader<TcpStream>>> {
    let mut u = TcpStream::connect(back).await?;
    let _ = u.set_nodelay(true);
    u.write_all(b"CONNECT back HTTP/1.1\r\n\r\n").await?;
    head(&mut u).await?;
    let name = ServerName::try_from(TLS_NAME).unwrap();
    let mut s = tls
        .connect(name, BufReader::with_capacity(TLS_READ_BUF, u))
        .await?;
    s.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUF));
    Ok(s)
}

/// The back's side of that TLS, with the same buffers. (The bench's readiness probe connects
/// and closes: its handshake fails.)
pub async fn tls_from_front(
    tls: &TlsAcceptor,
    c: TcpStream,
) -> std::io::Result<server::TlsStream<BufReader<TcpStream>>> {
    let _ = c.set_nodelay(true);
    let mut s = tls
        .accept(BufReader::with_capacity(TLS_READ_BUF, c))
        .await?;
    s.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUF));
    Ok(s)
}

/// Tells the caller its CONNECT succeeded, then copies between it and the way to the back.
async fn answer_and_copy<S>(mut c: tokio::net::UnixStream, s: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.is_ok() {
        copy(c, s).await;
    }
}

async fn back(addr: SocketAddr, tls: Option<TlsAcceptor>) {
    let l = TcpListener::bind(addr).await.unwrap();
    while let Ok((c, _)) = l.accept().await {
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => {
                    let _ = c.set_nodelay(true);
                    serve(c).await
                }
                Some(tls) => {
                    if let Ok(s) = tls_from_front(&tls, c).await {
                        serve(s).await
                    }
                }
            }
        });
    }
}

/// The back's stream: the target's head, then the target.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut c: S) {
    let Ok(h) = head(&mut c).await else { return };
    let Ok(target) = h.trim().parse::<SocketAddr>() else {
        return;
    };
    let Ok(t) = TcpStream::connect(target).await else {
        return;
    };
    let _ = t.set_nodelay(true);
    copy(c, t).await;
}
