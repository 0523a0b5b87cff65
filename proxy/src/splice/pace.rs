//! When a splicer keeps polling instead of parking (busy polling), and the per-direction
//! memory that lets it decide on its own.
//!
//! Why: on virtual machines waking a parked thread costs tens of microseconds, paid twice per
//! proxied request/answer (the request wakes the worker, so does the answer). A worker that
//! has just forwarded a request whose answer usually comes back at once can keep polling for
//! it and save the second wake-up. Spinning costs CPU, so the adaptive mode spins only after
//! forwarding a message in a direction whose recent messages were answered within
//! `Tuning::judge_factor` × the window, and only until that answer arrives or the window passes:
//! nothing when idle, nothing for bulk streams (their bursts fill the buffer, and a stream's
//! messages go unanswered, so its score falls to zero), nothing for connections that carry
//! one exchange (the score needs `Tuning::spin_score` answered messages first).
//!
//! Spinning pays only while the CPU is otherwise free or shared with the answer's sender.
//! When other busy threads share it, each yield of the spin hands one of them a whole time
//! slice (milliseconds), and the CPU time the spin burns leaves the splicer behind in the
//! kernel's fair share when its next event comes: under two CPU-bound processes on the VM
//! measured, `auto` had a p99 three times `off`'s. So a yield that kept the splicer off the CPU
//! for longer than `Tuning::contended_yield` pauses busy polling for
//! `Tuning::contended_pause`.

use super::tuning::{BusyPoll, Tuning};
use std::time::{Duration, Instant};

/// The score's maximum (four bits; [`Tuning::spin_score`] is at most this).
const SCORE_MAX: u8 = 15;
const SCORE: u8 = 0x0f;
/// This direction's last message was waited for by spinning.
const SPUN: u8 = 1 << 6;
/// This direction's last message awaits an answer from the other side.
const AWAIT: u8 = 1 << 7;
/// The clock's unit, in microseconds: 16-bit stamps in 4 µs units wrap after 262 ms, far
/// beyond any judge threshold (a wrapped stamp at worst scores one slow answer as quick).
const TICK_US: u128 = 4;

/// How a direction's answers are judged: quick within `within` clock ticks, and waited for
/// once `spin_score` quick answers (net of slow ones) came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judge {
    pub within: u16,
    pub spin_score: u8,
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
    pub fn sent(&mut self, now: u16, judge: Judge) -> bool {
        if self.bits & AWAIT != 0 {
            if now.wrapping_sub(self.sent) <= judge.within {
                // Pipelined: the earlier message still awaits its answer.
                return false;
            }
            // Went unanswered: a stream, or a client that thinks between requests.
            self.score_down();
        }
        let spin = self.bits & SCORE >= judge.spin_score;
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
    pub fn answered(&mut self, now: u16, judge: Judge) -> bool {
        if self.bits & AWAIT == 0 {
            return false;
        }
        if now.wrapping_sub(self.sent) <= judge.within {
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
    judge: Judge,
    contended_yield: Duration,
    contended_pause: Duration,
    /// Answers waited for by spinning; may overcount (a connection closed meanwhile), which
    /// `until` bounds.
    awaiting: u32,
    until: Option<Instant>,
    /// No spinning before this: a yield showed the CPU contended.
    paused_until: Option<Instant>,
}

impl Pacer {
    pub fn new(tuning: &Tuning) -> Pacer {
        let mode = tuning.busy_poll;
        let within = match mode {
            BusyPoll::Adaptive(w) => {
                let ticks = w.as_micros() * u128::from(tuning.judge_factor) / TICK_US;
                u16::try_from(ticks)
                    .unwrap_or(u16::MAX / 2)
                    .min(u16::MAX / 2)
            }
            BusyPoll::Off | BusyPoll::Fixed(_) => 0,
        };
        Pacer {
            mode,
            epoch: Instant::now(),
            judge: Judge {
                within,
                spin_score: tuning.spin_score.min(SCORE_MAX),
            },
            contended_yield: tuning.contended_yield,
            contended_pause: tuning.contended_pause,
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

    pub fn judge(&self) -> Judge {
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
    /// `contended_yield` means another thread ran for a time slice: busy polling pauses for
    /// `contended_pause` (see the module docs). Returns whether it paused.
    pub fn yielded(&mut self, before: Instant, after: Instant) -> bool {
        if self.mode == BusyPoll::Off
            || after.saturating_duration_since(before) <= self.contended_yield
        {
            return false;
        }
        self.paused_until = Some(after + self.contended_pause);
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

    const JUDGE: Judge = Judge {
        within: 25,
        spin_score: 2,
    };

    fn adaptive(window: Duration) -> Pacer {
        Pacer::new(&Tuning::with_busy_poll(BusyPoll::Adaptive(window)))
    }

    #[test]
    fn a_direction_is_waited_for_after_quick_answers_only() {
        let mut p = Pace::default();
        let judge = JUDGE;
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
            assert!(!p.sent(i * 50, JUDGE), "message {i}");
        }
        assert_eq!(p.bits & SCORE, 0);
    }

    #[test]
    fn a_spin_ends_with_its_answers_or_its_window() {
        let mut pacer = adaptive(Duration::from_millis(50));
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
        let mut pacer = adaptive(Duration::from_millis(50));
        let Tuning {
            contended_yield,
            contended_pause,
            ..
        } = Tuning::default();
        let t0 = Instant::now();
        // A short yield: the CPU was shared, not taken.
        assert!(!pacer.yielded(t0, t0 + contended_yield));
        pacer.expect();
        assert!(pacer.spinning(Instant::now()));
        // One that took longer: another thread ran a whole slice.
        let back = Instant::now();
        assert!(pacer.yielded(back - contended_yield * 2, back));
        assert!(!pacer.spinning(Instant::now()));
        pacer.expect();
        assert!(!pacer.spinning(Instant::now()));
        assert!(pacer.paused(back + contended_pause - Duration::from_millis(1)));
        // Then spinning may resume.
        assert!(!pacer.paused(back + contended_pause));
    }
}
