//! Piping a tunnelled connection's bytes between its socket and its HTTP/2 stream, counting
//! them as they pass: [`up`] reads the socket into the stream, [`down`] writes the stream's
//! DATA to the socket.
//!
//! Bytes read from the socket are handed to `h2` as they are (a `Bytes` split off the read
//! buffer, no copy), and `h2`'s received DATA payloads are written to the socket as they are.
//! Memory stays bounded as it was behind hyper: a direction reads again only once `h2` has
//! granted send capacity for what it read before (so at most one read is waiting beside what
//! the stream's window and `h2`'s send buffer allow), and received bytes are released to the
//! peer's window only once written to the socket, so a stalled reader holds at most its window.

mod down;
mod up;

use crate::metrics::{DirectionLabel, Metrics};
use bytes::Bytes;
use down::Down;
use h2::{Reason, RecvStream, SendStream};
use std::future::poll_fn;
use std::io;
use std::task::Poll;
use tokio::io::{AsyncRead, AsyncWrite};
use up::Up;

/// The two halves of a tunnelled stream on a session.
#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) send: SendStream<Bytes>,
    pub(crate) recv: RecvStream,
}

/// Which end of the tunnel pipes: names the byte counters of the two directions.
#[derive(Debug, Clone, Copy)]
pub(crate) enum End {
    /// The server: the socket is kube-apiserver's, bytes into the stream go to the target.
    Server,
    /// The agent: the socket is the target's.
    Agent,
}

/// Copies both ways until both directions are closed (a half-close is forwarded as one:
/// END_STREAM one way, a socket shutdown the other). `first` are bytes already read from
/// `io` (behind the CONNECT request's head). Bytes are counted as they are read, so
/// long-lived streams (`kubectl logs -f`) show up before they end and streams that end with a
/// reset are counted too. An error on either side resets the stream and closes the socket.
pub(crate) async fn pipe<T>(mut io: T, stream: Stream, first: Bytes, end: End, metrics: &Metrics)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let counter = |direction| {
        metrics
            .bytes
            .get_or_create(&DirectionLabel { direction })
            .clone()
    };
    let (into, out_of) = match end {
        End::Server => ("to_target", "from_target"),
        End::Agent => ("from_target", "to_target"),
    };
    let Stream { mut send, mut recv } = stream;
    let mut up = Up::new(counter(into), first, &mut send);
    let mut down = Down::new(counter(out_of));
    let r = poll_fn(|cx| {
        let u = up.poll(cx, &mut io, &mut send)?;
        let d = down.poll(cx, &mut io, &mut recv)?;
        if u.is_ready() && d.is_ready() {
            return Poll::Ready(Ok(()));
        }
        // The peer's END_STREAM has arrived and the socket is quiet: only a reset (the peer
        // gave up on the stream) or the session's end would otherwise go unnoticed.
        if d.is_ready() {
            if let Poll::Ready(r) = send.poll_reset(cx) {
                return Poll::Ready(Err(match r {
                    Ok(reason) => {
                        io::Error::new(io::ErrorKind::ConnectionReset, reason.to_string())
                    }
                    Err(e) => h2_error(e),
                }));
            }
        }
        Poll::Pending
    })
    .await;
    if let Err(e) = r {
        // A peer closing without a clean shutdown (EPIPE, reset) is an ordinary end here.
        tracing::debug!(error = %e, "stream ended with an error");
        send.send_reset(Reason::CANCEL);
    }
}

/// An `h2` error as the pipe reports it (the socket's own error when there is one).
fn h2_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        if let Some(io) = e.into_io() {
            return io;
        }
        return io::ErrorKind::BrokenPipe.into();
    }
    io::Error::other(e)
}
