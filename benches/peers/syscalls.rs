//! System calls per proxied connection (the `syscalls` scenario): `connrate` with the
//! contender's whole process tree (every thread of the main process and of its children, e.g.
//! nginx's and HAProxy's workers) under `strace -c -f`, the counts divided by the connections
//! made. Load-independent where the wall-clock figures are not: a call is a call however busy
//! the machine is. Only what depends on timing moves (how many events one `epoll_wait`
//! returns, how many connections one accept loop finds), and ptrace's slow-down shifts those
//! towards one event per wake-up, the same for every contender.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `strace -c -f` attached to a set of processes, summarising into a file.
#[derive(Debug)]
pub struct Trace {
    child: Child,
    out: PathBuf,
}

/// Calls and failed calls (errno returned, e.g. `EAGAIN`) of one system call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Count {
    pub calls: u64,
    pub errors: u64,
}

impl Trace {
    /// Attaches to every thread of `pids` and returns once all of them are traced.
    pub async fn attach(pids: &[u32], out: &Path) -> io::Result<Trace> {
        let mut c = Command::new("strace");
        // -c: a summary instead of a line per call; -f: every thread (and any child forked
        // later); -q: no attach/detach chatter in the summary file.
        c.arg("-c").arg("-f").arg("-q").arg("-o").arg(out);
        for p in pids {
            c.arg("-p").arg(p.to_string());
        }
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::other(format!("cannot run strace: {e}")))?;
        let mut t = Trace {
            child,
            out: out.into(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_traced(pids) {
            if Instant::now() > deadline {
                let _ = t.child.kill();
                let _ = t.child.wait();
                return Err(io::Error::other(
                    "strace did not attach within 10 s (ptrace not permitted?)",
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(t)
    }

    /// Detaches (SIGINT makes strace write its summary) and returns the counts by call.
    pub async fn finish(mut self) -> io::Result<BTreeMap<String, Count>> {
        interrupt(&mut self.child, "strace", Duration::from_secs(10)).await?;
        Ok(parse(&std::fs::read_to_string(&self.out)?))
    }
}

/// Stops a tracer the way its summary gets written (SIGINT) and waits up to `within` for it to
/// exit; one that does not is killed.
pub async fn interrupt(child: &mut Child, what: &str, within: Duration) -> io::Result<()> {
    let _ = Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + within;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "{what} did not exit within {within:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Whether every thread of every process has a tracer.
fn all_traced(pids: &[u32]) -> bool {
    pids.iter().all(|pid| {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            // Gone: nothing left to wait for.
            return true;
        };
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("TracerPid:"))
                        .map(|v| v.trim() != "0")
                })
                .unwrap_or(true)
        })
    })
}

/// Parses `strace -c`'s table: `% time  seconds  usecs/call  calls  [errors]  syscall`
/// between two dashed lines, then the total.
fn parse(summary: &str) -> BTreeMap<String, Count> {
    let mut out = BTreeMap::new();
    let mut in_table = false;
    for line in summary.lines() {
        if line.starts_with("------") {
            if in_table {
                break;
            }
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let (calls, errors, name) = match f.len() {
            5 => (f[3], "0", f[4]),
            6 => (f[3], f[4], f[5]),
            _ => continue,
        };
        let (Ok(calls), Ok(errors)) = (calls.parse::<u64>(), errors.parse::<u64>()) else {
            continue;
        };
        let c: &mut Count = out.entry(name.to_owned()).or_default();
        c.calls += calls;
        c.errors += errors;
    }
    out
}
