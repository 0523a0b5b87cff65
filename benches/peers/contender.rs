//! Starting, reloading, measuring and stopping each contender with the same routes.
//!
//! Ports: the harness binds 127.0.0.1:0, reads the port the OS chose, closes the socket and
//! writes the port into the contender's configuration (nginx, HAProxy and sniproxy cannot bind
//! port 0 and report it). Another process may take the port in between; a contender that does
//! not answer a routed probe within five seconds is stopped and started again on fresh ports
//! (three attempts).

use crate::load;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Isthmus,
    Nginx,
    Haproxy,
    Sniproxy,
    Direct,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Isthmus,
        Kind::Nginx,
        Kind::Haproxy,
        Kind::Sniproxy,
        Kind::Direct,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Isthmus => "isthmus",
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
            Kind::Sniproxy => "sniproxy",
            Kind::Direct => "direct",
        }
    }

    pub fn is_peer(self) -> bool {
        matches!(self, Kind::Nginx | Kind::Haproxy | Kind::Sniproxy)
    }

    /// Whether the program is installed; `None` when it is, else why not.
    pub fn missing(self) -> Option<String> {
        let found = |p: &str| Path::new(p).exists() || which(p);
        match self {
            Kind::Isthmus | Kind::Direct => None,
            Kind::Nginx if !found("nginx") => {
                Some("nginx not installed (apt-get install nginx-light libnginx-mod-stream)".into())
            }
            Kind::Nginx if !Path::new(NGINX_STREAM).exists() => Some(format!(
                "{NGINX_STREAM} missing (apt-get install libnginx-mod-stream)"
            )),
            Kind::Haproxy if !found("haproxy") => {
                Some("haproxy not installed (apt-get install haproxy)".into())
            }
            Kind::Sniproxy if !found("sniproxy") => {
                Some("sniproxy not installed (apt-get install sniproxy)".into())
            }
            _ => None,
        }
    }
}

const NGINX_STREAM: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

fn which(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Every route goes to the one upstream; the names differ only to make the tables large.
#[derive(Debug, Clone)]
pub struct Routes {
    pub names: Vec<String>,
    /// isthmus's upstream `idle_timeout` (`3h`, as the controller renders it); the peers'
    /// configurations have nothing like it.
    pub idle_timeout: Option<&'static str>,
}

/// A running contender.
#[derive(Debug)]
pub struct Running {
    pub kind: Kind,
    pub addr: SocketAddr,
    child: Option<Child>,
    dir: PathBuf,
    upstream: SocketAddr,
    tuning: Tuning,
    admin: u16,
    /// Each thread's CPU time as last read, in nanoseconds, kept after the thread exits.
    cpu_seen: std::sync::Mutex<std::collections::BTreeMap<u32, u64>>,
}

/// Settings every contender gets alike.
#[derive(Debug, Clone, Default)]
pub struct Tuning {
    /// Worker threads (isthmus `--threads`, nginx `worker_processes`, HAProxy `nbthread`).
    pub threads: usize,
    /// Busy polling: isthmus `--busy-poll <this>`; HAProxy `busy-polling` for a duration (it
    /// has no adaptive mode, and `off` and `auto` leave it at its default, off); nginx and
    /// sniproxy have no such setting and run as always.
    pub busy_poll: Option<String>,
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Running {
    pub async fn start(
        kind: Kind,
        dir: &Path,
        upstream: SocketAddr,
        routes: &Routes,
        tuning: &Tuning,
        probe_hello: &[u8],
    ) -> io::Result<Running> {
        if kind == Kind::Direct {
            return Ok(Running {
                kind,
                addr: upstream,
                child: None,
                dir: dir.into(),
                upstream,
                tuning: tuning.clone(),
                admin: 0,
                cpu_seen: Default::default(),
            });
        }
        let mut last = io::Error::other("not started");
        for _ in 0..3 {
            let mut r = Running {
                kind,
                addr: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
                child: None,
                dir: dir.join(kind.name()),
                upstream,
                tuning: tuning.clone(),
                admin: free_port()?,
                cpu_seen: Default::default(),
            };
            std::fs::create_dir_all(&r.dir)?;
            r.write_config(routes)?;
            r.child = Some(
                r.command()
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(r.dir.join("stderr.log"))?)
                    .spawn()?,
            );
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if load::probe(r.addr, probe_hello).await {
                    return Ok(r);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            last = io::Error::other(format!(
                "{} did not answer on {}; see {}",
                kind.name(),
                r.addr,
                r.dir.join("stderr.log").display()
            ));
            r.stop();
        }
        Err(last)
    }

    fn command(&self) -> Command {
        let d = &self.dir;
        let mut c;
        match self.kind {
            Kind::Isthmus => {
                // ISTHMUS_BIN compares another build (e.g. before/after an optimisation).
                let bin = std::env::var_os("ISTHMUS_BIN");
                c = Command::new(
                    bin.as_deref()
                        .unwrap_or(env!("CARGO_BIN_EXE_isthmus").as_ref()),
                );
                c.arg("proxy")
                    .arg("--config")
                    .arg(d.join("isthmus.json"))
                    .arg("--threads")
                    .arg(self.tuning.threads.to_string());
                if let Some(d) = &self.tuning.busy_poll {
                    c.arg("--busy-poll").arg(d);
                }
            }
            Kind::Nginx => {
                c = Command::new("nginx");
                c.arg("-e")
                    .arg(d.join("error.log"))
                    .arg("-p")
                    .arg(d)
                    .arg("-c")
                    .arg(d.join("nginx.conf"));
            }
            Kind::Haproxy => {
                // -W: master-worker, so that SIGUSR2 reloads like a production deployment.
                c = Command::new("haproxy");
                c.arg("-W").arg("-db").arg("-f").arg(d.join("haproxy.cfg"));
            }
            Kind::Sniproxy => {
                c = Command::new("sniproxy");
                c.arg("-f").arg("-c").arg(d.join("sniproxy.conf"));
            }
            Kind::Direct => unreachable!("the direct path runs no process"),
        }
        c
    }

    /// Writes the configuration for `routes` (used at start and for a reload).
    pub fn write_config(&self, routes: &Routes) -> io::Result<()> {
        let (file, text) = match self.kind {
            Kind::Isthmus => ("isthmus.json", self.isthmus_json(routes)),
            Kind::Nginx => ("nginx.conf", self.nginx_conf(routes)),
            Kind::Haproxy => {
                std::fs::write(self.dir.join("names.lst"), routes.names.join("\n") + "\n")?;
                ("haproxy.cfg", self.haproxy_cfg())
            }
            Kind::Sniproxy => ("sniproxy.conf", self.sniproxy_conf(routes)),
            Kind::Direct => return Ok(()),
        };
        // Write then rename: a reader never sees half a file.
        let tmp = self.dir.join(format!("{file}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, self.dir.join(file))
    }

    /// JSON, what the controller writes (`.json` is read with serde_json; YAML with
    /// marked-yaml, several times slower for 10k routes).
    fn isthmus_json(&self, routes: &Routes) -> String {
        // PEERS_ROUTE_SOURCES=127.0.0.0/8 gives every route an allow-list, as the controller
        // renders them (a build before per-route allow-lists refuses the field).
        let sources: Option<Vec<String>> = std::env::var("PEERS_ROUTE_SOURCES").ok().map(|l| {
            l.split(',')
                .map(|s| s.trim().trim_matches('"').to_owned())
                .collect()
        });
        let idle_timeout = routes.idle_timeout;
        let routes: Vec<serde_json::Value> = routes
            .names
            .iter()
            .map(|n| match &sources {
                Some(list) => {
                    serde_json::json!({ "sni": n, "upstream": "up", "allowed_sources": list })
                }
                None => serde_json::json!({ "sni": n, "upstream": "up" }),
            })
            .collect();
        let mut upstream = serde_json::json!({
            "name": "up", "endpoints": [self.upstream.to_string()],
        });
        // PEERS_UPSTREAM_KEEPALIVE=off turns the upstream sockets' TCP keepalive off, as nginx
        // and HAProxy run by default (four `setsockopt` per connection less): a like-for-like
        // row for the system call count.
        if std::env::var("PEERS_UPSTREAM_KEEPALIVE").as_deref() == Ok("off") {
            upstream["tcp_keepalive"] = serde_json::Value::Null;
        }
        if let Some(t) = idle_timeout {
            upstream["idle_timeout"] = t.into();
        }
        serde_json::json!({
            "admin": { "address": format!("127.0.0.1:{}", self.admin) },
            "drain_delay": "0s",
            "drain_timeout": "1s",
            // Reloads come from SIGHUP only, so one write triggers exactly one reload.
            "watch_interval": "0s",
            "listeners": [{ "name": "bench", "address": self.addr.to_string(), "routes": routes }],
            "upstreams": [upstream],
        })
        .to_string()
    }

    fn nginx_conf(&self, routes: &Routes) -> String {
        let d = self.dir.display();
        let mut map = String::new();
        for n in &routes.names {
            map += &format!("        {n} {};\n", self.upstream);
        }
        format!(
            "load_module {NGINX_STREAM};\ndaemon off;\nworker_processes {threads};\n\
             pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 20000; }}\nstream {{\n    map_hash_max_size 262144;\n\
             map_hash_bucket_size 128;\n    map $ssl_preread_server_name $name_map {{\n        hostnames;\n\
             {map}        default 127.0.0.1:1;\n    }}\n    server {{\n        listen {addr} reuseport;\n\
             ssl_preread on;\n        proxy_pass $name_map;\n    }}\n}}\n",
            threads = self.tuning.threads,
            addr = self.addr,
        )
    }

    fn haproxy_cfg(&self) -> String {
        let polls = self
            .tuning
            .busy_poll
            .as_deref()
            .is_some_and(|b| b != "off" && b != "auto");
        let busy = if polls { "    busy-polling\n" } else { "" };
        format!(
            "global\n    nbthread {threads}\n    maxconn 9000\n    pidfile {d}/haproxy.pid\n{busy}\
             defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n\
             frontend bench\n    bind {addr}\n    tcp-request inspect-delay 5s\n\
             tcp-request content accept if {{ req.ssl_hello_type 1 }}\n\
             use_backend up if {{ req.ssl_sni -i -f {d}/names.lst }}\n\
             backend up\n    server up {up}\n",
            threads = self.tuning.threads,
            d = self.dir.display(),
            addr = self.addr,
            up = self.upstream,
        )
    }

    fn sniproxy_conf(&self, routes: &Routes) -> String {
        let d = self.dir.display();
        let mut table = String::new();
        for n in &routes.names {
            table += &format!("    ^{}$ {}\n", n.replace('.', "\\."), self.upstream);
        }
        format!(
            "user root\npidfile {d}/sniproxy.pid\nerror_log {{\n    filename {d}/error.log\n    priority warning\n}}\n\
             listener {addr} {{\n    protocol tls\n    table bench\n}}\ntable bench {{\n{table}}}\n",
            addr = self.addr,
        )
    }

    /// Pid of the main process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The main process and its children (nginx's and HAProxy's workers).
    pub fn pids(&self) -> Vec<u32> {
        let Some(pid) = self.pid() else {
            return Vec::new();
        };
        let mut pids = vec![pid];
        pids.extend(children(pid));
        pids
    }

    /// The contender's scratch directory (configuration, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Resident memory in KiB of the main process and its children (nginx and HAProxy workers).
    pub fn rss_kib(&self) -> u64 {
        let Some(pid) = self.pid() else { return 0 };
        let mut pids = vec![pid];
        pids.extend(children(pid));
        pids.iter().map(|p| vm_rss(*p)).sum()
    }

    /// CPU seconds used so far by every thread of the main process and its children, in
    /// nanoseconds (`schedstat`). The clock ticks of `/proc/PID/stat` were 10 ms: over the
    /// latency scenario's 1,500 round trips a step of 6.7 µs per round trip, as large as the
    /// differences measured. A thread's last reading is kept when it exits (isthmus's blocking
    /// pool lets idle threads go), so the total does not fall when one exits; what it ran since
    /// the previous reading is not counted.
    pub fn cpu_seconds(&self) -> f64 {
        let Some(pid) = self.pid() else { return 0.0 };
        let mut pids = vec![pid];
        pids.extend(children(pid));
        let mut seen = self
            .cpu_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for p in pids {
            seen.extend(thread_cpu_ns(p));
        }
        seen.values().sum::<u64>() as f64 / 1e9
    }

    /// Asks the contender to re-read its configuration, the way an operator would.
    pub fn signal_reload(&self) -> io::Result<()> {
        let sig = match self.kind {
            Kind::Haproxy => "-USR2",
            _ => "-HUP",
        };
        match self.pid() {
            Some(pid) => kill(sig, pid),
            None => Ok(()),
        }
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the contender's processes, so that one that
    /// is not being measured takes no CPU from the one that is (HAProxy's `busy-polling`
    /// spins even when idle).
    pub fn pause(&self, paused: bool) {
        let Some(pid) = self.pid() else { return };
        let sig = if paused { "-STOP" } else { "-CONT" };
        let mut pids = vec![pid];
        pids.extend(children(pid));
        for p in pids {
            let _ = kill(sig, p);
        }
    }

    /// isthmus's splicers' moves out of `SCHED_BATCH` so far
    /// (`isthmus_proxy_sched_demoted_total`, from its admin endpoint); `None` for the peers or
    /// when the endpoint does not answer. A scenario that demotes is measured partly under
    /// `SCHED_OTHER`, and the pause (4 s or more) outlasts the scenario.
    pub async fn demotions(&self) -> Option<f64> {
        if self.kind != Kind::Isthmus {
            return None;
        }
        let admin = SocketAddr::from(([127, 0, 0, 1], self.admin));
        let (status, body) = isthmus_testkit::http_get(admin, "/metrics").await.ok()?;
        (status == 200).then(|| isthmus_testkit::metric(&body, "isthmus_proxy_sched_demoted_total"))
    }

    /// Graceful stop (resumed first if paused), then SIGKILL after three seconds.
    pub fn stop(&mut self) {
        self.pause(false);
        let Some(mut child) = self.child.take() else {
            return;
        };
        let sig = match self.kind {
            Kind::Isthmus => "-INT",
            Kind::Nginx => "-TERM",
            _ => "-TERM",
        };
        let _ = kill(sig, child.id());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let kids = children(child.id());
        let _ = child.kill();
        let _ = child.wait();
        for k in kids {
            let _ = kill("-KILL", k);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn kill(sig: &str, pid: u32) -> io::Result<()> {
    // A worker that has just exited is no error worth printing.
    let st = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()?;
    if st.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("kill {sig} {pid} failed")))
    }
}

fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

fn vm_rss(pid: u32) -> u64 {
    isthmus_testkit::rss_kib(pid).unwrap_or(0)
}

/// Each live thread of `pid` (thread ids are unique across processes) and its CPU time in
/// nanoseconds, `schedstat`'s first field.
fn thread_cpu_ns(pid: u32) -> Vec<(u32, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            Some((tid, stat.split_whitespace().next()?.parse::<u64>().ok()?))
        })
        .collect()
}
