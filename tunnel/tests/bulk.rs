//! Bulk streams arrive whole and in order, both ways. A bulk direction reads into a few buffers
//! that take turns while `h2` still holds parts of the earlier reads (`src/pipe/up.rs`), so a
//! buffer taken back too early would overwrite bytes still in flight. Each stream here carries
//! a pattern that no repeated, dropped or shifted read reproduces, through a target that echoes
//! it, several streams at once on one session, and every byte is checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Bytes each stream sends (and gets back): many bulk reads of 256 KiB on both ends.
const BYTES: usize = 16 << 20;
const STREAMS: u64 = 3;

/// The pattern: xorshift64 from a per-stream seed, one byte after the other, so the bytes at
/// each offset of each stream differ whatever the sizes of the reads and writes.
struct Pattern {
    state: u64,
    word: [u8; 8],
    used: usize,
}

impl Pattern {
    fn new(seed: u64) -> Self {
        Self {
            state: seed,
            word: [0; 8],
            used: 8,
        }
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            if self.used == 8 {
                self.state ^= self.state << 13;
                self.state ^= self.state >> 7;
                self.state ^= self.state << 17;
                self.word = self.state.to_le_bytes();
                self.used = 0;
            }
            *b = self.word[self.used];
            self.used += 1;
        }
    }
}

/// A target that writes back what it reads until the reader's end of file, then closes.
async fn start_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = tcp.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

/// Sends the stream's pattern in chunks of an odd size (no read lines up with them), reads the
/// echo to its end, and says where it first differed, if anywhere.
async fn carry(world: Arc<World>, addr: ConnectAddr, target: SocketAddr, seed: u64) -> String {
    let io = connect(&addr, Some(world.apiserver_tls()), &target.to_string())
        .await
        .unwrap();
    let (mut r, mut w) = tokio::io::split(io);
    let writer = tokio::spawn(async move {
        let mut pattern = Pattern::new(seed);
        let mut chunk = vec![0u8; 100_003];
        let mut left = BYTES;
        while left > 0 {
            let n = left.min(chunk.len());
            pattern.fill(&mut chunk[..n]);
            w.write_all(&chunk[..n]).await.unwrap();
            left -= n;
        }
        w.shutdown().await.unwrap();
        w
    });
    let mut expected = Pattern::new(seed);
    let (mut got, mut want) = (vec![0u8; 70_001], vec![0u8; 70_001]);
    let mut at = 0;
    let mut first_difference = None;
    loop {
        let n = r.read(&mut got).await.unwrap();
        if n == 0 {
            break;
        }
        expected.fill(&mut want[..n]);
        if first_difference.is_none() && got[..n] != want[..n] {
            let i = (0..n).find(|&i| got[i] != want[i]).unwrap_or(0);
            first_difference = Some(at + i);
        }
        at += n;
    }
    let _w = writer.await.unwrap();
    match first_difference {
        Some(i) => format!("stream {seed}: {at} bytes back, the first wrong at offset {i}"),
        None if at != BYTES => format!("stream {seed}: {at} of {BYTES} bytes back"),
        None => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_streams_arrive_whole_both_ways() {
    let world = Arc::new(World::new());
    let echo = start_echo().await;
    let server = TestServer::start(world.server_options(true), None, None).await;
    let resolver = SwitchResolver::new(vec![server.agents]);
    let agent = TestAgent::start(world.agent_options(
        vec![entry("vpn.test:443")],
        resolver,
        &["127.0.0.0/8"],
    ));
    live(&server.server, 1, "the agent session is live").await;
    let addr = ConnectAddr::Tcp(server.connect);
    let streams: Vec<_> = (1..=STREAMS)
        .map(|seed| tokio::spawn(carry(world.clone(), addr.clone(), echo, seed)))
        .collect();
    let mut wrong = Vec::new();
    for s in streams {
        let r = s.await.unwrap();
        if !r.is_empty() {
            wrong.push(r);
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
    let moved = format!(
        "isthmus_tunnel_bytes_total{{direction=\"to_target\"}} {}",
        STREAMS as usize * BYTES
    );
    assert!(
        server.metrics().contains(&moved),
        "the server's byte counter does not say {moved}:\n{}",
        server.metrics()
    );
    agent.stop().await;
    server.stop().await;
}
