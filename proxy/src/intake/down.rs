//! The client's socket during the intake, registered with the runtime only if it must be.
//!
//! With `TCP_DEFER_ACCEPT` a connection is accepted once its first bytes are there, and a TLS
//! client sends its whole ClientHello in one flight: the first read nearly always finds every
//! byte the intake needs. Such a socket never enters the runtime's epoll, which saves the
//! `EPOLL_CTL_ADD` on accept and the `EPOLL_CTL_DEL` when the splicer takes it over (two of
//! about twenty system calls per connection). A read that would block registers the socket
//! and waits through the runtime as before, so a slow client costs what it always did.

use super::reject::Reject;
use std::io::{self, Read};
use std::net::SocketAddr;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// An accepted, non-blocking socket: still outside the runtime, or registered with it (one
/// of the two is always there).
#[derive(Debug)]
pub struct Down {
    unregistered: Option<std::net::TcpStream>,
    registered: Option<TcpStream>,
}

impl Down {
    /// A socket just accepted, not registered with any runtime.
    pub fn new(socket: std::net::TcpStream) -> Down {
        Down {
            unregistered: Some(socket),
            registered: None,
        }
    }

    /// The socket registered with the runtime (registering it now if it is not yet): for
    /// what has to wait (a read that would block, answering a rejected or CONNECT client).
    pub fn registered(&mut self) -> io::Result<&mut TcpStream> {
        if let Some(s) = self.unregistered.take() {
            self.registered = Some(TcpStream::from_std(s)?);
        }
        self.registered
            .as_mut()
            .ok_or_else(|| io::Error::other("the client socket is gone"))
    }

    /// Reads what is available into `buf`, never past `max_bytes` in total: the intake's one
    /// reader (PROXY header, ClientHello, CONNECT request).
    pub async fn read_more(
        &mut self,
        buf: &mut Vec<u8>,
        max_bytes: usize,
    ) -> Result<usize, Reject> {
        if buf.len() >= max_bytes {
            return Err(Reject::TooLarge);
        }
        if buf.capacity() == buf.len() {
            // Most hellos fit in the first 2 KiB; larger ones double the buffer up to the cap.
            let grow = buf.len().max(2048).min(max_bytes - buf.len());
            buf.reserve_exact(grow);
        }
        let room = buf.capacity().min(max_bytes) - buf.len();
        let n = self
            .read_into(buf, room)
            .await
            .map_err(|_| Reject::ClientClosed)?;
        if n == 0 {
            return Err(Reject::ClientClosed);
        }
        Ok(n)
    }

    /// Reads what is available, at most `room` bytes, appended to `buf`; waits for bytes only
    /// when none are there. `Ok(0)` is the client's end of stream.
    async fn read_into(&mut self, buf: &mut Vec<u8>, room: usize) -> io::Result<usize> {
        if let Some(s) = &mut self.unregistered {
            let start = buf.len();
            buf.resize(start + room, 0);
            loop {
                match s.read(buf.get_mut(start..).unwrap_or_default()) {
                    Ok(n) => {
                        buf.truncate(start + n);
                        return Ok(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        buf.truncate(start);
                        if e.kind() != io::ErrorKind::WouldBlock {
                            return Err(e);
                        }
                        break;
                    }
                }
            }
        }
        // Nothing there yet: wait through the runtime from now on.
        self.registered()?.take(room as u64).read_buf(buf).await
    }

    /// The local address (for a PROXY header), whichever state the socket is in.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match (&self.unregistered, &self.registered) {
            (Some(s), _) => s.local_addr(),
            (None, Some(s)) => s.local_addr(),
            (None, None) => Err(io::Error::other("the client socket is gone")),
        }
    }

    /// The socket out of the runtime again, for the splicer.
    pub fn into_std(self) -> io::Result<std::net::TcpStream> {
        match (self.unregistered, self.registered) {
            (Some(s), _) => Ok(s),
            (None, Some(s)) => s.into_std(),
            (None, None) => Err(io::Error::other("the client socket is gone")),
        }
    }
}
