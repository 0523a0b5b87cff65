//! A socket whose writes may not stall: a write (or flush) that cannot make progress for
//! `timeout` fails with `TimedOut`, which ends the HTTP connection. A client that asks for
//! `/metrics` and never reads would otherwise hold its response, and the socket buffers under
//! it, for as long as it keeps the connection open. Any progress restarts the clock, so a
//! slow but reading client is not cut (the connection's age bounds it instead).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner` with a stall deadline on its writes.
#[derive(Debug)]
pub struct WriteDeadline<T> {
    inner: T,
    timeout: Duration,
    /// Armed when a write first returns `Pending`, cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    /// Wraps `inner`; a write that makes no progress for `timeout` fails.
    pub fn new(inner: T, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// Passes a finished poll on and disarms the clock; on `Pending`, arms it (once) and
    /// fails once it has run out.
    fn watch<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let clock = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client has not read for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_times_out_and_progress_restarts_the_clock() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut w = WriteDeadline::new(near, Duration::from_secs(10));
        // Fits the pipe: no wait.
        w.write_all(&[1; 1024]).await.unwrap();
        // The reader takes half after 8 s: the stalled write goes on and stalls again.
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(8)).await;
            let mut half = [0; 512];
            far.read_exact(&mut half).await.unwrap();
            far
        });
        let start = tokio::time::Instant::now();
        let e = w.write_all(&[2; 4096]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(start.elapsed(), Duration::from_secs(18));
        drop(reader.await.unwrap());
    }
}
