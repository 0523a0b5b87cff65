//! The loop's own state: its connections and their timers, the spare buffers they share,
//! pacing and scheduling. Owned by the loop's thread alone, so no lock is held while it does
//! I/O.

use super::conn::Conn;
use super::flow::Flow;
use super::keepalive::{self, Deferred, Plan, Tag};
use super::limits::{End, Limits, LimitsAndSpan};
use super::pace::Pacer;
use super::spares::Spares;
use super::table::Table;
use super::timers::Timers;
use super::tuning::Tuning;
use super::turn::{set_keepalive, Io};
use super::{Arrival, Contention, Pair};
use crate::sched::Demotion;
use mio::net::TcpStream;
use mio::Events;
use std::time::Instant;

/// The loop's own state.
#[derive(Debug)]
pub struct State {
    pub conns: Table<Conn>,
    /// When to look at the limits of each open connection that has one.
    pub timers: Timers,
    /// The inbox's vector, swapped in and out to keep its allocation.
    pub arrived: Vec<Arrival>,
    /// What every connection's turn draws on.
    pub turns: Turns,
    pub counters: Contention,
    /// Young connections whose upstream socket waits for its keepalive.
    pub keepalive: Deferred,
    /// The previous turn's `turns.again`, being driven (kept for its allocation).
    pub again_now: Vec<usize>,
}

/// What the connections' turns share: spare buffers, pacing, scheduling, the budget and the
/// list of connections to drive again.
#[derive(Debug)]
pub struct Turns {
    pub spares: Spares,
    pub pacer: Pacer,
    /// [`Tuning::turn_budget`].
    pub budget: u64,
    /// Out of `SCHED_BATCH` while the CPU is contended (see `sched`).
    pub policy: Demotion,
    /// Connections that stopped at their turn's budget with bytes to move: driven again in
    /// the next turn, after its events.
    pub again: Vec<usize>,
}

impl Turns {
    /// One turn's view of them, for [`Conn::turn`].
    pub fn io<'a>(&'a mut self, registry: &'a mio::Registry) -> Io<'a> {
        Io {
            registry,
            spares: &mut self.spares,
            pacer: &mut self.pacer,
            traffic: self.policy.traffic(),
            again: &mut self.again,
            budget: self.budget,
        }
    }
}

impl State {
    pub fn new(tuning: &Tuning, counters: Contention) -> State {
        State {
            conns: Table::default(),
            timers: Timers::default(),
            arrived: Vec::new(),
            turns: Turns {
                spares: Spares::default(),
                pacer: Pacer::new(tuning),
                budget: tuning.turn_budget,
                policy: Demotion::of_this_thread(tuning),
                again: Vec::new(),
            },
            counters,
            keepalive: Deferred::new(Instant::now()),
            again_now: Vec::new(),
        }
    }

    /// Adds `pair`, registered under `key` (see [`super::register`]) and handed over at `adopted`, to
    /// the table at `now`.
    pub fn insert(&mut self, key: usize, pair: Pair<TcpStream>, adopted: Instant, now: Instant) {
        let hello_left = !pair.to_up.is_empty();
        let mut d2u = Flow::new(pair.to_up_counter, pair.to_up);
        if hello_left {
            // Registered with write interest for the rest of the hello.
            d2u.watched();
        }
        match self.keepalive.enlist(pair.keepalive, key, now) {
            Plan::None => {}
            Plan::Later(tag) => d2u.keepalive = tag,
            Plan::Now(k) => set_keepalive(&pair.up, &k),
        }
        let limited = pair.limits != Limits::default();
        let limits_and_span = (limited || !pair.span.is_disabled()).then(|| {
            Box::new(LimitsAndSpan {
                limits: pair.limits,
                started: adopted,
                last: adopted,
                metrics: pair.metrics,
                upstream: pair.upstream,
                span: pair.span,
            })
        });
        let deadline = limits_and_span.as_deref().and_then(LimitsAndSpan::deadline);
        self.conns.insert(
            key,
            Conn {
                down: pair.down,
                up: pair.up,
                d2u,
                u2d: Flow::new(pair.to_down_counter, Vec::new()),
                _guards: pair.guards,
                limits_and_span,
            },
        );
        if let Some(at) = deadline {
            self.timers.set(key, at);
        }
    }

    /// Lets the connections of a poll's events take their turns.
    pub fn dispatch(&mut self, events: &Events, registry: &mio::Registry) {
        for ev in events.iter() {
            let (key, side) = (ev.token().0 >> 1, ev.token().0 & 1);
            // A connection closed earlier in this turn: it is gone, and so are its sockets.
            let Some(conn) = self.conns.get_mut(key) else {
                continue;
            };
            let closing = ev.is_read_closed() || ev.is_error();
            let (source, sink) = if side == 0 {
                (&mut conn.d2u, &mut conn.u2d)
            } else {
                (&mut conn.u2d, &mut conn.d2u)
            };
            if ev.is_readable() || closing {
                source.readable(closing);
            }
            if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                sink.writable();
            }
            if let Some(end) = conn.turn(key, &mut self.turns.io(registry)) {
                self.close(key, end);
            }
        }
    }

    /// Drives the connections the last turn left with bytes to move (or a connection now at
    /// one's key, which then has nothing to do).
    pub fn drive_again(&mut self, registry: &mio::Registry) {
        let mut due = std::mem::take(&mut self.again_now);
        for key in due.drain(..) {
            let Some(conn) = self.conns.get_mut(key) else {
                continue;
            };
            if let Some(end) = conn.turn(key, &mut self.turns.io(registry)) {
                self.close(key, end);
            }
        }
        self.again_now = due;
    }

    /// Closes the connection at `key`, which ended.
    fn close(&mut self, key: usize, end: End) {
        if let Some(c) = self.conns.remove(key) {
            self.timers.remove(key);
            c.close(end);
        }
    }

    /// Does what is due by `now`: closes connections whose limit passed, sets the keepalive
    /// of those old enough (a batch per turn); returns when the next thing is due, which is
    /// at once if a batch was left for the next turn.
    pub fn due(&mut self, now: Instant) -> Option<Instant> {
        let limits = self.expire(now);
        for _ in 0..keepalive::BATCH {
            let Some((key, tick)) = self.keepalive.pop_due(now) else {
                break;
            };
            let Some(conn) = self.conns.get_mut(key) else {
                continue;
            };
            let tag = conn.d2u.keepalive;
            if !tag.adopted_in(tick) {
                continue;
            }
            conn.d2u.keepalive = Tag::NONE;
            if let Some(k) = self.keepalive.kind(tag) {
                set_keepalive(&conn.up, k);
            }
        }
        match (limits, self.keepalive.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Closes connections whose limit passed and re-arms the others; returns the next
    /// deadline. A connection's entry is set from its limits and last activity, and moved on
    /// only when it comes due: bytes moving do not touch the heap.
    pub fn expire(&mut self, now: Instant) -> Option<Instant> {
        while let Some(key) = self.timers.pop_due(now) {
            let Some(x) = self
                .conns
                .get_mut(key)
                .and_then(|c| c.limits_and_span.as_deref())
            else {
                continue;
            };
            match x.expired(now) {
                Some(end) => {
                    if let Some(c) = self.conns.remove(key) {
                        c.close(end);
                    }
                }
                None => {
                    if let Some(at) = x.deadline() {
                        self.timers.set(key, at);
                    }
                }
            }
        }
        self.timers.next()
    }
}
