//! A dial that fails for a reason of this process's own (here: no descriptor left) is counted
//! as `local` and not held against the endpoint: under descriptor pressure every endpoint used
//! to be ejected in turn (issue 47, point 8). Alone in its test binary: it fills the process's
//! descriptor table.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_testkit::TestPki;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use tokio::io::AsyncWriteExt;

const SNI: &str = "local.example.com";

/// Opens files until the descriptor table is full, and again while sockets closed by tasks
/// that ran meanwhile free more, then closes `free` of them.
async fn fill_descriptors(free: usize) -> Vec<std::fs::File> {
    let mut held = Vec::new();
    loop {
        let before = held.len();
        loop {
            match std::fs::File::open("/dev/null") {
                Ok(f) => held.push(f),
                Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if held.len() == before {
            break;
        }
        // Let aborted tasks (the hello's capture) close their sockets.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }
    held.truncate(held.len().saturating_sub(free));
    held
}

#[tokio::test]
async fn a_dial_without_descriptors_is_local_and_ejects_no_endpoint() {
    let pki = TestPki::new();
    let hello = capture_hello(&pki, SNI).await;
    let (a, b) = (RawUpstream::start("a").await, RawUpstream::start("b").await);
    let yaml = format!(
        "{}listeners:\n  - name: l\n    address: \"127.0.0.1:0\"\n    \
         routes: [ {{ sni: \"{SNI}\", upstream: u }} ]\nupstreams:\n  - name: u\n    \
         endpoints: [\"{}\", \"{}\"]\n    \
         outlier_detection: {{ consecutive_failures: 1 }}\n",
        admin_yaml(),
        a.addr,
        b.addr
    );
    let f = Fixture::start(&yaml).await;
    let addr = f.addr("l").await;
    // A limit just above the descriptors in use, so that filling the table is quick.
    let before = getrlimit(Resource::Nofile);
    let in_use = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(in_use + 64),
            maximum: before.maximum,
        },
    )
    .unwrap();
    // Two descriptors left: the client's socket and the proxy's accepted one. The upstream
    // sockets cannot be made.
    let full = fill_descriptors(2).await;
    let (_, mut client) = send_raw(addr, &hello, hello.len()).await;
    assert_eq!(
        read_to_close(&mut client).await,
        b"",
        "routed without a descriptor"
    );
    drop((full, client));
    setrlimit(Resource::Nofile, before).unwrap();
    let series = |name: &str, labels: &str| format!("isthmus_proxy_{name}{{{labels}}}");
    let local = series(
        "upstream_connect_errors_total",
        "upstream=\"u\",reason=\"local\"",
    );
    for up in [a.addr, b.addr] {
        let ep = format!("upstream=\"u\",endpoint=\"{up}\"");
        let ejected = f.metric(&series("upstream_ejected", &ep)).await;
        assert_eq!(ejected, 0.0, "{up} ejected for a failure of this process");
    }
    assert_eq!(f.metric(&local).await, 2.0, "both endpoints tried");
    // With descriptors again, the first endpoint takes the next connection.
    let (mut s, answer) = try_route("127.0.0.1", addr, &hello).await;
    assert!(
        answer.starts_with(b"a:"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    s.write_all(b"x").await.unwrap();
}
