//! The chart's monitoring against the real tools: the alert rules through `promtool check
//! rules` and `promtool test rules` (tests/monitoring/alerts.test.yaml), and every dashboard
//! query against a real Prometheus scraping a running isthmus proxy, a temporary VPN
//! (tunnel server and agent with a session and streams) and the controller (against a real
//! kube-apiserver, one migration worked on and one refused); their `--log-format json` output
//! parses line by line (what fluent-bit needs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "monitoring/controller.rs"]
mod controller;
#[path = "monitoring/tunnel.rs"]
mod tunnel;

use common::chart::{find, render};
use isthmus_testkit::tools::{promtool, run_ok};
use isthmus_testkit::{
    http_get, tls_connect, wait_until, Logged, Prometheus, Scratch, TestPki, TlsEchoServer,
};
use serde_json::Value;
use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The rendered PrometheusRule's groups as a Prometheus rule file.
fn rules_file() -> String {
    let docs = render(&[], &[]);
    let rule = find(&docs, "PrometheusRule", "isthmus");
    serde_json::to_string_pretty(&rule["spec"]).unwrap()
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = Scratch::new("alerts");
    std::fs::write(dir.join("rules.yaml"), rules_file()).unwrap();
    let tests =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/monitoring/alerts.test.yaml");
    std::fs::copy(&tests, dir.join("alerts.test.yaml")).unwrap();
    let out = run_ok(Command::new(promtool()).current_dir(dir.path()).args([
        "check",
        "rules",
        "rules.yaml",
    ]));
    assert!(out.contains("SUCCESS: 8 rules found"), "{out}");
    let out = run_ok(Command::new(promtool()).current_dir(dir.path()).args([
        "test",
        "rules",
        "alerts.test.yaml",
    ]));
    assert!(out.contains("SUCCESS"), "{out}");
}

fn proxy_config(upstream: SocketAddr) -> String {
    format!(
        "admin: {{ address: \"127.0.0.1:0\" }}\nwatch_interval: 0s\nlisteners:\n  - name: peer-2380\n    address: \"127.0.0.1:0\"\n    max_pending_hellos_per_source: 1\n    routes:\n      - {{ sni: ok.example.com, upstream: etcd-0 }}\n      - {{ sni: dead.example.com, upstream: etcd-1 }}\nupstreams:\n  - {{ name: etcd-0, endpoints: [\"{upstream}\"] }}\n  - {{ name: etcd-1, endpoints: [\"127.0.0.1:1\"] }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_series_and_logs_are_json() {
    let pki = TestPki::new();
    let echo = TlsEchoServer::start(
        "etcd-0",
        isthmus_testkit::server_config(&pki, &pki.server_cert(&["ok.example.com"])),
    )
    .await;
    let dir = Scratch::new("monitoring");
    let config = dir.join("proxy.yaml");
    std::fs::write(&config, proxy_config(echo.addr)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_isthmus"));
    cmd.args(["--log-format", "json", "proxy", "--config"])
        .arg(&config);
    let mut proxy = Logged::spawn(cmd);
    let admin: SocketAddr = proxy
        .field("admin", Duration::from_secs(30))
        .await
        .parse()
        .unwrap();
    let (_, body) = http_get(admin, "/config").await.unwrap();
    let listener: SocketAddr = serde_json::from_str::<Value>(&body).unwrap()["bound"]["peer-2380"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // Traffic for every proxy panel: a forwarded connection, an upstream that refuses, an
    // unknown name, a pending connection evicted by a second one from the same address, a
    // refused reload.
    let client = isthmus_testkit::client_config(&pki);
    let mut ok = tls_connect(client.clone(), listener, "ok.example.com")
        .await
        .unwrap();
    ok.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 64];
    let _ = ok.read(&mut buf).await.unwrap();
    assert!(tls_connect(client.clone(), listener, "dead.example.com")
        .await
        .is_err());
    assert!(tls_connect(client.clone(), listener, "nobody.example.com")
        .await
        .is_err());
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut s = std::net::TcpStream::connect(listener).unwrap();
        s.write_all(&[0x16]).unwrap();
        slow.push(s);
    }
    std::fs::write(&config, "listeners: [ {name: x} ]\n").unwrap();
    assert!(Command::new("kill")
        .args(["-HUP", &proxy.id().to_string()])
        .status()
        .unwrap()
        .success());

    // The temporary VPN: an agent session, a stream carrying bytes (kept open), a refusal.
    let tunnel = tunnel::Tunnel::start().await;
    let stream = tunnel::traffic(&tunnel, tunnel::echo().await).await;

    // The controller: leader, reconciling one migration, refusing another.
    let controller = controller::Controller::start().await;

    let prom_config = format!(
        "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\nrule_files: [rules.yaml]\nscrape_configs:\n  - job_name: isthmus-proxy\n    static_configs: [ {{ targets: [\"{admin}\"] }} ]\n  - job_name: isthmus-tunnel-server\n    static_configs: [ {{ targets: [\"{}\"] }} ]\n  - job_name: isthmus-tunnel-agent\n    static_configs: [ {{ targets: [\"{}\"] }} ]\n  - job_name: isthmus-controller\n    static_configs: [ {{ targets: [\"{}\"] }} ]\n",
        tunnel.server_admin, tunnel.agent_admin, controller.metrics
    );
    let prometheus = Prometheus::start(&prom_config, &[("rules.yaml", &rules_file())]).await;
    prometheus.wait_targets_up(4).await;

    // The rules load and evaluate without errors.
    wait_until(
        "every rule evaluated, healthy",
        Duration::from_secs(60),
        || async {
            let rules = prometheus.api("rules", &[]).await;
            let all: Vec<Value> = rules["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["rules"].as_array().unwrap().clone())
                .collect();
            all.len() == 8 && all.iter().all(|r| r["health"] == "ok")
        },
    )
    .await;

    let docs = render(&[], &[]);
    let cm = find(&docs, "ConfigMap", "isthmus-dashboard");
    let dashboard: Value =
        serde_json::from_str(cm["data"]["isthmus.json"].as_str().unwrap()).unwrap();
    let mut checked = Vec::new();
    for panel in dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
    {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            wait_until(
                &format!("series for panel {:?}: {expr}", panel["title"]),
                Duration::from_secs(90),
                || async { !prometheus.query(expr).await.is_empty() },
            )
            .await;
            checked.push(panel["title"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(checked.len(), 19, "{checked:?}");
    println!(
        "{} dashboard queries returned series: {checked:?}",
        checked.len()
    );
    drop(slow);
    drop(ok);
    drop(stream);

    // Every line the proxy logged is one JSON object with a timestamp, a level and a message.
    let _ = Command::new("kill")
        .args(["-TERM", &proxy.id().to_string()])
        .status();
    let lines = proxy.lines();
    assert!(lines.len() >= 3, "{lines:?}");
    let tunnel_lines: Vec<String> = [&tunnel.server, &tunnel.agent, &controller.process]
        .iter()
        .flat_map(|p| p.lines())
        .collect();
    assert!(tunnel_lines.len() >= 2, "{tunnel_lines:?}");
    for l in lines.iter().chain(&tunnel_lines) {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(
            v["timestamp"].is_string()
                && v["level"].is_string()
                && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("invalid") || l.contains("reload")),
        "the refused reload is logged: {lines:?}"
    );
}
