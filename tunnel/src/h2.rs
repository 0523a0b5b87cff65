//! HTTP/2 settings shared by both ends of a session.
//!
//! Windows are fixed, not adaptive: hyper's adaptive window starts at 64 KiB and needs several
//! round trips of BDP probing to grow, which at ~200 ms RTT costs seconds per new session, and
//! it overrides the configured sizes. A fixed 4 MiB stream window carries ~160 Mbit/s per
//! stream at 200 ms; the connection window is several stream windows so that a few stalled
//! readers (each holding at most one stream window) cannot stop the other streams.

use hyper_util::rt::{TokioExecutor, TokioTimer};
use isthmus_config::Http2Config;

/// Streams the agent accepts at once: far above a kube-apiserver's concurrent webhook calls and
/// log streams, but bounded so one peer cannot make the agent hold unbounded sockets.
const MAX_STREAMS: u32 = 4096;

/// The largest DATA frame either end accepts. HTTP/2's default, 16 KiB, plus the 9-byte frame
/// header is one byte more than a TLS record carries, so every frame took two records; larger
/// frames let the TLS layer cut full 16 KiB records and halve the frames per byte.
const MAX_FRAME: u32 = 256 * 1024;

/// Bytes a stream may queue for sending (hyper's client default; its server default is
/// 400 KiB). The agent sends the bulk of the bytes (answers, logs), so it gets the same. A
/// stalled stream still holds at most its flow-control window: h2 grants send capacity only
/// within it.
const MAX_SEND_BUF: usize = 1024 * 1024;

/// Bytes read from a session's socket at once. rustls reads the socket 4 KiB at a time
/// (`read_tls`), one `recv` per 4 KiB; a buffer under the TLS layer makes that one `recv` per
/// 64 KiB and serves rustls from memory. One per session, not per stream.
const SESSION_READ_BUF: usize = 64 * 1024;

/// A session's socket as the TLS layer reads it (see [`SESSION_READ_BUF`]).
pub(crate) fn buffered<T: tokio::io::AsyncRead>(io: T) -> tokio::io::BufReader<T> {
    tokio::io::BufReader::with_capacity(SESSION_READ_BUF, io)
}

/// The server end: the HTTP/2 client of a session.
pub(crate) fn client(c: &Http2Config) -> hyper::client::conn::http2::Builder<TokioExecutor> {
    let mut b = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .initial_stream_window_size(c.stream_window)
        .initial_connection_window_size(c.connection_window)
        .max_concurrent_streams(MAX_STREAMS)
        .max_frame_size(MAX_FRAME)
        .keep_alive_interval(c.keepalive_interval.get())
        .keep_alive_timeout(c.keepalive_timeout.get())
        .keep_alive_while_idle(true);
    b
}

/// The agent end: the HTTP/2 server of a session.
pub(crate) fn server(c: &Http2Config) -> hyper::server::conn::http2::Builder<TokioExecutor> {
    let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .initial_stream_window_size(c.stream_window)
        .initial_connection_window_size(c.connection_window)
        .max_concurrent_streams(MAX_STREAMS)
        .max_frame_size(MAX_FRAME)
        .max_send_buf_size(MAX_SEND_BUF)
        .keep_alive_interval(c.keepalive_interval.get())
        .keep_alive_timeout(c.keepalive_timeout.get());
    b
}
