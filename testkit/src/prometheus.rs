//! A real Prometheus (the pinned build, [`crate::tools::prometheus`]) on a free loopback port,
//! with a configuration the test writes, and a client for its HTTP query API.

use crate::{wait_until, Scratch};
use serde_json::Value;
use std::net::{SocketAddr, TcpListener};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// A running Prometheus; killed on drop.
#[derive(Debug)]
pub struct Prometheus {
    _child: Child,
    addr: SocketAddr,
    scratch: Scratch,
}

impl Prometheus {
    /// Starts Prometheus with `config` (its YAML; `rule_files` may name files the caller wrote
    /// into [`dir`](Self::dir) beforehand via `files`), waits until `/-/ready`. Retries on
    /// another port when the chosen one was taken in between.
    pub async fn start(config: &str, files: &[(&str, &str)]) -> Prometheus {
        let scratch = Scratch::new("prometheus");
        for (name, text) in files {
            std::fs::write(scratch.join(name), text).unwrap();
        }
        std::fs::write(scratch.join("prometheus.yml"), config).unwrap();
        for attempt in 1..=5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let log = scratch.join(&format!("prometheus.{attempt}.log"));
            let f = std::fs::File::create(&log).unwrap();
            let mut child = Command::new(crate::tools::prometheus())
                .current_dir(scratch.path())
                .arg(format!(
                    "--config.file={}",
                    scratch.join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    scratch.join(&format!("data.{attempt}")).display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .stdin(Stdio::null())
                .stdout(f.try_clone().unwrap())
                .stderr(f)
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                if matches!(get(addr, "/-/ready").await, Ok((200, _))) {
                    return Prometheus {
                        _child: child,
                        addr,
                        scratch,
                    };
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(
                    std::time::Instant::now() < deadline,
                    "prometheus not ready:\n{text}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                text.contains("address already in use") && attempt < 5,
                "prometheus exited:\n{text}"
            );
        }
        unreachable!()
    }

    /// Its scratch directory (configuration, rule files, data, log).
    pub fn dir(&self) -> &std::path::Path {
        self.scratch.path()
    }

    /// `GET /api/v1/<path>` with the query string `params`; the `data` of a `success` answer.
    pub async fn api(&self, path: &str, params: &[(&str, &str)]) -> Value {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        let target = format!("/api/v1/{path}?{}", query.join("&"));
        let (status, body) = get(self.addr, &target)
            .await
            .unwrap_or_else(|e| panic!("GET {target}: {e}"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {target}: {status}: {e}: {body}"));
        assert_eq!(v["status"], "success", "GET {target}: {body}");
        v["data"].clone()
    }

    /// An instant query's result vector.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until every scrape target is up.
    pub async fn wait_targets_up(&self, n: usize) {
        wait_until(
            "every scrape target up",
            Duration::from_secs(60),
            || async {
                let t = self.api("targets", &[("state", "active")]).await;
                let active = t["activeTargets"].as_array().cloned().unwrap_or_default();
                active.len() == n && active.iter().all(|t| t["health"] == "up")
            },
        )
        .await;
    }
}

/// HTTP/1.0 GET (so the answer is never chunked); status and body.
async fn get(addr: SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
    crate::http::exchange(
        addr,
        &format!("GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n"),
    )
    .await
}

/// Percent-encodes everything but unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
