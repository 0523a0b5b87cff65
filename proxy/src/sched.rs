//! How the kernel schedules the proxy's threads (`isthmus proxy --scheduling`).
//!
//! Why `SCHED_BATCH` by default: a proxied round trip is a chain of threads handing bytes to
//! each other (client, proxy, server, proxy, client), and on the machine measured 99.6 % of
//! those wake-ups land on the waker's own CPU. Under the default policy a proxy thread woken
//! by a write may preempt the writer as the writer's system call returns, so the writer is
//! switched out before it reaches its own blocking read and must be switched back in later:
//! two context switches per hop instead of one. A `SCHED_BATCH` thread does not preempt on
//! wake-up; it runs when the writer blocks, a moment later. It is otherwise an ordinary
//! fair-share thread (same nice level, same share of the CPU), and needs no privilege or
//! capability.
//!
//! The price is paid when other busy threads share the CPU: a batch thread woken by a packet
//! then waits for the running thread's time slice to end (milliseconds). So a splicer thread
//! watches how long its wake-ups wait ([`Demotion`]): every `Tuning::check` it reads its own
//! run-queue figures (`/proc/thread-self/schedstat`: nanoseconds spent runnable but waiting,
//! and slices run), and when its slices waited more than `Tuning::contended_wait` on average while it
//! moved mostly messages ([`Traffic`]) it goes back to `SCHED_OTHER` for a pause. Busy polling
//! that finds the CPU contended (`splice::pace`) does the same. Under `SCHED_OTHER` its
//! wake-ups preempt again, so its waits no longer show whether the contention lasts: it
//! returns to batch after the pause and looks again, and a contention found right after a
//! return doubles the next pause (up to `Tuning::max_demotion`), so a CPU that stays busy costs
//! one `Tuning::check` of batch waits per pause. Every threshold, its default and the
//! measurement behind it are in `splice/tuning.rs` (BENCHMARKS.md, issue 28, rounds 6 to 8).

use crate::splice::tuning::Tuning;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// The policy of the proxy's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduling {
    /// `SCHED_BATCH`: woken threads wait for the running one to block or use up its slice.
    #[default]
    Batch,
    /// `SCHED_OTHER`, the kernel's default: woken threads may preempt the running one.
    Normal,
}

/// Puts the calling thread, and every thread it starts afterwards, under `policy`. Call it
/// before the runtimes and splicers start so that all of them inherit it.
pub fn apply(policy: Scheduling) -> io::Result<()> {
    crate::sys::set_scheduling_policy(match policy {
        Scheduling::Batch => libc::SCHED_BATCH,
        Scheduling::Normal => libc::SCHED_OTHER,
    })
}

/// A thread that runs under `SCHED_BATCH` except while its CPU is contended.
#[derive(Debug)]
pub(crate) struct Demotion {
    /// The thread started under `SCHED_BATCH`; a thread under any other policy is left alone.
    batch: bool,
    /// Out of batch until then.
    until: Option<Instant>,
    pause: Duration,
    /// Back in batch, and no check since has found the CPU free: another contention doubles
    /// the pause.
    just_back: bool,
    waits: Option<RunQueue>,
    next_check: Option<Instant>,
    traffic: Traffic,
    /// The thresholds (`check`, `contended_wait`, `min_slices`, `demotion`, `max_demotion`).
    tuning: Tuning,
}

/// What one direction of a connection moved in one turn of the splicer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    Nothing,
    /// Less than a bulk burst: a message, which likely awaits an answer.
    Message,
    /// A full buffer or more: part of a bulk transfer.
    Burst,
}

impl Moved {
    /// `bytes` moved in one turn, where a bulk turn moves at least `burst`.
    pub(crate) fn of(bytes: u64, burst: u64) -> Moved {
        match bytes {
            0 => Moved::Nothing,
            n if n < burst => Moved::Message,
            _ => Moved::Burst,
        }
    }
}

/// What the splicer moved since its last look at its waits. Waiting costs messages latency;
/// bulk bursts lose nothing by waiting (each wake-up moves more), and `SCHED_BATCH` saves them
/// context switches: the CPU a bulk transfer saturates is no reason to leave batch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Traffic {
    messages: u32,
    bursts: u32,
}

impl Traffic {
    pub(crate) fn add(&mut self, moved: Moved) {
        match moved {
            Moved::Nothing => {}
            Moved::Message => self.messages = self.messages.saturating_add(1),
            Moved::Burst => self.bursts = self.bursts.saturating_add(1),
        }
    }

    /// Whether latency matters to what moved: messages outnumbered bulk bursts.
    fn latency_bound(self) -> bool {
        self.messages > self.bursts
    }
}

impl Demotion {
    /// For the calling thread, which keeps the policy it inherited until
    /// [`Demotion::contended`] or [`Demotion::tick`] finds the CPU contended.
    pub(crate) fn of_this_thread(tuning: &Tuning) -> Demotion {
        let batch = crate::sys::scheduling_policy().is_ok_and(|p| p == libc::SCHED_BATCH);
        Demotion {
            batch,
            until: None,
            pause: tuning.demotion,
            just_back: false,
            // Unreadable (no /proc): only busy polling's yields can find contention.
            waits: batch.then(RunQueue::of_this_thread).flatten(),
            next_check: None,
            traffic: Traffic::default(),
            tuning: *tuning,
        }
    }

    /// Where the splicer tallies what it moves, while a look can use the tally: only in
    /// batch (a thread never in batch, or out of it for a pause, looks at nothing).
    pub(crate) fn traffic(&mut self) -> Option<&mut Traffic> {
        (self.batch && self.until.is_none()).then_some(&mut self.traffic)
    }

    /// Whether the thread is out of `SCHED_BATCH` for now.
    #[cfg(test)]
    fn demoted(&self) -> bool {
        self.until.is_some()
    }

    /// The CPU is contended: the thread's wake-ups may preempt again (`SCHED_OTHER`) until the
    /// pause is over. Returns whether this demoted the thread.
    pub(crate) fn contended(&mut self, now: Instant) -> bool {
        if !self.batch || self.until.is_some() {
            return false;
        }
        if self.just_back {
            self.pause = (self.pause * 2).min(self.tuning.max_demotion);
        }
        // A refusal leaves the thread as it was, which still works.
        if apply(Scheduling::Normal).is_err() {
            return false;
        }
        self.until = Some(now + self.pause);
        // Bytes moved before the pause say nothing about the look after it (busy polling's
        // slow yield demotes without a look, so its tally is still here).
        self.traffic = Traffic::default();
        true
    }

    /// Once per turn of the thread's loop: back to batch when the pause is over, and every
    /// `check` a look at how long the thread's wake-ups waited. Returns whether this demoted
    /// the thread.
    pub(crate) fn tick(&mut self, now: Instant) -> bool {
        if !self.batch {
            return false;
        }
        if let Some(until) = self.until {
            if now >= until && apply(Scheduling::Batch).is_ok() {
                self.until = None;
                self.just_back = true;
                self.next_check = Some(now + self.tuning.check);
                // Waits under `SCHED_OTHER` say nothing about batch's.
                if let Some(w) = self.waits.as_mut() {
                    w.sample(0);
                }
            }
            return false;
        }
        if self.next_check.is_some_and(|at| now < at) {
            return false;
        }
        self.next_check = Some(now + self.tuning.check);
        match self
            .waits
            .as_mut()
            .and_then(|w| w.sample(self.tuning.min_slices))
        {
            Some(waits) => self.look(now, waits),
            None => false,
        }
    }

    /// A check's figures: `waits` (waited ns, slices) since the last, and the traffic tallied
    /// meanwhile. Returns whether this demoted the thread.
    fn look(&mut self, now: Instant, waits: (u64, u64)) -> bool {
        let traffic = std::mem::take(&mut self.traffic);
        match (
            contended(waits, self.tuning.contended_wait),
            traffic.latency_bound(),
        ) {
            (true, true) => self.contended(now),
            // Busy, but with bulk bursts: no sign either way.
            (true, false) => false,
            (false, _) => {
                self.just_back = false;
                self.pause = self.tuning.demotion;
                false
            }
        }
    }

    /// The current pause, for tests.
    #[cfg(test)]
    fn until(&self) -> Option<Instant> {
        self.until
    }
}

/// Whether `(waited ns, slices)` show a contended CPU: slices waited over `threshold` on
/// average.
fn contended((waited_ns, slices): (u64, u64), threshold: Duration) -> bool {
    waited_ns / slices.max(1) > threshold.as_nanos() as u64
}

/// The calling thread's run-queue figures, from `/proc/thread-self/schedstat` (time on the CPU,
/// time runnable but waiting, slices run), kept open and read again at offset 0.
#[derive(Debug)]
struct RunQueue {
    file: File,
    last: (u64, u64),
}

impl RunQueue {
    fn of_this_thread() -> Option<RunQueue> {
        let file = File::open("/proc/thread-self/schedstat").ok()?;
        let mut rq = RunQueue { file, last: (0, 0) };
        rq.last = rq.read()?;
        Some(rq)
    }

    /// Waited nanoseconds and slices since the last sample taken, once at least `min_slices`
    /// have run: a thread that seldom wakes is judged over a longer time, and only the time
    /// it was runnable adds to its waits.
    fn sample(&mut self, min_slices: u64) -> Option<(u64, u64)> {
        let now = self.read()?;
        let d = (
            now.0.saturating_sub(self.last.0),
            now.1.saturating_sub(self.last.1),
        );
        if d.1 < min_slices {
            return None;
        }
        self.last = now;
        Some(d)
    }

    fn read(&self) -> Option<(u64, u64)> {
        let mut buf = [0u8; 96];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        parse(buf.get(..n)?)
    }
}

/// `(waited ns, slices)` of a schedstat line.
fn parse(line: &[u8]) -> Option<(u64, u64)> {
    let mut f = std::str::from_utf8(line)
        .ok()?
        .split_ascii_whitespace()
        .skip(1);
    let waited = f.next()?.parse().ok()?;
    let slices = f.next()?.parse().ok()?;
    Some((waited, slices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use isthmus_testkit::sched::policy_of_this_thread;

    /// Runs `f` on a thread of its own under `SCHED_BATCH`, with that thread's [`Demotion`]
    /// (the policy is per thread: the test's own thread is left as it was).
    fn on_a_batch_thread(f: impl FnOnce(&mut Demotion) + Send + 'static) {
        std::thread::spawn(|| {
            apply(Scheduling::Batch).unwrap();
            f(&mut Demotion::of_this_thread(&Tuning::default()));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_and_the_threads_it_starts_run_under_the_chosen_policy() {
        std::thread::spawn(|| {
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
            apply(Scheduling::Batch).unwrap();
            assert_eq!(policy_of_this_thread(), libc::SCHED_BATCH);
            let child = std::thread::spawn(policy_of_this_thread).join().unwrap();
            assert_eq!(child, libc::SCHED_BATCH);
            apply(Scheduling::Normal).unwrap();
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_batch_thread_leaves_batch_while_contended_and_others_are_left_alone() {
        on_a_batch_thread(|d| {
            let pause = Tuning::default().demotion;
            let t0 = Instant::now();
            assert!(d.contended(t0));
            assert!(d.demoted());
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
            // Not before the pause is over.
            d.tick(t0 + pause / 2);
            assert!(d.demoted());
            d.tick(t0 + pause);
            assert!(!d.demoted());
            assert_eq!(policy_of_this_thread(), libc::SCHED_BATCH);
            // Started under the default policy (`--scheduling normal`): never touched.
            apply(Scheduling::Normal).unwrap();
            let mut d = Demotion::of_this_thread(&Tuning::default());
            assert!(!d.contended(t0));
            assert!(!d.demoted());
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
            // Nor does it tally traffic for looks it never takes.
            assert!(d.traffic().is_none());
        });
    }

    #[test]
    fn contention_right_after_a_return_doubles_the_pause_up_to_the_cap() {
        on_a_batch_thread(|d| {
            let mut now = Instant::now();
            let mut pauses = vec![];
            for _ in 0..9 {
                assert!(d.contended(now));
                let until = d.until().unwrap();
                pauses.push((until - now).as_secs());
                now = until;
                d.tick(now);
                assert!(!d.demoted());
            }
            assert_eq!(pauses, [4, 8, 16, 32, 64, 64, 64, 64, 64]);
        });
    }

    #[test]
    fn the_pauses_are_the_tunings() {
        std::thread::spawn(|| {
            apply(Scheduling::Batch).unwrap();
            let tuning = Tuning {
                demotion: Duration::from_secs(1),
                max_demotion: Duration::from_secs(3),
                ..Tuning::default()
            };
            let mut d = Demotion::of_this_thread(&tuning);
            let mut now = Instant::now();
            let mut pauses = vec![];
            for _ in 0..4 {
                assert!(d.contended(now));
                let until = d.until().unwrap();
                pauses.push((until - now).as_secs());
                now = until;
                d.tick(now);
            }
            assert_eq!(pauses, [1, 2, 3, 3]);
        })
        .join()
        .unwrap();
    }

    /// A look's waits: `avg_us` per slice over 10 slices.
    fn waits(avg_us: u64) -> (u64, u64) {
        (avg_us * 10_000, 10)
    }

    fn messages(n: u32) -> Traffic {
        let mut t = Traffic::default();
        for _ in 0..n {
            t.add(Moved::of(1_000, 65_536));
        }
        t
    }

    #[test]
    fn a_cpu_busy_with_bulk_bursts_is_no_reason_to_leave_batch() {
        on_a_batch_thread(|d| {
            let t0 = Instant::now();
            // Bulk bursts behind a busy CPU wait milliseconds (the bench's 64 streams: half
            // the looks above 1.8 ms).
            let busy = waits(2_000);
            for _ in 0..5 {
                let mut t = messages(3);
                for _ in 0..40 {
                    t.add(Moved::of(65_536, 65_536));
                    t.add(Moved::of(0, 65_536));
                }
                *d.traffic().unwrap() = t;
                assert!(!d.look(t0, busy));
            }
            assert!(!d.demoted());
            // A look takes the tally with it; messages outnumbering bursts do count.
            let threshold = Tuning::default().contended_wait.as_micros() as u64;
            let just_over = waits(threshold + 1);
            assert!(
                !d.look(t0, just_over),
                "an empty tally is not latency-bound"
            );
            *d.traffic().unwrap() = messages(41);
            assert!(!d.look(t0, waits(threshold)));
            *d.traffic().unwrap() = messages(41);
            assert!(d.look(t0, just_over));
            assert!(d.demoted());
            // Out of batch for the pause: nothing to tally for.
            assert!(d.traffic().is_none());
        });
    }

    #[test]
    fn waits_of_a_time_slice_are_contention_waits_of_an_exchange_are_not() {
        // One wait of a 2 ms time slice among 9 of 5 µs.
        let threshold = Tuning::default().contended_wait;
        assert!(contended((2_045_000, 10), threshold));
        assert!(!contended((100_000, 10), threshold));
        assert!(!contended((0, 0), threshold));
        assert_eq!(parse(b"39310054 14537580 28\n"), Some((14537580, 28)));
        assert_eq!(parse(b"39310054\n"), None);
    }

    #[test]
    fn a_thread_reads_its_own_run_queue_figures() {
        std::thread::spawn(|| {
            let mut rq = RunQueue::of_this_thread().unwrap();
            // Each sleep blocks the thread and ends in a wake-up and a new slice (the sleeps
            // synchronise with nothing: they are the events counted).
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let (_, slices) = rq.sample(3).unwrap();
            assert!(slices >= 3, "{slices} slices");
            // Figures are since the last sample, taken once enough slices have run.
            assert_eq!(rq.sample(slices + 1000), None);
            let (_, again) = rq.sample(0).unwrap();
            assert!(again < slices, "{again} after {slices}");
        })
        .join()
        .unwrap();
    }
}
