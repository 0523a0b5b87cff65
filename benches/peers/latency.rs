//! The `latency` scenario's load: 1 KiB ping-pong on `conns` connections to every contender
//! at once, each connection paced at `rate` round trips per second (well below saturation),
//! the contenders taking turns of [`TURN`] until each has had its time.
//!
//! Why turns: one contender measured for seconds and then the next saw different moments of
//! the machine. On this VM the direct path's per-round median moved between 17 and 43 µs and
//! a contender's between 59 and 115 µs from one round to the next, so one 5-round run put
//! isthmus anywhere from 0.63× to 1.18× the best peer. Turns of 100 ms spread every contender
//! over the same moments; the direct path takes its turns too, so what each proxy adds is read
//! against the same moments as well.
//!
//! Each connection is driven by its own thread with blocking I/O, and the upstream echoes from
//! its own blocking thread too: an async runtime on either end added more (and more variable)
//! delay than the proxies themselves (the direct path measured 80–100 µs through tokio, about
//! 35 µs this way). A connection's pings are phased evenly against the others' of its
//! contender (connection i starts i/conns of a period later), so every contender sees the same
//! mix of lone and overlapping messages. Timed from the actual send, so a late wake-up of the
//! pacing sleep does not count; the first round trip of each turn is not counted (it follows
//! the other contenders' turns, not a period of its own).

use crate::report::percentile;
use crate::upstream::LATENCY_ECHO;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one contender's connections ping before the next contender's do.
pub const TURN: Duration = Duration::from_millis(100);

/// What one contender's connections measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// Every counted round trip, in nanoseconds.
    pub samples: Vec<u64>,
    /// The turn of each sample (0 = the contender's first), in the order of `samples`.
    pub turns: Vec<u32>,
    /// Round trips made, counted or not (for CPU per round trip).
    pub pings: u64,
}

impl Measured {
    /// Each turn's p99 in nanoseconds, in the order of the turns (the turns' median and worst
    /// show whether the tail is spread over the run or comes from a few moments of it).
    pub fn turn_p99s(&self) -> Vec<u64> {
        let mut by_turn: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (&s, &t) in self.samples.iter().zip(&self.turns) {
            by_turn.entry(t).or_default().push(s);
        }
        by_turn
            .into_values()
            .map(|mut v| {
                v.sort_unstable();
                percentile(&v, 99.0) as u64
            })
            .collect()
    }
}

/// One turn of a connection: ping from `start` until `end`, then say so on `done`.
struct Turn {
    index: u32,
    start: Instant,
    end: Instant,
    done: mpsc::Sender<()>,
}

/// A connection's thread and the way to give it turns.
struct Pinger {
    turns: mpsc::Sender<Turn>,
    thread: JoinHandle<io::Result<Measured>>,
}

/// Runs the scenario against every address in `addrs` (in this order within each round of
/// turns) for `each` per contender; one [`Measured`] per address.
pub async fn interleaved(
    addrs: Vec<SocketAddr>,
    hello: Arc<[u8]>,
    conns: usize,
    rate: u32,
    each: Duration,
) -> io::Result<Vec<Measured>> {
    tokio::task::spawn_blocking(move || {
        let period = Duration::from_secs(1) / rate;
        let pingers: Vec<Vec<Pinger>> = addrs
            .iter()
            .map(|&addr| {
                (0..conns)
                    .map(|i| {
                        let (turns, rx) = mpsc::channel();
                        let hello = hello.clone();
                        let phase = period * u32::try_from(i).unwrap_or(0)
                            / u32::try_from(conns).unwrap_or(1);
                        let thread =
                            std::thread::spawn(move || pings(addr, &hello, period, phase, &rx));
                        Pinger { turns, thread }
                    })
                    .collect()
            })
            .collect();
        let turns = (each.as_nanos() / TURN.as_nanos()).max(1);
        let driven = drive(&pingers, &addrs, turns);
        // Closing the turn channels ends every thread, failed or not.
        let threads: Vec<Vec<_>> = pingers
            .into_iter()
            .map(|ps| ps.into_iter().map(|p| p.thread).collect())
            .collect();
        let mut out = Vec::new();
        for (addr, ts) in addrs.iter().zip(threads) {
            let mut m = Measured::default();
            for t in ts {
                let one = t
                    .join()
                    .map_err(|_| io::Error::other("latency thread panicked"))?
                    .map_err(|e| io::Error::new(e.kind(), format!("{addr}: {e}")))?;
                m.samples.extend(one.samples);
                m.turns.extend(one.turns);
                m.pings += one.pings;
            }
            out.push(m);
        }
        driven.map(|()| out)
    })
    .await
    .map_err(io::Error::other)?
}

/// Gives every contender's connections `turns` turns, one contender at a time.
fn drive(pingers: &[Vec<Pinger>], addrs: &[SocketAddr], turns: u128) -> io::Result<()> {
    let (done, finished) = mpsc::channel();
    for index in 0..u32::try_from(turns).unwrap_or(u32::MAX) {
        for (ps, addr) in pingers.iter().zip(addrs) {
            let start = Instant::now();
            let end = start + TURN;
            for p in ps {
                let turn = Turn {
                    index,
                    start,
                    end,
                    done: done.clone(),
                };
                // A thread that failed has dropped its receiver; its error comes with join.
                p.turns
                    .send(turn)
                    .map_err(|_| io::Error::other(format!("{addr}: a connection failed")))?;
            }
            for _ in ps {
                // The threads' reads time out after 5 s, so a turn never takes longer.
                finished
                    .recv_timeout(TURN + Duration::from_secs(10))
                    .map_err(|_| io::Error::other(format!("{addr}: a connection failed")))?;
            }
        }
    }
    Ok(())
}

/// One connection: warm-up, then a turn whenever one comes, until the turns end.
fn pings(
    addr: SocketAddr,
    hello: &[u8],
    period: Duration,
    phase: Duration,
    turns: &mpsc::Receiver<Turn>,
) -> io::Result<Measured> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut first = hello.to_vec();
    first.push(LATENCY_ECHO);
    s.write_all(&first)?;
    let out = [0x5au8; 1024];
    let mut back = [0u8; 1024];
    let mut ping = |s: &mut TcpStream| -> io::Result<u64> {
        let t = Instant::now();
        s.write_all(&out)?;
        s.read_exact(&mut back)?;
        let took = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if back != out {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not an echo"));
        }
        Ok(took)
    };
    // Warm-up: the first exchanges pay for lazily allocated buffers everywhere.
    for _ in 0..10 {
        ping(&mut s)?;
    }
    let mut m = Measured::default();
    while let Ok(turn) = turns.recv() {
        let mut next = turn.start + phase;
        let mut counted = false;
        while next < turn.end {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let took = ping(&mut s)?;
            m.pings += 1;
            if counted {
                m.samples.push(took);
                m.turns.push(turn.index);
            }
            counted = true;
            next += period;
        }
        let _ = turn.done.send(());
    }
    Ok(m)
}
