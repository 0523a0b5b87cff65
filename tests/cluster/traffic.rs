//! Clients outside the cluster (the namespace `isthmus-node-ext`): curl speaking TLS with the
//! exposed name as SNI to the load balancer's address, as etcd's clients would; a load of new
//! connections; long-lived streams (etcd watches) and how they ended.

use super::node::Node;
use super::shoot::SNI;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use super::node::POLL;

#[derive(Debug, Clone)]
pub struct Client {
    pub lb: String,
    pub ca: PathBuf,
    /// The client certificate and key etcd requires.
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Client {
    fn curl(&self, node: &Node, source: Option<&str>, timeout_s: u32) -> Command {
        let mut c = node.outside();
        c.args(["curl", "-sS", "--max-time", &timeout_s.to_string()])
            .arg("--cacert")
            .arg(&self.ca)
            .arg("--cert")
            .arg(&self.cert)
            .arg("--key")
            .arg(&self.key)
            .args(["--resolve", &format!("{SNI}:2379:{}", self.lb)]);
        if let Some(s) = source {
            c.args(["--interface", s]);
        }
        c
    }

    /// One request to etcd's `/health` through the proxy: `Ok(body)` or the error.
    pub fn health(&self, node: &Node, source: Option<&str>) -> Result<String, String> {
        let out = self
            .curl(node, source, 5)
            .arg(format!("https://{SNI}:2379/health"))
            .output()
            .map_err(|e| e.to_string())?;
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && body.contains("\"health\":\"true\"") {
            Ok(body)
        } else {
            Err(format!(
                "curl exit {:?}: {}{}",
                out.status.code(),
                body,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// etcd's member list through the proxy (the JSON gateway): each member's peer URLs.
    pub fn peer_urls(&self, node: &Node) -> Result<Vec<String>, String> {
        let out = self
            .curl(node, None, 5)
            .args(["-X", "POST", "-d", "{}"])
            .arg(format!("https://{SNI}:2379/v3/cluster/member/list"))
            .output()
            .map_err(|e| e.to_string())?;
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        let list: serde_json::Value = serde_json::from_str(&body).map_err(|e| {
            format!(
                "curl exit {:?}: {body}{} ({e})",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        let urls = list["members"]
            .as_array()
            .ok_or(body.clone())?
            .iter()
            .flat_map(|m| m["peerURLs"].as_array().cloned().unwrap_or_default())
            .filter_map(|u| u.as_str().map(str::to_owned))
            .collect();
        Ok(urls)
    }

    /// An etcd watch held open through the proxy (etcd's JSON gateway streams the events).
    pub fn watch(&self, node: &Node) -> Watch {
        let child = self
            .curl(node, None, 600)
            .args([
                "-N",
                "-X",
                "POST",
                "-d",
                r#"{"create_request":{"key":"Zm9v"}}"#,
            ])
            .arg(format!("https://{SNI}:2379/v3/watch"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Watch { child }
    }
}

#[derive(Debug)]
pub struct Watch {
    child: Child,
}

/// How a long-lived connection ended.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Ended {
    /// Still open.
    Open,
    /// Closed in order by the proxy's drain (FIN: curl 18, transfer closed mid-stream).
    Drained,
    /// Reset (curl 56) or any other failure.
    Failed(i32),
}

impl Watch {
    pub fn ended(&mut self) -> Ended {
        match self.child.try_wait().unwrap() {
            None => Ended::Open,
            Some(s) => match s.code() {
                Some(0 | 18) => Ended::Drained,
                Some(c) => Ended::Failed(c),
                None => Ended::Failed(-1),
            },
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// New connections, one after another on `workers` threads, until stopped.
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    pub attempted: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    pub errors: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(client: &Client, workers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let attempted = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..workers)
            .map(|_| {
                let (stop, attempted, failed, errors) = (
                    stop.clone(),
                    attempted.clone(),
                    failed.clone(),
                    errors.clone(),
                );
                let client = client.clone();
                std::thread::spawn(move || {
                    let node = Node::handle();
                    while !stop.load(Ordering::Relaxed) {
                        attempted.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = client.health(&node, None) {
                            failed.fetch_add(1, Ordering::Relaxed);
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("ended {} UTC: {e}", utc_now()));
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            attempted,
            failed,
            errors,
            threads,
        }
    }

    /// Stops and returns (attempted, failed, first errors).
    pub fn stop(self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let errors = self
            .errors
            .lock()
            .unwrap()
            .iter()
            .take(5)
            .cloned()
            .collect();
        (
            self.attempted.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            errors,
        )
    }
}

/// Now as `HH:MM:SS.mmm` UTC, to set a failure beside the pods' and the node's times.
pub fn utc_now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let s = t.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        t.subsec_millis()
    )
}
