//! The splicer: one per worker, it owns every established connection of that worker and moves
//! their bytes both ways, with correct half-close, from one `epoll` instance (mio) that its own
//! thread blocks in.
//!
//! Why not a task per connection: an open connection is then a table entry of about a hundred
//! bytes instead of a task (its future, header and trailer, aligned to 128 bytes) plus two
//! 128-byte-aligned I/O registrations — tens of thousands of etcd peer streams and watches sit
//! idle most of the time. The intake (PROXY header, ClientHello, routing, connecting) stays in
//! ordinary tasks on the worker's runtime; the finished pair of sockets is handed over with
//! [`Splicer::adopt`], which wakes the splicer's thread only if it is parked.
//!
//! Why a thread of its own rather than a task whose epoll is nested in the runtime's: through
//! a nested epoll every readable socket wakes the runtime's thread second-hand, by way of the
//! outer epoll's callback, and then costs a second `epoll_wait`. On the 2-vCPU VM measured,
//! nesting alone added 9–13 µs to every proxied round trip of a minimal C relay, and moving
//! the splicer to its own thread took 5–10 µs off isthmus's (BENCHMARKS.md, issue 28, round 5).
//!
//! Busy polling ([`BusyPoll`]): after handling events the splicer may keep polling for a
//! bounded time instead of parking. On virtual machines waking a parked thread costs
//! microseconds; the answer to a request just forwarded often comes back within that window.
//! Each idle round yields to the kernel scheduler (the answer's sender often shares the CPU).
//! By default adaptive: only for the answer to a message whose direction is usually answered
//! that fast (`pace`), so idle workers, bulk streams and one-exchange connections never spin.

mod flow;
mod keepalive;
mod limits;
mod pace;
mod spares;

use crate::metrics::{LimitLabels, Metrics};
use crate::pool::Slot;
use crate::sched::{Demotion, Moved, Traffic};
use crate::sources::ActiveGuard;
use flow::Flow;
use isthmus_config::KeepaliveConfig;
use keepalive::{Deferred, Plan, Tag};
pub use limits::{End, Limits};
use limits::{Extra, Timer};
use mio::net::TcpStream;
use mio::{Events, Interest, Token};
pub use pace::BusyPoll;
use pace::Pacer;
use prometheus_client::metrics::counter::Counter;
use slab::Slab;
use spares::Spares;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{debug, warn};

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

/// A connected pair, handed over for splicing.
#[derive(Debug)]
pub struct Pair {
    pub down: std::net::TcpStream,
    pub up: std::net::TcpStream,
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
    /// Pairs handed over and not yet taken in by the loop; locked only to push or swap.
    inbox: Mutex<Vec<Pair>>,
    /// Wakes the loop's thread from `epoll_wait`: a pair arrived, or the last handle went.
    waker: mio::Waker,
    /// The loop is in, or about to enter, a blocking `epoll_wait`: a new pair must wake it.
    parked: AtomicBool,
    /// Every handle is gone: the loop ends, closing its connections.
    quit: AtomicBool,
    /// Set when the loop has ended: nothing would move a new pair's bytes.
    stopped: AtomicBool,
    /// Open connections, for tests waiting for every connection to close.
    #[cfg(test)]
    open: std::sync::atomic::AtomicUsize,
}

/// The loop's own state.
#[derive(Debug)]
struct State {
    conns: Slab<Conn>,
    timers: BinaryHeap<Reverse<Timer>>,
    next_gen: u32,
    spares: Spares,
    /// The inbox's vector, swapped in and out to keep its allocation.
    arrived: Vec<Pair>,
    /// A handle on the registry (its own descriptor), for adding write interest while
    /// events are dispatched.
    registry: Option<mio::Registry>,
    pacer: Pacer,
    /// Out of `SCHED_BATCH` while the CPU is contended (see `sched`).
    policy: Demotion,
    counters: Contention,
    /// Young connections whose upstream socket waits for its keepalive.
    keepalive: Deferred,
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
    /// own `epoll_wait` (see the module docs for why); `counters` count what a contended CPU
    /// made it do. The loop ends, closing its connections, when the last handle is dropped.
    pub fn start(name: String, busy_poll: BusyPoll, counters: Contention) -> io::Result<Splicer> {
        let poll = mio::Poll::new()?;
        let waker = mio::Waker::new(poll.registry(), WAKE)?;
        let inner = Arc::new(Inner {
            inbox: Mutex::default(),
            waker,
            parked: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            #[cfg(test)]
            open: Default::default(),
        });
        let task = inner.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            // A panic here aborts the process (see `supervise`): connections nobody serves
            // must not stay open.
            crate::supervise::abort_on_panic("splicer", || {
                let mut st = State::new(busy_poll, counters);
                if let Err(e) = task.run(poll, &mut st) {
                    // Never seen: epoll_wait fails only on invalid arguments. Closing beats
                    // holding connections nobody serves.
                    task.stopped.store(true, Ordering::Release);
                    let queued = std::mem::take(&mut *lock(&task.inbox)).len();
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

    /// Takes over a connected pair: its loop registers both sockets and moves their bytes. On
    /// error (the loop has stopped) the pair is dropped, closing both sockets.
    pub fn adopt(&self, pair: Pair) -> io::Result<()> {
        if self.inner.stopped.load(Ordering::Acquire) {
            return Err(io::Error::other("the worker's splicer has stopped"));
        }
        lock(&self.inner.inbox).push(pair);
        // Both sides use SeqCst: either the loop's last look at the inbox before it blocks
        // sees this pair, or this sees the loop parked and wakes it. A loop that is awake
        // takes the pair in at its next turn without a system call from here.
        if self.inner.parked.swap(false, Ordering::SeqCst) {
            self.inner.waker.wake()?;
        }
        Ok(())
    }

    /// Connections this splicer holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.open.load(Ordering::Acquire) + lock(&self.inner.inbox).len()
    }
}

impl Inner {
    fn run(&self, mut poll: mio::Poll, st: &mut State) -> io::Result<()> {
        st.registry = Some(poll.registry().try_clone()?);
        let mut events = Events::with_capacity(EVENTS);
        let mut deadline: Option<Instant> = None;
        loop {
            self.parked.store(true, Ordering::SeqCst);
            let timeout = if self.quit.load(Ordering::SeqCst) || !lock(&self.inbox).is_empty() {
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
            st.dispatch(&events);
            let full = events.iter().count() >= events.capacity();
            self.take_in(st, poll.registry());
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
            #[cfg(test)]
            self.open.store(st.conns.len(), Ordering::Release);
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
            self.take_in(st, poll.registry());
            poll_once(poll, events, Some(Duration::ZERO))?;
            if !events.is_empty() {
                st.dispatch(events);
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
            self.take_in(st, poll.registry());
            poll_once(poll, events, Some(Duration::ZERO))?;
            if !events.is_empty() {
                st.dispatch(events);
            } else {
                yield_cpu(st);
            }
            let now = Instant::now();
            if !st.pacer.spinning(now) || self.quit.load(Ordering::SeqCst) {
                st.expire(now);
                return Ok(true);
            }
        }
    }

    /// Registers the pairs handed over since the last turn and adds them to the table.
    fn take_in(&self, st: &mut State, registry: &mio::Registry) {
        {
            let mut inbox = lock(&self.inbox);
            #[cfg(test)]
            self.open
                .store(st.conns.len() + inbox.len(), Ordering::Release);
            std::mem::swap(&mut *inbox, &mut st.arrived);
        }
        let mut arrived = std::mem::take(&mut st.arrived);
        if !arrived.is_empty() {
            let now = Instant::now();
            for pair in arrived.drain(..) {
                let upstream = pair.upstream.clone();
                if let Err(e) = st.insert(pair, registry, now) {
                    warn!(%upstream, error = %e, "cannot splice the connection, closing it");
                }
            }
        }
        arrived.shrink_to(INBOX_KEEP);
        st.arrived = arrived;
        #[cfg(test)]
        self.open.store(st.conns.len(), Ordering::Release);
    }
}

impl State {
    fn new(busy_poll: BusyPoll, counters: Contention) -> State {
        State {
            conns: Slab::new(),
            timers: BinaryHeap::new(),
            next_gen: 0,
            spares: Spares::default(),
            arrived: Vec::new(),
            registry: None,
            pacer: Pacer::new(busy_poll),
            policy: Demotion::of_this_thread(),
            counters,
            keepalive: Deferred::new(Instant::now()),
        }
    }

    /// Registers both sockets of `pair`, adopted at `now`, and adds it to the table. On error
    /// (no room in the kernel's epoll set) the pair is dropped, closing both sockets.
    fn insert(&mut self, pair: Pair, registry: &mio::Registry, now: Instant) -> io::Result<()> {
        let mut down = TcpStream::from_std(pair.down);
        let mut up = TcpStream::from_std(pair.up);
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        // Read interest only: a writable socket would report an edge on registration, and
        // another whenever a FIN is acknowledged, each a wake-up with nothing to do. Write
        // interest is added when a write pushes back (`Conn::watch`), and from the start for
        // the part of the hello the connect did not get out. The first edges report what is
        // already there (the upstream's first flight), so nothing has to be driven here.
        let hello_left = !pair.to_up.is_empty();
        let mut d2u = Flow::new(pair.to_up_counter, pair.to_up);
        let up_interest = if hello_left {
            d2u.watched();
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        registry.register(&mut down, token(key, 0), Interest::READABLE)?;
        if let Err(e) = registry.register(&mut up, token(key, 1), up_interest) {
            let _ = registry.deregister(&mut down);
            return Err(e);
        }
        match self.keepalive.enlist(pair.keepalive, key, now) {
            Plan::None => {}
            Plan::Later(tag) => d2u.keepalive = tag,
            Plan::Now(k) => set_keepalive(&up, &k),
        }
        let limited = pair.limits != Limits::default();
        let extra = (limited || !pair.span.is_disabled()).then(|| {
            self.next_gen = self.next_gen.wrapping_add(1);
            Box::new(Extra {
                limits: pair.limits,
                gen: self.next_gen,
                started: now,
                last: now,
                metrics: pair.metrics,
                upstream: pair.upstream,
                span: pair.span,
            })
        });
        let deadline = extra
            .as_deref()
            .and_then(|x| x.deadline().map(|at| (at, x.gen)));
        entry.insert(Conn {
            down,
            up,
            d2u,
            u2d: Flow::new(pair.to_down_counter, Vec::new()),
            _keep: pair.keep,
            extra,
        });
        if let Some((at, gen)) = deadline {
            self.timers.push(Reverse(Timer { at, key, gen }));
        }
        Ok(())
    }

    fn dispatch(&mut self, events: &Events) {
        let State {
            conns,
            spares,
            registry,
            pacer,
            policy,
            ..
        } = self;
        for ev in events.iter() {
            let (key, side) = (ev.token().0 >> 1, ev.token().0 & 1);
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
            let end = match conn
                .drive(spares, pacer, policy.traffic())
                .and_then(|done| {
                    if !done {
                        conn.watch(key, registry.as_ref())?;
                    }
                    Ok(done)
                }) {
                Ok(false) => continue,
                Ok(true) => End::Closed,
                Err(e) => {
                    conn.debug_error(&e);
                    End::Failed
                }
            };
            if let Some(c) = conns.try_remove(key) {
                c.close(end);
            }
        }
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
    /// deadline.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        while let Some(Reverse(t)) = self.timers.peek() {
            if t.at > now {
                break;
            }
            let Some(Reverse(t)) = self.timers.pop() else {
                break;
            };
            let Some(conn) = self.conns.get_mut(t.key) else {
                continue;
            };
            let Some(x) = conn.extra.as_deref().filter(|x| x.gen == t.gen) else {
                continue;
            };
            match x.expired(now) {
                Some(end) => {
                    if let Some(c) = self.conns.try_remove(t.key) {
                        c.close(end);
                    }
                }
                None => {
                    if let Some(at) = x.deadline() {
                        let gen = x.gen;
                        self.timers.push(Reverse(Timer {
                            at,
                            key: t.key,
                            gen,
                        }));
                    }
                }
            }
        }
        self.timers.peek().map(|Reverse(t)| t.at)
    }
}

impl Conn {
    /// Drives both directions; `Ok(true)` when both are over.
    fn drive(
        &mut self,
        spares: &mut Spares,
        pacer: &mut Pacer,
        traffic: Option<&mut Traffic>,
    ) -> io::Result<bool> {
        let up_done = self.u2d.finished();
        let to_up = self.d2u.drive(&self.down, &self.up, spares, up_done)?;
        let down_done = self.d2u.finished();
        let to_down = self.u2d.drive(&self.up, &self.down, spares, down_done)?;
        let moved = to_up + to_down;
        let burst = flow::BUF_SIZE as u64;
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
    fn watch(&mut self, key: usize, registry: Option<&mio::Registry>) -> io::Result<()> {
        let both = Interest::READABLE | Interest::WRITABLE;
        let Some(registry) = registry else {
            return Err(io::Error::other("the splicer's registry is gone"));
        };
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
fn lock(m: &Mutex<Vec<Pair>>) -> MutexGuard<'_, Vec<Pair>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
