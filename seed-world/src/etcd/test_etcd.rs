//! A real etcd 3.4 cluster (Debian's `etcd`) whose members advertise the *exposed* names the
//! planner spells (`https://<pod>.<ns>.<seed>.<domain>:<port>`), on loopback ports the test
//! picks. Each member runs in its own mount namespace with a private `/etc/hosts` that
//! resolves every exposed name to 127.0.0.1 (`unshare -m` + a bind mount), so the machine's
//! resolver is untouched and the test process stays in the host network namespace. Membership
//! changes go through `etcdctl`, as etcd-druid's would through etcd's API.

use isthmus_testkit::{CertKey, Scratch, TestPki};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One member: its etcd name and the URLs it advertises.
#[derive(Debug, Clone)]
pub struct MemberDef {
    pub name: String,
    pub dns: String,
    pub peer_port: u16,
    pub client_port: u16,
}

impl MemberDef {
    pub fn peer_url(&self) -> String {
        format!("https://{}:{}", self.dns, self.peer_port)
    }
    pub fn client_url(&self) -> String {
        format!("https://{}:{}", self.dns, self.client_port)
    }
    fn local_client(&self) -> String {
        format!("https://127.0.0.1:{}", self.client_port)
    }
}

/// `(id, name, peer urls, learner)` of one member as `member list` shows it.
pub type Listed = (u64, String, Vec<String>, bool);

/// The cluster: processes by member name, and the TLS material.
pub struct TestEtcd {
    pub dir: Scratch,
    pki: TestPki,
    pub client: CertKey,
    defs: Vec<MemberDef>,
    procs: BTreeMap<String, Child>,
    /// Learners refuse most RPCs: `etcdctl` talks to the other members only.
    learners: std::collections::BTreeSet<String>,
    /// Learners whose promotion etcd refused at least once (the first refusal is logged).
    refused_promotions: std::collections::BTreeSet<String>,
}

impl std::fmt::Debug for TestEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEtcd")
            .field("running", &self.procs.keys())
            .finish()
    }
}

/// A spec port scheme's base with free loopback ports: peer ports `base..base+n` and client
/// ports `base-100-i` for `i < n` (the scheme's `clientBase` is `base - 100`). Searched below
/// the kernel's ephemeral range (32768+), where no outgoing connection takes a port between
/// the check and etcd's bind, starting at a per-process pseudo-random offset.
pub fn free_run(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    let start = 20_000 + (seed % 10_000) as u16;
    for _ in 0..2_000 {
        let step = NEXT.fetch_add(7, Ordering::Relaxed);
        let base = 20_000 + (start - 20_000 + step) % 12_000;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if (0..n).all(|i| free(base + i)) && (0..n).all(|i| free(base - 100 - i)) {
            return base;
        }
    }
    panic!("no free run of {n} loopback ports in 20000..32000");
}

impl TestEtcd {
    /// A cluster that knows `defs` (every member it may ever have); none runs yet.
    pub fn new(defs: Vec<MemberDef>) -> Self {
        let dir = Scratch::new("etcd");
        let pki = TestPki::new();
        let mut names: Vec<&str> = defs.iter().map(|d| d.dns.as_str()).collect();
        names.extend(["localhost", "127.0.0.1"]);
        let peer = pki.peer_cert(&names);
        peer.write(dir.path(), "member");
        pki.write_ca(dir.path());
        let client = pki.client_cert("isthmus-controller");
        client.write(dir.path(), "client");
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for d in &defs {
            hosts.push_str(&format!("127.0.0.1 {}\n", d.dns));
        }
        std::fs::write(dir.join("hosts"), hosts).unwrap();
        Self {
            dir,
            pki,
            client,
            defs,
            procs: BTreeMap::new(),
            learners: Default::default(),
            refused_promotions: Default::default(),
        }
    }

    pub fn ca_pem(&self) -> String {
        self.pki.ca_pem()
    }

    pub fn def(&self, name: &str) -> &MemberDef {
        self.defs.iter().find(|d| d.name == name).unwrap()
    }

    /// `host:port` → local address of every member's client URL (the controller's
    /// `etcd_connect_to`).
    pub fn connect_to(&self) -> BTreeMap<String, SocketAddr> {
        self.defs
            .iter()
            .map(|d| {
                (
                    format!("{}:{}", d.dns, d.client_port),
                    SocketAddr::from(([127, 0, 0, 1], d.client_port)),
                )
            })
            .collect()
    }

    /// Starts `name` with `--initial-cluster` of `cluster` (names whose peer URLs to list).
    pub fn start(&mut self, name: &str, cluster: &[&str], state: &str) {
        let d = self.def(name).clone();
        let initial: Vec<String> = cluster
            .iter()
            .map(|n| format!("{n}={}", self.def(n).peer_url()))
            .collect();
        let data = self.dir.join(&format!("{name}.data"));
        let p = |f: &str| self.dir.join(f).display().to_string();
        let args = [
            format!("--name={name}"),
            format!("--data-dir={}", data.display()),
            format!("--initial-advertise-peer-urls={}", d.peer_url()),
            format!("--listen-peer-urls=https://127.0.0.1:{}", d.peer_port),
            format!("--advertise-client-urls={}", d.client_url()),
            format!("--listen-client-urls=https://127.0.0.1:{}", d.client_port),
            format!("--initial-cluster={}", initial.join(",")),
            format!("--initial-cluster-state={state}"),
            "--initial-cluster-token=isthmus-controller-test".into(),
            format!("--cert-file={}", p("member.crt")),
            format!("--key-file={}", p("member.key")),
            format!("--trusted-ca-file={}", p("ca.crt")),
            "--client-cert-auth".into(),
            format!("--peer-cert-file={}", p("member.crt")),
            format!("--peer-key-file={}", p("member.key")),
            format!("--peer-trusted-ca-file={}", p("ca.crt")),
            "--peer-client-cert-auth".into(),
            "--experimental-peer-skip-client-san-verification".into(),
            "--heartbeat-interval=50".into(),
            "--election-timeout=500".into(),
        ];
        let script = format!(
            "mount --bind {} /etc/hosts && exec etcd {}",
            p("hosts"),
            args.join(" ")
        );
        let log = std::fs::File::create(self.dir.join(&format!("{name}.log"))).unwrap();
        let child = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("unshare + etcd (Debian packages util-linux, etcd-server)");
        self.procs.insert(name.to_string(), child);
    }

    /// Stops `name` (kill -9: a member cut off, as a removed or scaled-down pod is).
    pub fn stop(&mut self, name: &str) {
        self.learners.remove(name);
        if let Some(mut c) = self.procs.remove(name) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn running(&self) -> Vec<String> {
        self.procs.keys().cloned().collect()
    }

    /// `etcdctl` against the running members; `Err(stderr)` on failure.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let endpoints: Vec<String> = self
            .procs
            .keys()
            .filter(|n| !self.learners.contains(*n))
            .map(|n| self.def(n).local_client())
            .collect();
        let p = |f: &str| self.dir.join(f).display().to_string();
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                format!("--endpoints={}", endpoints.join(",")),
                format!("--cacert={}", p("ca.crt")),
                format!("--cert={}", p("client.crt")),
                format!("--key={}", p("client.key")),
                "--command-timeout=5s".into(),
            ])
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `(id, name, peer urls, learner)` of every member.
    pub fn members(&self) -> Vec<Listed> {
        self.try_members().unwrap_or_default()
    }

    /// The member list, `None` when etcd did not answer (not the same as no members: a
    /// stand-in that took it for one would add members that are there).
    pub fn try_members(&self) -> Option<Vec<Listed>> {
        let out = self.etcdctl(&["member", "list", "-w", "json"]).ok()?;
        let v: Value = serde_json::from_str(&out).ok()?;
        v["members"].as_array().map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["ID"].as_u64().unwrap_or(0),
                        m["name"].as_str().unwrap_or_default().to_string(),
                        m["peerURLs"]
                            .as_array()
                            .map(|u| {
                                u.iter()
                                    .filter_map(|x| x.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default(),
                        m["isLearner"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        })
    }

    fn id_of(&self, name: &str) -> Option<u64> {
        let url = self.def(name).peer_url();
        self.members()
            .into_iter()
            .find(|(_, n, urls, _)| n == name || urls.contains(&url))
            .map(|m| m.0)
    }

    /// Retries `op` for up to 30 s (etcd refuses membership changes for a few seconds after
    /// members (re)connect).
    fn retry(&self, what: &str, mut op: impl FnMut() -> Result<String, String>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match op() {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// `member add --learner` and start it (what etcd-druid's joining pod does).
    pub fn add_learner(&mut self, name: &str) {
        let url = self.def(name).peer_url();
        self.retry(&format!("member add {name}"), || {
            self.etcdctl(&[
                "member",
                "add",
                name,
                &format!("--peer-urls={url}"),
                "--learner",
            ])
        });
        let mut cluster: Vec<String> = self
            .members()
            .into_iter()
            .filter_map(|(_, n, urls, _)| {
                let n = if n.is_empty() { name.to_string() } else { n };
                urls.contains(&self.def(&n).peer_url()).then_some(n)
            })
            .collect();
        cluster.sort();
        let refs: Vec<&str> = cluster.iter().map(String::as_str).collect();
        self.learners.insert(name.to_string());
        self.start(name, &refs, "existing");
    }

    /// One attempt to promote a learner. etcd may refuse it (a learner that has not caught up
    /// with the leader yet, or a membership change right after members reconnected); the
    /// learner then stays one, and the caller tries again on its next turn, as
    /// etcd-backup-restore keeps trying: a 30 s deadline here once failed CI under load with a
    /// learner not yet in sync.
    pub fn promote(&mut self, name: &str) {
        let id = self
            .id_of(name)
            .unwrap_or_else(|| panic!("{name} is not a member"));
        match self.etcdctl(&["member", "promote", &format!("{id:x}")]) {
            Ok(_) => {
                self.learners.remove(name);
            }
            Err(e) => {
                if self.refused_promotions.insert(name.to_string()) {
                    eprintln!("member promote {name} refused, tried again each turn: {e}");
                }
            }
        }
    }

    /// `member remove` and stop the process.
    pub fn remove(&mut self, name: &str) {
        if let Some(id) = self.id_of(name) {
            self.retry(&format!("member remove {name}"), || {
                match self.etcdctl(&["member", "remove", &format!("{id:x}")]) {
                    // An earlier attempt that timed out (a leader move in flight) may have
                    // been applied: the member being gone is what was asked for.
                    Err(e) if e.contains("member not found") => Ok(e),
                    r => r,
                }
            });
        }
        self.stop(name);
    }

    /// Waits until every running member answers `endpoint health`.
    pub fn wait_healthy(&self) {
        self.retry("etcd health", || self.etcdctl(&["endpoint", "health"]));
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.procs) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
