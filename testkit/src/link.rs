//! A userspace network link (the lab's inter-seed and shoot links, the real seeds' link of
//! `isthmus-lab link`, the tunnel benches' and tests' long path): TCP relays adding a one-way
//! delay, able to cut and restore the link. `tc netem` does not run on the project's machines;
//! this does, in any namespace.
//!
//! The delay is applied per chunk with a timestamp (a reader stamps each chunk with "deliver at
//! now + delay", a writer waits for that instant), so a stream's throughput is not serialised
//! behind the delay, as on a real long link. A cut drops every relayed connection with a TCP
//! reset and resets new ones until the link is restored.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The link's state shared by all its relays.
#[derive(Debug, Clone)]
pub struct Link {
    one_way_micros: Arc<AtomicU64>,
    up: watch::Sender<bool>,
    /// Connections reset by a cut (open ones dropped, new ones refused): proof a cut bit.
    resets: Arc<AtomicU64>,
}

impl Link {
    /// A link with round-trip time `rtt` (half of it added in each direction).
    pub fn new(rtt: Duration) -> Self {
        let micros = u64::try_from(rtt.as_micros() / 2).unwrap_or(u64::MAX);
        Self {
            one_way_micros: Arc::new(AtomicU64::new(micros)),
            up: watch::channel(true).0,
            resets: Arc::default(),
        }
    }

    /// The one-way delay now applied.
    pub fn one_way(&self) -> Duration {
        Duration::from_micros(self.one_way_micros.load(Ordering::Relaxed))
    }

    /// Connections reset by cuts so far.
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Relaxed)
    }

    /// Cuts the link: open connections are reset, new ones are reset at once.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Restores the link.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }

    /// Starts a relay listening on `listen` (port 0: any), forwarding to `target` over this
    /// link; returns the address it listens on.
    pub async fn relay(&self, listen: SocketAddr, target: SocketAddr) -> io::Result<SocketAddr> {
        self.accept(listen, move |_| Some(target)).await
    }

    /// Starts a transparent relay on `listen` (`isthmus-lab link`): each connection nftables
    /// redirected to it is forwarded over this link to the address its client dialled
    /// (`SO_ORIGINAL_DST`), so one listener carries every TCP connection between networks
    /// whose packets meet in its namespace. A connection dialled to the relay itself is reset:
    /// relaying it would loop.
    pub async fn relay_redirected(&self, listen: SocketAddr) -> io::Result<SocketAddr> {
        self.accept(listen, |inbound| {
            let dialled = socket2::SockRef::from(inbound)
                .original_dst_v4()
                .ok()?
                .as_socket()?;
            (Some(dialled) != inbound.local_addr().ok()).then_some(dialled)
        })
        .await
    }

    /// Accepts on `listen`; `target` says where each connection goes (`None`: reset it).
    async fn accept(
        &self,
        listen: SocketAddr,
        target: impl Fn(&TcpStream) -> Option<SocketAddr> + Send + 'static,
    ) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("relay listen {listen}: {e}")))?;
        let bound = listener.local_addr()?;
        let link = self.clone();
        tokio::spawn(async move {
            loop {
                let inbound = match listener.accept().await {
                    Ok((inbound, _)) => inbound,
                    // Out of descriptors or a connection reset before it was taken: a test's
                    // relay waits a moment rather than spinning on the error.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Some(target) = target(&inbound) else {
                    reset(inbound);
                    continue;
                };
                let link = link.clone();
                tokio::spawn(async move { link.serve(inbound, target).await });
            }
        });
        Ok(bound)
    }

    async fn serve(&self, inbound: TcpStream, target: SocketAddr) {
        let mut up = self.up.subscribe();
        if !*up.borrow_and_update() {
            self.resets.fetch_add(1, Ordering::Relaxed);
            reset(inbound);
            return;
        }
        let outbound = tokio::select! {
            r = TcpStream::connect(target) => match r {
                Ok(s) => s,
                Err(_) => { reset(inbound); return; }
            },
            _ = up.wait_for(|u| !*u) => {
                self.resets.fetch_add(1, Ordering::Relaxed);
                reset(inbound);
                return;
            }
        };
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        let (ir, iw) = inbound.into_split();
        let (or, ow) = outbound.into_split();
        let a = tokio::spawn(pipe(ir, ow, self.one_way_micros.clone()));
        let b = tokio::spawn(pipe(or, iw, self.one_way_micros.clone()));
        let (a_abort, b_abort) = (a.abort_handle(), b.abort_handle());
        tokio::select! {
            _ = async { let _ = a.await; let _ = b.await; } => {}
            _ = up.wait_for(|u| !*u) => {
                // Aborting drops the halves; linger 0 was set on both sockets, so the peers
                // see a reset as on a broken path, not a clean close.
                self.resets.fetch_add(1, Ordering::Relaxed);
                a_abort.abort();
                b_abort.abort();
            }
        }
    }
}

fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

/// Copies `from` to `to`, each chunk delivered `delay` after it was read.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Arc<AtomicU64>,
) {
    let _ = from.as_ref().set_zero_linger();
    let _ = to.as_ref().set_zero_linger();
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let at = Instant::now() + Duration::from_micros(delay.load(Ordering::Relaxed));
                    if tx.send((at, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// On the runtime's paused clock (`start_paused`), which moves only when every task
    /// waits for a timer: the delays are the link's own, whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn delays_round_trips_not_throughput_and_cuts() {
        let target = echo().await;
        let link = Link::new(Duration::from_millis(100));
        let listen = link
            .relay("127.0.0.1:0".parse().unwrap(), target)
            .await
            .unwrap();
        let mut s = TcpStream::connect(listen).await.unwrap();
        let t = Instant::now();
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        let rtt = t.elapsed();
        assert!(rtt >= Duration::from_millis(100), "{rtt:?}");
        // 50 chunks of 64 KiB (at least 50 reads of the relay's 64 KiB buffer each way)
        // written back to back arrive after about one RTT, not 50.
        let (mut r, mut w) = s.into_split();
        let t = Instant::now();
        let writer = tokio::spawn(async move {
            for _ in 0..50 {
                w.write_all(&[7u8; 64 * 1024]).await.unwrap();
            }
            w
        });
        let mut got = vec![0u8; 50 * 64 * 1024];
        r.read_exact(&mut got).await.unwrap();
        let all = t.elapsed();
        assert!(all < Duration::from_millis(500), "{all:?}");
        let mut s = r.reunite(writer.await.unwrap()).unwrap();

        link.cut();
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b))
            .await
            .unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        let mut s2 = TcpStream::connect(listen).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), s2.read(&mut b))
            .await
            .unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");

        assert!(link.resets() >= 2, "{}", link.resets());
        link.restore();
        let mut s3 = TcpStream::connect(listen).await.unwrap();
        s3.write_all(b"x").await.unwrap();
        s3.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"x");
    }
}
