//! Stream → socket: writes the DATA `h2` received to the socket as it is, and gives the peer
//! window back only for what the socket took.

use super::h2_error;
use bytes::{Buf, Bytes};
use h2::{Reason, RecvStream};
use prometheus_client::metrics::counter::Counter;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;

/// Stream → socket.
pub(super) struct Down {
    /// Received, being written to the socket.
    out: Bytes,
    /// Bytes of `out` taken from `h2` and not yet released to the peer's window.
    unreleased: usize,
    eof: bool,
    done: bool,
    need_flush: bool,
    counter: Counter,
}

impl Down {
    pub(super) fn new(counter: Counter) -> Self {
        Self {
            out: Bytes::new(),
            unreleased: 0,
            eof: false,
            done: false,
            need_flush: false,
            counter,
        }
    }

    pub(super) fn poll<T: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        recv: &mut RecvStream,
    ) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        loop {
            while !self.out.is_empty() {
                let n = ready!(Pin::new(&mut *io).poll_write(cx, &self.out))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.out.advance(n);
                self.need_flush = true;
                coop.made_progress();
            }
            if self.unreleased > 0 {
                // Written to the socket: the peer may send that much more.
                let _ = recv.flow_control().release_capacity(self.unreleased);
                self.unreleased = 0;
            }
            if self.eof {
                ready!(Pin::new(&mut *io).poll_flush(cx))?;
                ready!(Pin::new(&mut *io).poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            match recv.poll_data(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    self.counter.inc_by(data.len() as u64);
                    self.unreleased = data.len();
                    self.out = data;
                    coop.made_progress();
                }
                Poll::Ready(None) => self.eof = true,
                Poll::Ready(Some(Err(e))) => match e.reason() {
                    // The peer is done with the stream (hyper's upgraded streams took these as
                    // the end of the bytes too): shut the socket down after what was written;
                    // `pipe` then sees the reset and closes the stream.
                    Some(Reason::NO_ERROR) | Some(Reason::CANCEL) => self.eof = true,
                    _ => return Poll::Ready(Err(h2_error(e))),
                },
                Poll::Pending => {
                    // Nothing to write: flush what was written before waiting.
                    if self.need_flush {
                        ready!(Pin::new(&mut *io).poll_flush(cx))?;
                        self.need_flush = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
