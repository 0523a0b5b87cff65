//! The upstream every contender forwards to: one Rust server in the harness process.
//!
//! Each connection starts with the ClientHello the load generator sent (the proxies replay it
//! unchanged; the direct path sends it too, so every path carries the same bytes), then one mode
//! byte: `D` followed by a little-endian u64 of milliseconds streams bytes to the client for that
//! long and then closes (bulk throughput, counted by the client where the bytes arrive; a close
//! from the upstream is the one end of stream every contender passes on — nginx and sniproxy do
//! not pass a client's half-close by default), `E` echoes (connection rate, idle connections,
//! reload survival), `L` echoes from a dedicated thread with blocking I/O (latency: no async
//! runtime on the measured path, so what is measured is the path, not the harness's scheduler).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const DOWNLOAD: u8 = b'D';
pub const ECHO: u8 = b'E';
pub const LATENCY_ECHO: u8 = b'L';

/// Connections the upstream holds open; counted so that the harness can wait until a
/// contender has passed every close on before it pauses that contender.
#[derive(Debug, Clone, Default)]
pub struct Open(Arc<AtomicUsize>);

impl Open {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Held by each connection's task (or thread); dropping it counts the connection closed.
struct Counted(Open);

impl Counted {
    fn new(open: &Open) -> Counted {
        open.0.fetch_add(1, Ordering::SeqCst);
        Counted(open.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Binds on 127.0.0.1:0 and serves until the runtime ends.
pub async fn start(hello_len: usize) -> io::Result<(SocketAddr, Open)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let open = Open::default();
    let counter = open.clone();
    tokio::spawn(async move {
        loop {
            let sock = match listener.accept().await {
                Ok((sock, _)) => sock,
                Err(_) => {
                    // Out of descriptors: retrying at once would spin and starve the machine.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let counted = Counted::new(&counter);
            tokio::spawn(async move {
                // Errors end only this connection; the load generator reports what it missed.
                let _ = serve(sock, hello_len, counted).await;
            });
        }
    });
    Ok((addr, open))
}

async fn serve(mut sock: TcpStream, hello_len: usize, counted: Counted) -> io::Result<()> {
    sock.set_nodelay(true)?;
    let mut head = vec![0u8; hello_len + 1];
    sock.read_exact(&mut head).await?;
    match head[hello_len] {
        DOWNLOAD => {
            let mut ms = [0u8; 8];
            sock.read_exact(&mut ms).await?;
            let until = Instant::now() + Duration::from_millis(u64::from_le_bytes(ms));
            let chunk = vec![0xa5u8; 128 * 1024];
            while Instant::now() < until {
                sock.write_all(&chunk).await?;
            }
            sock.shutdown().await
        }
        ECHO => {
            let (mut r, mut w) = sock.split();
            tokio::io::copy(&mut r, &mut w).await?;
            w.shutdown().await
        }
        LATENCY_ECHO => {
            let sock = sock.into_std()?;
            sock.set_nonblocking(false)?;
            std::thread::spawn(move || {
                blocking_echo(sock);
                drop(counted);
            });
            Ok(())
        }
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "unknown mode")),
    }
}

/// Echoes until the client closes, one blocking read and write at a time.
fn blocking_echo(mut sock: std::net::TcpStream) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.read(&mut buf) {
        if n == 0 || sock.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}
