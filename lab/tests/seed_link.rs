//! `isthmus-lab link` as `scripts/cluster.sh link up` runs it, in small and without a node:
//! three namespaces stand for seed a's outside, seed b's outside and the link between them,
//! plumbed as scripts/cluster/link.sh plumbs them (routes into the link namespace, which
//! forwards nothing and redirects TCP to the emulator). Shown: a connection from a to an
//! address of b is answered only through the emulator (none before it starts), a cut resets
//! it, a restore brings it back, a connection dialled to the relay itself is refused rather
//! than looped. The round trip at `--rtt 50ms` is printed as a figure. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::Netns;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Inside the link namespace only (as in link.sh): nothing else listens there.
const RELAY_PORT: &str = "15001";
/// Seed b's "server": an echo on its outside's address (a private namespace: no clash).
const ECHO: &str = "10.221.0.1:7000";

fn ip(ns: &Netns, args: &str) {
    let out = ns.command("ip").args(args.split(' ')).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn listening(ns: &Netns, port: &str) -> bool {
    let out = ns
        .command("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .unwrap();
    !out.stdout.is_empty()
}

/// Polls until `ok`, at most 10 s.
fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not after 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One line sent from namespace `from` to `to` by socat; the answer, or `None`.
fn echo(from: &Netns, to: &str) -> Option<String> {
    let mut c = from
        .command("socat")
        .args(["-t", "5", "-", &format!("TCP:{to}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A refused connection ends socat before the line is written: a broken pipe here is the
    // `None` the caller may expect, which the exit status below reports.
    let _ = c.stdin.take().unwrap().write_all(b"ping\n");
    let out = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_link_carries_tcp_between_outsides_and_only_through_the_emulator() {
    let (a, b) = (Netns::new("lka").unwrap(), Netns::new("lkb").unwrap());
    let link = Netns::new("lk").unwrap();
    link.link(&a, "10.220.2.2/30", "10.220.2.1/30").unwrap();
    link.link(&b, "10.221.2.2/30", "10.221.2.1/30").unwrap();
    ip(&a, "route add 10.221.0.0/16 via 10.220.2.2");
    ip(&b, "route add 10.220.0.0/16 via 10.221.2.2");
    ip(&b, "addr add 10.221.0.1/24 dev lo");
    ip(&link, "route add 10.221.0.0/16 via 10.221.2.1");
    ip(&link, "route add 10.220.0.0/16 via 10.220.2.1");
    let rule = format!(
        "table ip isthmus-link {{\n chain prerouting {{\n  type nat hook prerouting priority dstnat;\n  \
         meta l4proto tcp fib daddr type != local redirect to :{RELAY_PORT}\n }}\n}}\n"
    );
    let mut nft = link
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    nft.stdin
        .take()
        .unwrap()
        .write_all(rule.as_bytes())
        .unwrap();
    let nft = nft.wait_with_output().unwrap();
    assert!(
        nft.status.success(),
        "{}",
        String::from_utf8_lossy(&nft.stderr)
    );
    let _echo = Killed(
        b.command("socat")
            .args(["TCP-LISTEN:7000,bind=10.221.0.1,fork,reuseaddr", "EXEC:cat"])
            .spawn()
            .unwrap(),
    );
    wait("the echo in b", || listening(&b, "7000"));
    assert_eq!(echo(&a, ECHO), None, "b answered with no emulator running");

    let emulator = Killed(
        link.command(env!("CARGO_BIN_EXE_isthmus-lab"))
            .args([
                "link",
                "--rtt",
                "50ms",
                "--listen",
                &format!("0.0.0.0:{RELAY_PORT}"),
            ])
            .spawn()
            .unwrap(),
    );
    wait("the emulator", || listening(&link, RELAY_PORT));
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(
            echo(&a, ECHO).as_deref(),
            Some("ping\n"),
            "b's echo through the link"
        );
        rounds.push(t.elapsed());
    }
    println!(
        "figure: echo from a's outside to b's through isthmus-lab link --rtt 50ms, one socat \
         process per connection (its start included): p50 {:.1?} max {:.1?}",
        isthmus_testkit::percentile(&rounds, 50.0),
        isthmus_testkit::percentile(&rounds, 100.0)
    );
    assert_eq!(
        echo(&a, &format!("10.220.2.2:{RELAY_PORT}")),
        None,
        "the relay dialled itself"
    );

    let signal = |s: &str| {
        let pid = emulator.0.id().to_string();
        assert!(Command::new("kill")
            .args([s, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-USR1");
    wait("the cut", || echo(&a, ECHO).is_none());
    signal("-USR2");
    wait("the restore", || echo(&a, ECHO).is_some());
    drop(emulator);
    assert_eq!(echo(&a, ECHO), None, "b answered with the emulator gone");
}
