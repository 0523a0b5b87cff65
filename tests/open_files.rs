//! The open-files budget with splice pipes (issue 25 point 7): bulk flows whose readers stall
//! each hold a pipe (two descriptors) besides their two sockets. The binary runs with a low
//! `nofile` limit, takes as many connections as its effective cap allows, and every one of
//! them stalls both ways with bytes in flight; the admin endpoint must keep its descriptors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::{http_get, metric, wait_until, Logged, Scratch, TestPki};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const BIN: &str = env!("CARGO_BIN_EXE_isthmus");
const WAIT: Duration = Duration::from_secs(30);
const LIMIT: usize = 256;
const ADMIN_CONNECTIONS: usize = 8;

/// `(all, pipes)`: descriptors the process holds, and how many of them are pipes.
fn descriptors(pid: u32) -> (usize, usize) {
    let mut all = 0;
    let mut pipes = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        all += 1;
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        if target.to_string_lossy().starts_with("pipe:") {
            pipes += 1;
        }
    }
    (all, pipes)
}

fn client_hello(sni: &str) -> Vec<u8> {
    let pki = TestPki::new();
    let config = pki.client_config(None, &[]);
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

/// Writes 1 MiB chunks until the peer stops taking them; counts itself in `stalled` once a
/// write would block (nobody reads the other end, so it stays blocked).
fn write_until_stalled(mut s: tokio::net::tcp::OwnedWriteHalf, stalled: Arc<AtomicUsize>) {
    tokio::spawn(async move {
        let chunk = vec![0x17u8; 1 << 20];
        let mut counted = false;
        loop {
            match s.try_write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !counted {
                        counted = true;
                        stalled.fetch_add(1, Ordering::SeqCst);
                    }
                    // Held open; a write that gets through again would be a bug in the test.
                    let _ = s.write_all(&chunk).await;
                }
                Err(_) => return,
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bulk_flows_leave_the_admin_its_descriptors() {
    // The upstream: takes connections, sends bulk, never reads.
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = upstream.local_addr().unwrap();
    let stalled = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut held = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<TcpStream>();
    {
        let accepted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = upstream.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(s);
            }
        });
    }
    let dir = Scratch::new("open-files");
    let path = dir.join("proxy.yaml");
    std::fs::write(
        &path,
        format!(
            "admin: {{ address: \"127.0.0.1:0\", limits: {{ max_connections: {ADMIN_CONNECTIONS} }} }}\n\
             watch_interval: 0s\nlisteners:\n  - name: l\n    address: \"127.0.0.1:0\"\n    \
             routes: [ {{ sni: \"a.example.com\", upstream: u }} ]\nupstreams:\n  - {{ name: u, endpoints: [\"{up_addr}\"] }}\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -n {LIMIT} && exec {BIN} proxy --threads 1 --config {}",
            path.display()
        ))
        .env("NO_COLOR", "1");
    let mut proxy = Logged::spawn(cmd);
    let admin: SocketAddr = proxy.field("admin", WAIT).await.parse().unwrap();
    let pid = proxy.id();
    let (_, text) = http_get(admin, "/metrics").await.unwrap();
    let cap = metric(&text, "isthmus_proxy_max_connections_effective") as usize;
    let (_, body) = http_get(admin, "/config").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let listener: SocketAddr = v["bound"]["l"].as_str().unwrap().parse().unwrap();

    // As many connections as the cap allows, each routed with its hello...
    let hello = client_hello("a.example.com");
    let mut clients = Vec::new();
    for _ in 0..cap {
        let mut s = TcpStream::connect(listener).await.unwrap();
        s.write_all(&hello).await.unwrap();
        clients.push(s);
    }
    wait_until("every connection reached the upstream", WAIT, || async {
        accepted.load(Ordering::SeqCst) == cap
    })
    .await;
    // ...then bulk both ways, read by nobody, until every writer is blocked: each flow then
    // holds what it could not pass on (a pipe, when it got one).
    for s in clients {
        let (r, w) = s.into_split();
        held.push(r);
        write_until_stalled(w, stalled.clone());
    }
    for _ in 0..cap {
        let s = rx.recv().await.unwrap();
        let (r, w) = s.into_split();
        held.push(r);
        write_until_stalled(w, stalled.clone());
    }
    wait_until("every flow is stalled both ways", WAIT, || async {
        stalled.load(Ordering::SeqCst) == 2 * cap
    })
    .await;
    let (open, pipes) = descriptors(pid);
    println!(
        "nofile {LIMIT}: {cap} connections stalled both ways; the proxy holds {open} descriptors, \
         {pipes} of them pipes"
    );
    // The admin endpoint's connections still fit, and it answers.
    assert!(
        open + ADMIN_CONNECTIONS <= LIMIT,
        "{open} descriptors open of {LIMIT}: no room for {ADMIN_CONNECTIONS} admin connections"
    );
    assert!(
        pipes >= 8,
        "no splice pipe in use ({pipes} pipe descriptors)"
    );
    for _ in 0..ADMIN_CONNECTIONS {
        let (status, _) = tokio::time::timeout(WAIT, http_get(admin, "/readyz"))
            .await
            .expect("/readyz answers")
            .unwrap();
        assert_eq!(status, 200);
    }
    drop(held);
    drop(proxy);
}
