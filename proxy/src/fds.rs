//! File descriptors: the soft `RLIMIT_NOFILE` is raised to the hard limit at start, and the
//! global connection cap is clamped so that spliced connections (two descriptors each) and
//! splice pipes (two each, at most [`pipes_that_fit`] open) can never take the descriptors
//! the admin endpoint, the listeners and DNS need: the admin keeps answering `/readyz` and
//! `/metrics` when the data path is full.
//!
//! Budget for a limit of L descriptors and A admin connections:
//! connections = (L − 128 − A − 2 × pipes) / 2, with pipes = L / 16 (16 to 1024). A
//! connection takes a pipe only while a bulk burst waits for a slow reader; beyond the pipe
//! cap such a burst is copied instead (a 64 KiB buffer, no descriptor).

use std::io;

/// Descriptors kept for everything but spliced connections and pipes: listening sockets,
/// DNS, epoll, the configuration file, and a margin for connections being refused. The admin
/// endpoint's `max_connections` comes on top.
pub const RESERVED: u64 = 128;

/// Raises the soft limit on open files to the hard limit; returns the soft limit in effect.
pub fn raise_nofile_limit() -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    // The soft limit is never above the hard one: unequal means it can be raised.
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        setrlimit(Resource::Nofile, lim)?;
    }
    // `None` is RLIM_INFINITY.
    Ok(lim.current.unwrap_or(u64::MAX))
}

/// How many splice pipes may be open at once with `limit` descriptors: a 16th of them, at
/// least 16 (a small limit still splices) and at most 1024 (enough concurrent bulk bursts
/// waiting for their readers; the rest are copied).
pub fn pipes_that_fit(limit: u64) -> usize {
    usize::try_from(limit / 16)
        .unwrap_or(usize::MAX)
        .clamp(16, 1024)
}

/// How many connections fit into `limit` descriptors with the reserve, the pipes and
/// `admin` connections set aside.
pub fn connections_that_fit(limit: u64, admin: usize) -> usize {
    let pipes = 2 * pipes_that_fit(limit) as u64;
    let spare = limit.saturating_sub(RESERVED + admin as u64 + pipes) / 2;
    usize::try_from(spare).unwrap_or(usize::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_descriptors_per_connection_after_the_reserve_and_the_pipes() {
        assert_eq!(pipes_that_fit(1024), 64);
        assert_eq!(connections_that_fit(1024, 256), 256);
        assert_eq!(pipes_that_fit(1_048_576), 1024);
        assert_eq!(connections_that_fit(1_048_576, 256), 523_072);
        assert_eq!(pipes_that_fit(100), 16);
        assert_eq!(connections_that_fit(100, 256), 1);
    }
}
