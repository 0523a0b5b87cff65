//! Encoded response bodies shared between connections: one encode at a time per body, and a
//! body that a slow client still holds is handed to the next clients too (for up to
//! [`REUSE_FOR`]), so that clients which ask for `/metrics` and never read hold one copy of
//! it between them instead of one each.
//!
//! A body nobody holds any more (every response was written out) is never reused: a client
//! that reads its answer and asks again always gets a fresh one, so `/metrics` is as current
//! as it was without the sharing.

use bytes::Bytes;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long a body still held by a client may be handed out again.
pub const REUSE_FOR: Duration = Duration::from_secs(1);

/// One kind of body (`/metrics`, `/config`).
#[derive(Debug, Default)]
pub struct SharedBody {
    /// Held across the encode: a second encode of the same body waits for the first.
    last: Mutex<Option<(Instant, Bytes)>>,
}

impl SharedBody {
    /// The body: the last one while a client still holds it and it is young enough, else
    /// what `encode` makes now (`None`: encoding failed, nothing is kept).
    pub async fn get(&self, encode: impl FnOnce() -> Option<Bytes>) -> Option<Bytes> {
        let mut last = self.last.lock().await;
        if let Some((at, body)) = last.as_ref() {
            // Not unique: a response being written still holds it.
            if at.elapsed() < REUSE_FOR && !body.is_unique() {
                return Some(body.clone());
            }
        }
        let body = encode()?;
        *last = Some((Instant::now(), body.clone()));
        Some(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn held_bodies_are_shared_and_released_ones_are_encoded_again() {
        let shared = Arc::new(SharedBody::default());
        let encodes = Arc::new(AtomicUsize::new(0));
        let get = || {
            let (shared, encodes) = (shared.clone(), encodes.clone());
            async move {
                shared
                    .get(|| {
                        let n = encodes.fetch_add(1, Ordering::SeqCst);
                        Some(Bytes::from(vec![n as u8; 1 << 20]))
                    })
                    .await
                    .unwrap()
            }
        };
        // 100 clients that never read: one encode, one copy.
        let mut held = Vec::new();
        for _ in 0..100 {
            held.push(get().await);
        }
        assert_eq!(encodes.load(Ordering::SeqCst), 1);
        assert!(held.iter().all(|b| b.as_ptr() == held[0].as_ptr()));
        // Held, but older than REUSE_FOR: encoded again.
        tokio::time::advance(REUSE_FOR).await;
        held.push(get().await);
        assert_eq!(encodes.load(Ordering::SeqCst), 2);
        // Nobody holds it: a reading client gets a fresh body every time.
        held.clear();
        let first = get().await;
        drop(first);
        let _second = get().await;
        assert_eq!(encodes.load(Ordering::SeqCst), 4);
    }
}
