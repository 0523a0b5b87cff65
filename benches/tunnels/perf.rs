//! Counts that do not depend on how busy the shared machine is (`--perf`): `perf stat` attached
//! to each of a peer's processes over one phase of the bench: CPU time, system calls, context
//! switches and page faults, reported per GB moved or per call made. Throughput on a machine
//! shared with other builds varies 2–5× between runs; these counts barely move, so they carry
//! before/after comparisons of the tunnel's own work.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Software events and tracepoints: this VM has no hardware counters.
const EVENTS: &str = "task-clock,raw_syscalls:sys_enter,context-switches,page-faults";

/// The system calls counted one by one (the tracepoint `syscalls:sys_enter_NAME` each).
const CALLS: [&str; 9] = [
    "recvfrom",
    "read",
    "sendto",
    "write",
    "writev",
    "epoll_wait",
    "epoll_ctl",
    "futex",
    "madvise",
];

/// What one process did over the phase.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub cpu_ms: f64,
    pub syscalls: f64,
    pub switches: f64,
    pub faults: f64,
    /// Per entry of [`CALLS`].
    pub calls: [f64; CALLS.len()],
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.cpu_ms += o.cpu_ms;
        self.syscalls += o.syscalls;
        self.switches += o.switches;
        self.faults += o.faults;
        for (a, b) in self.calls.iter_mut().zip(o.calls) {
            *a += b;
        }
    }

    /// The system calls by name, each divided by `per` (those that occurred).
    pub fn calls_per(&self, per: f64) -> String {
        CALLS
            .iter()
            .zip(self.calls)
            .filter(|(_, n)| *n > 0.0)
            .map(|(name, n)| format!("{name} {:.0}", n / per))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `CPU ms / syscalls / context switches / page faults`, each divided by `per`.
    pub fn per(&self, per: f64) -> String {
        format!(
            "{:.2} ms / {:.0} / {:.0} / {:.0}",
            self.cpu_ms / per,
            self.syscalls / per,
            self.switches / per,
            self.faults / per
        )
    }
}

/// `perf stat` (or `perf record`) running against some processes.
pub struct PerfStat {
    runs: Vec<(u32, Child, PathBuf)>,
}

impl PerfStat {
    /// Attaches `perf stat` to every pid (one each, so that the processes are told apart) and
    /// returns once all count; `None` when perf is missing or does not answer within 10 s.
    pub async fn start(pids: &[u32], dir: &Path, tag: &str) -> Option<PerfStat> {
        let calls: Vec<String> = CALLS
            .iter()
            .map(|c| format!("syscalls:sys_enter_{c}"))
            .collect();
        let events = format!("{EVENTS},{}", calls.join(","));
        let args = ["stat", "-x", ",", "-e", &events];
        Self::attach(&args, pids, dir, tag, "csv").await
    }

    /// `perf record` of CPU samples with call graphs instead (`TUNNELS_PERF_RECORD=DIR`:
    /// `perf-TAG-PID.data` files there, for `perf report`).
    pub async fn record(pids: &[u32], dir: &Path, tag: &str) -> Option<PerfStat> {
        let args = [
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "2999",
            "--call-graph",
            "dwarf,16384",
        ];
        Self::attach(&args, pids, dir, tag, "data").await
    }

    async fn attach(
        args: &[&str],
        pids: &[u32],
        dir: &Path,
        tag: &str,
        ext: &str,
    ) -> Option<PerfStat> {
        let mut runs = Vec::new();
        for &pid in pids {
            let base = dir.join(format!("perf-{tag}-{pid}"));
            let (out, ctl, ack) = (
                base.with_extension(ext),
                base.with_extension("ctl"),
                base.with_extension("ack"),
            );
            for f in [&out, &ctl, &ack] {
                let _ = std::fs::remove_file(f);
            }
            for f in [&ctl, &ack] {
                Command::new("mkfifo").arg(f).status().ok()?;
            }
            // Started with its events disabled; enabled through the control FIFO, whose
            // acknowledgement says that it counts from now on.
            let child = Command::new("perf")
                .args(args)
                .args(["-D", "-1", "--control"])
                .arg(format!("fifo:{},{}", ctl.display(), ack.display()))
                .args(["-p", &pid.to_string(), "-o"])
                .arg(&out)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            runs.push((pid, child, out));
            let enabled = tokio::task::spawn_blocking(move || {
                use std::io::{BufRead, Write};
                let mut ctl = std::fs::OpenOptions::new().write(true).open(&ctl)?;
                let ack = std::fs::File::open(&ack)?;
                ctl.write_all(b"enable\n")?;
                let mut line = String::new();
                std::io::BufReader::new(ack).read_line(&mut line)?;
                Ok::<_, std::io::Error>(line.starts_with("ack"))
            });
            match tokio::time::timeout(Duration::from_secs(10), enabled).await {
                Ok(Ok(Ok(true))) => {}
                _ => {
                    PerfStat { runs }.stop();
                    return None;
                }
            }
        }
        Some(PerfStat { runs })
    }

    /// Stops counting; the counts per pid and their sum (zero for `record`).
    pub fn stop(self) -> (Vec<(u32, Counts)>, Counts) {
        let mut each = Vec::new();
        let mut sum = Counts::default();
        for (pid, mut child, out) in self.runs {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
            let c = parse(&std::fs::read_to_string(&out).unwrap_or_default());
            sum.add(&c);
            each.push((pid, c));
        }
        (each, sum)
    }
}

/// `perf stat -x,` lines: `value,unit,event,…`.
fn parse(csv: &str) -> Counts {
    let mut c = Counts::default();
    for line in csv.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(v), Some(event)) = (f.first().and_then(|v| v.parse::<f64>().ok()), f.get(2))
        else {
            continue;
        };
        match *event {
            "task-clock" => c.cpu_ms = v,
            "raw_syscalls:sys_enter" => c.syscalls = v,
            "context-switches" => c.switches = v,
            "page-faults" => c.faults = v,
            e => {
                let name = e.strip_prefix("syscalls:sys_enter_").unwrap_or_default();
                if let Some(i) = CALLS.iter().position(|c| *c == name) {
                    c.calls[i] = v;
                }
            }
        }
    }
    c
}
