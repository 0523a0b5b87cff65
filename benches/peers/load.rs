//! The one load generator every contender (and the direct path) is driven with.

use crate::upstream::{DOWNLOAD, ECHO};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Connects and sends the ClientHello followed by the mode byte, in one write, as a TLS client
/// sends its hello in one flight.
pub async fn open(addr: SocketAddr, hello: &[u8], mode: u8) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut first = Vec::with_capacity(hello.len() + 1);
    first.extend_from_slice(hello);
    first.push(mode);
    s.write_all(&first).await?;
    Ok(s)
}

/// Opens an echo connection and waits for one byte to come back, so that the path through
/// the proxy (including its upstream connection) is known to be fully established.
pub async fn open_echo(addr: SocketAddr, hello: &[u8]) -> io::Result<TcpStream> {
    let mut s = open(addr, hello, ECHO).await?;
    ping(&mut s, 1).await?;
    Ok(s)
}

async fn ping(s: &mut TcpStream, len: usize) -> io::Result<()> {
    let out = vec![0x5au8; len];
    let mut back = vec![0u8; len];
    s.write_all(&out).await?;
    s.read_exact(&mut back).await?;
    // A proxy that rejects the connection may answer with a TLS alert (isthmus does); only
    // our own bytes coming back count as a routed round trip.
    if back != out {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not an echo"));
    }
    Ok(())
}

/// What a bulk download measured: the bytes of the whole transfer (for CPU per GB) and the
/// rate of its steady part.
pub struct Bulk {
    pub bytes: u64,
    pub rate: f64,
}

/// Bulk download over `conns` connections for `ramp` + `dur`. The rate counts only the bytes
/// that reached the client after `ramp`, over the time from then to the last end of stream:
/// the first moments are slow start, and on a VM whose host takes back the memory a guest
/// leaves free (free page reporting), the host's refill of the socket buffers the transfer
/// first fills (docs/benchmarks-history.md, "round 10"), which falls on whichever contender
/// is measured first after a quiet spell.
pub async fn bulk(
    addr: SocketAddr,
    hello: Arc<[u8]>,
    conns: usize,
    ramp: Duration,
    dur: Duration,
) -> io::Result<Bulk> {
    let measured_from = Instant::now() + ramp;
    let mut set = JoinSet::new();
    for _ in 0..conns {
        let hello = hello.clone();
        set.spawn(async move {
            let mut s = open(addr, &hello, DOWNLOAD).await?;
            let ms = u64::try_from((ramp + dur).as_millis()).unwrap_or(u64::MAX);
            s.write_all(&ms.to_le_bytes()).await?;
            let mut buf = vec![0u8; 256 * 1024];
            let (mut total, mut steady) = (0u64, 0u64);
            loop {
                match s.read(&mut buf).await? {
                    0 => break,
                    n => {
                        total += n as u64;
                        if Instant::now() >= measured_from {
                            steady += n as u64;
                        }
                    }
                }
            }
            io::Result::Ok((total, steady))
        });
    }
    let (mut bytes, mut steady) = (0u64, 0u64);
    while let Some(r) = set.join_next().await {
        let (t, s) = r.map_err(io::Error::other)??;
        bytes += t;
        steady += s;
    }
    let secs = Instant::now()
        .saturating_duration_since(measured_from)
        .as_secs_f64();
    Ok(Bulk {
        bytes,
        rate: steady as f64 / secs.max(1e-9),
    })
}

/// New connections per second: `concurrency` closed loops of connect, ClientHello, 16-byte
/// echo, close. Returns the rate, the connections made and the failed attempts (not counted
/// in the rate, but reported).
pub async fn conn_rate(
    addr: SocketAddr,
    hello: Arc<[u8]>,
    concurrency: usize,
    dur: Duration,
) -> io::Result<(f64, u64, u64)> {
    let start = Instant::now();
    let (ok, failed) =
        connection_loops(addr, hello, concurrency, move || start.elapsed() < dur).await?;
    Ok((ok as f64 / start.elapsed().as_secs_f64(), ok, failed))
}

/// `total` connections as [`conn_rate`] makes them (connect, ClientHello, 16-byte echo,
/// close), `concurrency` at a time: the connections made and the failed attempts.
pub async fn churn(
    addr: SocketAddr,
    hello: Arc<[u8]>,
    concurrency: usize,
    total: u64,
) -> io::Result<(u64, u64)> {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let left = Arc::new(AtomicU64::new(total));
    connection_loops(addr, hello, concurrency, move || {
        left.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
    })
    .await
}

/// `concurrency` closed loops of connect, ClientHello, 16-byte echo, close, each going on
/// while `more()` says so: the connections made and the failed attempts.
async fn connection_loops(
    addr: SocketAddr,
    hello: Arc<[u8]>,
    concurrency: usize,
    more: impl Fn() -> bool + Clone + Send + 'static,
) -> io::Result<(u64, u64)> {
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let (hello, more) = (hello.clone(), more.clone());
        set.spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut first = hello.to_vec();
            first.push(ECHO);
            first.extend_from_slice(&[7u8; 16]);
            while more() {
                let r = async {
                    let mut s = TcpStream::connect(addr).await?;
                    s.set_nodelay(true)?;
                    s.write_all(&first).await?;
                    let mut back = [0u8; 16];
                    s.read_exact(&mut back).await?;
                    io::Result::Ok(())
                }
                .await;
                match r {
                    Ok(()) => ok += 1,
                    Err(_) => failed += 1,
                }
            }
            (ok, failed)
        });
    }
    let (mut ok, mut failed) = (0u64, 0u64);
    while let Some(r) = set.join_next().await {
        let (o, f) = r.map_err(io::Error::other)?;
        ok += o;
        failed += f;
    }
    Ok((ok, failed))
}

/// Opens `n` fully established echo connections, 32 at a time.
pub async fn open_many(addr: SocketAddr, hello: Arc<[u8]>, n: usize) -> io::Result<Vec<TcpStream>> {
    let workers = 32.min(n.max(1));
    let mut set = JoinSet::new();
    for w in 0..workers {
        let hello = hello.clone();
        let mine = n / workers + usize::from(w < n % workers);
        set.spawn(async move {
            let mut v = Vec::with_capacity(mine);
            for _ in 0..mine {
                v.push(open_echo(addr, &hello).await?);
            }
            io::Result::Ok(v)
        });
    }
    let mut all = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        all.extend(r.map_err(io::Error::other)??);
    }
    Ok(all)
}

/// How many of `conns` still echo a byte within two seconds.
pub async fn alive(conns: Vec<TcpStream>) -> usize {
    let mut set = JoinSet::new();
    for mut s in conns {
        set.spawn(async move {
            matches!(
                tokio::time::timeout(Duration::from_secs(2), ping(&mut s, 1)).await,
                Ok(Ok(()))
            )
        });
    }
    let mut ok = 0;
    while let Some(r) = set.join_next().await {
        ok += usize::from(matches!(r, Ok(true)));
    }
    ok
}

/// One routed round trip; used to wait for a contender to be ready and to detect a reload.
pub async fn probe(addr: SocketAddr, hello: &[u8]) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_millis(500), open_echo(addr, hello)).await,
        Ok(Ok(_))
    )
}
