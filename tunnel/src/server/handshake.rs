//! An agent connection from accept to the end of its TLS handshake, under one deadline
//! (`agents.handshake_timeout`): the source address (a trusted proxy's PROXY v2 header, or
//! the peer), a handshake slot for that source (`slots.rs`), the TLS handshake.
//!
//! Behind the seed's isthmus proxies every agent (and every stranger) arrives from a proxy's
//! address; the proxy's PROXY v2 header names the real client, so that the per-source share
//! tells a flood from an agent. A trusted proxy writes the header with the ClientHello as its
//! first bytes, so reading it costs no wait; the header is read exactly (never past it), and
//! the TLS layer gets the socket untouched after it.

use super::Shared;
use isthmus_config::Cidr;
use isthmus_proxy_protocol::{self as pp, Header, Parsed};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// An agent session's stream once its TLS handshake is over.
pub(crate) type Tls = TlsStream<BufReader<TcpStream>>;

/// Why a connection was closed before its TLS handshake was over.
#[derive(Debug)]
pub(crate) enum Refused {
    /// A newer handshake took the slot (`reason="evicted"`).
    Evicted,
    /// A trusted peer sent a broken or unsupported PROXY header (`reason="proxy_protocol"`).
    ProxyProtocol(&'static str),
    /// Not over within `handshake_timeout`.
    Timeout,
    /// The TLS handshake failed (wrong certificate, not TLS, closed).
    Tls(std::io::Error),
}

/// Takes `tcp` through the PROXY header (from trusted peers) and the TLS handshake; the
/// client's address comes back with the stream.
pub(crate) async fn accept(
    shared: &Arc<Shared>,
    mut tcp: TcpStream,
    peer: SocketAddr,
) -> Result<(Tls, SocketAddr), Refused> {
    let deadline = tokio::time::Instant::now() + shared.limits.handshake_timeout;
    let in_time = async {
        let client = if Cidr::any_contains(&shared.limits.trusted_proxies, peer.ip()) {
            client_address(&mut tcp, peer).await?
        } else {
            peer
        };
        let (slot, evicted) = shared.slots.admit(client.ip());
        let tls = shared.acceptor.accept(crate::http2::buffered(tcp));
        tokio::select! {
            r = tls => r.map(|tls| (tls, client, slot)).map_err(Refused::Tls),
            Ok(()) = evicted => Err(Refused::Evicted),
        }
    };
    match tokio::time::timeout_at(deadline, in_time).await {
        Ok(Ok((tls, client, _slot))) => Ok((tls, client)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Refused::Timeout),
    }
}

/// The client address a trusted peer's PROXY v2 header gives (`LOCAL`, or no header at all:
/// the peer's own). Reads exactly the header's bytes.
async fn client_address(tcp: &mut TcpStream, peer: SocketAddr) -> Result<SocketAddr, Refused> {
    let io = |e: std::io::Error| Refused::Tls(e);
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await.map_err(io)? == 0 {
        return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    match first[0] {
        b'\r' => {}
        b'P' => return Err(Refused::ProxyProtocol("v1 (send v2)")),
        // A TLS record: no header.
        _ => return Ok(peer),
    }
    let mut header = vec![0u8; pp::V2_FIXED_LEN];
    tcp.read_exact(&mut header).await.map_err(io)?;
    if let Parsed::Invalid(why) = pp::parse(&header) {
        return Err(Refused::ProxyProtocol(why));
    }
    // Within V2_MAX_LEN: `parse` refused longer ones from the fixed bytes.
    let len = pp::v2_len(&header).unwrap_or(pp::V2_FIXED_LEN);
    header.resize(len, 0);
    if let Some(body) = header.get_mut(pp::V2_FIXED_LEN..) {
        tcp.read_exact(body).await.map_err(io)?;
    }
    match pp::parse(&header) {
        Parsed::Header {
            header: Header::Proxied(a),
            ..
        } => Ok(a.source),
        Parsed::Header { .. } => Ok(peer),
        Parsed::Invalid(why) => Err(Refused::ProxyProtocol(why)),
        Parsed::NeedMore | Parsed::Absent => Err(Refused::ProxyProtocol("v2 incomplete")),
    }
}

impl Refused {
    /// The `reason` of `isthmus_tunnel_refused_total{listener="agents"}`, if it counts there
    /// (timeouts and TLS failures count as failed handshakes).
    pub(crate) fn reason(&self) -> Option<&'static str> {
        match self {
            Refused::Evicted => Some("evicted"),
            Refused::ProxyProtocol(_) => Some("proxy_protocol"),
            Refused::Timeout | Refused::Tls(_) => None,
        }
    }
}
