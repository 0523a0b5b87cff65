//! The controller tests' etcd: every member the planner spells (`plan::members`) on loopback
//! ports the test picks, advertising the names etcd-druid gives it — its exposed one
//! (`https://<pod>.<ns>.<seed>.<domain>:<port>`) and its in-cluster one
//! (`https://<pod>.<etcd>-peer.<ns>.svc:<port>`) — with a private `/etc/hosts` per member
//! ([`Place::PrivateHosts`]) that resolves every name to 127.0.0.1, so the machine's resolver
//! is untouched and the test stays in the host's network namespace. Each seed's two ports of
//! a member are distinct (the tests pick runs far apart), so the in-cluster URLs are unique.
//! Their certificates come from a CA of the test's own, or from one it brings ([`MemberCa`]).

use super::{Cluster, MemberDef, Place};
use isthmus_controller::plan::Member;
use isthmus_testkit::{CertKey, Scratch, TestPki};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The cluster (no member runs yet), and what a test needs to reach it as the controller.
#[derive(Debug)]
pub struct Loopback {
    pub cluster: Cluster,
    /// The CA's certificate (PEM).
    pub ca_pem: String,
    /// A client certificate of that CA (the controller's).
    pub client: CertKey,
    /// `host:port` of every exposed client URL → its loopback address (the controller's
    /// `etcd_connect_to`).
    pub connect_to: BTreeMap<String, SocketAddr>,
}

/// A spec port scheme's base with free loopback ports: peer ports `base..base+n` and client
/// ports `base-100-i` for `i < n` (the scheme's `clientBase` is `base - 100`). Searched below
/// the kernel's ephemeral range (32768+), where no outgoing connection takes a port between
/// the check and etcd's bind, starting at a per-process pseudo-random offset. A port once
/// handed out is never handed out again in this process: nothing binds a run until its etcd
/// starts, so a later call could find it free (a CI run saw one member's plain client port
/// fall on a port of the spec's run, and its etcd fail with "address already in use").
pub fn free_run(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    use std::sync::Mutex;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    static TAKEN: Mutex<std::collections::BTreeSet<u16>> =
        Mutex::new(std::collections::BTreeSet::new());
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    let start = 20_000 + (seed % 10_000) as u16;
    for _ in 0..2_000 {
        let step = NEXT.fetch_add(7, Ordering::Relaxed);
        let base = 20_000 + (start - 20_000 + step) % 12_000;
        let ports: Vec<u16> = (0..n).flat_map(|i| [base + i, base - 100 - i]).collect();
        let free =
            |p: &u16| !taken.contains(p) && std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok();
        if ports.iter().all(free) {
            taken.extend(ports);
            return base;
        }
    }
    panic!("no free run of {n} loopback ports in 20000..32000");
}

#[test]
fn runs_handed_out_in_one_process_never_share_a_port() {
    let ports = |base: u16| (0..3).flat_map(move |i| [base + i, base - 100 - i]);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        for p in ports(free_run(3)) {
            assert!(seen.insert(p), "port {p} handed out twice");
        }
    }
}

/// The CA that issues the members' certificates: a fresh one of the test's own
/// ([`TestPki`], [`Loopback::new`]), or one the test brings ([`Loopback::cluster_of_ca`]).
pub trait MemberCa {
    /// The CA's certificate (PEM): what the members trust, from peers and from clients.
    fn ca_pem(&self) -> String;
    /// A certificate for server and client use (an etcd peer's) naming `names`: PEM
    /// certificate and key.
    fn peer_pem(&self, names: &[&str]) -> (String, String);
}

impl MemberCa for TestPki {
    fn ca_pem(&self) -> String {
        TestPki::ca_pem(self)
    }
    fn peer_pem(&self, names: &[&str]) -> (String, String) {
        let c = self.peer_cert(names);
        (c.cert_pem, c.key_pem)
    }
}

impl Loopback {
    /// The cluster of `members` (of the `Etcd` `etcd` in `namespace`, every seed's), their
    /// certificates, hosts file and client certificate written into a scratch directory.
    pub fn new(members: &[Member], namespace: &str, etcd: &str) -> Self {
        let pki = TestPki::new();
        let (cluster, connect_to) = Self::cluster_of_ca(members, namespace, etcd, &pki);
        Self {
            ca_pem: pki.ca_pem(),
            client: pki.client_cert("isthmus-controller"),
            cluster,
            connect_to,
        }
    }

    /// [`Loopback::new`]'s cluster and `connect_to`, the members' certificates issued by `ca`
    /// and trusting it alone: a shoot's `ca-etcd`, whose owner (Gardener's secrets manager)
    /// issues the clients' certificates, so none is made here.
    pub fn cluster_of_ca(
        members: &[Member],
        namespace: &str,
        etcd: &str,
        ca: &dyn MemberCa,
    ) -> (Cluster, BTreeMap<String, SocketAddr>) {
        let dir = Scratch::new("etcd");
        let hosts = dir.join("hosts");
        let in_cluster = |m: &Member| format!("{}.{etcd}-peer.{namespace}.svc", m.pod);
        std::fs::write(dir.join("ca.crt"), ca.ca_pem()).unwrap();
        let mut lines = String::from("127.0.0.1 localhost\n");
        let mut defs = Vec::new();
        // The harness' plain client ports: a run of their own.
        let plain = free_run(u16::try_from(members.len()).unwrap());
        for (m, port) in members.iter().zip(plain..) {
            let names = [
                m.dns_name.as_str(),
                &in_cluster(m),
                "localhost",
                "127.0.0.1",
            ];
            let (cert, key) = ca.peer_pem(&names);
            std::fs::write(dir.join(&format!("{}.crt", m.member)), cert).unwrap();
            std::fs::write(dir.join(&format!("{}.key", m.member)), key).unwrap();
            lines += &format!("127.0.0.1 {} {}\n", m.dns_name, in_cluster(m));
            defs.push(MemberDef {
                name: m.member.clone(),
                exposed_peer_url: m.peer_url(),
                in_cluster_peer_url: format!("https://{}:{}", in_cluster(m), m.peer_port),
                listen_peer_url: format!("https://127.0.0.1:{}", m.peer_port),
                client_url: format!("http://127.0.0.1:{port}"),
                tls_client_url: format!("https://127.0.0.1:{}", m.client_port),
                place: Place::PrivateHosts(hosts.clone()),
            });
        }
        std::fs::write(&hosts, lines).unwrap();
        let connect_to = members
            .iter()
            .map(|m| {
                let to = SocketAddr::from(([127, 0, 0, 1], m.client_port));
                (format!("{}:{}", m.dns_name, m.client_port), to)
            })
            .collect();
        (Cluster::in_scratch(dir, defs, false), connect_to)
    }
}
