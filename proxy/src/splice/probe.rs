//! What tests read of a running splicer (open connections, timers held, hand-overs that woke
//! it), and nothing outside tests: the one test seam of the loop. Built without `cfg(test)`
//! it is an empty value whose calls compile to nothing.

#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};

/// Figures the loop publishes after its turns, for tests to poll.
#[derive(Debug, Default)]
pub struct Probe {
    /// Open connections, for tests waiting for every connection to close.
    #[cfg(test)]
    open: AtomicUsize,
    /// Timer entries the loop holds after its last turn, for tests that none is left behind.
    #[cfg(test)]
    timers: AtomicUsize,
    /// Hand-overs that woke the loop, for tests of when they do.
    #[cfg(test)]
    wakes: AtomicUsize,
}

#[cfg(test)]
impl Probe {
    pub fn open(&self, n: usize) {
        self.open.store(n, Ordering::Release);
    }

    pub fn timers(&self, n: usize) {
        self.timers.store(n, Ordering::Release);
    }

    pub fn woke(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }

    pub fn opened(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn timers_held(&self) -> usize {
        self.timers.load(Ordering::Acquire)
    }

    pub fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }
}

#[cfg(not(test))]
impl Probe {
    #[inline(always)]
    pub fn open(&self, _: usize) {}

    #[inline(always)]
    pub fn timers(&self, _: usize) {}

    #[inline(always)]
    pub fn woke(&self) {}
}
