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

mod flow;
mod keepalive;
mod limits;
mod pace;
mod probe;
mod spares;
mod table;
mod timers;
pub(crate) mod tuning;

use crate::metrics::{LimitLabels, Metrics};
use crate::pool::Slot;
use crate::sched::{Demotion, Moved, Traffic};
use crate::sources::ActiveGuard;
use flow::Flow;
use isthmus_config::KeepaliveConfig;
use keepalive::{Deferred, Plan, Tag};
use limits::Extra;
pub use limits::{End, Limits};
use mio::net::TcpStream;
use mio::{Events, Interest, Token};
use pace::Pacer;
use probe::Probe;
use prometheus_client::metrics::counter::Counter;
use spares::Spares;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use table::{Keys, Table};
use timers::Timers;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{debug, warn};
pub use tuning::{BusyPoll, Tuning};

/// Events taken from the kernel per poll.
const EVENTS: usize = 256;
/// Room for pairs kept by the inbox between turns; a burst beyond it is freed once taken in,
/// so thousands of connections opened at once do not leave their hand-over buffer behind.
const INBOX_KEEP: usize = 64;

/// What an open connection holds until it closes: dropping it updates the gauges, releases
/// the upstream's connection slot and lets a drain know this connection is gone.
#[derive(Debug)]
pub struct Keep {
    _active: ActiveGuard,
    _slot: Slot,
    _token: TaskTrackerToken,
}

impl Keep {
    pub fn new(active: ActiveGuard, slot: Slot, token: TaskTrackerToken) -> Self {
        Keep {
            _active: active,
            _slot: slot,
            _token: token,
        }
    }
}

/// A connected pair, handed over for splicing (the splicer holds it with mio's sockets).
#[derive(Debug)]
pub struct Pair<S = std::net::TcpStream> {
    pub down: S,
    pub up: S,
    /// Bytes for the upstream before anything the client sends next (the part of the
    /// replayed ClientHello the connect did not get out).
    pub to_up: Vec<u8>,
    pub to_up_counter: Counter,
    pub to_down_counter: Counter,
    pub limits: Limits,
    pub keep: Keep,
    /// For `isthmus_proxy_closed_by_limit_total{upstream}`.
    pub metrics: Arc<Metrics>,
    pub upstream: Arc<str>,
    pub span: tracing::Span,
    /// The upstream's keepalive, set on `up` once the connection has lived a second
    /// (`keepalive`): short connections never pay its four system calls.
    pub keepalive: Option<KeepaliveConfig>,
}

impl<S> Pair<S> {
    /// How long the pair may wait to be taken in: until its first timer (a limit, or the
    /// upstream's keepalive); `None` if it has none and only its sockets' events matter.
    fn may_wait(&self) -> Option<Duration> {
        let keepalive = self.keepalive.as_ref().map(|k| {
            if keepalive::deferred(k) {
                keepalive::DEFER
            } else {
                Duration::ZERO
            }
        });
        [
            keepalive,
            self.limits.idle_timeout,
            self.limits.max_duration,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Pair {
    fn into_mio(self) -> Pair<TcpStream> {
        Pair {
            down: TcpStream::from_std(self.down),
            up: TcpStream::from_std(self.up),
            to_up: self.to_up,
            to_up_counter: self.to_up_counter,
            to_down_counter: self.to_down_counter,
            limits: self.limits,
            keep: self.keep,
            metrics: self.metrics,
            upstream: self.upstream,
            span: self.span,
            keepalive: self.keepalive,
        }
    }
}

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

/// The loop's own state.
#[derive(Debug)]
struct State {
    conns: Table<Conn>,
    /// When to look at the limits of each open connection that has one.
    timers: Timers,
    spares: Spares,
    /// The inbox's vector, swapped in and out to keep its allocation.
    arrived: Vec<Arrival>,
    pacer: Pacer,
    /// [`Tuning::turn_budget`].
    turn_budget: u64,
    /// Out of `SCHED_BATCH` while the CPU is contended (see `sched`).
    policy: Demotion,
    counters: Contention,
    /// Young connections whose upstream socket waits for its keepalive.
    keepalive: Deferred,
    /// Connections that stopped at their turn's budget with bytes to move: driven again in
    /// the next turn, after its events.
    again: Vec<usize>,
    /// The previous turn's `again`, being driven (kept for its allocation).
    again_now: Vec<usize>,
}

/// What a splicer counts of a contended CPU.
#[derive(Debug, Clone, Default)]
pub struct Contention {
    /// `isthmus_proxy_busy_poll_contended_total`.
    pub busy_poll: Counter,
    /// `isthmus_proxy_sched_demoted_total`.
    pub demoted: Counter,
}

/// One open connection: two sockets, two directions.
#[derive(Debug)]
struct Conn {
    down: TcpStream,
    up: TcpStream,
    d2u: Flow,
    u2d: Flow,
    _keep: Keep,
    /// Limits, and the connection's span when it is enabled; most connections have neither.
    extra: Option<Box<Extra>>,
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

impl Inner {
    /// Whether the parked loop would wake by itself only after `at`.
    fn wakes_after(&self, at: Instant) -> bool {
        let at = at.saturating_duration_since(self.epoch).as_millis();
        u128::from(self.wakes_at.load(Ordering::SeqCst)) > at
    }

    /// Publishes when the loop, about to park, wakes by itself.
    fn parks_until(&self, deadline: Option<Instant>) {
        let at = deadline.map_or(u64::MAX, |at| {
            let ms = at.saturating_duration_since(self.epoch).as_millis();
            u64::try_from(ms).unwrap_or(u64::MAX)
        });
        self.wakes_at.store(at, Ordering::SeqCst);
    }

    fn run(&self, mut poll: mio::Poll, st: &mut State) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS);
        let mut deadline: Option<Instant> = None;
        loop {
            self.parks_until(deadline);
            self.parked.store(true, Ordering::SeqCst);
            let timeout = if self.quit.load(Ordering::SeqCst)
                || !st.again.is_empty()
                || !lock(&self.inbox).pairs.is_empty()
            {
                Some(Duration::ZERO)
            } else {
                deadline.map(|at| at.saturating_duration_since(Instant::now()))
            };
            let polled = poll_once(&mut poll, &mut events, timeout);
            self.parked.store(false, Ordering::SeqCst);
            polled?;
            if self.quit.load(Ordering::SeqCst) {
                return Ok(());
            }
            self.handle(st, &events);
            let full = events.iter().count() >= events.capacity();
            // One clock read serves the turn's timers, pacing and policy unless it spins.
            let mut now = Instant::now();
            deadline = st.due(now);
            if !full {
                let spun = match st.pacer.mode() {
                    BusyPoll::Off => false,
                    BusyPoll::Fixed(window) if !st.pacer.paused(now) => {
                        self.spin(&mut poll, &mut events, window, st)?;
                        true
                    }
                    BusyPoll::Fixed(_) => false,
                    BusyPoll::Adaptive(_) => {
                        self.spin_for_answers(&mut poll, &mut events, st, now)?
                    }
                };
                if spun {
                    now = Instant::now();
                    deadline = st.due(now);
                }
            }
            if st.policy.tick(now) {
                st.counters.demoted.inc();
            }
            self.probe.timers(st.timers.len());
            self.probe.open(st.conns.len());
        }
    }

    /// Keeps polling without parking for up to `window` after the last event.
    fn spin(
        &self,
        poll: &mut mio::Poll,
        events: &mut Events,
        window: Duration,
        st: &mut State,
    ) -> io::Result<()> {
        let mut until = Instant::now() + window;
        loop {
            poll_once(poll, events, Some(Duration::ZERO))?;
            self.handle(st, events);
            if !events.is_empty() {
                until = Instant::now() + window;
                continue;
            }
            let now = Instant::now();
            st.expire(now);
            if now >= until || self.quit.load(Ordering::SeqCst) {
                return Ok(());
            }
            if yield_cpu(st) {
                return Ok(());
            }
        }
    }

    /// Keeps polling while answers worth waiting for are due (see `pace`); returns whether
    /// it polled at all.
    fn spin_for_answers(
        &self,
        poll: &mut mio::Poll,
        events: &mut Events,
        st: &mut State,
        now: Instant,
    ) -> io::Result<bool> {
        if !st.pacer.spinning(now) {
            return Ok(false);
        }
        loop {
            poll_once(poll, events, Some(Duration::ZERO))?;
            self.handle(st, events);
            if events.is_empty() {
                yield_cpu(st);
            }
            let now = Instant::now();
            if !st.pacer.spinning(now) || self.quit.load(Ordering::SeqCst) {
                st.expire(now);
                return Ok(true);
            }
        }
    }

    /// Handles a poll's events, after taking in the pairs handed over since the last poll:
    /// an event can only be of a pair registered before the poll, so the table then holds it.
    fn handle(&self, st: &mut State, events: &Events) {
        self.take_in(st);
        std::mem::swap(&mut st.again, &mut st.again_now);
        if !events.is_empty() {
            st.dispatch(events, &self.registry);
        }
        if !st.again_now.is_empty() {
            st.drive_again(&self.registry);
        }
    }

    /// Adds the pairs handed over since the last turn to the table, and gives the keys of
    /// the connections closed since then back for new pairs.
    fn take_in(&self, st: &mut State) {
        {
            let mut inbox = lock(&self.inbox);
            self.probe.open(st.conns.len() + inbox.pairs.len());
            std::mem::swap(&mut inbox.pairs, &mut st.arrived);
            st.conns.give_back(&mut inbox.keys);
        }
        let mut arrived = std::mem::take(&mut st.arrived);
        if !arrived.is_empty() {
            let now = Instant::now();
            for (key, adopted, pair) in arrived.drain(..) {
                st.insert(key, pair, adopted, now);
            }
        }
        arrived.shrink_to(INBOX_KEEP);
        st.arrived = arrived;
        self.probe.open(st.conns.len());
    }
}

impl State {
    fn new(tuning: &Tuning, counters: Contention) -> State {
        State {
            conns: Table::default(),
            timers: Timers::default(),
            spares: Spares::default(),
            arrived: Vec::new(),
            pacer: Pacer::new(tuning),
            turn_budget: tuning.turn_budget,
            policy: Demotion::of_this_thread(tuning),
            counters,
            keepalive: Deferred::new(Instant::now()),
            again: Vec::new(),
            again_now: Vec::new(),
        }
    }

    /// Adds `pair`, registered under `key` (see [`register`]) and handed over at `adopted`, to
    /// the table at `now`.
    fn insert(&mut self, key: usize, pair: Pair<TcpStream>, adopted: Instant, now: Instant) {
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
        let extra = (limited || !pair.span.is_disabled()).then(|| {
            Box::new(Extra {
                limits: pair.limits,
                started: adopted,
                last: adopted,
                metrics: pair.metrics,
                upstream: pair.upstream,
                span: pair.span,
            })
        });
        let deadline = extra.as_deref().and_then(Extra::deadline);
        self.conns.insert(
            key,
            Conn {
                down: pair.down,
                up: pair.up,
                d2u,
                u2d: Flow::new(pair.to_down_counter, Vec::new()),
                _keep: pair.keep,
                extra,
            },
        );
        if let Some(at) = deadline {
            self.timers.set(key, at);
        }
    }

    fn dispatch(&mut self, events: &Events, registry: &mio::Registry) {
        let State {
            conns,
            timers,
            spares,
            pacer,
            policy,
            again,
            turn_budget,
            ..
        } = self;
        for ev in events.iter() {
            let (key, side) = (ev.token().0 >> 1, ev.token().0 & 1);
            // A connection closed earlier in this turn: it is gone, and so are its sockets.
            let Some(conn) = conns.get_mut(key) else {
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
            let traffic = policy.traffic();
            let Some(end) = conn.turn(key, registry, spares, pacer, traffic, again, *turn_budget)
            else {
                continue;
            };
            if let Some(c) = conns.remove(key) {
                timers.remove(key);
                c.close(end);
            }
        }
    }

    /// Drives the connections the last turn left with bytes to move (or a connection now at
    /// one's key, which then has nothing to do).
    fn drive_again(&mut self, registry: &mio::Registry) {
        let mut due = std::mem::take(&mut self.again_now);
        for key in due.drain(..) {
            let Some(conn) = self.conns.get_mut(key) else {
                continue;
            };
            let traffic = self.policy.traffic();
            let (spares, pacer, again) = (&mut self.spares, &mut self.pacer, &mut self.again);
            let budget = self.turn_budget;
            let Some(end) = conn.turn(key, registry, spares, pacer, traffic, again, budget) else {
                continue;
            };
            if let Some(c) = self.conns.remove(key) {
                self.timers.remove(key);
                c.close(end);
            }
        }
        self.again_now = due;
    }

    /// Does what is due by `now`: closes connections whose limit passed, sets the keepalive
    /// of those old enough (a batch per turn); returns when the next thing is due, which is
    /// at once if a batch was left for the next turn.
    fn due(&mut self, now: Instant) -> Option<Instant> {
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
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        while let Some(key) = self.timers.pop_due(now) {
            let Some(x) = self.conns.get_mut(key).and_then(|c| c.extra.as_deref()) else {
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

impl Conn {
    /// One turn of the connection at `key`: drives both directions and watches for room
    /// where a destination pushed back; what ended it, if it ended. Queued in `again` when a
    /// direction stopped at its `budget` with bytes to move.
    #[allow(clippy::too_many_arguments)]
    fn turn(
        &mut self,
        key: usize,
        registry: &mio::Registry,
        spares: &mut Spares,
        pacer: &mut Pacer,
        traffic: Option<&mut Traffic>,
        again: &mut Vec<usize>,
        budget: u64,
    ) -> Option<End> {
        let driven = self.drive(spares, pacer, traffic, budget).and_then(|done| {
            if !done {
                self.watch(key, registry)?;
            }
            Ok(done)
        });
        match driven {
            Ok(false) => {
                if self.d2u.more() || self.u2d.more() {
                    again.push(key);
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
    fn drive(
        &mut self,
        spares: &mut Spares,
        pacer: &mut Pacer,
        traffic: Option<&mut Traffic>,
        budget: u64,
    ) -> io::Result<bool> {
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
        if let Some(t) = traffic {
            t.add(up);
            t.add(down);
        }
        if moved > 0 && pacer.learns() {
            pace(&mut self.d2u, &mut self.u2d, up, down, pacer);
        }
        if moved > 0 {
            if let Some(x) = self.extra.as_deref_mut() {
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

    fn debug_error(&self, e: &io::Error) {
        if let Some(x) = &self.extra {
            x.span.in_scope(|| debug!(error = %e, "closed with error"));
        }
    }

    fn close(self, end: End) {
        let Some(x) = self.extra else { return };
        let limit = match end {
            End::Idle => Some("idle_timeout"),
            End::MaxDuration => Some("max_connection_duration"),
            End::Closed | End::Failed => None,
        };
        if let Some(limit) = limit {
            x.metrics
                .closed_by_limit
                .get_or_create(&LimitLabels {
                    upstream: x.upstream.to_string(),
                    limit,
                })
                .inc();
        }
        x.span.in_scope(|| debug!(?end, "closed"));
    }
}

/// Updates both directions' [`pace::Pace`] after a turn that moved bytes: what moved answers
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
fn set_keepalive(up: &TcpStream, k: &KeepaliveConfig) {
    if let Err(e) = crate::socket::set_keepalive(up, k) {
        debug!(error = %e, "cannot set keepalive on the upstream socket");
    }
}

/// Lets the kernel run another thread of this CPU (often the answer's sender); returns whether
/// that took so long that busy polling paused (see `pace`), in which case the thread also
/// leaves `SCHED_BATCH` for a while (see `sched`).
fn yield_cpu(st: &mut State) -> bool {
    let before = Instant::now();
    std::thread::yield_now();
    let after = Instant::now();
    let contended = st.pacer.yielded(before, after);
    if contended {
        st.counters.busy_poll.inc();
        if st.policy.contended(after) {
            st.counters.demoted.inc();
        }
    }
    contended
}

fn token(key: usize, side: usize) -> Token {
    Token(key << 1 | side)
}

/// One `epoll_wait`; a signal's interruption counts as a wait that found nothing.
fn poll_once(
    poll: &mut mio::Poll,
    events: &mut Events,
    timeout: Option<Duration>,
) -> io::Result<()> {
    match poll.poll(events, timeout) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        r => r,
    }
}

/// The inbox stays usable after a panic elsewhere: every push and swap is complete before
/// the lock is released.
fn lock(m: &Mutex<Inbox>) -> MutexGuard<'_, Inbox> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
