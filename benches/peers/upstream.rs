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
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const DOWNLOAD: u8 = b'D';
pub const ECHO: u8 = b'E';
pub const LATENCY_ECHO: u8 = b'L';

/// Binds on 127.0.0.1:0 and serves until the runtime ends.
pub async fn start(hello_len: usize) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                // Errors end only this connection; the load generator reports what it missed.
                let _ = serve(sock, hello_len).await;
            });
        }
    });
    Ok(addr)
}

async fn serve(mut sock: TcpStream, hello_len: usize) -> io::Result<()> {
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
            std::thread::spawn(move || blocking_echo(sock));
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
