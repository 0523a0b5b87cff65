//! Reading a ClientHello off a fresh connection: into a capped buffer, under a deadline,
//! parsing only when a TLS record has completed so that a client trickling one byte at a time
//! costs O(records) parses rather than O(bytes).

use super::Down;
use crate::client_hello::{self, Parsed};

/// Why a connection was closed before routing. `as_str` is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    NoSni,
    UnknownSni,
    NotTls,
    Malformed(client_hello::Malformed),
    TooLarge,
    Timeout,
    ClientClosed,
    /// A missing (with `require`) or invalid PROXY protocol header.
    ProxyProtocol,
    /// The proxy has `max_connections` connections open.
    TooManyConnections,
    /// The listener has its own `max_connections` connections open.
    TooManyListenerConnections,
    /// The source is not in the listener's `allowed_sources`.
    SourceNotAllowed,
    /// The route found admits no such source (its `allowed_sources`, or
    /// `routes_without_allowed_sources: deny`); answered as an unknown name would be.
    RouteSourceNotAllowed,
    /// A PROXY header from a peer outside `trusted_proxies` (or none possible: `require`).
    UntrustedProxy,
    /// The source has `max_connections_per_source` connections open on the listener.
    TooManyConnectionsPerSource,
    /// A younger connection took this one's pending slot (`max_pending_hellos[_per_source]`).
    Evicted,
}

impl Reject {
    /// The `reason` label of `isthmus_proxy_hello_rejections_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::NoSni => "no_sni",
            Reject::UnknownSni => "unknown_sni",
            Reject::NotTls => "not_tls",
            Reject::Malformed(_) => "malformed",
            Reject::TooLarge => "too_large",
            Reject::Timeout => "timeout",
            Reject::ClientClosed => "client_closed",
            Reject::ProxyProtocol => "proxy_protocol",
            Reject::TooManyConnections => "too_many_connections",
            Reject::TooManyListenerConnections => "too_many_listener_connections",
            Reject::SourceNotAllowed => "source_not_allowed",
            Reject::RouteSourceNotAllowed => "route_source_not_allowed",
            Reject::UntrustedProxy => "untrusted_proxy",
            Reject::TooManyConnectionsPerSource => "too_many_connections_per_source",
            Reject::Evicted => "evicted",
        }
    }

    /// The TLS alert to send before closing, if the client spoke TLS and is still listening.
    pub fn alert(self) -> Option<u8> {
        const DECODE_ERROR: u8 = 50;
        const UNRECOGNIZED_NAME: u8 = 112;
        match self {
            // A refused source learns no more than for a name that is not routed.
            Reject::NoSni | Reject::UnknownSni | Reject::RouteSourceNotAllowed => {
                Some(UNRECOGNIZED_NAME)
            }
            Reject::Malformed(_) | Reject::TooLarge => Some(DECODE_ERROR),
            Reject::NotTls
            | Reject::Timeout
            | Reject::ClientClosed
            | Reject::ProxyProtocol
            | Reject::TooManyConnections
            | Reject::TooManyListenerConnections
            | Reject::SourceNotAllowed
            | Reject::UntrustedProxy
            | Reject::TooManyConnectionsPerSource
            | Reject::Evicted => None,
        }
    }
}

/// A fatal TLS alert record (TLS 1.2 record version, as every TLS version accepts).
pub fn alert_record(description: u8) -> [u8; 7] {
    [21, 3, 3, 0, 2, 2, description]
}

/// The SNI a client asked for, if any. `buf` may already hold bytes (after a PROXY
/// header); on return it holds every byte of the hello, for replay. The caller bounds the time.
pub async fn read_client_hello(
    stream: &mut Down,
    buf: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<Option<String>, Reject> {
    loop {
        if !buf.is_empty() && ends_on_record_boundary(buf) {
            match client_hello::parse(buf) {
                Parsed::NeedMore => {}
                Parsed::Sni(name) => return Ok(Some(name)),
                Parsed::NoSni => return Ok(None),
                Parsed::NotTls => return Err(Reject::NotTls),
                Parsed::Malformed(m) => return Err(Reject::Malformed(m)),
            }
        }
        read_more(stream, buf, max_bytes).await?;
    }
}

/// Reads what is available into `buf`, never past `max_bytes` in total.
pub async fn read_more(
    stream: &mut Down,
    buf: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<usize, Reject> {
    if buf.len() >= max_bytes {
        return Err(Reject::TooLarge);
    }
    if buf.capacity() == buf.len() {
        // Most hellos fit in the first 2 KiB; larger ones double the buffer up to the cap.
        let grow = buf.len().max(2048).min(max_bytes - buf.len());
        buf.reserve_exact(grow);
    }
    let room = buf.capacity().min(max_bytes) - buf.len();
    let n = stream
        .read_into(buf, room)
        .await
        .map_err(|_| Reject::ClientClosed)?;
    if n == 0 {
        return Err(Reject::ClientClosed);
    }
    Ok(n)
}

/// True when the bytes end exactly at the end of a TLS record, or do not look like TLS records
/// at all (so that the parser can say "not TLS" without waiting). Walks record headers only.
fn ends_on_record_boundary(buf: &[u8]) -> bool {
    let mut at = 0usize;
    loop {
        let Some(header) = buf.get(at..at + 5) else {
            // A partial header. The very first bytes go to the parser so that non-TLS input is
            // rejected at once; after complete records they may be bytes a client pipelined
            // behind a complete hello (a short first write after it), which must not leave us
            // waiting for bytes that never come. At most four such parses per record.
            return true;
        };
        if header[0] != 22 {
            return true;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        at += 5 + len;
        if at >= buf.len() {
            return at == buf.len() || len > 16384 + 2048;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_boundaries() {
        assert!(ends_on_record_boundary(&[]));
        assert!(ends_on_record_boundary(b"GET / HTTP/1.1"));
        assert!(ends_on_record_boundary(&[22]));
        assert!(!ends_on_record_boundary(&[22, 3, 1, 0, 4, 1]));
        assert!(ends_on_record_boundary(&[22, 3, 1, 0, 1, 1]));
        // A partial header after complete records: the hello may be complete before it.
        assert!(ends_on_record_boundary(&[22, 3, 1, 0, 1, 1, 22, 3]));
        assert!(ends_on_record_boundary(&[22, 3, 1, 0, 1, 1, b'E']));
        assert!(ends_on_record_boundary(&[
            22, 3, 1, 0, 1, 1, 22, 3, 1, 0, 0
        ]));
        // An oversized record header is handed to the parser to be called malformed.
        assert!(ends_on_record_boundary(&[22, 3, 1, 0xff, 0xff, 1]));
    }
}
