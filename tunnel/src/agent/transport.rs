//! How the agent reaches a tunnel server: TCP, optionally through an HTTP CONNECT proxy with a
//! routing header (Gardener's `X-Gardener-Destination` ingress), then TLS 1.3 with a client
//! certificate. Through an isthmus SNI proxy nothing special is needed: the SNI routes.

use crate::Error;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Longest answer accepted from the HTTP CONNECT proxy.
const MAX_PROXY_ANSWER: usize = 8 * 1024;

/// One way of reaching one server address.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) addr: SocketAddr,
    /// `host:port` as configured: the CONNECT target when a proxy is used.
    pub(crate) address: String,
    pub(crate) server_name: ServerName<'static>,
    pub(crate) http_connect_header: Option<String>,
}

/// TCP (+ proxy) + TLS, all within `timeout`.
pub(crate) async fn connect(
    route: &Route,
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<TlsStream<BufReader<TcpStream>>, Error> {
    let fut = async {
        let mut tcp = TcpStream::connect(route.addr)
            .await
            .map_err(|e| Error::io(format!("connect {}", route.addr), e))?;
        let _ = tcp.set_nodelay(true);
        if let Some(header) = &route.http_connect_header {
            proxy_connect(&mut tcp, &route.address, header).await?;
        }
        let mut tls = TlsConnector::from(tls.clone())
            .connect(route.server_name.clone(), crate::http2::buffered(tcp))
            .await
            .map_err(|e| Error::io(format!("TLS with {}", route.addr), e))?;
        crate::http2::tune_tls(&mut **tls.get_mut().1);
        Ok(tls)
    };
    tokio::time::timeout(timeout, fut).await.map_err(|_| {
        Error::io(
            format!("connect {}", route.addr),
            std::io::ErrorKind::TimedOut.into(),
        )
    })?
}

async fn proxy_connect(tcp: &mut TcpStream, target: &str, header: &str) -> Result<(), Error> {
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{header}\r\n\r\n");
    tcp.write_all(req.as_bytes())
        .await
        .map_err(|e| Error::io("HTTP CONNECT proxy", e))?;
    // Byte by byte: the TLS server speaks only after our ClientHello, so nothing after the
    // blank line can be lost, and the answer is tiny.
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    loop {
        if answer.is_empty() || answer.ends_with(b"\n") || answer.len() >= MAX_PROXY_ANSWER {
            match proxy_answer(&answer) {
                ProxyAnswer::NeedMore => {}
                ProxyAnswer::Connected => return Ok(()),
                ProxyAnswer::Refused(why) => return Err(Error::ProxyRefused(why)),
            }
        }
        let n = tcp
            .read(&mut byte)
            .await
            .map_err(|e| Error::io("HTTP CONNECT proxy", e))?;
        if n == 0 {
            return Err(Error::ProxyRefused("closed before answering".into()));
        }
        answer.push(byte[0]);
    }
}

/// The verdict on what an HTTP CONNECT proxy has answered so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyAnswer {
    /// The answer's head is not complete yet.
    NeedMore,
    /// `200`: the tunnel is open.
    Connected,
    /// Anything else (the status line, or why the answer is unusable).
    Refused(String),
}

/// Reads a proxy's answer head (status line, headers, blank line; at most
/// `MAX_PROXY_ANSWER` bytes). Pure and total, so that it can be fuzzed: a verdict other than
/// `NeedMore` on a prefix is the verdict on any longer input.
pub fn proxy_answer(answer: &[u8]) -> ProxyAnswer {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n");
    let head = match end {
        Some(end) if end + 4 <= MAX_PROXY_ANSWER => &answer[..end],
        _ if answer.len() < MAX_PROXY_ANSWER => return ProxyAnswer::NeedMore,
        _ => return ProxyAnswer::Refused("answer too long".into()),
    };
    let text = String::from_utf8_lossy(head);
    let status = text.lines().next().unwrap_or_default().to_owned();
    if status.split_whitespace().nth(1) == Some("200") {
        ProxyAnswer::Connected
    } else {
        ProxyAnswer::Refused(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_answers() {
        assert_eq!(proxy_answer(b""), ProxyAnswer::NeedMore);
        assert_eq!(proxy_answer(b"HTTP/1.1 200 OK\r\n"), ProxyAnswer::NeedMore);
        assert_eq!(
            proxy_answer(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            ProxyAnswer::Connected
        );
        assert_eq!(
            proxy_answer(b"HTTP/1.1 403 Forbidden\r\nX: y\r\n\r\n"),
            ProxyAnswer::Refused("HTTP/1.1 403 Forbidden".into())
        );
        let long = vec![b'a'; MAX_PROXY_ANSWER];
        assert_eq!(
            proxy_answer(&long),
            ProxyAnswer::Refused("answer too long".into())
        );
    }
}
