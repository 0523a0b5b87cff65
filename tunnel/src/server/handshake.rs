//! An agent connection from accept to the end of its TLS handshake, under one deadline
//! (`agents.handshake_timeout`): the source address (a trusted proxy's PROXY v2 header, or
//! the peer), a handshake slot for that source (`slots.rs`), the TLS handshake.
//!
//! Behind the seed's isthmus proxies every agent (and every stranger) arrives from a proxy's
//! address; the proxy's PROXY v2 header names the real client, so that the per-source share
//! tells a flood from an agent. A trusted proxy writes the header with the ClientHello as its
//! first bytes, so reading it costs no wait; the header is read exactly (never past it), and
//! the TLS layer gets the socket untouched after it.
//!
//! Any other peer's connection must start with TLS. One that starts with a PROXY header (a
//! proxy sending v2 to a server that does not list it in `agents.trusted_proxies`) is refused
//! as such, counted (`reason="untrusted_proxy_header"`) and logged at `error`, rate-limited:
//! a mismatch between the proxy's and the server's settings shows, instead of looking like
//! a flood of broken TLS handshakes that fails every agent.

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
    /// A peer outside `trusted_proxies` sent a PROXY header
    /// (`reason="untrusted_proxy_header"`).
    UntrustedProxyHeader,
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
        let trusted = Cidr::any_contains(&shared.limits.trusted_proxies, peer.ip());
        let client = if trusted {
            client_address(&mut tcp, peer).await?
        } else {
            peer
        };
        let (slot, evicted) = shared.slots.admit(client.ip());
        let tls = async {
            if !trusted {
                refuse_proxy_header(&tcp).await?;
            }
            let acceptor = tokio_rustls::TlsAcceptor::from(shared.tls.agents());
            acceptor
                .accept(crate::http2::buffered(tcp))
                .await
                .map_err(Refused::Tls)
        };
        tokio::select! {
            r = tls => r.map(|tls| (tls, client, slot)),
            Ok(()) = evicted => Err(Refused::Evicted),
        }
    };
    match tokio::time::timeout_at(deadline, in_time).await {
        Ok(Ok((tls, client, slot))) => {
            slot.completed();
            Ok((tls, client))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Refused::Timeout),
    }
}

/// Refuses a connection that starts with a PROXY header (v1 or v2): from a peer outside
/// `trusted_proxies` it can only be a proxy whose header the server was not told to expect.
/// Neither signature can start a TLS record, so nothing valid is refused; the bytes are
/// only peeked, never taken from the TLS layer.
async fn refuse_proxy_header(tcp: &TcpStream) -> Result<(), Refused> {
    let mut first = [0u8; 12];
    let n = tcp.peek(&mut first).await.map_err(Refused::Tls)?;
    match pp::detect(first.get(..n).unwrap_or_default()) {
        // `NeedMore`: a prefix of a signature, which no TLS record starts with either.
        pp::Detected::Header | pp::Detected::NeedMore if n > 0 => {
            Err(Refused::UntrustedProxyHeader)
        }
        _ => Ok(()),
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
            Refused::UntrustedProxyHeader => Some("untrusted_proxy_header"),
            Refused::Timeout | Refused::Tls(_) => None,
        }
    }
}
