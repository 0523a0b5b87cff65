//! Piping a tunnelled connection's bytes both ways, counting them as they pass.
//!
//! Each direction's buffer is allocated when its first bytes arrive and grows with the reads
//! that fill it, from [`FIRST`] to [`MAX`]: an idle stream holds no buffer (it waits with a
//! stack buffer), a request/response stream a small one, a bulk stream 64 KiB chunks. The
//! buffer never grows past [`MAX`], so a stalled stream still holds a bounded amount; it is
//! freed when the stream ends. (tokio's `copy_bidirectional` allocates both buffers up front.)

use crate::metrics::{DirectionLabel, Metrics};
use prometheus_client::metrics::counter::Counter;
use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A direction's first buffer, once bytes arrive (and the stack buffer idle reads land in).
const FIRST: usize = 16 * 1024;
/// The largest buffer: a read that fills the buffer makes the next one 4× as large, up to this.
/// Not more: hyper copies every write into an upgraded HTTP/2 stream into a fresh allocation,
/// and with glibc one of 128 KiB or more is an `mmap`/`munmap` per write (measured with
/// 256 KiB: 1.4–2× the page faults, ~15 % more CPU per GB in the tunnel processes).
const MAX: usize = 64 * 1024;

/// Copies both ways until both directions are closed (a half-close is forwarded as one).
/// `a` is the side facing kube-apiserver, `b` the target's side. Bytes are counted as they
/// are read, so long-lived streams (`kubectl logs -f`) show up before they end and streams
/// that end with a reset are counted too.
pub(crate) async fn pipe<A, B>(mut a: A, mut b: B, metrics: &Metrics)
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
    let mut to_target = Half::new(counter("to_target"));
    let mut from_target = Half::new(counter("from_target"));
    let r = poll_fn(|cx| {
        let ab = to_target.poll(cx, &mut a, &mut b)?;
        let ba = from_target.poll(cx, &mut b, &mut a)?;
        if ab.is_ready() && ba.is_ready() {
            Poll::Ready(Ok::<_, io::Error>(()))
        } else {
            Poll::Pending
        }
    })
    .await;
    if let Err(e) = r {
        // A peer closing without a clean shutdown (EPIPE, reset) is an ordinary end here.
        tracing::debug!(error = %e, "stream ended with an error");
    }
}

/// One direction: read into the buffer, write it out, forward EOF as a shutdown.
struct Half {
    buf: Vec<u8>,
    /// `buf[pos..end]` is still to be written.
    pos: usize,
    end: usize,
    read_done: bool,
    need_flush: bool,
    done: bool,
    /// The last read filled the buffer: the next read gets a larger one.
    grow: bool,
    counter: Counter,
}

impl Half {
    fn new(counter: Counter) -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            end: 0,
            read_done: false,
            need_flush: false,
            done: false,
            grow: false,
            counter,
        }
    }

    fn poll<R, W>(&mut self, cx: &mut Context<'_>, r: &mut R, w: &mut W) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        // Cooperative scheduling, as tokio's own copy does: a busy stream yields now and then.
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        loop {
            if self.pos == self.end && !self.read_done {
                match self.poll_fill(cx, r) {
                    Poll::Ready(r) => {
                        r?;
                        coop.made_progress();
                    }
                    Poll::Pending => {
                        // Nothing to write: flush what was written before waiting.
                        if self.need_flush {
                            ready!(Pin::new(&mut *w).poll_flush(cx))?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                }
            }
            while self.pos < self.end {
                let n = ready!(Pin::new(&mut *w).poll_write(cx, &self.buf[self.pos..self.end]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                self.need_flush = true;
                coop.made_progress();
            }
            if self.read_done {
                ready!(Pin::new(&mut *w).poll_flush(cx))?;
                ready!(Pin::new(&mut *w).poll_shutdown(cx))?;
                self.done = true;
                self.buf = Vec::new();
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Reads into the (empty) buffer: into a stack buffer while none is allocated, so an idle
    /// direction holds no memory; a read that fills the buffer grows the next one.
    fn poll_fill<R: AsyncRead + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
    ) -> Poll<io::Result<()>> {
        if self.buf.is_empty() {
            let mut stack = [MaybeUninit::<u8>::uninit(); FIRST];
            let mut rb = ReadBuf::uninit(&mut stack);
            ready!(Pin::new(&mut *r).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n > 0 {
                let mut buf = vec![0; FIRST];
                buf[..n].copy_from_slice(rb.filled());
                self.buf = buf;
            }
            self.grow = n == FIRST;
            self.filled(n);
            return Poll::Ready(Ok(()));
        }
        if self.grow {
            // Called with the buffer written out: nothing to move.
            self.buf = vec![0; (self.buf.len() * 4).min(MAX)];
            self.grow = false;
        }
        let mut rb = ReadBuf::new(&mut self.buf);
        ready!(Pin::new(&mut *r).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        self.grow = n == self.buf.len() && self.buf.len() < MAX;
        self.filled(n);
        Poll::Ready(Ok(()))
    }

    fn filled(&mut self, n: usize) {
        self.pos = 0;
        self.end = n;
        if n == 0 {
            self.read_done = true;
        } else {
            self.counter.inc_by(n as u64);
        }
    }
}
