//! Log lines under attack: at most one per key (a listener or upstream name, and a reason)
//! every [`INTERVAL`], carrying how many events it stands for. Counters are never limited:
//! they carry every event. The one copy: the proxy and the tunnel use it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// At most one line per key this often.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Per-key log budgets. Keys are listener or upstream names with a reason: a bounded set.
#[derive(Debug, Default)]
pub struct RateLog {
    slots: Mutex<HashMap<(String, &'static str), Slot>>,
}

#[derive(Debug)]
struct Slot {
    last: Instant,
    /// Events since the last line, this one included.
    events: u64,
}

impl RateLog {
    /// Records one event; `Some(n)` when a line should be logged now for the `n` events since
    /// the last one (this one included).
    pub fn event(&self, name: &str, reason: &'static str) -> Option<u64> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        match slots.get_mut(&(name.to_owned(), reason)) {
            Some(s) => {
                s.events += 1;
                if now.duration_since(s.last) < INTERVAL {
                    return None;
                }
                s.last = now;
                Some(std::mem::take(&mut s.events))
            }
            None => {
                let slot = Slot {
                    last: now,
                    events: 0,
                };
                slots.insert((name.to_owned(), reason), slot);
                Some(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_key_and_interval_with_the_count() {
        let log = RateLog::default();
        assert_eq!(log.event("l", "timeout"), Some(1));
        for _ in 0..999 {
            assert_eq!(log.event("l", "timeout"), None);
        }
        // Another reason, another listener: their own budgets.
        assert_eq!(log.event("l", "no_sni"), Some(1));
        assert_eq!(log.event("m", "timeout"), Some(1));
        tokio::time::advance(INTERVAL).await;
        assert_eq!(log.event("l", "timeout"), Some(1000));
        assert_eq!(log.event("l", "timeout"), None);
    }
}
