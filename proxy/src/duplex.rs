//! Splicing two TCP streams both ways with correct half-close.
//!
//! Each direction reads until EOF and then shuts down the *write* side of the other socket,
//! passing the FIN on while the opposite direction keeps flowing. The splice ends when both
//! directions have ended, or at once when either side fails (a reset on one side is passed on
//! by dropping both sockets).
//!
//! Buffers exist only while data is moving: an idle spliced connection holds no buffer, which
//! is what keeps memory per idle connection small (tens of thousands of etcd peer streams and
//! watches sit idle most of the time).

use prometheus_client::metrics::counter::Counter;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Bytes a buffer holds; big enough that bulk transfers need few syscalls.
const BUF_SIZE: usize = 64 * 1024;

/// Byte totals of a finished splice.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub downstream_to_upstream: u64,
    pub upstream_to_downstream: u64,
}

/// Optional limits on a spliced connection. Both default to none: etcd peer streams and
/// watches live for days, and cutting them is exactly what we exist to avoid.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Close when no byte moved in either direction for this long.
    pub idle_timeout: Option<Duration>,
    /// Close this long after the splice started, whatever the traffic.
    pub max_duration: Option<Duration>,
}

/// Why a splice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Both sides closed their direction.
    Closed,
    /// `idle_timeout` elapsed.
    Idle,
    /// `max_duration` elapsed.
    MaxDuration,
}

/// Splices until both directions end or a limit fires. Counters advance as bytes move, not
/// only at the end, so that long-lived connections show up in `/metrics` while they live.
pub async fn splice(
    downstream: &TcpStream,
    upstream: &TcpStream,
    to_upstream: &Counter,
    to_downstream: &Counter,
    limits: Limits,
) -> io::Result<(Totals, End)> {
    let started = Instant::now();
    // Milliseconds since `started` of the last byte moved; shared by both directions and the
    // idle watchdog (an atomic keeps the future `Send`).
    let last = AtomicU64::new(0);
    let up = pump(downstream, upstream, to_upstream, started, &last);
    let down = pump(upstream, downstream, to_downstream, started, &last);
    // The timers are boxed only when a limit is set: every spliced connection lives in a
    // task for its whole life, and unset limits (the default) should cost it no bytes.
    let idle = async {
        match limits.idle_timeout {
            Some(t) => Box::pin(idle_watchdog(t, started, &last)).await,
            None => std::future::pending().await,
        }
    };
    let max = async {
        match limits.max_duration {
            Some(d) => Box::pin(tokio::time::sleep(d)).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(up, down, idle, max);
    let (mut up_done, mut down_done) = (None, None);
    while up_done.is_none() || down_done.is_none() {
        tokio::select! {
            r = &mut up, if up_done.is_none() => up_done = Some(r?),
            r = &mut down, if down_done.is_none() => down_done = Some(r?),
            () = &mut idle => return Ok((Totals::default(), End::Idle)),
            () = &mut max => return Ok((Totals::default(), End::MaxDuration)),
        }
    }
    let totals = Totals {
        downstream_to_upstream: up_done.unwrap_or(0),
        upstream_to_downstream: down_done.unwrap_or(0),
    };
    Ok((totals, End::Closed))
}

async fn idle_watchdog(limit: Duration, started: Instant, last: &AtomicU64) {
    loop {
        let last_ms = last.load(Ordering::Relaxed);
        let deadline = started + Duration::from_millis(last_ms) + limit;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    counter: &Counter,
    started: Instant,
    last: &AtomicU64,
) -> io::Result<u64> {
    let mut total = 0u64;
    let mut buf: Option<Vec<u8>> = None;
    loop {
        from.readable().await?;
        let b = buf.get_or_insert_with(pool::take);
        let n = match from.try_read_buf(b) {
            Ok(0) => {
                // Pass the FIN on. The peer may already be gone; that ends this direction only.
                let _ = socket2::SockRef::from(to).shutdown(Shutdown::Write);
                return Ok(total);
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Readiness was stale (it stays set after a short read until a read would
                // block): wait for data without holding a buffer, or every idle connection
                // would keep one per direction.
                pool::give(buf.take());
                continue;
            }
            Err(e) => return Err(e),
        };
        write_all(to, b).await?;
        b.clear();
        total += n as u64;
        counter.inc_by(n as u64);
        last.store(millis_since(started), Ordering::Relaxed);
        if n < BUF_SIZE {
            // The socket is drained: give the buffer back rather than hold it while idle.
            pool::give(buf.take());
            continue;
        }
        // A full buffer: a bulk stream. Move the rest of the burst without copying.
        #[cfg(target_os = "linux")]
        {
            pool::give(buf.take());
            let moved = |m: usize| {
                total += m as u64;
                counter.inc_by(m as u64);
                last.store(millis_since(started), Ordering::Relaxed);
            };
            // Boxed: the splice state exists only during a bulk burst, not in every idle
            // connection's task.
            if Box::pin(splice_burst(from, to, moved)).await? {
                let _ = socket2::SockRef::from(to).shutdown(Shutdown::Write);
                return Ok(total);
            }
        }
    }
}

/// Moves bytes with splice(2) until `from` has none right now (`Ok(false)`) or ends
/// (`Ok(true)`). Without a pipe (descriptor limit) it returns at once and copying goes on.
#[cfg(target_os = "linux")]
async fn splice_burst(
    from: &TcpStream,
    to: &TcpStream,
    mut moved: impl FnMut(usize),
) -> io::Result<bool> {
    use tokio::io::Interest;
    let Ok(mut pipe) = crate::zero_copy::Pipe::take() else {
        return Ok(false);
    };
    loop {
        // The pipe is empty here, so WouldBlock can only mean the socket is drained.
        match from.try_io(Interest::READABLE, || pipe.fill_from(from)) {
            Ok(0) => {
                pipe.give();
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                pipe.give();
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        while pipe.held > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || pipe.drain_to(to)) {
                Ok(m) => moved(m),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Per-thread spare buffers. Connections take one while bytes move and give it back when the
/// socket is drained, so idle connections hold none, and a busy worker does not pay for a
/// 64 KiB malloc/free pair (and the page faults after glibc trims its heap) per message.
mod pool {
    use super::BUF_SIZE;
    use std::cell::RefCell;

    /// Spares kept per worker thread; beyond that buffers are freed.
    const MAX_SPARE: usize = 16;

    thread_local! {
        static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// An empty buffer with `BUF_SIZE` capacity (never zeroed: reads fill spare capacity).
    pub fn take() -> Vec<u8> {
        SPARE
            .try_with(|s| s.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Vec::with_capacity(BUF_SIZE))
    }

    pub fn give(buf: Option<Vec<u8>>) {
        let Some(mut buf) = buf else { return };
        buf.clear();
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < MAX_SPARE {
                s.push(buf);
            }
        });
    }
}

async fn write_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        to.writable().await?;
        match to.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Megabytes both ways take the bulk (splice on Linux) path; every byte arrives in order,
    /// the counters match, and each FIN is passed on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bulk_both_ways_with_half_close() {
        let (mut client, down) = pair().await;
        let (up, mut server) = pair().await;
        let (to_up, to_down) = (Counter::default(), Counter::default());
        let a = pattern(8 << 20, 1);
        let b = pattern(3 << 20, 7);
        let (a2, b2) = (a.clone(), b.clone());
        let server_side = tokio::spawn(async move {
            let (mut r, mut w) = server.split();
            let read = async {
                let mut got = Vec::new();
                r.read_to_end(&mut got).await.unwrap();
                got
            };
            let write = async {
                w.write_all(&b2).await.unwrap();
                w.shutdown().await.unwrap();
            };
            let (got, ()) = tokio::join!(read, write);
            assert!(got == a2, "upstream got {} bytes, wrong", got.len());
        });
        let client_side = tokio::spawn(async move {
            let (mut r, mut w) = client.split();
            let write = async {
                w.write_all(&a).await.unwrap();
                w.shutdown().await.unwrap();
            };
            let read = async {
                let mut got = Vec::new();
                r.read_to_end(&mut got).await.unwrap();
                got
            };
            let ((), got) = tokio::join!(write, read);
            assert!(got == b, "client got {} bytes, wrong", got.len());
        });
        let (totals, end) = splice(&down, &up, &to_up, &to_down, Limits::default())
            .await
            .unwrap();
        server_side.await.unwrap();
        client_side.await.unwrap();
        assert_eq!(end, End::Closed);
        assert_eq!(totals.downstream_to_upstream, 8 << 20);
        assert_eq!(totals.upstream_to_downstream, 3 << 20);
        assert_eq!(to_up.get(), 8 << 20);
        assert_eq!(to_down.get(), 3 << 20);
    }

    /// The limits, boxed only when set, still end the splice.
    #[tokio::test]
    async fn limits_end_the_splice() {
        let (_client, down) = pair().await;
        let (up, _server) = pair().await;
        let c = Counter::default();
        let idle = Limits {
            idle_timeout: Some(Duration::from_millis(50)),
            max_duration: None,
        };
        let (_, end) = splice(&down, &up, &c, &c, idle).await.unwrap();
        assert_eq!(end, End::Idle);
        let max = Limits {
            idle_timeout: None,
            max_duration: Some(Duration::from_millis(50)),
        };
        let (_, end) = splice(&down, &up, &c, &c, max).await.unwrap();
        assert_eq!(end, End::MaxDuration);
    }
}
