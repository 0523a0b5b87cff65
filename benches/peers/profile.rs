//! Where the CPU goes, call by call (the `profile` scenario): `connrate` with the contender's
//! process tree under `perf record -g`, each sample charged to the system call it was taken
//! in (the outermost `__x64_sys_*` frame of its kernel stack), to the system call machinery
//! itself (entry and exit, the dispatch), to other kernel work (interrupts, softirqs outside a
//! call) or to user space. On loopback the receiving side's TCP work runs inline in the
//! sender's call, so `connect` carries the handshake and `close` the FIN exchange.
//!
//! What it answers: how much of a proxy's per-connection CPU any rewrite of its own code could
//! save. An io_uring path saves at most the machinery and the epoll calls (it still parses,
//! routes and does every connection's TCP work); everything else is the connections' own.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Samples by where they were taken: a system call's name, or one of the [`BUCKETS`].
pub type Samples = BTreeMap<String, u64>;

pub const MACHINERY: &str = "(entry/exit)";
pub const USER: &str = "(user space)";
pub const OTHER: &str = "(other kernel)";
pub const BUCKETS: [&str; 3] = [MACHINERY, USER, OTHER];

/// The kernel's system call entry and exit path (x86-64), where a sample is the cost of making
/// a call at all rather than of what the call does.
const ENTRY_EXIT: [&str; 14] = [
    "entry_SYSCALL_64",
    "entry_SYSCALL_64_after_hwframe",
    "entry_SYSCALL_64_safe_stack",
    "do_syscall_64",
    "x64_sys_call",
    "syscall_enter_from_user_mode",
    "syscall_exit_to_user_mode",
    "syscall_exit_to_user_mode_prepare",
    "syscall_return_via_sysret",
    "exit_to_user_mode_prepare",
    "exit_to_user_mode_loop",
    "arch_exit_to_user_mode_prepare",
    "switch_fpu_return",
    "__rseq_handle_notify_resume",
];

/// `perf record -g` attached to a set of processes, writing to a file.
#[derive(Debug)]
pub struct Record {
    child: Child,
    out: PathBuf,
}

impl Record {
    /// Starts sampling every thread of `pids` (1999 Hz, kernel and user call chains) and
    /// returns once `perf` has written its header.
    pub async fn attach(pids: &[u32], out: &Path) -> io::Result<Record> {
        let list = pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let child = Command::new("perf")
            .args(["record", "-q", "-g", "-F", "1999", "-o"])
            .arg(out)
            .arg("-p")
            .arg(list)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::other(format!("cannot run perf (apt linux-perf): {e}")))?;
        let mut r = Record {
            child,
            out: out.into(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(out).map_or(0, |m| m.len()) == 0 {
            if let Some(st) = r.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "perf record exited at once ({st}; perf_event_paranoid?)"
                )));
            }
            if Instant::now() > deadline {
                let _ = r.child.kill();
                let _ = r.child.wait();
                return Err(io::Error::other("perf record did not start within 10 s"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(r)
    }

    /// Stops sampling (SIGINT makes perf finish its file) and returns the samples by call.
    pub async fn finish(mut self) -> io::Result<Samples> {
        crate::syscalls::interrupt(&mut self.child, "perf record", Duration::from_secs(30)).await?;
        let script = Command::new("perf")
            .args(["script", "-F", "comm,ip,sym", "-i"])
            .arg(&self.out)
            .stderr(Stdio::null())
            .output()?;
        if !script.status.success() {
            return Err(io::Error::other(format!(
                "perf script failed: {}",
                script.status
            )));
        }
        Ok(classify(&String::from_utf8_lossy(&script.stdout)))
    }
}

/// The system call a kernel stack (leaf first) was taken in: its `__x64_sys_*` frame, or,
/// where the compiler made that a tail call (`writev`: `do_syscall_64` → `do_writev`), the
/// frame the dispatcher called.
fn call<'a>(frames: &[(&str, &'a str)]) -> Option<&'a str> {
    let named = frames.iter().rev().find_map(|(_, s)| {
        s.strip_prefix("__x64_sys_")
            .or_else(|| s.strip_prefix("__do_sys_"))
    });
    named.or_else(|| {
        let at = frames
            .iter()
            .position(|(_, s)| *s == "do_syscall_64" || *s == "x64_sys_call")?;
        let inner = frames[..at].last()?.1;
        Some(
            inner
                .strip_prefix("ksys_")
                .or_else(|| inner.strip_prefix("do_"))
                .unwrap_or(inner),
        )
    })
}

/// Charges every sample of `perf script -F comm,ip,sym` (a header line, then one indented
/// `ip symbol+offset` line per frame, leaf first, a blank line between samples).
fn classify(script: &str) -> Samples {
    let mut out = Samples::new();
    let mut frames: Vec<(&str, &str)> = Vec::new();
    let mut charge = |frames: &mut Vec<(&str, &str)>| {
        if let Some(&(ip, sym)) = frames.first() {
            let key = if !ip.starts_with("ffff") {
                USER.to_owned()
            } else if ENTRY_EXIT.contains(&sym) || sym.starts_with("__x64_sys_") {
                MACHINERY.to_owned()
            } else if frames.iter().any(|(_, s)| *s == "task_work_run") {
                // The last `close` of a socket releases it on the way back to user space.
                "close".to_owned()
            } else {
                match call(frames) {
                    Some(c) if ENTRY_EXIT.contains(&c) => MACHINERY.to_owned(),
                    Some(c) => c.to_owned(),
                    None => OTHER.to_owned(),
                }
            };
            *out.entry(key).or_default() += 1;
        }
        frames.clear();
    };
    for line in script.lines() {
        if line.trim().is_empty() {
            charge(&mut frames);
        } else if line.starts_with([' ', '\t']) {
            let mut f = line.split_whitespace();
            if let (Some(ip), Some(sym)) = (f.next(), f.next()) {
                frames.push((ip, sym.split('+').next().unwrap_or(sym)));
            }
        } else {
            // The next sample's header.
            charge(&mut frames);
        }
    }
    charge(&mut frames);
    out
}
