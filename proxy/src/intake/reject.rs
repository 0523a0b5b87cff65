//! Why a connection is closed before it is routed, and what its client is told: a TLS alert
//! (`reject_with_alert`), an HTTP status on a CONNECT listener, or nothing.

use crate::client_hello;

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

/// The HTTP status a CONNECT client gets for `reason`, if any.
pub fn http_status(reason: Reject) -> Option<u16> {
    match reason {
        Reject::Timeout => Some(408),
        Reject::TooManyConnections
        | Reject::TooManyListenerConnections
        | Reject::TooManyConnectionsPerSource => Some(503),
        Reject::ProxyProtocol => Some(400),
        Reject::TooLarge => Some(431),
        // As for a header value that is not routed.
        Reject::RouteSourceNotAllowed => Some(404),
        _ => None,
    }
}
