//! The agent's end of one session's HTTP/2 connection, as a future: the `h2` server handshake,
//! then every stream the server opens is handed to the [`Service`] in a task of its own, while
//! PINGs keep the session alive. Ends when the connection does; [`Conn::graceful_shutdown`]
//! sends GOAWAY and lets the open streams finish.

use super::target::Service;
use crate::http2::Keepalive;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};

/// Why a connection ended other than by a clean close.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// HTTP/2 (or the socket under it) failed.
    #[error("HTTP/2: {0}")]
    H2(h2::Error),
    /// A PING went unanswered for `keepalive_timeout`.
    #[error("keepalive timed out")]
    KeepaliveTimedOut,
}

type Pinned = Pin<Box<dyn Future<Output = ()> + Send>>;

enum State<T> {
    Handshaking(h2::server::Handshake<T, Bytes>),
    Serving {
        conn: h2::server::Connection<T, Bytes>,
        keepalive: Pinned,
    },
}

/// One session's connection, served until it ends.
pub(crate) struct Conn<T> {
    state: State<T>,
    service: Service,
    keepalive: Keepalive,
    /// `graceful_shutdown` was called during the handshake: GOAWAY right after it.
    close_pending: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    pub(crate) fn new(
        builder: &h2::server::Builder,
        keepalive: Keepalive,
        io: T,
        service: Service,
    ) -> Self {
        Self {
            state: State::Handshaking(builder.handshake(io)),
            service,
            keepalive,
            close_pending: false,
        }
    }

    /// Sends GOAWAY: the server opens no more streams here; the open ones finish, then the
    /// connection ends.
    pub(crate) fn graceful_shutdown(&mut self) {
        match &mut self.state {
            State::Handshaking(_) => self.close_pending = true,
            State::Serving { conn, .. } => conn.graceful_shutdown(),
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Future for Conn<T> {
    type Output = Result<(), ConnError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = &mut *self;
        loop {
            match &mut me.state {
                State::Handshaking(hs) => {
                    let mut conn = ready!(Pin::new(hs).poll(cx)).map_err(ConnError::H2)?;
                    if me.close_pending {
                        conn.graceful_shutdown();
                    }
                    let keepalive = Box::pin(me.keepalive.run(conn.ping_pong()));
                    me.state = State::Serving { conn, keepalive };
                }
                State::Serving { conn, keepalive } => {
                    if keepalive.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(ConnError::KeepaliveTimedOut));
                    }
                    // Accepting is what drives the connection: until it is pending.
                    loop {
                        match ready!(conn.poll_accept(cx)) {
                            Some(Ok((req, respond))) => {
                                tokio::spawn(me.service.clone().handle(req, respond));
                            }
                            Some(Err(e)) => return Poll::Ready(Err(ConnError::H2(e))),
                            None => return Poll::Ready(Ok(())),
                        }
                    }
                }
            }
        }
    }
}
