//! The `isthmus` binary as an operator runs it: `check-config`, and `proxy` with real signals;
//! its subcommands and `--help`; what it links (the image's binary carries no lab).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::{
    client_config, http_get, server_config, tls_connect, wait_draining, wait_until, Logged,
    Scratch, TestPki, TlsEchoServer,
};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_isthmus");
const WAIT: Duration = Duration::from_secs(15);

#[test]
fn check_config_prints_every_error_and_exits_non_zero() {
    let dir = Scratch::new("cli");
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "listeners:\n  - name: a\n    address: \"0.0.0.0:2380\"\n    routes: [ { sni: x.example.com, upstream: nope } ]\n    default_upstream: gone\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = bad.display();
    assert!(
        err.contains(&format!(
            "{file}:4:47: listeners[0].routes[0].upstream: no upstream named \"nope\""
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:5:23: listeners[0].default_upstream: no upstream named \"gone\""
        )),
        "{err}"
    );

    let good = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/proxy.yaml");
    let out = Command::new(BIN)
        .args(["check-config", good])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok: 5 listeners, 5 routes, 5 upstreams"));

    let out = Command::new(BIN)
        .args(["check-config"])
        .arg(dir.join("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn subcommands_are_the_production_ones_and_help_shows_no_implementation_notes() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in [
        "proxy",
        "tunnel-server",
        "tunnel-agent",
        "check-config",
        "controller",
    ] {
        assert!(
            help.contains(&format!("  {sub} ")),
            "{sub} missing:\n{help}"
        );
    }
    // The lab is its own binary (`isthmus-lab demo`).
    assert!(!help.contains("demo"), "{help}");
    let out = Command::new(BIN).arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let out = Command::new(BIN)
        .args(["controller", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.starts_with("Run the live-migration controller"),
        "{help}"
    );
    assert!(!help.contains("Boxed"), "{help}");
}

/// `isthmus controller ARGS` with no cluster to ask: asserts that it stops at start; its
/// standard error.
fn controller_refuses(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("controller")
        .args(args)
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Issue 47 point 1: flags that would make every rendered file unloadable (the VPN listener on
/// the admin port or on a member listener, a port below 1024) stop the controller at start,
/// naming the flags, before it talks to any cluster.
#[test]
fn controller_refuses_a_layout_no_proxy_could_bind() {
    for (args, want) in [
        (&["--vpn-port", "9901"][..], "admin port"),
        (&["--vpn-port", "2380"][..], "is already used by listener"),
        (&["--vpn-port", "443"][..], "below 1024"),
        (&["--proxy-admin-port", "8443"][..], "admin port"),
    ] {
        let err = controller_refuses(args);
        assert!(
            err.contains("--members, --vpn-port and --proxy-admin-port") && err.contains(want),
            "{args:?}: {err}"
        );
    }
}

/// Issue 46: the proxies' listen address must be a wildcard (the controller reads each pod's
/// `/config` at the pod's own IP) and the namespace labels `KEY=VALUE`; both stop the start,
/// naming the flag, before any cluster is asked.
#[test]
fn controller_refuses_a_listen_address_and_namespace_labels_it_cannot_use() {
    for (args, want) in [
        (
            &["--listen-address", "127.0.0.1"][..],
            "--listen-address: 127.0.0.1 is not a wildcard",
        ),
        (
            &["--listen-address", "::1"][..],
            "--listen-address: ::1 is not a wildcard",
        ),
        (
            &["--proxy-namespace-labels", "isthmus"][..],
            "--proxy-namespace-labels",
        ),
        (&["--proxy-namespace-labels", "=x"][..], "want KEY=VALUE"),
    ] {
        let err = controller_refuses(args);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Issue 47 point 7: a PROXY header names any client, so only the load balancer's ranges may
/// send one; a catch-all `--trusted-proxies` stops the start.
#[test]
fn controller_refuses_to_trust_every_address_with_proxy_headers() {
    for all in ["0.0.0.0/0", "10.250.0.0/16,::/0"] {
        let err = controller_refuses(&["--trusted-proxies", all]);
        assert!(
            err.contains("--trusted-proxies") && err.contains("trusts every address"),
            "{all}: {err}"
        );
    }
}

/// The image's binary must not link the lab, the seed world's stand-ins or their etcd client
/// (tonic, prost), and must build without protoc: `cargo tree -p isthmus` over normal and build
/// dependencies names none of them.
#[test]
fn isthmus_links_no_lab_etcd_client_tonic_or_prost() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "-p", "isthmus", "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
    // Not vacuous: the tree is the binary's.
    assert!(names.contains(&"isthmus-proxy"), "{tree}");
    let banned: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| {
            [
                "isthmus-lab",
                "isthmus-seed-world",
                "etcd-client",
                "tonic",
                "prost",
                "protoc",
            ]
            .iter()
            .any(|b| n == b || n.starts_with(&format!("{b}-")))
        })
        .collect();
    assert!(banned.is_empty(), "isthmus depends on {banned:?}:\n{tree}");
}

async fn bound(admin: SocketAddr, listener: &str) -> SocketAddr {
    let (_, body) = http_get(admin, "/config").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["bound"][listener].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn proxy_reloads_on_sighup_and_drains_on_sigterm() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com", "b.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let dir = Scratch::new("cli-proxy");
    let config = |sni: &str| {
        format!(
            "admin: {{ address: \"127.0.0.1:0\" }}\ndrain_delay: 300ms\ndrain_timeout: 20s\nwatch_interval: 0s\n\
             listeners:\n  - name: l\n    address: \"127.0.0.1:0\"\n    routes: [ {{ sni: \"{sni}\", upstream: u }} ]\n\
             upstreams:\n  - {{ name: u, endpoints: [\"{}\"] }}\n",
            up.addr
        )
    };
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, config("a.example.com")).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["proxy", "--config"])
        .arg(&path)
        .env("NO_COLOR", "1");
    let mut p = Logged::spawn(cmd);
    let admin: SocketAddr = p.field("admin", WAIT).await.parse().unwrap();
    wait_until("admin up", WAIT, || async {
        http_get(admin, "/readyz").await.is_ok()
    })
    .await;
    let addr = bound(admin, "l").await;
    let mut tls = tls_connect(client_config(&pki), addr, "a.example.com")
        .await
        .unwrap();

    std::fs::write(&path, config("b.example.com")).unwrap();
    p.signal("HUP");
    wait_until("SIGHUP reload", WAIT, || async {
        tls_connect(client_config(&pki), addr, "b.example.com")
            .await
            .is_ok()
    })
    .await;

    p.signal("TERM");
    wait_draining(admin, addr, WAIT).await;
    // The connection opened before the reload and the drain still works.
    tls.write_all(b"draining").await.unwrap();
    let mut buf = [0u8; 32];
    let n = tls.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"up:draining");
    assert!(!p.exited(), "must wait for the open connection");
    tls.shutdown().await.unwrap();
    drop(tls);
    let status = p.exit_status(WAIT).await;
    assert!(status.success(), "exit status {status}");
}

/// Out of file descriptors (EMFILE), the accept loop backs off instead of spinning, counts
/// the errors, and serves again once descriptors are free.
#[tokio::test]
async fn accept_backs_off_on_emfile_and_recovers() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let dir = Scratch::new("cli-emfile");
    let path = dir.join("proxy.yaml");
    std::fs::write(
        &path,
        format!(
            "admin: {{ address: \"127.0.0.1:0\" }}\nwatch_interval: 0s\nlisteners:\n  - name: l\n    address: \"127.0.0.1:0\"\n    routes: [ {{ sni: \"a.example.com\", upstream: u }} ]\nupstreams:\n  - {{ name: u, endpoints: [\"{}\"] }}\n",
            up.addr
        ),
    )
    .unwrap();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec {BIN} proxy --threads 1 --config {}",
            path.display()
        ))
        .env("NO_COLOR", "1");
    let mut p = Logged::spawn(cmd);
    let admin: SocketAddr = p.field("admin", WAIT).await.parse().unwrap();
    let addr = bound(admin, "l").await;
    // Far more idle connections than descriptors, queued while the proxy is stopped: the
    // kernel completes the handshakes, and once it runs again its accept loop drains the
    // queue in one go (the connections over the cap are closed by tasks that run only when
    // the loop yields), so accept(2) fails with EMFILE once its table is full. Without the
    // stop, whether the table fills depends on how fast this client connects (seen: 119
    // connections refused and 0 EMFILE in one CI run).
    p.signal("STOP");
    let mut idle = Vec::new();
    for _ in 0..300 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        // One byte of a ClientHello: past TCP_DEFER_ACCEPT, the proxy must accept it.
        let _ = s.write_all(&[0x16]).await;
        idle.push(s);
    }
    p.signal("CONT");
    // Stay saturated for a while: the condition under test, not a synchronisation.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The admin keeps answering while the listener's descriptors are exhausted (the proxy
    // keeps descriptors in reserve for it by clamping max_connections).
    wait_until(
        "/readyz answers while the listener is saturated",
        WAIT,
        || async { matches!(http_get(admin, "/readyz").await, Ok((200, _))) },
    )
    .await;
    drop(idle);
    wait_until("proxy serves again", WAIT, || async {
        tls_connect(client_config(&pki), addr, "a.example.com")
            .await
            .is_ok()
    })
    .await;
    let (_, metrics) = http_get(admin, "/metrics").await.unwrap();
    let errors = isthmus_testkit::metric(
        &metrics,
        "isthmus_proxy_accept_errors_total{listener=\"l\"}",
    );
    assert!(errors >= 1.0, "EMFILE must be counted:\n{metrics}");
    // A busy loop would fail accept(2) hundreds of thousands of times in half a second; the
    // 50 ms backoff allows a handful.
    assert!(errors < 1000.0, "accept loop spun: {errors} errors");
    drop(p);
}
