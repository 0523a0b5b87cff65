//! Files that must not kill or empty the running proxy (issue 25 point 6), against the real
//! binary: a 20 KB file nesting 10,000 levels (YAML and JSON), an emptied file, a file with
//! most routes gone. Each reload is refused and counted; the proxy keeps serving the routes it
//! had, and a later good file is applied.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::{
    client_config, http_get, metric, server_config, tls_connect, wait_until, Logged, Scratch,
    TestPki, TlsEchoServer,
};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_isthmus");
const WAIT: Duration = Duration::from_secs(20);

/// `routes` routes (`r0.example.com`, …) to the echo upstream. JSON, which is YAML too: the
/// same text serves both readers, the file name picks the reader.
fn config(upstream: SocketAddr, routes: usize) -> String {
    let routes: Vec<_> = (0..routes)
        .map(|i| serde_json::json!({"sni": format!("r{i}.example.com"), "upstream": "u"}))
        .collect();
    let v = serde_json::json!({
        "admin": {"address": "127.0.0.1:0"},
        "watch_interval": "0s",
        "listeners": [{"name": "l", "address": "127.0.0.1:0", "routes": routes}],
        "upstreams": [{"name": "u", "endpoints": [upstream.to_string()]}],
    });
    v.to_string()
}

async fn start(path: &Path) -> (Logged, SocketAddr) {
    let mut cmd = Command::new(BIN);
    cmd.args(["proxy", "--config"])
        .arg(path)
        .env("NO_COLOR", "1");
    let mut p = Logged::spawn(cmd);
    let admin = p.field("admin", WAIT).await.parse().unwrap();
    (p, admin)
}

async fn reloads(admin: SocketAddr, result: &str) -> f64 {
    let (_, body) = http_get(admin, "/metrics").await.unwrap();
    metric(
        &body,
        &format!("isthmus_proxy_config_reloads_total{{result=\"{result}\"}}"),
    )
}

async fn echo(addr: SocketAddr, pki: &TestPki, sni: &str) -> bool {
    let Ok(mut tls) = tls_connect(client_config(pki), addr, sni).await else {
        return false;
    };
    let mut buf = [0u8; 16];
    tls.write_all(b"x").await.is_ok()
        && matches!(tls.read(&mut buf).await, Ok(n) if &buf[..n] == b"up:x")
}

/// Writes `text`, sends SIGHUP and waits until the reload is counted under `result`.
async fn reload(p: &Logged, path: &Path, admin: SocketAddr, text: &str, result: &str) {
    let before = reloads(admin, result).await;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
    p.signal("HUP");
    wait_until(&format!("reload counted {result}"), WAIT, || async {
        reloads(admin, result).await > before
    })
    .await;
}

async fn refused_files_leave_the_proxy_serving(file: &str) {
    let json = file.ends_with(".json");
    let pki = TestPki::new();
    let names: Vec<String> = (0..12).map(|i| format!("r{i}.example.com")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let up = TlsEchoServer::start("up", server_config(&pki, &pki.server_cert(&names))).await;
    let dir = Scratch::new("bad-files");
    let path = dir.join(file);
    std::fs::write(&path, config(up.addr, 12)).unwrap();
    let (p, admin) = start(&path).await;
    wait_until("admin up", WAIT, || async {
        http_get(admin, "/readyz").await.is_ok()
    })
    .await;
    let (_, body) = http_get(admin, "/config").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let addr: SocketAddr = v["bound"]["l"].as_str().unwrap().parse().unwrap();
    assert!(echo(addr, &pki, "r0.example.com").await);

    // 10,000 levels in 20 KB: block sequences (`- - - …`) and flow sequences.
    let compact = format!("listeners:\n{}x\n", "- ".repeat(10_000));
    let flow = format!(
        "{{\"listeners\": {}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert!(compact.len() >= 20_000 && flow.len() >= 20_000);
    for deep in [&compact, &flow] {
        reload(&p, &path, admin, deep, "invalid").await;
        assert!(echo(addr, &pki, "r5.example.com").await, "still serving");
    }
    // An emptied file (for JSON: `{}`, an empty JSON file does not parse at all).
    let empty = if json { "{}" } else { "" };
    reload(&p, &path, admin, empty, "removal_refused").await;
    // Most routes gone.
    reload(&p, &path, admin, &config(up.addr, 3), "removal_refused").await;
    assert!(echo(addr, &pki, "r11.example.com").await, "still serving");
    let mut running = p;
    assert!(!running.exited(), "the proxy is alive");
    // A file that says so is applied.
    let mut v: serde_json::Value = serde_json::from_str(&config(up.addr, 3)).unwrap();
    v["allow_large_removal"] = true.into();
    reload(&running, &path, admin, &v.to_string(), "applied").await;
    assert!(echo(addr, &pki, "r2.example.com").await);
    assert!(!echo(addr, &pki, "r11.example.com").await, "route removed");
    assert!(!running.exited(), "the proxy is alive");
}

#[tokio::test]
async fn refused_yaml_files_leave_the_proxy_serving() {
    refused_files_leave_the_proxy_serving("proxy.yaml").await;
}

#[tokio::test]
async fn refused_json_files_leave_the_proxy_serving() {
    refused_files_leave_the_proxy_serving("proxy.json").await;
}
