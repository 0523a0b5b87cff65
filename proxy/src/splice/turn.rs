//! One connection's I/O: a turn drives both directions, watches for room where a destination
//! pushed back, and updates the directions' pacing.

use super::conn::Conn;
use super::flow::Flow;
use super::limits::End;
use super::pace::Pacer;
use super::spares::{self, Spares};
use super::token;
use crate::sched::{Moved, Traffic};
use isthmus_config::KeepaliveConfig;
use mio::net::TcpStream;
use mio::Interest;
use std::io;
use std::time::Instant;
use tracing::debug;

/// What a connection's turn uses of the loop: one per turn, borrowed from the loop's state.
pub struct Io<'a> {
    pub registry: &'a mio::Registry,
    pub spares: &'a mut Spares,
    pub pacer: &'a mut Pacer,
    /// Where the scheduling policy tallies what moved, while it looks (see `sched`).
    pub traffic: Option<&'a mut Traffic>,
    /// Connections that stopped at their budget with bytes to move.
    pub again: &'a mut Vec<usize>,
    /// `Tuning::turn_budget`.
    pub budget: u64,
}

impl Conn {
    /// One turn of the connection at `key`: drives both directions and watches for room
    /// where a destination pushed back; what ended it, if it ended. Queued in `io.again` when
    /// a direction stopped at its budget with bytes to move.
    pub fn turn(&mut self, key: usize, io: &mut Io<'_>) -> Option<End> {
        let driven = self.drive(io).and_then(|done| {
            if !done {
                self.watch(key, io.registry)?;
            }
            Ok(done)
        });
        match driven {
            Ok(false) => {
                if self.d2u.more() || self.u2d.more() {
                    io.again.push(key);
                }
                None
            }
            Ok(true) => Some(End::Closed),
            Err(e) => {
                self.debug_error(&e);
                Some(End::Failed)
            }
        }
    }

    /// Drives both directions; `Ok(true)` when both are over.
    fn drive(&mut self, io: &mut Io<'_>) -> io::Result<bool> {
        let (spares, budget) = (&mut *io.spares, io.budget);
        let up_done = self.u2d.finished();
        let to_up = self
            .d2u
            .drive(&self.down, &self.up, spares, up_done, budget)?;
        let down_done = self.d2u.finished();
        let to_down = self
            .u2d
            .drive(&self.up, &self.down, spares, down_done, budget)?;
        let moved = to_up + to_down;
        let burst = spares::BUF_SIZE as u64;
        let (up, down) = (Moved::of(to_up, burst), Moved::of(to_down, burst));
        if let Some(t) = io.traffic.as_deref_mut() {
            t.add(up);
            t.add(down);
        }
        if moved > 0 && io.pacer.learns() {
            pace(&mut self.d2u, &mut self.u2d, up, down, io.pacer);
        }
        if moved > 0 {
            if let Some(x) = self.limits_and_span.as_deref_mut() {
                x.last = Instant::now();
            }
        }
        Ok(self.d2u.finished() && self.u2d.finished())
    }

    /// Adds write interest for a destination that pushed back. `EPOLL_CTL_MOD` reports room
    /// that freed up in between as an edge, so none is missed; once added it stays (a
    /// connection that pushes back once likely carries bulk and does again).
    fn watch(&mut self, key: usize, registry: &mio::Registry) -> io::Result<()> {
        let both = Interest::READABLE | Interest::WRITABLE;
        if self.d2u.needs_watch() {
            registry.reregister(&mut self.up, token(key, 1), both)?;
            self.d2u.watched();
        }
        if self.u2d.needs_watch() {
            registry.reregister(&mut self.down, token(key, 0), both)?;
            self.u2d.watched();
        }
        Ok(())
    }
}

/// Updates both directions' [`super::pace::Pace`] after a turn that moved bytes: what moved answers
/// the other direction's last message, and a message (less than a bulk burst) that went out
/// awaits its own answer.
fn pace(d2u: &mut Flow, u2d: &mut Flow, up: Moved, down: Moved, pacer: &mut Pacer) {
    let (now, judge) = (pacer.now(), pacer.judge());
    if down != Moved::Nothing && d2u.pace.answered(now, judge) {
        pacer.arrived();
    }
    if up != Moved::Nothing && u2d.pace.answered(now, judge) {
        pacer.arrived();
    }
    for (flow, m) in [(d2u, up), (u2d, down)] {
        if m == Moved::Message && flow.pace.sent(now, judge) {
            pacer.expect();
        }
    }
}

/// Sets keepalive on an upstream socket. A failure (the socket already broke) is left to the
/// connection's next read or write to report.
pub fn set_keepalive(up: &TcpStream, k: &KeepaliveConfig) {
    if let Err(e) = crate::socket::set_keepalive(up, k) {
        debug!(error = %e, "cannot set keepalive on the upstream socket");
    }
}
