//! rustls configurations and a TLS echo server that names itself in every reply.

use crate::{CertKey, TestPki};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{client::TlsStream, TlsAcceptor, TlsConnector};

/// A server config presenting `id`, without client authentication, no ALPN.
pub fn server_config(pki: &TestPki, id: &CertKey) -> Arc<ServerConfig> {
    pki.server_config(id, false, &[])
}

/// A client config trusting `pki`'s CA, without a client certificate, no ALPN.
pub fn client_config(pki: &TestPki) -> Arc<ClientConfig> {
    pki.client_config(None, &[])
}

/// Connects to `addr` and completes a TLS handshake with SNI `name`.
pub async fn tls_connect(
    config: Arc<ClientConfig>,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    TlsConnector::from(config).connect(name, tcp).await
}

/// Like [`tls_connect`], from the local address `from` (any 127.0.0.0/8 address works on Linux
/// loopback), so that a test can play several sources.
pub async fn tls_connect_from(
    config: Arc<ClientConfig>,
    from: std::net::IpAddr,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let socket = match from {
        std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    let tcp = socket.connect(addr).await?;
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    TlsConnector::from(config).connect(name, tcp).await
}

/// A TLS server on `127.0.0.1:0` that answers every chunk it reads with
/// `<label>:<chunk>`, so a test can tell which upstream a connection reached.
#[derive(Debug)]
pub struct TlsEchoServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsEchoServer {
    /// Starts serving `config` under the name `label`.
    pub async fn start(label: &str, config: Arc<ServerConfig>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(config);
        let label = label.to_owned();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, label) = (acceptor.clone(), label.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                let mut reply = format!("{label}:").into_bytes();
                                reply.extend_from_slice(&buf[..n]);
                                if tls.write_all(&reply).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self { addr, task }
    }
}

impl Drop for TlsEchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
