//! How the kernel schedules the proxy's threads (`isthmus proxy --scheduling`).
//!
//! Why `SCHED_BATCH` by default: a proxied round trip is a chain of threads handing bytes to
//! each other (client, proxy, server, proxy, client), and on the machine measured 99.6 % of
//! those wake-ups land on the waker's own CPU. Under the default policy a proxy thread woken
//! by a write may preempt the writer as the writer's system call returns, so the writer is
//! switched out before it reaches its own blocking read and must be switched back in later:
//! two context switches per hop instead of one. A `SCHED_BATCH` thread does not preempt on wake-up; it runs when the writer blocks,
//! a moment later. It is otherwise an ordinary fair-share thread (same nice level, same share
//! of the CPU), and needs no privilege or capability.
//!
//! The price is paid when other busy threads share the CPU: a batch thread woken by a packet
//! then waits for the running thread's time slice to end (milliseconds). So a splicer thread
//! whose busy polling finds the CPU contended (`splice::pace`) goes back to `SCHED_OTHER` for
//! as long as busy polling pauses ([`Demotion`]), and returns to batch afterwards.
//!
//! Figures from the 2-vCPU VM are in BENCHMARKS.md, issue 28, round 6.

use std::io;

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
    demoted: bool,
}

impl Demotion {
    /// For the calling thread, which keeps the policy it inherited until [`Demotion::contended`].
    pub(crate) fn of_this_thread() -> Demotion {
        let batch = crate::sys::scheduling_policy().is_ok_and(|p| p == libc::SCHED_BATCH);
        Demotion {
            batch,
            demoted: false,
        }
    }

    /// Whether the thread is out of `SCHED_BATCH` for now.
    pub(crate) fn demoted(&self) -> bool {
        self.demoted
    }

    /// The CPU is contended: the thread's wake-ups may preempt again (`SCHED_OTHER`).
    pub(crate) fn contended(&mut self) {
        if self.batch && !self.demoted {
            // A refusal leaves the thread as it was, which still works.
            self.demoted = apply(Scheduling::Normal).is_ok();
        }
    }

    /// The contention is over: back to `SCHED_BATCH`.
    pub(crate) fn settled(&mut self) {
        if self.demoted {
            self.demoted = apply(Scheduling::Batch).is_err();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isthmus_testkit::sched::policy_of_this_thread;

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
        std::thread::spawn(|| {
            apply(Scheduling::Batch).unwrap();
            let mut d = Demotion::of_this_thread();
            d.contended();
            assert!(d.demoted());
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
            d.settled();
            assert!(!d.demoted());
            assert_eq!(policy_of_this_thread(), libc::SCHED_BATCH);
            // Started under the default policy (`--scheduling normal`): never touched.
            apply(Scheduling::Normal).unwrap();
            let mut d = Demotion::of_this_thread();
            d.contended();
            assert!(!d.demoted());
            assert_eq!(policy_of_this_thread(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
