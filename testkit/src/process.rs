//! A process under test whose log is kept: its stderr is read line by line on a thread of its
//! own (so a chatty child never blocks on a full pipe), every line is kept for assertions and
//! failure messages, and the process is killed when the handle is dropped.

use serde_json::Value;
use std::io::BufRead;
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running child with its stderr lines collected; killed and reaped on drop.
#[derive(Debug)]
pub struct Logged {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    /// Spawns `cmd` with stderr piped; panics if it cannot start.
    pub fn spawn(mut cmd: Command) -> Logged {
        let mut child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stderr = child.stderr.take().expect("stderr was piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap().push(l);
            }
        });
        Logged { child, lines }
    }

    /// The lines logged so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The process's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.try_wait().is_some()
    }

    /// Sends `signal` (a name `kill -s` knows: `HUP`, `TERM`, `STOP`, …).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -s {signal} {pid}");
    }

    /// Waits for the process to exit; panics with the log after `timeout`.
    pub async fn exit_status(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_wait() {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running after {timeout:?}:\n{}",
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The first value of `field` the process logs: `fields.<field>` of a JSON line
    /// (`--log-format json`) or `field=<value>` in a text line (take `NO_COLOR=1`). Panics with
    /// the log after `timeout` or when the process exits first.
    pub async fn field(&mut self, field: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        let key = format!("{field}=");
        loop {
            let found =
                self.lines.lock().unwrap().iter().find_map(|l| {
                    match serde_json::from_str::<Value>(l) {
                        Ok(v) => v["fields"][field].as_str().map(str::to_owned),
                        Err(_) => l
                            .split_whitespace()
                            .find_map(|w| w.strip_prefix(&key))
                            .map(str::to_owned),
                    }
                });
            if let Some(v) = found {
                return v;
            }
            assert!(
                !self.exited() && std::time::Instant::now() < deadline,
                "no `{field}` in the log within {timeout:?}:\n{}",
                self.lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port that was free a moment ago (bind 127.0.0.1:0, read, release), for programs
/// that log the address they were given rather than the one they bound. The caller retries
/// with a new one when the process it hands it to fails to bind.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}
