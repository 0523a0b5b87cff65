//! HTTP/2 settings shared by both ends of a session, and the PING keepalive.
//!
//! Sessions speak HTTP/2 through the `h2` crate directly, not through hyper: a tunnelled
//! stream is an `h2` stream pair that `pipe.rs` moves bytes in and out of without a copy of
//! its own (hyper's upgraded HTTP/2 stream copied every write into a fresh buffer and handed
//! it to a task of its own on the way to the connection).
//!
//! Windows are fixed, not adaptive: an adaptive window starts at 64 KiB and needs several
//! round trips of BDP probing to grow, which at ~200 ms RTT costs seconds per new session. A
//! fixed 4 MiB stream window carries ~160 Mbit/s per stream at 200 ms; the connection window
//! is several stream windows so that a few stalled readers (each holding at most one stream
//! window) cannot stop the other streams.

use h2::{Ping, PingPong};
use isthmus_config::Http2Config;
use std::time::Duration;

/// Streams the agent accepts at once: far above a kube-apiserver's concurrent webhook calls and
/// log streams, but bounded so one peer cannot make the agent hold unbounded sockets.
const MAX_STREAMS: u32 = 4096;

/// Streams the server opens before the agent's SETTINGS have told it the agent's limit (hyper's
/// default, kept from when the sessions ran on hyper).
const INITIAL_MAX_SEND_STREAMS: usize = 100;

/// The largest DATA frame either end accepts. HTTP/2's default, 16 KiB, plus the 9-byte frame
/// header is one byte more than a TLS record carries, so every frame took two records; larger
/// frames let the TLS layer cut full 16 KiB records and halve the frames per byte.
const MAX_FRAME: u32 = 256 * 1024;

/// Bytes of a stream `h2` holds unsent: two of the pipe's 64 KiB reads, enough to keep the
/// connection writing while the next read comes in. (It was hyper's 1 MiB: a fast reader then
/// parked sixteen reads in `h2`, each in a buffer of its own.) Send capacity is granted only
/// within the stream's window as well, so a stalled stream holds at most this much here.
const MAX_SEND_BUF: usize = 128 * 1024;

/// The largest request or response head either end accepts (hyper's default).
const MAX_HEADER_LIST: u32 = 16 * 1024;

/// Streams a peer may make this end reset for protocol errors before the session is closed
/// (hyper's default; the "MadeYouReset" mitigation).
const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// Bytes read from a session's socket at once. rustls reads the socket 4 KiB at a time
/// (`read_tls`), one `recv` per 4 KiB; a buffer under the TLS layer makes that one `recv` per
/// 64 KiB and serves rustls from memory. One per session, not per stream.
const SESSION_READ_BUF: usize = 64 * 1024;

/// TLS bytes a session's rustls connection may queue for writing (rustls' default: 64 KiB).
/// `h2` writes a DATA frame of up to 64 KiB plus its 9-byte header at once; with the default
/// rustls took the first 64 KiB, wrote them, and then the last bytes in a record and a
/// `writev` of their own: two system calls per frame. Per session, not per stream.
const SESSION_TLS_BUFFER: usize = 256 * 1024;

/// A session's socket as the TLS layer reads it (see [`SESSION_READ_BUF`]).
pub(crate) fn buffered<T: tokio::io::AsyncRead>(io: T) -> tokio::io::BufReader<T> {
    tokio::io::BufReader::with_capacity(SESSION_READ_BUF, io)
}

/// Sizes a session's TLS connection for HTTP/2 once its handshake is done (see
/// [`SESSION_TLS_BUFFER`]).
pub(crate) fn tune_tls<D>(conn: &mut rustls::ConnectionCommon<D>) {
    conn.set_buffer_limit(Some(SESSION_TLS_BUFFER));
}

/// The server end: the HTTP/2 client of a session.
pub(crate) fn client(c: &Http2Config) -> h2::client::Builder {
    let mut b = h2::client::Builder::new();
    b.initial_window_size(c.stream_window)
        .initial_connection_window_size(c.connection_window)
        .initial_max_send_streams(INITIAL_MAX_SEND_STREAMS)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buffer_size(MAX_SEND_BUF)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .enable_push(false);
    b
}

/// The agent end: the HTTP/2 server of a session.
pub(crate) fn server(c: &Http2Config) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.initial_window_size(c.stream_window)
        .initial_connection_window_size(c.connection_window)
        .max_concurrent_streams(MAX_STREAMS)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buffer_size(MAX_SEND_BUF)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS));
    b
}

/// PING interval and timeout of a session (`http2.keepalive_*`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keepalive {
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
}

impl Keepalive {
    pub(crate) fn new(c: &Http2Config) -> Self {
        Self {
            interval: c.keepalive_interval.get(),
            timeout: c.keepalive_timeout.get(),
        }
    }

    /// Sends a PING every `interval`, idle or not, and returns only when one is not answered
    /// within `timeout`: the session is dead, close it. Poll it beside the connection, which
    /// sends the PING and reads the answer; once the connection has ended it never returns.
    pub(crate) async fn run(self, ping_pong: Option<PingPong>) {
        // `None`: taken already (only one owner may ping); never happens.
        let Some(mut pp) = ping_pong else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(self.interval).await;
            match tokio::time::timeout(self.timeout, pp.ping(Ping::opaque())).await {
                Ok(Ok(_pong)) => {}
                // The connection ended: whoever polls it sees why.
                Ok(Err(_)) => return std::future::pending().await,
                Err(_) => return,
            }
        }
    }
}
