//! The server's table of agent sessions and the policy that picks one for a new stream:
//! healthy, not draining, fewest streams in flight.
//!
//! A stream is queued on a session only through [`Session::open`], and [`Session::drain`] takes
//! the same gate: once `drain` returns, every stream this server will ever open on the session
//! is already queued on its connection, so a request queued after it (the drain
//! acknowledgement, `session.rs`) reaches the agent after all of them.

use crate::metrics::{Metrics, SessionState};
use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::SendStream;
use hyper::Request;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{watch, Notify};

/// One agent session as the server sees it.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: u64,
    pub(crate) peer: SocketAddr,
    send: SendRequest<Bytes>,
    in_flight: AtomicUsize,
    draining: AtomicBool,
    /// Set when the connection has ended.
    closed: AtomicBool,
    /// Held while a stream is queued and while the session is marked draining.
    gate: Mutex<()>,
    state: Mutex<SessionState>,
    stream_ended: Arc<Notify>,
}

impl Session {
    /// Marks the session as draining: no new streams; open ones continue.
    pub(crate) fn drain(&self) {
        let _gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.draining.swap(true, Ordering::SeqCst) {
            tracing::info!(session = self.id, peer = %self.peer, "session draining");
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set("draining");
        }
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Whether new streams may go here.
    fn usable(&self) -> bool {
        !self.is_draining() && !self.closed.load(Ordering::SeqCst)
    }

    /// Marks the connection as ended (its task saw it end).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Queues `req` on this session unless it drains, and counts the stream on it until the
    /// guard drops. The request's HEADERS are on the connection's queue when this returns
    /// (`h2` queues synchronously); the future answers it, the `SendStream` carries the bytes
    /// that follow. `Some(Err)`: the connection refused the stream at once (it has ended or
    /// received GOAWAY); nothing was sent.
    #[allow(clippy::type_complexity)]
    pub(crate) fn open(
        self: &Arc<Self>,
        req: Request<()>,
    ) -> Option<(
        Result<(ResponseFuture, SendStream<Bytes>), h2::Error>,
        SessionStream,
    )> {
        let _gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.usable() {
            return None;
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let counted = SessionStream(self.clone());
        // A fresh clone has no stream of its own pending, so it may send without `ready()`;
        // past the peer's stream limit the stream waits in `h2`'s queue, in order.
        Some((self.send.clone().send_request(req, false), counted))
    }
}

/// A stream counted on its session.
#[derive(Debug)]
pub(crate) struct SessionStream(Arc<Session>);

impl Drop for SessionStream {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.stream_ended.notify_waiters();
    }
}

/// All live sessions.
#[derive(Debug)]
pub(crate) struct Sessions {
    list: Mutex<Vec<Arc<Session>>>,
    next_id: AtomicU64,
    /// Bumped whenever a session joins: CONNECTs waiting for one wake up.
    added: watch::Sender<u64>,
    /// Woken whenever a stream ends: the drain at shutdown waits on it.
    stream_ended: Arc<Notify>,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            list: Mutex::default(),
            next_id: AtomicU64::new(0),
            added: watch::Sender::new(0),
            stream_ended: Arc::default(),
        }
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Session>>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a verified session as `active`.
    pub(crate) fn add(
        &self,
        peer: SocketAddr,
        send: SendRequest<Bytes>,
        metrics: &Metrics,
    ) -> Arc<Session> {
        let s = Arc::new(Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer,
            send,
            in_flight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            gate: Mutex::new(()),
            state: Mutex::new(metrics.session_state("active")),
            stream_ended: self.stream_ended.clone(),
        });
        self.lock().push(s.clone());
        self.added.send_modify(|n| *n += 1);
        s
    }

    /// Changes whenever a session joins (subscribe, then look at the table: no join is missed).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.added.subscribe()
    }

    /// Waits until no stream is in flight on any session.
    pub(crate) async fn all_streams_ended(&self) {
        loop {
            let ended = self.stream_ended.notified();
            tokio::pin!(ended);
            // Registered before the count is read: a stream ending in between still wakes us.
            ended.as_mut().enable();
            if self.streams() == 0 {
                return;
            }
            ended.await;
        }
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().retain(|s| s.id != id);
    }

    /// Sessions that may take a new stream, best first (fewest streams in flight).
    pub(crate) fn candidates(&self) -> Vec<Arc<Session>> {
        let mut v: Vec<_> = self.lock().iter().filter(|s| s.usable()).cloned().collect();
        v.sort_by_key(|s| s.in_flight());
        v
    }

    /// Number of sessions that may take new streams.
    pub(crate) fn live(&self) -> usize {
        self.lock().iter().filter(|s| s.usable()).count()
    }

    /// Marks every session as draining.
    pub(crate) fn drain_all(&self) {
        for s in self.lock().iter() {
            s.drain();
        }
    }

    /// Streams in flight over all sessions.
    pub(crate) fn streams(&self) -> usize {
        self.lock().iter().map(|s| s.in_flight()).sum()
    }
}
