//! The shoot's admission webhook through the tunnel across two real seeds (issue 45 point 3),
//! as the lab runs it with processes (lab/src/webhook): each seed's kube-apiserver pod calls
//! the webhook through its `cluster` egress (`--egress-selector-config-file`: HTTPConnect over
//! mTLS to its own seed's CONNECT front), a tunnel server carries the call over an agent's
//! session into the shoot, and the agent dials the webhook there.
//!
//! - The shoot is seed a's outside network namespace (where the load runs): the lab's HTTPS
//!   endpoint (`isthmus_lab::webhook::endpoint`, on a thread that joined that namespace) and
//!   both `isthmus tunnel-agent`s (this checkout's binary, `ip netns exec`), each allowing only
//!   the webhook's address and port.
//! - Seed b (destination): the temporary VPN is the controller's. The destination migration
//!   carries `spec.vpn.server` ([`Tunnel::destination_vpn`], the contract of
//!   tests/cluster/tunnel.rs: its Secrets, names and fields), so seed b's controller runs the
//!   tunnel server from `Join`, and its proxies route the VPN name on the VPN port (PROXY v2)
//!   to it. The temporary agent dials seed b's load balancer across the link once the
//!   destination's members are voters, before the destination kube-apiserver starts.
//! - Seed a (source): the stand-in for Gardener's regular VPN server, `vpn-seed-server`
//!   (gardener v1.149.3 `pkg/component/networking/vpn/seedserver`), which cannot run here (it
//!   is OpenVPN behind the istio ingress gateway, whose SNI route and `X-Gardener-Destination`
//!   CONNECT need istio): an `isthmus tunnel-server` Deployment in the source namespace, its
//!   objects rendered by the controller's own code (`isthmus_controller::tunnel_server::objects`,
//!   what seed b's controller applies) from the same `spec.vpn.server` shape, minus what only
//!   the controller's run needs (owner, PodDisruptionBudget, the agents' ClusterIP Service and
//!   its policy from the proxies), plus a `LoadBalancer` Service of its own, `vpn-seed-server`
//!   (port 8443 to the agents' port), where the regular agent connects before the load starts,
//!   as a shoot's `vpn-shoot` reaches its seed's ingress. Its one NetworkPolicy: the agents'
//!   port from anywhere (`allow-vpn-seed-server`), since the source namespace's boundary
//!   (`join_tls.rs`) admits only its own pods and the proxies', and the load balancer's
//!   connections come from neither; the server still admits only the agent's certificate.
//!   The CONNECT front needs nothing more: the boundary admits the namespace's own pods (the
//!   kube-apiserver), and the controller's `isthmus-tunnel-server-connect` admits it too.
//!
//! Each seed's kube-apiserver presents a client certificate of its own to the webhook, which
//! counts the AdmissionReviews it answered per certificate: so many from the source, so many
//! from the destination. Failed webhook calls: connections the webhook dropped, the agents'
//! failed or refused dials, and the CONNECTs a tunnel server did not answer with 200 (a call
//! kube-apiserver retried is in there too); a failed call with `failurePolicy: Fail` is also a
//! failed API request, which `shoot_move.rs` checks.

use super::join_observe::{DST, SRC};
use super::join_tls::{DOMAIN, ETCD};
use super::node::{poll, Node, POLL, SYSTEM};
use super::shoot_api::{ShootFiles, TLS};
use super::shoot_load::{enter, Admission};
use isthmus_controller::crd::EtcdMigrationSpec;
use isthmus_controller::tunnel_server::{
    self as server, objects, Owner, Proxies, TunnelServers, AGENTS_PORT, CONNECT_PORT,
    CONNECT_SERVICE,
};
use isthmus_lab::api::files;
use isthmus_lab::webhook::endpoint::{self, Served};
use isthmus_lab::webhook::WEBHOOK_SERVICE;
use isthmus_testkit::{CertKey, Scratch, TestPki};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::sync::oneshot;

/// The agents' names for the seed a stand-in (their SNI and its certificate) and for seed b's
/// temporary VPN (`spec.vpn.dnsName`, under the migration's internal domain).
const VPN_A: &str = "vpn-seed-server.druid-src.seed-a.internal.example.com";
const VPN_B: &str = "vpn.druid-dst.seed-b.internal.example.com";
/// The port both seeds' agents dial: the proxies' VPN port (the chart's `proxy.vpnPort`), and
/// the stand-in's load balancer port.
const VPN_PORT: u16 = 8443;
/// The stand-in's load balancer Service and policy.
const STAND_IN: &str = "vpn-seed-server";
const STAND_IN_POLICY: &str = "allow-vpn-seed-server";
/// The agents' client certificate name, which both servers admit.
const AGENT: &str = "vpn-shoot.kube-system";
/// The Secrets `spec.vpn.server` names, in each shoot namespace.
const AGENTS_TLS: &str = "tunnel-agents-tls";
const CONNECT_TLS: &str = "tunnel-connect-tls";
const CA_BUNDLE: &str = "ca-vpn-bundle";
/// How long a tunnel server's rollout, an address or an agent's first session may take.
const SETUP: Duration = Duration::from_secs(240);

fn seed_name(seed: &Node) -> String {
    format!("seed-{}", seed.seed)
}

/// The client certificate's name of `seed`'s kube-apiserver (its CONNECT front admits it).
fn caller(seed: &Node) -> String {
    format!("kube-apiserver.{}", seed_name(seed))
}

/// `spec.vpn` of a migration in `ns` whose tunnel server serves `dns_name` to the agents.
fn vpn_spec(ns: &str, dns_name: &str, seed: &Node) -> Value {
    let ca = json!({"secret": CA_BUNDLE, "key": "bundle.crt"});
    json!({
        "dnsName": dns_name, "port": VPN_PORT, "proxyProtocol": "v2",
        "target": format!("{}.{ns}.svc.cluster.local:{AGENTS_PORT}", server::NAME),
        "server": {
            "agents": {"tlsSecret": AGENTS_TLS, "clientCa": ca, "clientNames": [AGENT]},
            "connect": {"tlsSecret": CONNECT_TLS, "clientCa": ca, "clientNames": [caller(seed)]},
        },
    })
}

/// The tunnel's TLS (one CA: both servers', the agents', the kube-apiservers' and the
/// webhook's certificates) and each seed's server side.
pub struct Tunnel {
    pki: TestPki,
    dir: Scratch,
    /// Each seed's kube-apiserver's client certificate: source, destination.
    callers: [CertKey; 2],
    /// The stand-in's load balancer address in seed a.
    stand_in: String,
}

impl Tunnel {
    /// The servers' Secrets in both shoot namespaces (which exist), and seed a's stand-in
    /// running behind its load balancer.
    pub fn new(a: &Node, b: &Node) -> Self {
        let pki = TestPki::new();
        let dir = Scratch::new("seeds-shoot-webhook");
        pki.write_ca(dir.path());
        pki.peer_cert(&[AGENT]).write(dir.path(), "agent");
        for (seed, ns, vpn) in [(a, SRC, VPN_A), (b, DST, VPN_B)] {
            let connect = format!("{CONNECT_SERVICE}.{ns}.svc.cluster.local");
            let agents = pki.server_cert(&[vpn]);
            let front = pki.server_cert(&[&connect]);
            for (name, c) in [(AGENTS_TLS, &agents), (CONNECT_TLS, &front)] {
                seed.apply(
                    &json!({
                        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                        "metadata": {"name": name, "namespace": ns},
                        "stringData": {"tls.crt": c.cert_pem, "tls.key": c.key_pem},
                    })
                    .to_string(),
                );
            }
            seed.apply(
                &json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": CA_BUNDLE, "namespace": ns},
                    "stringData": {"bundle.crt": pki.ca_pem()},
                })
                .to_string(),
            );
        }
        let callers = [a, b].map(|s| pki.peer_cert(&[&caller(s)]));
        let stand_in = stand_in(a);
        Self {
            pki,
            dir,
            callers,
            stand_in,
        }
    }

    /// The webhook's serving certificate: kube-apiserver checks a service-referenced webhook
    /// against `<service>.<namespace>.svc`.
    fn webhook_cert(&self) -> CertKey {
        let (svc_ns, svc) = WEBHOOK_SERVICE;
        self.pki.server_cert(&[&format!("{svc}.{svc_ns}.svc")])
    }

    /// The destination migration's `spec.vpn`: seed b's controller runs its tunnel server.
    pub fn destination_vpn(&self, b: &Node) -> Value {
        vpn_spec(DST, VPN_B, b)
    }

    /// Each seed's kube-apiserver calls the webhook through its own seed's CONNECT front
    /// (`cluster` egress) with its own client certificate, also towards the webhook.
    pub fn kube_apiservers(&self, shoot: &mut ShootFiles) {
        let f = |name: &str| Path::new(TLS).join(name);
        for (i, ns) in [SRC, DST].into_iter().enumerate() {
            let url = format!("https://{CONNECT_SERVICE}.{ns}.svc.cluster.local:{CONNECT_PORT}");
            let (crt, key) = (f("tunnel-client.crt"), f("tunnel-client.key"));
            let ca = f("tunnel-ca.crt");
            let own = json!({
                "tunnel-ca.crt": self.pki.ca_pem(),
                "tunnel-client.crt": self.callers[i].cert_pem,
                "tunnel-client.key": self.callers[i].key_pem,
                "egress.yaml": files::egress_config(&url, &ca, &crt, &key),
                "webhook.kubeconfig": files::webhook_kubeconfig(&crt, &key),
                "admission.yaml": files::admission_config(&f("webhook.kubeconfig")),
            });
            shoot.per_namespace.insert(ns.to_owned(), own);
        }
        shoot.args.extend([
            format!(
                "--egress-selector-config-file={}",
                f("egress.yaml").display()
            ),
            format!(
                "--admission-control-config-file={}",
                f("admission.yaml").display()
            ),
        ]);
    }
}

/// Seed a's stand-in for `vpn-seed-server` ([module docs](self)): applied, rolled out, its
/// load balancer's address.
fn stand_in(a: &Node) -> String {
    let image = a.jsonpath(
        SYSTEM,
        "ds/isthmus-proxy",
        "{.spec.template.spec.containers[0].image}",
    );
    for body in stand_in_objects(a, image) {
        a.apply(&body.to_string());
    }
    a.rolled_out(SRC, &format!("deploy/{}", server::NAME), 240);
    lb_address(a, SRC, STAND_IN)
}

/// The stand-in's objects in seed `a` running `image`, in the order they are applied.
fn stand_in_objects(a: &Node, image: String) -> Vec<Value> {
    let spec: EtcdMigrationSpec = serde_json::from_value(json!({
        "role": "destination", "step": "Join", "etcdName": ETCD, "seedName": seed_name(a),
        "internalDomain": DOMAIN,
        "dns": {"type": "local", "secretRef": {"name": "dns-internal", "namespace": SRC}},
        "loadBalancer": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "vpn": vpn_spec(SRC, VPN_A, a),
    }))
    .unwrap();
    let labels = BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), SYSTEM.to_owned())]);
    let settings = TunnelServers {
        image,
        // Agents reach it through its own load balancer: no proxy sends a PROXY header.
        trusted_proxies: Vec::new(),
        priority_class: String::new(),
        service_monitor: false,
        listen: Ipv4Addr::UNSPECIFIED.into(),
        kube_apiserver_egress: false,
    };
    let owner = Owner {
        name: STAND_IN.into(),
        uid: String::new(),
    };
    let proxies = Proxies {
        namespace_labels: &labels,
        alias: "all-shoots",
    };
    let mut out = Vec::new();
    for mut body in objects(&spec, SRC, &owner, &proxies, &settings).unwrap() {
        let (kind, name) = (body["kind"].clone(), body["metadata"]["name"].clone());
        let only_controllers = kind == "PodDisruptionBudget"
            || (kind == "Service" && name == server::NAME)
            || (kind == "NetworkPolicy" && name == server::AGENTS_POLICY);
        if only_controllers {
            continue;
        }
        if let Some(m) = body["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
        out.push(body);
    }
    out.extend([
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": STAND_IN, "namespace": SRC},
            "spec": {
                "type": "LoadBalancer", "selector": server::selector(),
                "ports": [{"name": "agents", "port": VPN_PORT, "targetPort": AGENTS_PORT}],
            },
        }),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": STAND_IN_POLICY, "namespace": SRC},
            "spec": {
                "podSelector": {"matchLabels": server::selector()},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": AGENTS_PORT}]}],
            },
        }),
    ]);
    out
}

/// Seed a's stand-in as [`stand_in`] applies it, without a node: the controller's server
/// (its configuration, CONNECT front and its policy, Deployment) without its owner, behind a
/// load balancer of its own; the configuration admits the agents' and the source
/// kube-apiserver's names and trusts no proxy.
pub fn the_stand_in_is_the_controllers_server() {
    let objects = stand_in_objects(&Node::seed('a'), "isthmus:latest".into());
    let names: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "ConfigMap/isthmus-tunnel-server",
            "Service/isthmus-tunnel-connect",
            "NetworkPolicy/isthmus-tunnel-server-connect",
            "Deployment/isthmus-tunnel-server",
            "Service/vpn-seed-server",
            "NetworkPolicy/allow-vpn-seed-server",
        ]
    );
    assert!(objects
        .iter()
        .all(|o| o["metadata"].get("ownerReferences").is_none()));
    let config = objects[0]["data"][server::CONFIG_KEY].as_str().unwrap();
    assert!(
        config.contains(AGENT) && config.contains("kube-apiserver.seed-a"),
        "{config}"
    );
    assert!(!config.contains("trusted_proxies"), "{config}");
    assert_eq!(
        objects[3]["spec"]["template"]["spec"]["containers"][0]["image"],
        "isthmus:latest"
    );
}

fn lb_address(seed: &Node, ns: &str, svc: &str) -> String {
    poll(
        seed,
        &format!("{ns}/{svc}'s load balancer address"),
        SETUP,
        POLL,
        || {
            let ip = seed.jsonpath(
                ns,
                &format!("svc/{svc}"),
                "{.status.loadBalancer.ingress[0].ip}",
            );
            ip.parse::<Ipv4Addr>().map(|_| ip.clone()).map_err(|_| ip)
        },
    )
}

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

    /// Checks what [`Shoot::after_load`] read: reviews answered from both seeds'
    /// kube-apiservers, no failed call.
    pub fn check(&self) {
        let s = self.seen.borrow();
        assert!(s.per_seed[0] > 0, "no review from the source: {s:?}");
        assert!(s.per_seed[1] > 0, "no review from the destination: {s:?}");
        let failed = s.dropped + s.dials_failed + s.connects_failed.iter().flatten().sum::<usize>();
        assert_eq!(failed, 0, "failed webhook calls: {s:?}");
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
