//! What the tests of misbehaving peers and floods share: waiting for the server to close a
//! connection, the log lines a run writes, the isthmus proxy in front of the server, and a
//! flood of connections that stall after their first bytes.

use super::DEADLINE;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

/// Reads until the peer closes (or resets); panics if it does not within the deadline.
pub async fn closed<S: AsyncRead + Unpin>(s: &mut S) {
    let mut buf = [0u8; 1024];
    let until_closed = async { while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {} };
    tokio::time::timeout(DEADLINE, until_closed)
        .await
        .expect("the server did not close the connection");
}

/// Log lines (`level` and up) written while `f` runs on this thread.
pub fn logs_of<T>(level: tracing::Level, f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(level)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

/// The seed's isthmus proxy: one listener that routes `vpn.test` to `server` with a PROXY v2
/// header.
pub fn proxy_yaml(server: SocketAddr) -> String {
    format!(
        "admin: {{ address: \"127.0.0.1:0\" }}\nwatch_interval: 0s\nlisteners:\n  - name: vpn\n    \
         address: \"127.0.0.1:0\"\n    routes: [ {{ sni: \"vpn.test\", upstream: vpn }} ]\n\
         upstreams:\n  - {{ name: vpn, endpoints: [\"{server}\"], send_proxy_protocol: v2 }}\n"
    )
}

/// A flood: one task per `(source, first bytes)` entry, each connecting to `target` (bound to
/// `source` when given), sending its first bytes and holding the connection until the server
/// closes it (or the flood stops), then opening it again after `pause` (the attack's rate, not
/// a wait for anything).
pub struct Flood {
    stop: CancellationToken,
    opened: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    pub fn start(
        target: SocketAddr,
        connections: Vec<(Option<IpAddr>, Arc<Vec<u8>>)>,
        pause: Duration,
    ) -> Flood {
        let stop = CancellationToken::new();
        let opened = Arc::new(AtomicU64::new(0));
        let tasks = connections
            .into_iter()
            .map(|(source, first)| {
                let (stop, opened) = (stop.clone(), opened.clone());
                tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        if let Ok(mut s) = connect_from(source, target).await {
                            opened.fetch_add(1, Ordering::Relaxed);
                            let _ = s.write_all(&first).await;
                            let mut buf = [0u8; 256];
                            loop {
                                tokio::select! {
                                    _ = stop.cancelled() => return,
                                    r = s.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
                                }
                            }
                        }
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(pause) => {}
                        }
                    }
                })
            })
            .collect();
        Flood {
            stop,
            opened,
            tasks,
        }
    }

    /// The connections opened so far.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    pub async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn connect_from(source: Option<IpAddr>, target: SocketAddr) -> std::io::Result<TcpStream> {
    match source {
        None => TcpStream::connect(target).await,
        Some(ip) => {
            let socket = match ip {
                IpAddr::V4(_) => TcpSocket::new_v4()?,
                IpAddr::V6(_) => TcpSocket::new_v6()?,
            };
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(target).await
        }
    }
}
