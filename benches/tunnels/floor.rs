//! The tunnel path's floor (`relays`): the hops a tunnel's bytes take here, with nothing of a
//! tunnel in them. Two processes (this bench binary re-executed) stand where the tunnel server
//! and agent stand: the front takes `CONNECT` on a Unix socket, as the isthmus server does,
//! and opens a TCP connection per stream across the same link and the same CONNECT proxy to
//! the back, which dials the target; both copy bytes 64 KiB at a time. No TLS, no HTTP/2, no
//! multiplexing: what a tunnel costs beyond this is its own work; what this costs is the
//! price of the hops (a Unix socket, three TCP connections, two more processes) on this
//! machine, which no tunnel on this path can go below.

use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};

/// `front:<unix socket>:<back's address as reached through the link>` or `back:<address>`.
pub const ROLE_ENV: &str = "TUNNELS_BENCH_RELAY";

/// Bytes per read, as the link relay and the CONNECT proxy.
const BUF: usize = 64 * 1024;

/// The child's `main`: one of the two relays, until killed.
pub fn child_main(role: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        match role.split_once(':') {
            Some(("front", rest)) => {
                let (sock, back) = rest.rsplit_once(' ').unwrap();
                front(sock, back.parse().unwrap()).await
            }
            Some(("back", addr)) => back(addr.parse().unwrap()).await,
            _ => panic!("{ROLE_ENV}={role}"),
        }
    });
}

/// Reads a head up to its blank line (small, byte by byte: once per stream).
async fn head<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await? == 0 || head.len() > 8192 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

async fn copy<A, B>(mut a: A, mut b: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, BUF, BUF).await;
}

async fn front(sock: &str, back: SocketAddr) {
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).unwrap();
    while let Ok((mut c, _)) = l.accept().await {
        tokio::spawn(async move {
            let Ok(h) = head(&mut c).await else { return };
            let target = h.split_whitespace().nth(1).unwrap_or_default().to_owned();
            let Ok(mut u) = TcpStream::connect(back).await else {
                return;
            };
            let _ = u.set_nodelay(true);
            // Through the CONNECT proxy (which routes every CONNECT to the back), then the
            // target for the back.
            let req = format!("CONNECT back HTTP/1.1\r\n\r\n{target}\r\n\r\n");
            if u.write_all(req.as_bytes()).await.is_err() || head(&mut u).await.is_err() {
                return;
            }
            if c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.is_ok() {
                copy(c, u).await;
            }
        });
    }
}

async fn back(addr: SocketAddr) {
    let l = TcpListener::bind(addr).await.unwrap();
    while let Ok((mut c, _)) = l.accept().await {
        tokio::spawn(async move {
            let _ = c.set_nodelay(true);
            let Ok(h) = head(&mut c).await else { return };
            let Ok(target) = h.trim().parse::<SocketAddr>() else {
                return;
            };
            let Ok(t) = TcpStream::connect(target).await else {
                return;
            };
            let _ = t.set_nodelay(true);
            copy(c, t).await;
        });
    }
}
