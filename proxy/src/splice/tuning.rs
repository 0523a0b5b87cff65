//! Every heuristic of the splicer's scheduling and busy polling, with its default and the
//! measurement it rests on, in one value ([`Tuning`]). The code that applies them is
//! `splice/pace.rs` (busy polling), `sched.rs` (leaving `SCHED_BATCH` on a contended CPU) and
//! `splice/flow.rs` (the per-turn budget).
//!
//! The measurements were taken on two 2-vCPU virtual machines ("VM 1", "VM 2" in
//! BENCHMARKS.md's *Machines*); the rounds named are in docs/benchmarks-history.md. None of
//! them could be repeated on a machine of another kind (no such machine here): each default
//! below says what it was measured against, and a user on other hardware can change the two
//! exposed as flags (`--busy-poll`, `--scheduling`).
//!
//! Not here: the upstream keepalive's 1 s deferral (`keepalive::DEFER`, commit `d50fe21`,
//! BENCHMARKS.md round 11), a constant because it sizes the cohort arrays at compile time, and
//! the copy buffer's 64 KiB (`spares::BUF_SIZE`), which is also what counts as a bulk burst.

use std::time::Duration;

/// Busy polling after traffic (`isthmus proxy --busy-poll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyPoll {
    /// Park as soon as no event is waiting.
    Off,
    /// Keep polling for this long after every event.
    Fixed(Duration),
    /// Keep polling up to this long only for answers that usually come that fast (see
    /// `splice/pace.rs`).
    Adaptive(Duration),
}

impl Default for BusyPoll {
    /// `Adaptive(100 µs)`: a few wake-ups of a parked thread on the VMs measured. Commit
    /// `cb681b6` (8 connections × 500/s ping-pong, 8 interleaved passes, load 2.5–3.0):
    /// added p50 39 µs at 100 µs, 60 at 50 µs, 76 without busy polling, nginx 79; CPU per
    /// round trip level (33 µs at 100 µs, 32–36 without). Against `off` (BENCHMARKS.md,
    /// *Measurements behind the defaults*, rounds 7 and 8) the benefit is machine-dependent:
    /// on VM 1 one connection's added p50 23.4/23.3/28.6 µs against 26.2/23.0/35.3, eight
    /// connections level, at 7 % more CPU per round trip; on VM 2 `off` had the lower p50
    /// with eight connections. Kept as the default because the latency goals were met with
    /// it (round 14); `--busy-poll off` is the choice where CPU counts more.
    fn default() -> Self {
        BusyPoll::Adaptive(Duration::from_micros(100))
    }
}

/// The splicer's heuristics. One value per splicer, fixed when it starts; only `busy_poll`
/// is a flag, the rest are defaults a test may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// When to keep polling instead of parking.
    pub busy_poll: BusyPoll,
    /// Adaptive polling: a message answered within this many windows counts as answered
    /// quickly. More than one because, without spinning, the delay measured includes this
    /// worker's own wake-up. Default 2 (commit `83ba277`: after it, 8 connections × 500/s
    /// had a p50 of 125 µs against 178 before, nginx 165; 5 interleaved passes, load 6–7).
    pub judge_factor: u32,
    /// Adaptive polling: quickly answered messages (net of slow ones) a direction needs
    /// before its messages are waited for; at most 15 (the score's four bits). Default 2
    /// (`83ba277`): connections that carry one exchange (`connrate`) never reach it.
    pub spin_score: u8,
    /// A yield of a spin that kept the splicer off the CPU this long means another thread ran
    /// a time slice (0.75 ms and up): busy polling pauses. The threads of an exchange give the
    /// CPU back within tens of µs. Default 500 µs (commit `7d677bd`, issue 28 round 6: under
    /// two CPU-bound processes the proxied round-trip p99 was 636, 766 µs with the pause
    /// (and batch's demotion) against 2,767–3,854 µs without).
    pub contended_yield: Duration,
    /// How long busy polling pauses after such a yield: the slow yields that detect
    /// contention stay rare (one per second and worker). Default 1 s (`7d677bd`).
    pub contended_pause: Duration,
    /// How often a `SCHED_BATCH` splicer reads its run-queue waits
    /// (`/proc/thread-self/schedstat`, one `pread`): until it looks, a busy CPU costs its
    /// wake-ups milliseconds each. Default 20 ms (commit `f33de67`, round 7).
    pub check: Duration,
    /// Slices that waited this long on average mean other threads' time slices ran first.
    /// Default 30 µs (`f33de67`, round 7: with two CPU hogs the added p99 fell to 257 and
    /// 250 µs from round 6's 841 and 2,036; `79659d7`, round 8: bulk bursts do not count,
    /// which kept CPU per GB with 64 connections at 151–174 ms against 230–252).
    pub contended_wait: Duration,
    /// Slices a check needs for its average to count. Default 8 (`f33de67`).
    pub min_slices: u64,
    /// The first pause out of `SCHED_BATCH` once contended: each return costs up to one
    /// `check` of batch waits on a CPU still busy. Default 4 s (`f33de67`, round 7).
    pub demotion: Duration,
    /// Contention found right after a return doubles the pause, up to this. Default 64 s
    /// (`f33de67`): a CPU that stays busy costs one `check` of batch waits a minute.
    pub max_demotion: Duration,
    /// Bytes one direction moves in one turn before the others go first (checked before each
    /// read, so a turn may end one pipe fill past it). Default 1 MiB (commit `aec6ab6`,
    /// issue 47 point 8): not a tuned figure but a fairness bound, the kernel's pipe fill,
    /// so a bulk stream still moves in large splices.
    pub turn_budget: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            busy_poll: BusyPoll::default(),
            judge_factor: 2,
            spin_score: 2,
            contended_yield: Duration::from_micros(500),
            contended_pause: Duration::from_secs(1),
            check: Duration::from_millis(20),
            contended_wait: Duration::from_micros(30),
            min_slices: 8,
            demotion: Duration::from_secs(4),
            max_demotion: Duration::from_secs(64),
            turn_budget: 1 << 20,
        }
    }
}

impl Tuning {
    /// The defaults with `busy_poll`.
    pub fn with_busy_poll(busy_poll: BusyPoll) -> Tuning {
        Tuning {
            busy_poll,
            ..Tuning::default()
        }
    }
}
