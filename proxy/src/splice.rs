//! The splicer: one per worker, it owns every established connection of that worker and moves
//! their bytes both ways, with correct half-close, from one `epoll` instance (mio) that its own
//! thread blocks in.
//!
//! Why not a task per connection: an open connection is then a table entry of about a hundred
//! bytes instead of a task (its future, header and trailer, aligned to 128 bytes) plus two
//! 128-byte-aligned I/O registrations — tens of thousands of etcd peer streams and watches sit
//! idle most of the time. The intake (PROXY header, ClientHello, routing, connecting) stays in
//! ordinary tasks on the worker's runtime; the finished pair of sockets is handed over with
//! [`Splicer::adopt`], which registers both sockets in the splicer's `epoll` itself. Their
//! first events wake the splicer's thread, so the hand-over does not: a worker's two threads
//! then wake each other once less per connection (BENCHMARKS.md, issue 28, round 12). Only a
//! pair whose first timer (a limit, or its keepalive) would come before the splicer wakes by
//! itself wakes a parked splicer at once.
//!
//! Why a thread of its own rather than a task whose epoll is nested in the runtime's: through
//! a nested epoll every readable socket wakes the runtime's thread second-hand, by way of the
//! outer epoll's callback, and then costs a second `epoll_wait`. On the 2-vCPU VM measured,
//! nesting alone added 9–13 µs to every proxied round trip of a minimal C relay, and moving
//! the splicer to its own thread took 5–10 µs off isthmus's (BENCHMARKS.md, issue 28, round 5).
//!
//! Fairness: a turn moves at most `Tuning::turn_budget` bytes per direction of a connection; a
//! connection with more to move is driven again in the next turn, after that turn's events,
//! and the loop does not block while one waits. Before, a busy connection was driven until
//! `EAGAIN`, while every other connection of the worker waited.
//!
//! Busy polling ([`BusyPoll`]): after handling events the splicer may keep polling for a
//! bounded time instead of parking. On virtual machines waking a parked thread costs
//! microseconds; the answer to a request just forwarded often comes back within that window.
//! Each idle round yields to the kernel scheduler (the answer's sender often shares the CPU).
//! By default adaptive: only for the answer to a message whose direction is usually answered
//! that fast (`pace`), so idle workers, bulk streams and one-exchange connections never spin.
//!
//! Every threshold of busy polling and scheduling is in one value, [`Tuning`] (`tuning.rs`),
//! with its default and the measurement behind it.

//!
//! The files: this one is the handle ([`Splicer`]: start, hand-over) and what it shares with
//! the loop; `pair.rs` what is handed over; `thread.rs` the loop on its thread (polling,
//! busy polling, parking); `state.rs` the loop's connections and timers; `conn.rs` one
//! connection's state and `turn.rs` its I/O (one turn of both directions); below them the
//! directions (`flow.rs`), pacing (`pace.rs`), limits and timers, deferred keepalive, the
//! spare buffers and pipes, and the heuristics' values (`tuning.rs`).

mod conn;
mod flow;
mod keepalive;
mod limits;
mod pace;
mod pair;
mod probe;
mod spares;
mod state;
mod table;
mod thread;
mod timers;
pub(crate) mod tuning;
mod turn;

pub use limits::Limits;
use mio::net::TcpStream;
use mio::{Interest, Token};
pub use pair::{OpenGuards, Pair};
use probe::Probe;
use prometheus_client::metrics::counter::Counter;
use state::State;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use table::Keys;
use tracing::warn;
pub use tuning::{BusyPoll, Tuning};

/// A worker's splicer. Cheap to clone; all clones feed the same loop.
#[derive(Debug, Clone)]
pub struct Splicer {
    inner: Arc<Inner>,
    /// Dropped with the last handle, which ends the loop.
    _owner: Arc<Owner>,
}

/// Ends the loop when the last [`Splicer`] handle goes.
#[derive(Debug)]
struct Owner(Arc<Inner>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.quit.store(true, Ordering::SeqCst);
        // Cannot fail short of a broken eventfd; the loop would then end at its next event.
        let _ = self.0.waker.wake();
    }
}

/// What the splicer's handles share with its loop. The connection table itself belongs to the
/// loop alone, so no lock is held while it does I/O.
#[derive(Debug)]
struct Inner {
    /// Pairs handed over and not yet taken in by the loop, and the keys they take.
    inbox: Mutex<Inbox>,
    /// The loop's `epoll` set, for [`Splicer::adopt`] to register a pair's sockets in and
    /// for the loop to add write interest while it dispatches events.
    registry: mio::Registry,
    /// Wakes the loop's thread from `epoll_wait`: a pair needs it, or the last handle went.
    waker: mio::Waker,
    /// The loop is in, or about to enter, a blocking `epoll_wait`.
    parked: AtomicBool,
    /// When the parked loop wakes by itself, in milliseconds after `epoch` (`u64::MAX`: only
    /// for an event).
    wakes_at: AtomicU64,
    epoch: Instant,
    /// Every handle is gone: the loop ends, closing its connections.
    quit: AtomicBool,
    /// Set when the loop has ended: nothing would move a new pair's bytes.
    stopped: AtomicBool,
    /// What tests read of the loop (empty outside tests).
    probe: Probe,
}

/// What handles leave for the loop: pairs under the keys their sockets are registered with.
#[derive(Debug, Default)]
struct Inbox {
    pairs: Vec<Arrival>,
    keys: Keys,
}

/// A pair handed over, its key, and when: its limits count from then, however late the loop
/// takes it in.
type Arrival = (usize, Instant, Pair<TcpStream>);

/// What a splicer counts of a contended CPU.
#[derive(Debug, Clone, Default)]
pub struct Contention {
    /// `isthmus_proxy_busy_poll_contended_total`.
    pub busy_poll: Counter,
    /// `isthmus_proxy_sched_demoted_total`.
    pub demoted: Counter,
}

/// The token of the loop's waker; connections' tokens (`key << 1 | side`) stay far below it.
const WAKE: Token = Token(usize::MAX);

impl Splicer {
    /// Creates a splicer whose loop runs on a thread of its own, named `name`, blocked in its
    /// own `epoll_wait` (see the module docs for why), under `tuning`; `counters` count what a
    /// contended CPU made it do. The loop ends, closing its connections, when the last handle
    /// is dropped.
    pub fn start(name: String, tuning: Tuning, counters: Contention) -> io::Result<Splicer> {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKE)?;
        let inner = Arc::new(Inner {
            inbox: Mutex::default(),
            registry: poll.registry().try_clone()?,
            waker,
            parked: AtomicBool::new(false),
            wakes_at: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            quit: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            probe: Probe::default(),
        });
        let task = inner.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            // A panic here aborts the process (see `supervise`): connections nobody serves
            // must not stay open.
            crate::supervise::abort_on_panic("splicer", || {
                let mut st = State::new(&tuning, counters);
                if let Err(e) = task.run(poll, &mut st) {
                    // Never seen: epoll_wait fails only on invalid arguments. Closing beats
                    // holding connections nobody serves.
                    task.stopped.store(true, Ordering::Release);
                    let queued = std::mem::take(&mut lock(&task.inbox).pairs).len();
                    warn!(error = %e, open = st.conns.len() + queued,
                        "splicer stopped; its connections are closed");
                }
            });
        })?;
        let owner = Arc::new(Owner(inner.clone()));
        Ok(Splicer {
            inner,
            _owner: owner,
        })
    }

    /// Takes over a connected pair: registers both sockets in the loop's `epoll` set, whose
    /// loop then moves their bytes. On error (the loop has stopped, or the kernel's `epoll`
    /// set has no room) the pair is dropped, closing both sockets.
    pub fn adopt(&self, pair: Pair) -> io::Result<()> {
        if self.inner.stopped.load(Ordering::Acquire) {
            return Err(io::Error::other("the worker's splicer has stopped"));
        }
        let mut pair = pair.into_mio();
        let may_wait = pair.may_wait();
        let adopted = Instant::now();
        {
            let mut inbox = lock(&self.inner.inbox);
            let key = inbox.keys.take();
            // Registered under the lock: the loop takes the inbox in after every poll and
            // before it handles the poll's events, so by then it holds the pair of any event
            // it sees. (Registering outside the lock and keeping the events that came before
            // their pair cost more: one connection in six then woke the loop a second time.)
            if let Err(e) = register(&self.inner.registry, &mut pair, key) {
                inbox.keys.put_back(key);
                return Err(e);
            }
            inbox.pairs.push((key, adopted, pair));
        }
        // The sockets' events wake a parked loop, which takes the pair in then. What cannot
        // wait for them is a timer of the pair's due before the loop wakes by itself. Both
        // sides use SeqCst: either the loop's last look at the inbox before it blocks sees
        // this pair, or this sees the loop parked.
        if self.inner.parked.load(Ordering::SeqCst)
            && may_wait.is_some_and(|w| self.inner.wakes_after(adopted + w))
            && self.inner.parked.swap(false, Ordering::SeqCst)
        {
            self.inner.probe.woke();
            self.inner.waker.wake()?;
        }
        Ok(())
    }

    /// Timer entries the loop held after its last turn.
    #[cfg(test)]
    pub fn timers(&self) -> usize {
        self.inner.probe.timers_held()
    }

    /// Connections this splicer holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.probe.opened() + lock(&self.inner.inbox).pairs.len()
    }
}

/// Registers both sockets of `pair` under `key`. Read interest only: a writable socket would
/// report an edge on registration, and another whenever a FIN is acknowledged, each a wake-up
/// with nothing to do. Write interest is added when a write pushes back (`Conn::watch`), and
/// from the start for the part of the hello the connect did not get out. The first edges
/// report what is already there (the upstream's first flight), so nothing has to be driven
/// when the loop takes the pair in.
fn register(registry: &mio::Registry, pair: &mut Pair<TcpStream>, key: usize) -> io::Result<()> {
    let up_interest = if pair.to_up.is_empty() {
        Interest::READABLE
    } else {
        Interest::READABLE | Interest::WRITABLE
    };
    registry.register(&mut pair.down, token(key, 0), Interest::READABLE)?;
    if let Err(e) = registry.register(&mut pair.up, token(key, 1), up_interest) {
        let _ = registry.deregister(&mut pair.down);
        return Err(e);
    }
    Ok(())
}

fn token(key: usize, side: usize) -> Token {
    Token(key << 1 | side)
}

/// The inbox stays usable after a panic elsewhere: every push and swap is complete before
/// the lock is released.
fn lock(m: &Mutex<Inbox>) -> MutexGuard<'_, Inbox> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
