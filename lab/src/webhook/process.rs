//! A tunnel process (`isthmus tunnel-server` or `tunnel-agent`) inside a namespace: its config
//! file, its log, and a stop that drains (SIGTERM, then wait for the exit) as a pod's
//! termination would.

use crate::error::{Error, Result};
use crate::seeds::{run, Seed};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// One running process; killed on drop if it was not stopped.
#[derive(Debug)]
pub(super) struct Process {
    what: String,
    child: Option<Child>,
}

impl Process {
    /// Writes `yaml` to `<dir>/<stem>.yaml` and runs `bin <subcommand> --config` in `ns`,
    /// stderr to `<dir>/<stem>.log`.
    pub(super) fn start(
        bin: &Path,
        ns: &Seed,
        subcommand: &str,
        dir: &Path,
        stem: &str,
        yaml: &str,
    ) -> Result<Self> {
        let config = dir.join(format!("{stem}.yaml"));
        std::fs::write(&config, yaml).map_err(|e| Error::io(config.display(), e))?;
        let log_path = dir.join(format!("{stem}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(log_path.display(), e))?;
        let what = format!("{} {subcommand} ({stem})", bin.display());
        let child = ns
            .command(&bin.display().to_string())
            .arg(subcommand)
            .arg("--config")
            .arg(&config)
            // Session changes are logged at info; the log is where a failed call is explained.
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Command {
                command: what.clone(),
                detail: e.to_string(),
            })?;
        Ok(Self {
            what,
            child: Some(child),
        })
    }

    /// Fails if the process already exited (a bad config, a port in use).
    pub(super) fn check_running(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(Error::Command {
                    command: self.what.clone(),
                    detail: format!("exited with {status}: see its log"),
                });
            }
        }
        Ok(())
    }

    /// SIGTERM (the process drains: open streams finish) and waits for the exit.
    pub(super) async fn stop(mut self, within: Duration) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        run(Command::new("kill").args(["-TERM", &child.id().to_string()]))?;
        let deadline = Instant::now() + within;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Timeout {
                        what: format!("{} to drain and exit", self.what),
                        after: within,
                    });
                }
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
