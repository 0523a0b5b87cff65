//! File descriptors: the soft `RLIMIT_NOFILE` is raised to the hard limit at start, and the
//! global connection cap is clamped so that spliced connections (two descriptors each) can
//! never take the descriptors the admin endpoint, the listeners and DNS need: the admin
//! keeps answering `/readyz` and `/metrics` when the data path is full.

use std::io;

/// Descriptors kept for everything but spliced connections: listening sockets, DNS,
/// epoll, spare pipes, the configuration file, and a margin for connections being refused.
/// The admin endpoint's `max_connections` comes on top.
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

/// How many connections fit into `limit` descriptors with the reserve and `admin`
/// connections set aside.
pub fn connections_that_fit(limit: u64, admin: usize) -> usize {
    let spare = limit.saturating_sub(RESERVED + admin as u64) / 2;
    usize::try_from(spare).unwrap_or(usize::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_descriptors_per_connection_after_the_reserve() {
        assert_eq!(connections_that_fit(1024, 256), 320);
        assert_eq!(connections_that_fit(1_048_576, 256), 524_096);
        assert_eq!(connections_that_fit(100, 256), 1);
    }
}
