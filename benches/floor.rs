//! The machine's floor under the peer comparison: what one system call, parking a thread and
//! one 1 KiB loopback TCP round trip cost here. Every proxy pays these per connection and per
//! message whatever its code does, so they bound what any change to isthmus (an io_uring path
//! included) could gain. See docs/benchmarks-history.md, "Issue 28, round 3".
//!
//! `cargo bench --bench floor [-- --samples N] [--gap-us MICROSECONDS]` (default 2000 samples,
//! 2000 µs apart); prints one table, writes no files. Run it on a quiet machine: the polling
//! rows keep one core busy for their whole run.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A round trip's two ends: `Read + Write` over a Unix socket pair or loopback TCP.
trait Wire: Read + Write + Send + 'static {
    fn nonblocking(&self, on: bool) -> std::io::Result<()>;
}

impl Wire for UnixStream {
    fn nonblocking(&self, on: bool) -> std::io::Result<()> {
        self.set_nonblocking(on)
    }
}

impl Wire for TcpStream {
    fn nonblocking(&self, on: bool) -> std::io::Result<()> {
        self.set_nonblocking(on)
    }
}

/// Reads exactly `buf.len()` bytes; a non-blocking socket is polled without parking.
fn read_full(s: &mut impl Wire, buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            // No `spin_loop()` (PAUSE): under a hypervisor's pause-loop exiting a run of them
            // hands the vCPU back to the host. The system call is the loop's delay.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn write_full(s: &mut impl Wire, buf: &[u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.write(&buf[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Round trips of `size` bytes between this thread and an echo thread, paced `gap` apart so
/// both threads park (and an idle vCPU halts) between them, as in the peers' `latency`
/// scenario (2 ms). `spin`: both ends poll without parking, so no round trip pays a wake-up;
/// half the difference is what parking costs per hop. With a gap the polling figure grows
/// too: this thread's own vCPU has halted during the gap and resumes slowly.
/// Returns each round trip's time in nanoseconds, sorted.
fn round_trips<W: Wire>(
    (mut here, mut there): (W, W),
    size: usize,
    spin: bool,
    samples: usize,
    gap: Duration,
) -> Vec<u64> {
    here.nonblocking(spin).unwrap();
    there.nonblocking(spin).unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; size];
        while read_full(&mut there, &mut buf).is_ok() {
            if write_full(&mut there, &buf).is_err() {
                break;
            }
        }
    });
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        std::thread::sleep(gap);
        let t = Instant::now();
        write_full(&mut here, &out).unwrap();
        read_full(&mut here, &mut back).unwrap();
        // The first exchanges pay for lazily allocated buffers.
        if i >= 20 {
            times.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
    }
    drop(here);
    echo.join().unwrap();
    times.sort_unstable();
    times
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    (a, b)
}

/// Nanoseconds per `getpid(2)` (glibc does not cache it), the cheapest real system call:
/// entry and exit, with this kernel's mitigations. Median of five passes.
fn null_syscall() -> f64 {
    let n = 2_000_000u32;
    let mut passes: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let mut x = 0u32;
            for _ in 0..n {
                x ^= std::hint::black_box(std::process::id());
            }
            std::hint::black_box(x);
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    passes.sort_by(f64::total_cmp);
    passes[2]
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() {
    let (mut samples, mut gap_us) = (2000usize, 2000u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--samples" => samples = args.next().and_then(|v| v.parse().ok()).unwrap_or(samples),
            "--gap-us" => gap_us = args.next().and_then(|v| v.parse().ok()).unwrap_or(gap_us),
            _ => {}
        }
    }
    let gap = Duration::from_micros(gap_us);
    println!("null system call (getpid): {:.0} ns", null_syscall());
    println!(
        "round trips, {samples} samples each, {} µs apart:",
        gap.as_micros()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>24}",
        "path", "p50 (us)", "p99 (us)", "parking per hop, p50 (us)"
    );
    let row = |name: &str, blocking: Vec<u64>, spinning: Vec<u64>| {
        let wake = (pct(&blocking, 0.5) - pct(&spinning, 0.5)) / 2.0;
        for (mode, t) in [("parked", &blocking), ("polling", &spinning)] {
            println!(
                "{:<34} {:>9.1} {:>9.1} {:>24}",
                format!("{name}, {mode}"),
                pct(t, 0.5),
                pct(t, 0.99),
                if mode == "parked" {
                    format!("{wake:.1}")
                } else {
                    "-".into()
                }
            );
        }
    };
    row(
        "unix socket, 1 byte",
        round_trips(UnixStream::pair().unwrap(), 1, false, samples, gap),
        round_trips(UnixStream::pair().unwrap(), 1, true, samples, gap),
    );
    row(
        "loopback TCP, 1 KiB",
        round_trips(tcp_pair(), 1024, false, samples, gap),
        round_trips(tcp_pair(), 1024, true, samples, gap),
    );
}
