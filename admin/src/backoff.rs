//! The accept-error backoff of every accept loop: an error of one connection (aborted, reset,
//! interrupted) is skipped at once; any other (`EMFILE`, `ENFILE`, `ENOBUFS`) would come back
//! at once and spin at 100 % CPU while nothing frees up, so the loop sleeps briefly.

use std::io;
use std::time::Duration;

/// How long an accept loop waits after an error that is not one connection's.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// True when `e` concerns one connection only, so accepting again at once is right.
pub fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// After a failed `accept`: returns at once for a per-connection error, else after
/// [`ACCEPT_BACKOFF`]. Returns whether it backed off (callers log and count those).
pub async fn after_accept_error(e: &io::Error) -> bool {
    if is_per_connection(e) {
        return false;
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn only_errors_beyond_one_connection_back_off() {
        let start = tokio::time::Instant::now();
        assert!(!after_accept_error(&io::ErrorKind::ConnectionAborted.into()).await);
        assert_eq!(start.elapsed(), Duration::ZERO);
        let emfile = io::Error::from_raw_os_error(24);
        assert!(after_accept_error(&emfile).await);
        assert_eq!(start.elapsed(), ACCEPT_BACKOFF);
    }
}
