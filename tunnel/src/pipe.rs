//! Piping a tunnelled connection's bytes both ways, counting them as they pass.

use crate::metrics::{DirectionLabel, Metrics};
use prometheus_client::metrics::counter::Counter;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes read at once in each direction (tokio's default is 8 KiB).
const BUF: usize = 64 * 1024;

/// Copies both ways until both directions are closed (a half-close is forwarded as one).
/// `a` is the side facing kube-apiserver, `b` the target's side. Bytes are counted as they
/// are read, so long-lived streams (`kubectl logs -f`) show up before they end and streams
/// that end with a reset are counted too.
pub(crate) async fn pipe<A, B>(a: A, b: B, metrics: &Metrics)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let counter = |direction| {
        metrics
            .bytes
            .get_or_create(&DirectionLabel { direction })
            .clone()
    };
    let mut a = Counted(a, counter("to_target"));
    let mut b = Counted(b, counter("from_target"));
    if let Err(e) = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, BUF, BUF).await {
        // A peer closing without a clean shutdown (EPIPE, reset) is an ordinary end here.
        tracing::debug!(error = %e, "stream ended with an error");
    }
}

/// Counts the bytes read from the inner stream.
struct Counted<T>(T, Counter);

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.0).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        if n > 0 {
            self.1.inc_by(n as u64);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
