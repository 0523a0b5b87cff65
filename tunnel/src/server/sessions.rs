//! The server's table of agent sessions and the policy that picks one for a new stream:
//! healthy, not draining, fewest streams in flight.
//!
//! A stream is queued on a session only through [`Session::open`], and [`Session::drain`] takes
//! the same gate: once `drain` returns, every stream this server will ever open on the session
//! is already queued on its connection, so a request queued after it (the drain
//! acknowledgement, `session.rs`) reaches the agent after all of them.

use crate::metrics::{Metrics, SessionState};
use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, Response};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{watch, Notify};

/// One agent session as the server sees it.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) send: SendRequest<Empty<Bytes>>,
    in_flight: AtomicUsize,
    draining: AtomicBool,
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

    /// Queues `req` on this session unless it drains, and counts the stream on it until the
    /// guard drops. The request is on the connection's queue when this returns (hyper queues
    /// synchronously); the future answers it.
    pub(crate) fn open(
        self: &Arc<Self>,
        req: Request<Empty<Bytes>>,
    ) -> Option<(
        impl Future<Output = hyper::Result<Response<Incoming>>>,
        SessionStream,
    )> {
        let _gate = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_draining() || self.send.is_closed() {
            return None;
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let counted = SessionStream(self.clone());
        Some((self.send.clone().send_request(req), counted))
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
        send: SendRequest<Empty<Bytes>>,
        metrics: &Metrics,
    ) -> Arc<Session> {
        let s = Arc::new(Session {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer,
            send,
            in_flight: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
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
        let mut v: Vec<_> = self
            .lock()
            .iter()
            .filter(|s| !s.is_draining() && !s.send.is_closed())
            .cloned()
            .collect();
        v.sort_by_key(|s| s.in_flight());
        v
    }

    /// Number of sessions that may take new streams.
    pub(crate) fn live(&self) -> usize {
        self.lock()
            .iter()
            .filter(|s| !s.is_draining() && !s.send.is_closed())
            .count()
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
