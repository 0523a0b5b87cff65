//! `h2-relays` (run only when named): the relays of [`super::floor`] with what a tunnel's
//! session adds on top of TLS, and nothing of isthmus. Front and back share one TLS 1.3
//! connection (rustls, ring, the session's buffers) carrying HTTP/2 through `h2` with the
//! tunnel's settings (`tunnel/src/http2.rs`: 4 MiB stream and 32 MiB connection windows,
//! 256 KiB frames, 128 KiB send buffer); each stream is a CONNECT the back dials, and its bytes
//! are piped 64 KiB at a time, a read waiting for `h2`'s send capacity before the next one, a
//! received frame's window given back once written. Each relay runs on one thread. No
//! admission, allow-lists, metrics, drain or keepalive: what HTTP/2 over TLS costs a tunnel
//! here, the floor under isthmus's design; what isthmus costs beyond it is its own.

use super::floor::{acceptor, connector, head, tls_from_front, tls_to_back};
use bytes::{Bytes, BytesMut};
use h2::{RecvStream, SendStream};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::OnceCell;

/// As the tunnel's pipe and sessions (`tunnel/src/pipe/`, `tunnel/src/http2.rs`).
const READ: usize = 64 * 1024;
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;
const MAX_FRAME: u32 = 256 * 1024;
const MAX_SEND_BUF: usize = 128 * 1024;

type Session = h2::client::SendRequest<Bytes>;

/// Takes CONNECT on `sock` and opens a stream for each on the one session to `back`, dialled
/// (through the link's CONNECT proxy) when the first stream comes.
pub async fn front(sock: &str, back: SocketAddr, ca: &str) {
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).unwrap();
    let tls = connector(ca);
    let session: Arc<OnceCell<Session>> = Arc::default();
    while let Ok((mut c, _)) = l.accept().await {
        let (tls, session) = (tls.clone(), session.clone());
        tokio::spawn(async move {
            let Ok(h) = head(&mut c).await else { return };
            let target = h.split_whitespace().nth(1).unwrap_or_default().to_owned();
            let Ok(s) = session.get_or_try_init(|| dial(back, &tls)).await else {
                return;
            };
            let Ok(mut s) = s.clone().ready().await else {
                return;
            };
            let Ok(req) = http::Request::connect(target).body(()) else {
                return;
            };
            let Ok((answer, send)) = s.send_request(req, false) else {
                return;
            };
            let Ok(answer) = answer.await else { return };
            if answer.status() != http::StatusCode::OK
                || c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.is_err()
            {
                return;
            }
            pipe(c, send, answer.into_body()).await;
        });
    }
}

/// The way to the back as `tls-relays` take it, then the HTTP/2 handshake; the connection runs
/// as a task.
async fn dial(back: SocketAddr, tls: &tokio_rustls::TlsConnector) -> std::io::Result<Session> {
    let s = tls_to_back(back, tls).await?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_send_buffer_size(MAX_SEND_BUF)
        .handshake(s)
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(send)
}

/// Serves sessions on `addr`: each stream's CONNECT target is dialled and piped.
pub async fn back(addr: SocketAddr, cert: &str, key: &str) {
    let l = TcpListener::bind(addr).await.unwrap();
    let tls = acceptor(cert, key);
    while let Ok((c, _)) = l.accept().await {
        let tls = tls.clone();
        tokio::spawn(async move {
            let Ok(s) = tls_from_front(&tls, c).await else {
                return;
            };
            let Ok(mut conn) = h2::server::Builder::new()
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .max_frame_size(MAX_FRAME)
                .max_send_buffer_size(MAX_SEND_BUF)
                .handshake::<_, Bytes>(s)
                .await
            else {
                return;
            };
            while let Some(Ok((req, mut respond))) = conn.accept().await {
                tokio::spawn(async move {
                    let target = req.uri().authority().map(|a| a.as_str().to_owned());
                    let t = match target.map(|a| a.parse::<SocketAddr>()) {
                        Some(Ok(a)) => TcpStream::connect(a).await.ok(),
                        _ => None,
                    };
                    let Some(t) = t else {
                        return respond.send_reset(h2::Reason::CONNECT_ERROR);
                    };
                    let _ = t.set_nodelay(true);
                    let ok = http::Response::new(());
                    let Ok(send) = respond.send_response(ok, false) else {
                        return;
                    };
                    pipe(t, send, req.into_body()).await;
                });
            }
        });
    }
}

/// Both directions of a stream until both are closed.
async fn pipe<S: AsyncRead + AsyncWrite>(io: S, send: SendStream<Bytes>, recv: RecvStream) {
    let (r, w) = tokio::io::split(io);
    tokio::join!(up(r, send), down(w, recv));
}

/// Socket → stream: a read is sent once `h2` has granted capacity for all of it.
async fn up<R: AsyncRead>(r: R, mut send: SendStream<Bytes>) {
    tokio::pin!(r);
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(READ);
        match r.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Ok(_) => {}
        }
        let data = buf.split().freeze();
        send.reserve_capacity(data.len());
        while send.capacity() < data.len() {
            match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                _ => return,
            }
        }
        if send.send_data(data, false).is_err() {
            return;
        }
    }
}

/// Stream → socket: a frame's bytes go back to the peer's window once written.
async fn down<W: AsyncWrite>(w: W, mut recv: RecvStream) {
    tokio::pin!(w);
    while let Some(Ok(data)) = recv.data().await {
        if w.write_all(&data).await.is_err() {
            return;
        }
        let _ = recv.flow_control().release_capacity(data.len());
    }
    let _ = w.shutdown().await;
}
