//! One direction of a spliced connection: read from one socket, write to the other, pass the
//! FIN on. A state machine over non-blocking sockets with edge-triggered readiness: `drive`
//! moves what it can without blocking and returns; the splicer calls it again on the next edge.
//!
//! Edge-triggered readiness is only reported once per change, so the flow remembers what it
//! learnt: `CAN_READ` (the source may still hold bytes: set by a readable edge, cleared by a
//! read that would block or came back short) and `WAIT_WRITE` (the destination's send buffer is
//! full: set by a short or blocked write, cleared by a writable edge). A short read means the
//! receive queue was empty at that instant, and any byte or FIN arriving later raises a new
//! edge, so the read that would only say `EAGAIN` is skipped, unless the edge already carried
//! the peer's FIN or an error (`CLOSING`): then nothing new will come and reading goes on to
//! the end.
//!
//! A turn of the splicer moves at most a budget of bytes per direction (`Tuning::turn_budget`): a
//! direction that still could move more says so ([`Flow::more`]) and the splicer drives it
//! again after the other connections' events, instead of reading it until `EAGAIN` while
//! they wait.

use super::keepalive::Tag;
use super::pace::Pace;
use super::spares::{Held, Spares, BUF_SIZE};
#[cfg(target_os = "linux")]
use crate::sys::Pipe;
use mio::net::TcpStream;
use prometheus_client::metrics::counter::Counter;
use std::io::{self, Read, Write};
use std::net::Shutdown;

const CAN_READ: u8 = 1;
const CLOSING: u8 = 1 << 1;
const WAIT_WRITE: u8 = 1 << 2;
const EOF: u8 = 1 << 3;
const SHUT: u8 = 1 << 4;
const BULK: u8 = 1 << 5;
/// The destination is watched for room to write (its registration includes `WRITABLE`).
const WATCHED: u8 = 1 << 6;
/// The last drive stopped at its budget with bytes left to move.
const MORE: u8 = 1 << 7;

/// One direction's state.
#[derive(Debug)]
pub struct Flow {
    held: Option<Box<Held>>,
    counter: Counter,
    flags: u8,
    /// Whether this direction's messages are answered quickly (adaptive busy polling).
    pub pace: Pace,
    /// The keepalive this flow's destination still waits for (`keepalive`): set only in the
    /// flow toward the upstream. Here, in the padding after `pace`, it costs the connection's
    /// table entry nothing.
    pub keepalive: Tag,
}

impl Flow {
    /// A flow counting the bytes it moves into `counter`; `first`, if not empty, is written
    /// to the destination before anything read from the source.
    pub fn new(counter: Counter, first: Vec<u8>) -> Flow {
        let end = first.len();
        let held = (end > 0).then(|| {
            Box::new(Held::Copy {
                buf: first,
                at: 0,
                end,
            })
        });
        Flow {
            held,
            counter,
            flags: 0,
            pace: Pace::default(),
            keepalive: Tag::NONE,
        }
    }

    /// The source had a readable edge; `closing` if it carried the peer's FIN or an error.
    pub fn readable(&mut self, closing: bool) {
        self.flags |= CAN_READ;
        if closing {
            self.flags |= CLOSING;
        }
    }

    /// The destination had a writable edge.
    pub fn writable(&mut self) {
        self.flags &= !WAIT_WRITE;
    }

    /// The destination pushed back and is not watched for room yet: the caller adds
    /// `WRITABLE` to its registration (and says so with [`Flow::watched`]).
    pub fn needs_watch(&self) -> bool {
        self.flags & (WAIT_WRITE | WATCHED) == WAIT_WRITE
    }

    /// The destination's registration includes `WRITABLE` from now on.
    pub fn watched(&mut self) {
        self.flags |= WATCHED;
    }

    /// The last [`Flow::drive`] stopped at its budget: driven now, it would move more.
    pub fn more(&self) -> bool {
        self.flags & MORE != 0
    }

    /// The FIN was passed on and nothing is left to write: this direction is over.
    pub fn finished(&self) -> bool {
        self.flags & SHUT != 0 && self.held.is_none()
    }

    /// Moves what can be moved now; returns the bytes written to the destination. An error
    /// ends the whole connection (the caller drops both sockets, so a reset is passed on).
    ///
    /// `last`: the other direction is finished, so this one passing its FIN on ends the
    /// connection and the caller closes both sockets at once. The FIN is then left to
    /// `close(2)`: the other direction has read `to` to its end, so nothing unread is left in
    /// its receive queue and the kernel sends a FIN, not a reset, exactly as `shutdown` would
    /// (one system call less per connection).
    ///
    /// Once `budget` bytes have moved, it stops before the next read (see [`Flow::more`]).
    pub fn drive(
        &mut self,
        from: &TcpStream,
        to: &TcpStream,
        spares: &mut Spares,
        last: bool,
        budget: u64,
    ) -> io::Result<u64> {
        let mut moved = 0u64;
        self.flags &= !MORE;
        loop {
            if let Some(held) = self.held.as_deref_mut() {
                if self.flags & WAIT_WRITE != 0 {
                    return Ok(moved);
                }
                let (done, n) = flush(held, to)?;
                self.count(n, &mut moved);
                if !done {
                    self.flags |= WAIT_WRITE;
                    return Ok(moved);
                }
                if let Some(done) = self.held.take() {
                    spares.recycle(*done);
                }
            }
            if self.flags & EOF != 0 {
                if self.flags & SHUT == 0 {
                    if !last {
                        // The peer may be gone already; that ends this direction only.
                        let _ = to.shutdown(Shutdown::Write);
                    }
                    self.flags |= SHUT;
                }
                return Ok(moved);
            }
            if self.flags & CAN_READ == 0 {
                return Ok(moved);
            }
            if moved >= budget {
                self.flags |= MORE;
                return Ok(moved);
            }
            #[cfg(target_os = "linux")]
            if self.flags & BULK != 0 {
                match spares.pipe() {
                    Some(pipe) => self.splice_once(pipe, from, to, spares, &mut moved)?,
                    // No descriptor for a pipe: copying works too.
                    None => self.flags &= !BULK,
                }
                continue;
            }
            self.copy_once(from, to, spares, &mut moved)?;
        }
    }

    fn count(&self, n: usize, moved: &mut u64) {
        if n > 0 {
            self.counter.inc_by(n as u64);
            *moved += n as u64;
        }
    }

    fn copy_once(
        &mut self,
        mut from: &TcpStream,
        to: &TcpStream,
        spares: &mut Spares,
        moved: &mut u64,
    ) -> io::Result<()> {
        let mut buf = spares.buf();
        let n = match from.read(&mut buf) {
            Ok(0) => {
                spares.give_buf(buf);
                self.flags |= EOF;
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                spares.give_buf(buf);
                self.flags &= !CAN_READ;
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                spares.give_buf(buf);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if n == BUF_SIZE {
            self.flags |= BULK;
        } else if self.flags & CLOSING == 0 {
            self.flags &= !CAN_READ;
        }
        self.hand_over(Held::Copy { buf, at: 0, end: n }, to, spares, moved)
    }

    /// Writes freshly read bytes out; what the destination does not take now is held until
    /// its next writable edge.
    fn hand_over(
        &mut self,
        mut held: Held,
        to: &TcpStream,
        spares: &mut Spares,
        moved: &mut u64,
    ) -> io::Result<()> {
        let (done, written) = flush(&mut held, to)?;
        self.count(written, moved);
        if done {
            spares.recycle(held);
        } else {
            self.held = Some(Box::new(held));
            self.flags |= WAIT_WRITE;
        }
        Ok(())
    }

    /// One fill of the pipe from the source and as much of it out as the destination takes.
    /// A short splice does not mean the socket is drained (the pipe may run out of slots), so
    /// bulk mode reads until the source would block.
    #[cfg(target_os = "linux")]
    fn splice_once(
        &mut self,
        mut pipe: Pipe,
        from: &TcpStream,
        to: &TcpStream,
        spares: &mut Spares,
        moved: &mut u64,
    ) -> io::Result<()> {
        match pipe.fill_from(from) {
            Ok(0) => {
                spares.give_pipe(pipe);
                self.flags |= EOF;
                return Ok(());
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The burst is over; the next read starts with a copy again.
                spares.give_pipe(pipe);
                self.flags &= !(CAN_READ | BULK);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.hand_over(Held::Pipe(pipe), to, spares, moved)
    }
}

/// Writes held bytes; `(true, n)` when all are out, `(false, n)` when the destination pushed
/// back (a short write means its send buffer is full: the kernel raises a writable edge when
/// room frees up, so the write that would only say `EAGAIN` is skipped).
fn flush(held: &mut Held, mut to: &TcpStream) -> io::Result<(bool, usize)> {
    match held {
        Held::Copy { buf, at, end } => loop {
            let data = buf.get(*at..*end).unwrap_or_default();
            match to.write(data) {
                Ok(n) => {
                    *at += n;
                    return Ok((*at >= *end, n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((false, 0)),
                Err(e) => return Err(e),
            }
        },
        #[cfg(target_os = "linux")]
        Held::Pipe(pipe) => {
            let mut written = 0;
            while pipe.held > 0 {
                match pipe.drain_to(to) {
                    Ok(0) => break,
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            Ok((pipe.held == 0, written))
        }
    }
}
