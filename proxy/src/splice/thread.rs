//! The splicer's thread: one loop that blocks in its own `epoll_wait`, takes in the pairs
//! handed over, lets the connections take their turns, busy polls when answers are due
//! (`pace`) and does what its timers say, until the last handle goes.

use super::state::State;
use super::tuning::BusyPoll;
use super::{lock, Inner};
use mio::Events;
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Events taken from the kernel per poll.
const EVENTS: usize = 256;
/// Room for pairs kept by the inbox between turns; a burst beyond it is freed once taken in,
/// so thousands of connections opened at once do not leave their hand-over buffer behind.
const INBOX_KEEP: usize = 64;

impl Inner {
    /// Whether the parked loop would wake by itself only after `at`.
    pub(super) fn wakes_after(&self, at: Instant) -> bool {
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

    pub(super) fn run(&self, mut poll: mio::Poll, st: &mut State) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS);
        let mut deadline: Option<Instant> = None;
        loop {
            self.parks_until(deadline);
            self.parked.store(true, Ordering::SeqCst);
            let timeout = if self.quit.load(Ordering::SeqCst)
                || !st.turns.again.is_empty()
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
                let spun = match st.turns.pacer.mode() {
                    BusyPoll::Off => false,
                    BusyPoll::Fixed(window) if !st.turns.pacer.paused(now) => {
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
            if st.turns.policy.tick(now) {
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
        if !st.turns.pacer.spinning(now) {
            return Ok(false);
        }
        loop {
            poll_once(poll, events, Some(Duration::ZERO))?;
            self.handle(st, events);
            if events.is_empty() {
                yield_cpu(st);
            }
            let now = Instant::now();
            if !st.turns.pacer.spinning(now) || self.quit.load(Ordering::SeqCst) {
                st.expire(now);
                return Ok(true);
            }
        }
    }

    /// Handles a poll's events, after taking in the pairs handed over since the last poll:
    /// an event can only be of a pair registered before the poll, so the table then holds it.
    fn handle(&self, st: &mut State, events: &Events) {
        self.take_in(st);
        std::mem::swap(&mut st.turns.again, &mut st.again_now);
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

/// Lets the kernel run another thread of this CPU (often the answer's sender); returns whether
/// that took so long that busy polling paused (see `pace`), in which case the thread also
/// leaves `SCHED_BATCH` for a while (see `sched`).
fn yield_cpu(st: &mut State) -> bool {
    let before = Instant::now();
    std::thread::yield_now();
    let after = Instant::now();
    let contended = st.turns.pacer.yielded(before, after);
    if contended {
        st.counters.busy_poll.inc();
        if st.turns.policy.contended(after) {
            st.counters.demoted.inc();
        }
    }
    contended
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
