//! What the tests of misbehaving peers and floods share: waiting for the server to close a
//! connection, the log lines a run writes, and the isthmus proxy in front of the server.

use super::DEADLINE;
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncReadExt};

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
