//! isthmus tunnel: the temporary VPN between a shoot and a seed (issue 4).
//!
//! The shoot's nodes sit behind NAT, so the [`agent`] (shoot side) dials out to the [`server`]
//! (seed side) over TLS 1.3 with mutual authentication. Over that connection the roles reverse:
//! the server is the HTTP/2 *client* and opens one `CONNECT host:port` stream per tunnelled TCP
//! connection; the agent is the HTTP/2 *server*, checks the target against its allow-list, dials
//! it and pipes bytes. HTTP/2 (the `h2` crate, driven directly: a stream's bytes go between its
//! socket and `h2` without a copy or a task of their own) gives per-stream flow control, PING
//! keepalive and GOAWAY draining.
//! The server offers kube-apiserver the HTTP/1.1 CONNECT endpoint of its
//! `EgressSelectorConfiguration` over TCP (mTLS) or a Unix socket.
//!
//! Vocabulary: a *session* is one agent⇄server TLS connection carrying HTTP/2; a *stream* is
//! one tunnelled TCP connection inside a session; a *dial* is the agent's TCP connect to a
//! target; *draining* a session means no new streams on it while open ones finish.
//!
//! What this crate must never do: dial a target outside the agent's allow-list, answer `200`
//! to a CONNECT before the target is connected, send bytes to a CONNECT client before it speaks,
//! let one stream's slow reader stall another stream, or cut a stream when a session is
//! replaced (make before break). It never reads the tunnelled bytes.

#![forbid(unsafe_code)]

pub mod admin;
pub mod agent;
mod error;
mod http2;
pub mod metrics;
mod pipe;
pub mod server;
pub mod tls;

pub use error::Error;
