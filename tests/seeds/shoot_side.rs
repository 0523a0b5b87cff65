//! The shoot's side of the webhook across two real seeds (`shoot_webhook.rs`): seed a's
//! outside network namespace (where the load runs) holds the lab's HTTPS endpoint
//! (`isthmus_lab::webhook::endpoint`, on a thread that joined that namespace) and both
//! `isthmus tunnel-agent`s (this checkout's binary, `ip netns exec`), each allowing only the
//! webhook's address and port: the regular agent on seed a's stand-in from before the load,
//! the temporary agent on seed b's load balancer across the link once the destination's
//! members are voters, before the destination kube-apiserver starts.
//!
//! The webhook counts the AdmissionReviews it answered per kube-apiserver client certificate:
//! so many from the source, so many from the destination, each with its time (the report's
//! webhook band). Failed webhook calls: connections the webhook dropped, the agents' failed or
//! refused dials, and the CONNECTs a tunnel server did not answer with 200 (a call
//! kube-apiserver retried is in there too); a failed call with `failurePolicy: Fail` is also a
//! failed API request, which `shoot_move.rs` checks.

use super::join_observe::{DST, SRC};
use super::node::{Node, POLL, SYSTEM};
use super::shoot_load::{enter, Admission};
use super::shoot_webhook::{lb_address, Tunnel, SETUP, VPN_A, VPN_B, VPN_PORT};
use isthmus_controller::tunnel_server as server;
use isthmus_lab::webhook::endpoint::{self, Served};
use isthmus_lab::webhook::{Call, Via};
use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use tokio::sync::oneshot;

/// One `isthmus tunnel-agent` in the shoot; killed when dropped.
struct Agent {
    child: Child,
    admin: u16,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the webhook and the tunnel saw, read once the load has stopped.
#[derive(Debug, Default)]
struct Seen {
    /// AdmissionReviews answered per seed (source, destination) and all of them.
    per_seed: [usize; 2],
    total: usize,
    /// Connections the webhook dropped, the agents' dials that did not connect, and each
    /// seed's tunnel server's CONNECTs not answered 200 (`None`: its metrics unreadable).
    dropped: usize,
    dials_failed: usize,
    connects_failed: [Option<usize>; 2],
}

/// The shoot: the webhook and the agents, in seed a's outside network namespace.
pub struct Shoot {
    netns: String,
    webhook: SocketAddr,
    served: Served,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    // Agents before the webhook's thread ends (field order is drop order).
    agents: RefCell<Vec<Agent>>,
    /// The source's answered reviews when the load started (the set-up's probes before).
    at_start: RefCell<usize>,
    seen: RefCell<Seen>,
    dir: std::path::PathBuf,
    ca: std::path::PathBuf,
    callers: [Vec<u8>; 2],
}

impl Shoot {
    /// The webhook on the outside address `ip` of `netns`, and the regular agent connected to
    /// the stand-in (waited for).
    pub fn start(tunnel: &Tunnel, netns: &str, ip: Ipv4Addr) -> Self {
        let tls = tunnel.pki.server_config(
            &tunnel.webhook_cert(),
            // kube-apiserver presents its client certificate (the admission kubeconfig).
            true,
            &["http/1.1"],
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let ns = netns.to_owned();
        let thread = std::thread::spawn(move || {
            let run = || -> Result<tokio::runtime::Runtime, String> {
                enter(&ns)?;
                tokio::runtime::Runtime::new().map_err(|e| e.to_string())
            };
            let rt = match run() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let served = Served::default();
                let cancel = tokio_util::sync::CancellationToken::new();
                let bound = endpoint::start(
                    SocketAddr::from((ip, 0)),
                    tls,
                    cancel.clone(),
                    served.clone(),
                )
                .await
                .map_err(|e| e.to_string());
                let _ = tx.send(bound.map(|a| (a, served)));
                let _ = stopped.await;
                cancel.cancel();
            });
        });
        let (webhook, served) = rx
            .recv()
            .expect("the webhook's thread")
            .unwrap_or_else(|e| panic!("the webhook in {netns}: {e}"));
        println!("figure: shoot webhook: listening at {webhook} in {netns}");
        let shoot = Self {
            netns: netns.to_owned(),
            webhook,
            served,
            stop: Some(stop),
            thread: Some(thread),
            agents: RefCell::new(Vec::new()),
            at_start: RefCell::new(0),
            seen: RefCell::new(Seen::default()),
            dir: tunnel.dir.path().to_path_buf(),
            ca: tunnel.dir.join("ca.crt"),
            callers: tunnel.callers.each_ref().map(|c| c.chain[0].to_vec()),
        };
        shoot.agent("regular", &tunnel.stand_in, VPN_A);
        shoot
    }

    /// What the load registers (`shoot_load::Admission`).
    pub fn admission(&self) -> Admission {
        Admission {
            webhook: self.webhook,
            ca: self.ca.clone(),
            served: self.served.clone(),
        }
    }

    /// The load has started: the reviews so far were the set-up's.
    pub fn load_started(&self) {
        *self.at_start.borrow_mut() = self.served.from(&self.callers[0]);
    }

    /// The temporary agent connects to seed b's tunnel server through seed b's load
    /// balancer (across the link), waited for.
    pub fn join_temporary(&self, b: &Node) {
        let lb = lb_address(b, SYSTEM, "isthmus-proxy");
        self.agent("temporary", &lb, VPN_B);
    }

    /// Starts an agent dialling `address:`[`VPN_PORT`] with SNI `server_name`; returns once
    /// it has a session (its `/readyz`).
    fn agent(&self, role: &str, address: &str, server_name: &str) {
        let t0 = std::time::Instant::now();
        let admin = free_port(&self.netns);
        let d = |n: &str| self.dir.join(n).display().to_string();
        let config = self.dir.join(format!("agent-{role}.yaml"));
        std::fs::write(
            &config,
            format!(
                "servers:\n  - {{ address: \"{address}:{VPN_PORT}\", server_name: \"{server_name}\" }}\n\
                 tls: {{ ca: \"{}\", cert: \"{}\", key: \"{}\" }}\n\
                 allow: [\"{}/32:{}\"]\n\
                 admin: {{ address: \"127.0.0.1:{admin}\" }}\n\
                 backoff_max: 1s\n",
                d("ca.crt"),
                d("agent.crt"),
                d("agent.key"),
                self.webhook.ip(),
                self.webhook.port(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.dir.join(format!("agent-{role}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .arg(env!("CARGO_BIN_EXE_isthmus"))
            .args(["tunnel-agent", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agents.borrow_mut().push(Agent { child, admin });
        let deadline = std::time::Instant::now() + SETUP;
        while self.admin(admin, "/readyz").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the {role} agent's session to {address}:{VPN_PORT} ({server_name}) not after {SETUP:?}:\n{}",
                std::fs::read_to_string(self.dir.join(format!("agent-{role}.log")))
                    .unwrap_or_default()
            );
            std::thread::sleep(POLL);
        }
        println!(
            "figure: shoot webhook: the {role} agent's session to {address}:{VPN_PORT} ({server_name}): {:.1?}",
            t0.elapsed()
        );
    }

    /// An agent's admin endpoint at `path` (its body), from inside the shoot.
    fn admin(&self, port: u16, path: &str) -> Option<String> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.netns,
                "curl",
                "-sf",
                "--max-time",
                "5",
            ])
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Once the load has stopped (every acknowledged write's call is in) and before the
    /// shoot namespaces go: what the webhook answered and the tunnel's failures, printed.
    pub fn after_load(&self, a: &Node, b: &Node) {
        let mut seen = self.seen.borrow_mut();
        seen.per_seed = [
            self.served.from(&self.callers[0]) - *self.at_start.borrow(),
            self.served.from(&self.callers[1]),
        ];
        seen.total = self.served.total();
        seen.dropped = self.served.failed();
        seen.dials_failed = self
            .agents
            .borrow()
            .iter()
            .filter_map(|a| self.admin(a.admin, "/metrics"))
            .map(|m| {
                sum(&m, "isthmus_tunnel_dials_total{", |l| {
                    !l.contains("outcome=\"ok\"")
                })
            })
            .sum();
        seen.connects_failed = [(a, SRC), (b, DST)].map(|(seed, ns)| {
            server_metrics(seed, ns).map(|m| {
                sum(&m, "isthmus_tunnel_connects_total{", |l| {
                    !l.contains("code=\"200\"")
                })
            })
        });
        let s = seen;
        println!(
            "figure: shoot webhook: {} AdmissionReviews answered during the load from the source kube-apiserver (seed a, through the stand-in for vpn-seed-server), {} from the destination (seed b, through the controller's temporary VPN); {} in all with the set-up's probes",
            s.per_seed[0], s.per_seed[1], s.total
        );
        let shown = |c: Option<usize>| c.map_or("unreadable".to_owned(), |n| n.to_string());
        println!(
            "figure: shoot webhook: failed calls: {} connections the webhook dropped, {} agent dials not connected, CONNECTs not answered 200: seed a {}, seed b {}",
            s.dropped,
            s.dials_failed,
            shown(s.connects_failed[0]),
            shown(s.connects_failed[1])
        );
    }

    /// The reviews answered during the load as the report's webhook calls (`start_ms` since
    /// `epoch`, the load's start), by the seed whose kube-apiserver sent them.
    pub fn calls(&self, epoch: Instant) -> Vec<Call> {
        let mut calls: Vec<Call> = [Via::Source, Via::Destination]
            .into_iter()
            .zip(&self.callers)
            .flat_map(|(via, cert)| {
                self.served
                    .answered_to(cert)
                    .into_iter()
                    .filter(|a| a.accepted >= epoch)
                    .map(move |a| Call {
                        start_ms: (a.accepted - epoch).as_secs_f64() * 1000.0,
                        latency_ms: a.ms,
                        via,
                        ok: true,
                        error: None,
                    })
            })
            .collect();
        calls.sort_by(|x, y| x.start_ms.total_cmp(&y.start_ms));
        calls
    }

    /// The failed webhook calls [`Shoot::after_load`] counted, however seen.
    pub fn failed(&self) -> usize {
        let s = self.seen.borrow();
        s.dropped + s.dials_failed + s.connects_failed.iter().flatten().sum::<usize>()
    }

    /// Checks what [`Shoot::after_load`] read: reviews answered from both seeds'
    /// kube-apiservers, no failed call.
    pub fn check(&self) {
        let s = self.seen.borrow();
        assert!(s.per_seed[0] > 0, "no review from the source: {s:?}");
        assert!(s.per_seed[1] > 0, "no review from the destination: {s:?}");
        assert_eq!(self.failed(), 0, "failed webhook calls: {s:?}");
    }
}

impl Drop for Shoot {
    fn drop(&mut self) {
        self.agents.borrow_mut().clear();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A port free on 127.0.0.1 in `netns` now (for an agent's admin endpoint).
fn free_port(netns: &str) -> u16 {
    let ns = netns.to_owned();
    std::thread::spawn(move || {
        enter(&ns).unwrap();
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    })
    .join()
    .unwrap()
}

/// `ns`'s tunnel server's `/metrics` from `seed`'s node (the kubelet's probes come from
/// there too).
fn server_metrics(seed: &Node, ns: &str) -> Option<String> {
    let ip = seed.pods_jsonpath(
        ns,
        &format!("app.kubernetes.io/name={}", server::NAME),
        "{.items[?(@.status.phase==\"Running\")].status.podIP}",
    );
    let ip = ip.split_whitespace().next()?;
    let url = format!("http://{ip}:{}/metrics", server::ADMIN_PORT);
    let out = seed.script(&["node", "curl", "-sSf", "--max-time", "5", &url]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The sum of the samples of `family` (`name{`) whose line `pick` selects.
fn sum(metrics: &str, family: &str, pick: impl Fn(&str) -> bool) -> usize {
    metrics
        .lines()
        .filter(|l| l.starts_with(family) && pick(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}
