//! HTTP/1 servers that no client can hold: the limits of [`HttpLimits`] applied the same way
//! by every isthmus HTTP endpoint (the proxy's and the tunnel's admin, the tunnel's CONNECT
//! front, the controller's metrics server).
//!
//! - a request head must arrive within `header_read_timeout` (hyper's header timer; also
//!   closes idle keep-alive connections), and may not exceed `max_header_bytes` (`431`);
//! - at most `max_connections` connections: one more closes the *oldest*, so a fresh probe
//!   (`/readyz` from the kubelet) always gets in however many slow clients are connected.
//!
//! [`serve`] (the admin endpoints) bounds the answers too: a client that stops reading is
//! closed after `write_timeout` without progress (`deadline.rs`), no connection lives longer
//! than `connection_timeout` (a response in progress included), and the accepted socket's send
//! buffer is [`SEND_BUFFER`] (the kernel's autotuning would give a non-reading client up to
//! 4 MiB of socket memory). Bodies are shared, not copied, into hyper's write queue
//! (`writev`), and large ones are shared between clients (`bodies.rs`).
//!
//! Memory is bounded by `max_connections` × (`max_header_bytes` + hyper's write buffer and
//! task, ~8 KiB, + the send buffer): about 22 MiB at the defaults, plus at most
//! `bodies::MAX_COPIES` copies of each shared body.

use crate::deadline::WriteDeadline;
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use isthmus_config::HttpLimits;
use prometheus_client::metrics::counter::Counter;
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// hyper's smallest allowed read buffer.
const MIN_BUF: usize = 8192;

/// `SO_SNDBUF` of an admin connection (the kernel doubles it for its bookkeeping): a
/// connection still carries ~64 MiB/s at 1 ms round trip (a 1 MiB `/metrics` in ~16 ms), and
/// a client that does not read pins 64 KiB of kernel memory rather than megabytes.
pub const SEND_BUFFER: usize = 32 * 1024;

/// The connection slots of one HTTP server and the hyper settings of its limits.
#[derive(Debug)]
pub struct Gate {
    limits: HttpLimits,
    slots: Mutex<Slots>,
    evicted: Counter,
}

#[derive(Debug, Default)]
struct Slots {
    next: u64,
    /// Open connections, oldest first.
    open: BTreeMap<u64, oneshot::Sender<()>>,
}

/// One admitted connection; dropping it frees its slot.
#[derive(Debug)]
pub struct Admission {
    gate: Arc<Gate>,
    seq: u64,
    evicted: oneshot::Receiver<()>,
}

impl Gate {
    /// A gate for one server.
    pub fn new(limits: HttpLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            slots: Mutex::default(),
            evicted: Counter::default(),
        })
    }

    /// The limits this gate applies.
    pub fn limits(&self) -> &HttpLimits {
        &self.limits
    }

    /// Counts connections closed to make room for a newer one (register it to export it).
    pub fn evicted(&self) -> Counter {
        self.evicted.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        // Each update is complete before the lock is released.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// A hyper HTTP/1 builder with the header timeout and the head size cap.
    pub fn builder(&self) -> hyper::server::conn::http1::Builder {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout.get())
            .max_buf_size(self.limits.max_header_bytes.max(MIN_BUF))
            .max_headers(64)
            // Queue body chunks as they are (a shared `Bytes` stays shared) rather than
            // copying them into one flat buffer per connection.
            .writev(true);
        b
    }

    /// Takes a slot, closing the oldest connection when all are taken.
    pub fn admit(self: &Arc<Self>) -> Admission {
        let (tx, rx) = oneshot::channel();
        let mut slots = self.lock();
        if slots.open.len() >= self.limits.max_connections.max(1) {
            if let Some((_, oldest)) = slots.open.pop_first() {
                let _ = oldest.send(());
                self.evicted.inc();
            }
        }
        let seq = slots.next;
        slots.next += 1;
        slots.open.insert(seq, tx);
        drop(slots);
        Admission {
            gate: self.clone(),
            seq,
            evicted: rx,
        }
    }
}

impl Admission {
    /// Runs `work` (the connection) until it ends, or until this connection is evicted
    /// (then `None`: `work` is dropped, which closes the connection).
    pub async fn run<F: Future>(mut self, work: F) -> Option<F::Output> {
        tokio::select! {
            r = work => Some(r),
            Ok(()) = &mut self.evicted => None,
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.gate.lock().open.remove(&self.seq);
    }
}

/// Serves HTTP/1 on `listener` until `stop` fires: every connection gets a slot of `gate`
/// and a service from `make`. Accept errors (EMFILE) back off instead of spinning.
pub async fn serve<M, S, B>(
    listener: TcpListener,
    gate: Arc<Gate>,
    make: M,
    stop: CancellationToken,
) where
    M: Fn() -> S,
    S: Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    loop {
        let sock = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    debug!(error = %e, "HTTP accept failed");
                    crate::backoff::after_accept_error(&e).await;
                    continue;
                }
            },
        };
        let limits = *gate.limits();
        // Best effort: a socket keeping the kernel's size is only less bounded.
        let _ = socket2::SockRef::from(&sock).set_send_buffer_size(SEND_BUFFER);
        let io = WriteDeadline::new(sock, limits.write_timeout.get());
        let admission = gate.admit();
        let connection = gate.builder().serve_connection(TokioIo::new(io), make());
        tokio::spawn(async move {
            let aged = aged(connection, &limits);
            if let Some(Err(e)) = admission.run(aged).await {
                debug!(error = %e, "HTTP connection");
            }
        });
    }
}

/// Runs `connection` until it ends, or until it is `connection_timeout` old, whatever it is
/// doing then: the age is a total deadline. A client that keeps reading a big body slowly
/// restarts the write deadline with every byte, and used to keep the connection (and its copy
/// of the body) for `connection_timeout` + `write_timeout`. From `connection_timeout` −
/// `write_timeout` (or half the age, if less) on, the connection takes no new request, so a
/// response started before has that long to be read.
async fn aged<I, S, B>(
    connection: hyper::server::conn::http1::Connection<I, S>,
    limits: &HttpLimits,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let age = limits.connection_timeout.get();
    let last_response = limits.write_timeout.get().min(age / 2);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        r = connection.as_mut() => return r,
        _ = tokio::time::sleep(age - last_response) => {}
    }
    connection.as_mut().graceful_shutdown();
    tokio::time::timeout(last_response, connection)
        .await
        .unwrap_or(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client that reads a big answer 1 KiB every 5 s makes progress within every
    /// `write_timeout`, and is closed at `connection_timeout` all the same (it used to get
    /// `write_timeout` more: ~70 s holding its copy of the body at the defaults).
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_closed_at_the_connection_age() {
        let limits = HttpLimits::default();
        let age = limits.connection_timeout.get();
        let gate = Gate::new(limits);
        let (near, mut far) = tokio::io::duplex(4096);
        let service = hyper::service::service_fn(|_req| async {
            let body = Full::new(Bytes::from(vec![b'x'; 1 << 20]));
            Ok::<_, std::convert::Infallible>(Response::new(body))
        });
        let io = TokioIo::new(WriteDeadline::new(near, limits.write_timeout.get()));
        let connection = gate.builder().serve_connection(io, service);
        let start = tokio::time::Instant::now();
        let served = tokio::spawn(async move { aged(connection, &limits).await });
        far.write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\n\r\n")
            .await
            .unwrap();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if !matches!(far.read(&mut buf).await, Ok(n) if n > 0) {
                    return;
                }
            }
        });
        served.await.unwrap().ok();
        let lived = start.elapsed();
        assert!(
            lived <= age && lived > age - limits.write_timeout.get(),
            "the connection lived {lived:?}, its age is {age:?}"
        );
        reader.await.unwrap();
    }

    #[test]
    fn the_oldest_connection_makes_room() {
        let gate = Gate::new(HttpLimits {
            max_connections: 2,
            ..HttpLimits::default()
        });
        let mut a = gate.admit();
        let mut b = gate.admit();
        let c = gate.admit();
        assert!(a.evicted.try_recv().is_ok());
        assert!(b.evicted.try_recv().is_err());
        drop(a);
        assert_eq!(gate.open(), 2);
        assert_eq!(gate.evicted().get(), 1);
        drop((b, c));
        assert_eq!(gate.open(), 0);
    }
}
