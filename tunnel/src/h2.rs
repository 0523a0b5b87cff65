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

/// The server end: the HTTP/2 client of a session.
pub(crate) fn client(c: &Http2Config) -> hyper::client::conn::http2::Builder<TokioExecutor> {
    let mut b = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .initial_stream_window_size(c.stream_window)
        .initial_connection_window_size(c.connection_window)
        .max_concurrent_streams(MAX_STREAMS)
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
        .keep_alive_interval(c.keepalive_interval.get())
        .keep_alive_timeout(c.keepalive_timeout.get());
    b
}
