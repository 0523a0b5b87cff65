//! Socket → stream: reads the socket and hands what it read to `h2` without copying it.
//!
//! Buffers: a direction that never carried more than a small read at once holds none (it
//! reads into a stack buffer, and what arrives is copied into an allocation of its size:
//! request/response streams allocate what they carry). A read that fills the stack buffer
//! switches the direction to bulk reads straight into [`BULK`]-byte buffers, whose filled part
//! is handed to `h2` and whose rest takes the next read. A few such buffers take turns
//! ([`Ring`]): `h2` is still encrypting the last reads when the next one comes, and a fresh
//! allocation per read cost up to a page fault per 4 KiB (glibc gives freed memory back to the
//! kernel and takes it again: ~100k faults per GB in the agent, measured). When the socket
//! goes quiet all but one are dropped, so a bulk stream that went idle holds one buffer.

use super::h2_error;
use bytes::{Bytes, BytesMut};
use h2::SendStream;
use prometheus_client::metrics::counter::Counter;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// An idle direction's stack buffer; a read that fills it starts bulk reads.
const FIRST: usize = 16 * 1024;
/// A bulk read's buffer: below glibc's 128 KiB `mmap` threshold.
const BULK: usize = 64 * 1024;
/// Bulk buffers at most: the one being read into, the one waiting for send capacity, and what
/// `h2` may hold unsent (`MAX_SEND_BUF` in `http2.rs`: two reads).
const RING: usize = 4;

/// Socket → stream.
pub(super) struct Up {
    /// Read, not yet handed to `h2`: waits for send capacity.
    pending: Bytes,
    ring: Ring,
    bulk: bool,
    eof: bool,
    done: bool,
    counter: Counter,
}

impl Up {
    pub(super) fn new(counter: Counter, first: Bytes, send: &mut SendStream<Bytes>) -> Self {
        if !first.is_empty() {
            counter.inc_by(first.len() as u64);
            send.reserve_capacity(first.len());
        }
        Self {
            pending: first,
            ring: Ring::default(),
            bulk: false,
            eof: false,
            done: false,
            counter,
        }
    }

    pub(super) fn poll<T: AsyncRead + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
        send: &mut SendStream<Bytes>,
    ) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        // Cooperative scheduling, as tokio's own copy does: a busy stream yields now and then.
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        loop {
            if !self.pending.is_empty() {
                // Capacity was reserved when the bytes were read. Once some is granted the
                // whole read goes: `h2` holds what exceeds it until the window opens, and
                // this direction reads nothing more until capacity is granted again.
                while send.capacity() == 0 {
                    match ready!(send.poll_capacity(cx)) {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Poll::Ready(Err(h2_error(e))),
                        None => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                    }
                }
                send.send_data(std::mem::take(&mut self.pending), false)
                    .map_err(h2_error)?;
                coop.made_progress();
            }
            if self.eof {
                send.send_data(Bytes::new(), true).map_err(h2_error)?;
                self.done = true;
                self.ring = Ring::default();
                return Poll::Ready(Ok(()));
            }
            let chunk = ready!(self.poll_read(cx, io))?;
            coop.made_progress();
            if chunk.is_empty() {
                self.eof = true;
            } else {
                self.counter.inc_by(chunk.len() as u64);
                send.reserve_capacity(chunk.len());
                self.pending = chunk;
            }
        }
    }

    /// One read from the socket; empty at EOF.
    fn poll_read<T: AsyncRead + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut T,
    ) -> Poll<io::Result<Bytes>> {
        if !self.bulk {
            let mut stack = [MaybeUninit::<u8>::uninit(); FIRST];
            let mut rb = ReadBuf::uninit(&mut stack);
            ready!(Pin::new(&mut *io).poll_read(cx, &mut rb))?;
            self.bulk = rb.filled().len() == FIRST;
            return Poll::Ready(Ok(Bytes::copy_from_slice(rb.filled())));
        }
        let buf = self.ring.next();
        match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, buf) {
            Poll::Ready(r) => {
                r?;
                Poll::Ready(Ok(buf.split().freeze()))
            }
            Poll::Pending => {
                self.ring.shrink();
                Poll::Pending
            }
        }
    }
}

/// The buffers bulk reads take turns in. Each read is split off its buffer whole, so a buffer
/// is empty between reads; its allocation is shared with what `h2` still holds of it.
#[derive(Default)]
struct Ring {
    bufs: Vec<BytesMut>,
    cur: usize,
}

impl Ring {
    /// A buffer with room for a bulk read: the current one while it has room, else the first
    /// one whose earlier reads `h2` has all let go of (started over), else a new one (while
    /// there are fewer than [`RING`]; then the next is given up to `h2` and replaced).
    fn next(&mut self) -> &mut BytesMut {
        let n = self.bufs.len();
        if n == 0 {
            self.bufs.push(BytesMut::with_capacity(BULK));
            self.cur = 0;
        } else if self.bufs[self.cur].capacity() < FIRST {
            let free = (1..=n)
                .map(|k| (self.cur + k) % n)
                .find(|&i| self.bufs[i].try_reclaim(BULK));
            match free {
                Some(i) => self.cur = i,
                None if n < RING => {
                    self.bufs.push(BytesMut::with_capacity(BULK));
                    self.cur = n;
                }
                None => {
                    self.cur = (self.cur + 1) % n;
                    self.bufs[self.cur] = BytesMut::with_capacity(BULK);
                }
            }
        }
        &mut self.bufs[self.cur]
    }

    /// Keeps only the current buffer (the socket went quiet).
    fn shrink(&mut self) {
        if self.bufs.len() > 1 {
            let cur = self.bufs.swap_remove(self.cur);
            self.bufs = vec![cur];
            self.cur = 0;
        }
    }
}
