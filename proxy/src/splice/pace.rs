//! When a splicer keeps polling instead of parking (busy polling), and the per-direction
//! memory that lets it decide on its own.
//!
//! Why: on virtual machines waking a parked thread costs tens of microseconds, paid twice per
//! proxied request/answer (the request wakes the worker, so does the answer). A worker that
//! has just forwarded a request whose answer usually comes back at once can keep polling for
//! it and save the second wake-up. Spinning costs CPU, so the adaptive mode spins only after
//! forwarding a message in a direction whose recent messages were answered within
//! [`JUDGE_FACTOR`] × the window, and only until that answer arrives or the window passes:
//! nothing when idle, nothing for bulk streams (their bursts fill the buffer, and a stream's
//! messages go unanswered, so its score falls to zero), nothing for connections that carry
//! one exchange (the score needs [`SPIN_SCORE`] answered messages first).
//!
//! Spinning pays only while the CPU is otherwise free or shared with the answer's sender.
//! When other busy threads share it, each yield of the spin hands one of them a whole time
//! slice (milliseconds), and the CPU time the spin burns leaves the splicer behind in the
//! kernel's fair share when its next event comes: under two CPU-bound processes on the VM
//! measured, `auto` had a p99 three times `off`'s. So a yield that kept the splicer off the CPU
//! for longer than [`CONTENDED_YIELD`] pauses busy polling for [`CONTENDED_PAUSE`].

use std::time::{Duration, Instant};

/// The adaptive mode's window: a few wake-ups of a parked thread on the virtual machines
/// measured (BENCHMARKS.md, issue 28: 100 µs gave a lower p50 than 50 µs under load, at the
/// same CPU per round trip); an answer slower than that is not worth spinning for.
pub const ADAPTIVE_WINDOW: Duration = Duration::from_micros(100);
/// A message answered within this many windows counts as answered quickly. Larger than one:
/// without spinning the measured delay includes this worker's own wake-up.
const JUDGE_FACTOR: u32 = 2;
/// Quickly answered messages (net of slow ones) a direction needs before its messages are
/// waited for.
const SPIN_SCORE: u8 = 2;
const SCORE_MAX: u8 = 15;
const SCORE: u8 = 0x0f;
/// This direction's last message was waited for by spinning.
const SPUN: u8 = 1 << 6;
/// This direction's last message awaits an answer from the other side.
const AWAIT: u8 = 1 << 7;
/// A yield that kept the splicer off the CPU this long means another thread ran for a time
/// slice (0.75 ms and up): the threads a request/response exchange hands the CPU to (its
/// client or server, another worker) give it back within tens of microseconds.
pub const CONTENDED_YIELD: Duration = Duration::from_micros(500);
/// How long busy polling pauses after a yield that showed the CPU contended: long enough that
/// the slow yields that detect it are rare (one per second and worker), short enough to spin
/// again soon after the contention ends.
pub const CONTENDED_PAUSE: Duration = Duration::from_secs(1);
/// The clock's unit, in microseconds: 16-bit stamps in 4 µs units wrap after 262 ms, far
/// beyond any judge threshold (a wrapped stamp at worst scores one slow answer as quick).
const TICK_US: u128 = 4;

/// Busy polling after traffic (`isthmus proxy --busy-poll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyPoll {
    /// Park as soon as no event is waiting.
    Off,
    /// Keep polling for this long after every event.
    Fixed(Duration),
    /// Keep polling up to this long only for answers that usually come that fast (see the
    /// module docs).
    Adaptive(Duration),
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll::Adaptive(ADAPTIVE_WINDOW)
    }
}

/// One direction's memory: 3 bytes, which fit in the padding of its `Flow`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pace {
    bits: u8,
    sent: u16,
}

impl Pace {
    /// This direction forwarded a message (not a bulk burst) at `now`. Returns whether it is
    /// worth waiting for its answer.
    pub fn sent(&mut self, now: u16, judge: u16) -> bool {
        if self.bits & AWAIT != 0 {
            if now.wrapping_sub(self.sent) <= judge {
                // Pipelined: the earlier message still awaits its answer.
                return false;
            }
            // Went unanswered: a stream, or a client that thinks between requests.
            self.score_down();
        }
        let spin = self.bits & SCORE >= SPIN_SCORE;
        self.bits |= AWAIT;
        self.bits = if spin {
            self.bits | SPUN
        } else {
            self.bits & !SPUN
        };
        self.sent = now;
        spin
    }

    /// The other direction moved bytes at `now`: the answer, if this one awaited one.
    /// Returns whether a spin was waiting for it.
    pub fn answered(&mut self, now: u16, judge: u16) -> bool {
        if self.bits & AWAIT == 0 {
            return false;
        }
        if now.wrapping_sub(self.sent) <= judge {
            if self.bits & SCORE < SCORE_MAX {
                self.bits += 1;
            }
        } else {
            self.score_down();
        }
        let spun = self.bits & SPUN != 0;
        self.bits &= !(AWAIT | SPUN);
        spun
    }

    fn score_down(&mut self) {
        if self.bits & SCORE > 0 {
            self.bits -= 1;
        }
    }
}

/// A splicer's side: its clock, the answers it spins for, and until when.
#[derive(Debug)]
pub struct Pacer {
    mode: BusyPoll,
    epoch: Instant,
    judge: u16,
    /// Answers waited for by spinning; may overcount (a connection closed meanwhile), which
    /// `until` bounds.
    awaiting: u32,
    until: Option<Instant>,
    /// No spinning before this: a yield showed the CPU contended.
    paused_until: Option<Instant>,
}

impl Pacer {
    pub fn new(mode: BusyPoll) -> Pacer {
        let judge = match mode {
            BusyPoll::Adaptive(w) => {
                let ticks = w.as_micros() * u128::from(JUDGE_FACTOR) / TICK_US;
                u16::try_from(ticks)
                    .unwrap_or(u16::MAX / 2)
                    .min(u16::MAX / 2)
            }
            BusyPoll::Off | BusyPoll::Fixed(_) => 0,
        };
        Pacer {
            mode,
            epoch: Instant::now(),
            judge,
            awaiting: 0,
            until: None,
            paused_until: None,
        }
    }

    pub fn mode(&self) -> BusyPoll {
        self.mode
    }

    /// Whether the connections keep [`Pace`] at all.
    pub fn learns(&self) -> bool {
        matches!(self.mode, BusyPoll::Adaptive(_))
    }

    pub fn judge(&self) -> u16 {
        self.judge
    }

    /// The clock in [`TICK_US`] units, wrapping.
    pub fn now(&self) -> u16 {
        (self.epoch.elapsed().as_micros() / TICK_US) as u16
    }

    /// A message worth waiting for went out.
    pub fn expect(&mut self) {
        if let BusyPoll::Adaptive(w) = self.mode {
            self.awaiting += 1;
            self.until = Some(Instant::now() + w);
        }
    }

    /// Whether busy polling is paused at `now` (see [`Pacer::yielded`]).
    pub fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|at| now < at)
    }

    /// A spin's yield kept this thread off the CPU from `before` to `after`. Longer than
    /// [`CONTENDED_YIELD`] means another thread ran for a time slice: busy polling pauses for
    /// [`CONTENDED_PAUSE`] (see the module docs). Returns whether it paused.
    pub fn yielded(&mut self, before: Instant, after: Instant) -> bool {
        if self.mode == BusyPoll::Off || after.saturating_duration_since(before) <= CONTENDED_YIELD
        {
            return false;
        }
        self.paused_until = Some(after + CONTENDED_PAUSE);
        true
    }

    /// An answer a spin waited for came in.
    pub fn arrived(&mut self) {
        self.awaiting = self.awaiting.saturating_sub(1);
    }

    /// Whether an adaptive spin goes on at `now`; clears the state when it ends.
    pub fn spinning(&mut self, now: Instant) -> bool {
        let paused = self.paused(now);
        match self.until {
            Some(until) if self.awaiting > 0 && now < until && !paused => true,
            _ => {
                self.awaiting = 0;
                self.until = None;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direction_is_waited_for_after_quick_answers_only() {
        let mut p = Pace::default();
        let judge = 25;
        // Two quick answers are needed first.
        for t in [0u16, 100] {
            assert!(!p.sent(t, judge));
            assert!(!p.answered(t + 10, judge));
        }
        assert!(p.sent(200, judge));
        assert!(p.answered(205, judge));
        // Slow answers take it back.
        for t in [300u16, 400, 500] {
            p.sent(t, judge);
            p.answered(t + 90, judge);
        }
        assert!(!p.sent(600, judge));
    }

    #[test]
    fn a_stream_is_never_waited_for() {
        let mut p = Pace::default();
        for i in 0..100u16 {
            assert!(!p.sent(i * 50, 25), "message {i}");
        }
        assert_eq!(p.bits & SCORE, 0);
    }

    #[test]
    fn a_spin_ends_with_its_answers_or_its_window() {
        let mut pacer = Pacer::new(BusyPoll::Adaptive(Duration::from_millis(50)));
        assert!(!pacer.spinning(Instant::now()));
        pacer.expect();
        assert!(pacer.spinning(Instant::now()));
        pacer.arrived();
        assert!(!pacer.spinning(Instant::now()));
        pacer.expect();
        assert!(!pacer.spinning(Instant::now() + Duration::from_secs(1)));
        assert!(!pacer.spinning(Instant::now()));
    }

    #[test]
    fn a_slow_yield_pauses_spinning() {
        let mut pacer = Pacer::new(BusyPoll::Adaptive(Duration::from_millis(50)));
        let t0 = Instant::now();
        // A short yield: the CPU was shared, not taken.
        assert!(!pacer.yielded(t0, t0 + CONTENDED_YIELD));
        pacer.expect();
        assert!(pacer.spinning(Instant::now()));
        // One that took longer: another thread ran a whole slice.
        let back = Instant::now();
        assert!(pacer.yielded(back - CONTENDED_YIELD * 2, back));
        assert!(!pacer.spinning(Instant::now()));
        pacer.expect();
        assert!(!pacer.spinning(Instant::now()));
        assert!(pacer.paused(back + CONTENDED_PAUSE - Duration::from_millis(1)));
        // Then spinning may resume.
        assert!(!pacer.paused(back + CONTENDED_PAUSE));
    }
}
