//! Peers that get past what the server checks first and then misbehave (issue 47): a proxy
//! whose PROXY header the server was not told to expect.

mod common;

use common::*;
use isthmus_proxy_protocol::{encode_v2, Addresses};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the peer closes (or resets); panics if it does not within the deadline.
#[allow(clippy::expect_used)]
async fn closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S) {
    let mut buf = [0u8; 1024];
    let until_closed = async { while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {} };
    tokio::time::timeout(DEADLINE, until_closed)
        .await
        .expect("the server did not close the connection");
}

/// A PROXY header from a peer not in `trusted_proxies` (a proxy sending v2 to a server that
/// does not expect it) is refused as such: counted under its own reason and logged at
/// `error`, once per interval however many arrive, instead of passing for broken TLS.
#[test]
fn a_proxy_header_from_an_untrusted_peer_is_refused_visibly() {
    let world = World::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The server runs on this thread, under the capturing subscriber.
    let (metrics, logs) = logs_of(|| {
        rt.block_on(async {
            let server = TestServer::start(world.server_options(false), None, None).await;
            for _ in 0..5 {
                let mut s = TcpStream::connect(server.agents).await.unwrap();
                let mut first = Vec::new();
                let a = Addresses {
                    source: "192.0.2.1:40000".parse().unwrap(),
                    destination: server.agents,
                };
                encode_v2(&a, &mut first);
                first.extend_from_slice(&[0x16, 0x03, 0x01, 0x02, 0x00]);
                s.write_all(&first).await.unwrap();
                closed(&mut s).await;
            }
            let m = server.metrics();
            server.stop().await;
            m
        })
    });
    let series =
        "isthmus_tunnel_refused_total{listener=\"agents\",reason=\"untrusted_proxy_header\"}";
    assert_eq!(metric(&metrics, series), 5.0, "{metrics}");
    let errors: Vec<_> = logs
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("agents.trusted_proxies"))
        .collect();
    assert_eq!(errors.len(), 1, "{logs}");
}

/// Log lines (debug and up) written while `f` runs on this thread.
#[allow(clippy::unwrap_used)]
fn logs_of<T>(f: impl FnOnce() -> T) -> (T, String) {
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
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    (out, text)
}
