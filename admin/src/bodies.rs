//! Encoded response bodies shared between connections, so that however many clients ask for
//! `/metrics` or `/config` and never read, the process holds at most [`MAX_COPIES`] copies of
//! each.
//!
//! A body is encoded by one request at a time. A body still held by a client (a response
//! being written) is handed to the next clients too for [`REUSE_FOR`]; after that a new one is
//! encoded, unless [`MAX_COPIES`] are still held: then the newest of them is handed out,
//! however old (at most the `connection_timeout` of the connection holding it). Before that
//! cap, one new client per second that never read pinned one more copy of each body for its
//! connection's ~70 s: 23 → 190 MiB with 1,400 routes (issue 47, point 4).
//!
//! A body nobody holds any more is never handed out again: a client that reads its answer and
//! asks again gets a fresh one, so `/metrics` is as current as it was without the sharing
//! unless [`MAX_COPIES`] clients are sitting on theirs.

use bytes::Bytes;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long a body still held by a client may be handed out again.
pub const REUSE_FOR: Duration = Duration::from_secs(1);

/// Most copies of one kind of body held at once by clients still being written to.
pub const MAX_COPIES: usize = 4;

/// One kind of body (`/metrics`, `/config`).
#[derive(Debug, Default)]
pub struct SharedBody {
    /// Bodies handed out and when, oldest first: every one still held by a client, but for
    /// the newest, which may be held by nobody. Locked across the encode: a second encode of
    /// the same body waits for the first.
    made: Mutex<Vec<(Instant, Bytes)>>,
}

impl SharedBody {
    /// The body: one already made when the rules above allow it, else what `encode` makes
    /// now (`None`: encoding failed, nothing is kept).
    pub async fn get(&self, encode: impl FnOnce() -> Option<Bytes>) -> Option<Bytes> {
        let mut made = self.made.lock().await;
        // Unique: no response being written holds it any more.
        made.retain(|(_, body)| !body.is_unique());
        if let Some((at, body)) = made.last() {
            if at.elapsed() < REUSE_FOR || made.len() >= MAX_COPIES {
                return Some(body.clone());
            }
        }
        let body = encode()?;
        made.push((Instant::now(), body.clone()));
        Some(body)
    }

    /// Copies clients hold now.
    #[cfg(test)]
    async fn held(&self) -> usize {
        let made = self.made.lock().await;
        made.iter().filter(|(_, body)| !body.is_unique()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A body kind whose encodes are counted; each body holds its encode's number.
    #[derive(Default)]
    struct Rig {
        shared: SharedBody,
        encodes: AtomicUsize,
    }

    impl Rig {
        async fn get(&self) -> Bytes {
            self.shared
                .get(|| {
                    let n = self.encodes.fetch_add(1, Ordering::SeqCst);
                    Some(Bytes::from(vec![n as u8; 1 << 20]))
                })
                .await
                .unwrap()
        }

        fn encodes(&self) -> usize {
            self.encodes.load(Ordering::SeqCst)
        }
    }

    /// Distinct bodies among `held`.
    fn copies(held: &[Bytes]) -> usize {
        let mut p: Vec<_> = held.iter().map(|b| b.as_ptr()).collect();
        p.sort();
        p.dedup();
        p.len()
    }

    #[tokio::test(start_paused = true)]
    async fn held_bodies_are_shared_and_released_ones_are_encoded_again() {
        let rig = Rig::default();
        // 100 clients that never read: one encode, one copy.
        let mut held = Vec::new();
        for _ in 0..100 {
            held.push(rig.get().await);
        }
        assert_eq!(rig.encodes(), 1);
        assert_eq!(copies(&held), 1);
        // Held, but older than REUSE_FOR: encoded again.
        tokio::time::advance(REUSE_FOR).await;
        held.push(rig.get().await);
        assert_eq!(rig.encodes(), 2);
        // Nobody holds it: a reading client gets a fresh body every time, and nothing is
        // kept between them.
        held.clear();
        let first = rig.get().await;
        drop(first);
        let second = rig.get().await;
        assert_eq!(rig.encodes(), 4);
        assert_eq!(rig.shared.held().await, 1);
        drop(second);
        assert_eq!(rig.shared.held().await, 0);
    }

    /// Issue 47, point 4: one new client a second that never reads (each kept ~70 s) pinned
    /// one copy each, ~60 copies; now at most [`MAX_COPIES`], and fresh ones again once
    /// they are gone.
    #[tokio::test(start_paused = true)]
    async fn one_new_client_a_second_that_never_reads_pins_at_most_max_copies() {
        let rig = Rig::default();
        let mut held = Vec::new();
        for _ in 0..70 {
            held.push(rig.get().await);
            tokio::time::advance(REUSE_FOR).await;
        }
        assert_eq!(copies(&held), MAX_COPIES);
        assert_eq!(rig.encodes(), MAX_COPIES);
        held.clear();
        let fresh = rig.get().await;
        assert_eq!(usize::from(fresh[0]), MAX_COPIES, "not a fresh body");
    }
}
