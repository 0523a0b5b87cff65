//! The bench's world: a seed and a shoot network namespace joined to the bench process (the
//! host) by veth pairs, the shoot's targets, the emulated link, an HTTP CONNECT proxy standing
//! in for the seed's ingress, and the peers: the direct path (the floor), the isthmus tunnel
//! (in this process), konnectivity (`proxy-server`/`proxy-agent` processes) and OpenVPN (TUN in
//! the two namespaces, TCP through the CONNECT proxy).
//!
//! ```text
//!  host (this process: callers, isthmus server+agent, konnectivity server+agent, link, proxy)
//!   ├─ veth 10.213.171.1 ⇄ seed  10.213.171.2   OpenVPN server (tcp 1194), tun 10.8.171.1
//!   └─ veth 10.213.172.1 ⇄ shoot 10.213.172.2   targets (:8443 webhook, :8444 source),
//!                                                OpenVPN client, tun 10.8.171.2
//! ```
//! Every tunnel's agent-side connection crosses one [`Link`] (the emulated RTT); the floor's
//! calls cross one too. Host routes: 10.8.171.2 via the seed, so the callers reach the shoot's
//! TUN address through the OpenVPN server.

use super::load::{Dialer, Entry};
use super::targets::{self, SOURCE_PORT, WEBHOOK_PORT};
use isthmus_lab::link::Link;
use isthmus_testkit::{openvpn, Netns, Scratch, TestPki};
use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOST_SEED: Ipv4Addr = Ipv4Addr::new(10, 213, 171, 1);
const SEED: Ipv4Addr = Ipv4Addr::new(10, 213, 171, 2);
const HOST_SHOOT: Ipv4Addr = Ipv4Addr::new(10, 213, 172, 1);
const SHOOT: Ipv4Addr = Ipv4Addr::new(10, 213, 172, 2);
const VPN_SHOOT: Ipv4Addr = Ipv4Addr::new(10, 8, 171, 2);
pub const KONNECTIVITY_VERSION: &str = "v0.34.0";

/// A process killed on drop.
pub struct Proc(pub Child, PathBuf);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Proc {
    let file = std::fs::File::create(log).unwrap();
    Proc(
        cmd.stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
        log.into(),
    )
}

impl Proc {
    /// The last lines of its log, for a failure's message.
    fn tail(&self) -> String {
        let log = std::fs::read_to_string(&self.1).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(15);
        format!("--- {}:\n{}", self.1.display(), lines[from..].join("\n"))
    }
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A veth pair between the host and `ns`.
fn host_veth(ns: &Netns, tag: &str, host: Ipv4Addr, inner: Ipv4Addr) {
    let (h, n) = (
        format!("tb{tag}{}h", std::process::id() % 10_000),
        format!("tb{tag}{}n", std::process::id() % 10_000),
    );
    sh(&["ip", "link", "add", &h, "type", "veth", "peer", "name", &n]);
    sh(&["ip", "link", "set", &n, "netns", ns.name()]);
    sh(&["ip", "addr", "add", &format!("{host}/30"), "dev", &h]);
    sh(&["ip", "link", "set", &h, "up"]);
    sh(&[
        "ip",
        "-n",
        ns.name(),
        "addr",
        "add",
        &format!("{inner}/30"),
        "dev",
        &n,
    ]);
    sh(&["ip", "-n", ns.name(), "link", "set", &n, "up"]);
}

/// A free loopback port (bound, read, released: the peers' command lines need numbers).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The parts every peer shares.
pub struct World {
    pub dir: Scratch,
    pub pki: TestPki,
    pub caller_tls: Arc<rustls::ClientConfig>,
    // Drop order: processes before their namespaces.
    _targets: Proc,
    pub seed: Netns,
    pub shoot: Netns,
}

impl World {
    pub fn new() -> World {
        let dir = Scratch::new("tunnels-bench");
        let pki = TestPki::new();
        let seed = Netns::new("tbseed").unwrap_or_else(|e| panic!("needs root and iproute2: {e}"));
        let shoot = Netns::new("tbshoot").unwrap();
        host_veth(&seed, "s", HOST_SEED, SEED);
        host_veth(&shoot, "t", HOST_SHOOT, SHOOT);
        sh(&[
            "ip",
            "netns",
            "exec",
            seed.name(),
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        sh(&[
            "ip",
            "route",
            "add",
            &format!("{VPN_SHOOT}/32"),
            "via",
            &SEED.to_string(),
        ]);
        let (crt, key) = pki
            .server_cert(&[targets::WEBHOOK_NAME])
            .write(dir.path(), "webhook-src");
        std::fs::copy(crt, dir.join("webhook.crt")).unwrap();
        std::fs::copy(key, dir.join("webhook.key")).unwrap();
        let exe = std::env::current_exe().unwrap();
        let mut child = shoot
            .command(exe.to_str().unwrap())
            .env(targets::ROLE_ENV, dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "targets did not start");
        let caller_tls = pki.client_config(None, &[]);
        World {
            _targets: Proc(child, PathBuf::from("(stderr)")),
            dir,
            pki,
            caller_tls,
            seed,
            shoot,
        }
    }

    /// The targets as seen from the host over the shoot's veth.
    /// A dialer of the shoot's targets (webhook and source) through `entry`.
    pub fn dialer(&self, entry: Entry) -> Dialer {
        Dialer {
            entry,
            webhook: SocketAddr::from((SHOOT, WEBHOOK_PORT)),
            source: SocketAddr::from((SHOOT, SOURCE_PORT)),
            tls: self.caller_tls.clone(),
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["route", "del", &format!("{VPN_SHOOT}/32")])
            .status();
    }
}

/// Waits (up to 30 s) until `proc` has logged `prefix` followed by an address, and returns it.
async fn logged_address(proc: &Proc, prefix: &str) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&proc.1).unwrap_or_default();
        let found = log.lines().find_map(|l| {
            let rest = &l[l.find(prefix)? + prefix.len()..];
            rest.split_whitespace().next()?.parse().ok()
        });
        if let Some(addr) = found {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "never logged {prefix}…\n{}",
            proc.tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 30 s) until `addr` accepts connections: a peer's ports are picked free before
/// its process binds them, and the next peer must not pick the same one meanwhile.
async fn listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{what} never listened on {addr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A relay of `link` on a free port of `ip` to `target` (bound on port 0, so no other process
/// can take the port between choosing and binding it); returns where it listens.
async fn relay(link: &Link, ip: Ipv4Addr, target: SocketAddr) -> SocketAddr {
    link.relay(SocketAddr::from((ip, 0)), target).await.unwrap()
}

/// The seed's ingress as Gardener's VPN reaches it: an HTTP CONNECT proxy that routes every
/// CONNECT (by its routing header, in Gardener) to one upstream.
async fn connect_proxy(upstream: SocketAddr) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = c.set_nodelay(true);
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let Ok(mut u) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = u.set_nodelay(true);
                if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                // 64 KiB a read, as the link relay: tokio's default of 8 KiB made this stand-in
                // cost four times the system calls per byte of everything else on the path.
                let _ =
                    tokio::io::copy_bidirectional_with_sizes(&mut c, &mut u, 64 << 10, 64 << 10)
                        .await;
            });
        }
    });
    addr
}

/// One running peer.
pub struct Peer {
    pub name: &'static str,
    pub dialer: Dialer,
    /// The link its agent-side connection (or the floor's calls) crosses.
    pub link: Link,
    /// Its processes besides this one (CPU and memory are counted over these and ours).
    pub pids: Vec<u32>,
    _procs: Vec<Proc>,
}

impl Peer {
    /// Waits (up to 60 s) until a webhook call through the peer succeeds.
    pub async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match tokio::time::timeout(Duration::from_secs(3), self.dialer.call()).await {
                Ok(Ok(_)) => return,
                r if Instant::now() > deadline => {
                    let last = match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".into(),
                    };
                    let logs: Vec<String> = self._procs.iter().map(Proc::tail).collect();
                    panic!(
                        "{} never carried a call (last attempt: {last}); \
                         ISTHMUS_KEEP_SCRATCH=1 keeps every log\n{}",
                        self.name,
                        logs.join("\n")
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// The floor: calls straight across the link to the targets.
pub async fn direct(w: &World, rtt: Duration) -> Peer {
    let link = Link::new(rtt);
    let mut dialer = w.dialer(Entry::Tcp);
    dialer.webhook = relay(&link, Ipv4Addr::LOCALHOST, dialer.webhook).await;
    dialer.source = relay(&link, Ipv4Addr::LOCALHOST, dialer.source).await;
    Peer {
        name: "direct",
        dialer,
        link,
        pids: vec![],
        _procs: vec![],
    }
}

/// Waits (up to 30 s) until the Unix socket `path` accepts connections.
async fn listening_unix(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::UnixStream::connect(path).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} never listened on {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What stands between the relays of a floor.
#[derive(Debug, Clone, Copy)]
pub enum Between {
    /// Plain TCP, a connection per stream (`relays`).
    Tcp,
    /// TLS 1.3, a connection per stream (`tls-relays`).
    Tls,
    /// HTTP/2 over TLS 1.3, one session for all streams (`h2-relays`, [`super::h2floor`]).
    H2,
}

/// The tunnel path's floor ([`super::floor`]): two relay processes where the tunnel's server
/// and agent stand, the same link and CONNECT proxy between them, nothing of a tunnel;
/// `between` them plain TCP, TLS or HTTP/2 over TLS.
pub async fn relays(w: &World, rtt: Duration, tag: &str, between: Between) -> Peer {
    let exe = std::env::current_exe().unwrap();
    let back = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (name, kind) = match between {
        Between::Tcp => ("relays", ""),
        Between::Tls => ("tls-relays", "tls-"),
        Between::H2 => ("h2-relays", "h2-"),
    };
    let (back_role, ca) = if let Between::Tcp = between {
        (format!("back:{back}"), None)
    } else {
        let d = w.dir.path();
        let (crt, key) = w
            .pki
            .server_cert(&[super::floor::TLS_NAME])
            .write(d, &format!("{name}-{tag}"));
        let role = format!("{kind}back:{back} {} {}", crt.display(), key.display());
        (role, Some(w.pki.write_ca(d)))
    };
    let back_proc = spawn(
        Command::new(&exe).env(super::floor::ROLE_ENV, back_role),
        &w.dir.join(&format!("{name}-back-{tag}.log")),
    );
    listening(back, name).await;
    let link = Link::new(rtt);
    let proxy = connect_proxy(back).await;
    let front = relay(&link, Ipv4Addr::LOCALHOST, proxy).await;
    let sock = w.dir.join(&format!("{name}-{tag}.sock"));
    let front_role = match &ca {
        None => format!("front:{} {front}", sock.display()),
        Some(ca) => format!("{kind}front:{} {front} {}", sock.display(), ca.display()),
    };
    let front_proc = spawn(
        Command::new(&exe).env(super::floor::ROLE_ENV, front_role),
        &w.dir.join(&format!("{name}-front-{tag}.log")),
    );
    listening_unix(&sock, name).await;
    Peer {
        name,
        dialer: w.dialer(Entry::Connect(sock)),
        link,
        pids: vec![front_proc.0.id(), back_proc.0.id()],
        _procs: vec![front_proc, back_proc],
    }
}

/// The isthmus tunnel as deployed: `isthmus tunnel-server` and `isthmus tunnel-agent`
/// processes with the defaults of their configuration; the agent reaches the server through
/// the link and the CONNECT proxy (as it would through Gardener's ingress), kube-apiserver
/// reaches the server's CONNECT endpoint on its Unix socket.
pub async fn isthmus(w: &World, rtt: Duration, tag: &str) -> Peer {
    let pki = &w.pki;
    let d = w.dir.path();
    let ca = pki.write_ca(d);
    let (scrt, skey) = pki
        .server_cert(&["vpn.test"])
        .write(d, &format!("isthmus-server-{tag}"));
    let (acrt, akey) = pki
        .client_cert("vpn-shoot")
        .write(d, &format!("isthmus-agent-{tag}"));
    let sock = w.dir.join(&format!("isthmus-{tag}.sock"));
    let p = |x: &Path| x.display().to_string();
    let server_yaml = w.dir.join(&format!("isthmus-server-{tag}.yaml"));
    std::fs::write(
        &server_yaml,
        format!(
            "agents: {{ address: \"127.0.0.1:0\", tls: {{ cert: \"{}\", key: \"{}\", client_ca: \"{}\" }} }}\n\
             connect: {{ unix: \"{}\" }}\n\
             admin: {{ address: \"127.0.0.1:0\" }}\n",
            p(&scrt),
            p(&skey),
            p(&ca),
            p(&sock),
        ),
    )
    .unwrap();
    // ISTHMUS_BIN runs another build (before/after comparisons of an optimisation).
    let bin = std::env::var("ISTHMUS_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_isthmus").into());
    let server = spawn(
        Command::new(&bin)
            .args(["tunnel-server", "--config"])
            .arg(&server_yaml),
        &w.dir.join(&format!("isthmus-server-{tag}.log")),
    );
    // Every port on 0: the server logs the one its agents' listener got.
    let agents = logged_address(&server, "tunnel server running agents=").await;
    let link = Link::new(rtt);
    let proxy = connect_proxy(agents).await;
    let front = relay(&link, Ipv4Addr::LOCALHOST, proxy).await;
    let agent_yaml = w.dir.join(&format!("isthmus-agent-{tag}.yaml"));
    std::fs::write(
        &agent_yaml,
        format!(
            "servers:\n  - {{ address: \"{front}\", server_name: vpn.test, http_connect_header: \"X-Gardener-Destination: vpn\" }}\n\
             tls: {{ ca: \"{}\", cert: \"{}\", key: \"{}\" }}\n\
             allow: [\"10.213.172.0/24\"]\n\
             admin: {{ address: \"127.0.0.1:0\" }}\n",
            p(&ca),
            p(&acrt),
            p(&akey),
        ),
    )
    .unwrap();
    let agent = spawn(
        Command::new(&bin)
            .args(["tunnel-agent", "--config"])
            .arg(&agent_yaml),
        &w.dir.join(&format!("isthmus-agent-{tag}.log")),
    );
    let dialer = w.dialer(Entry::Connect(sock));
    Peer {
        name: "isthmus",
        dialer,
        link,
        pids: vec![server.0.id(), agent.0.id()],
        _procs: vec![server, agent],
    }
}

pub fn konnectivity_bins() -> Option<(PathBuf, PathBuf)> {
    let root = isthmus_testkit::cache::dir().join(format!("konnectivity-{KONNECTIVITY_VERSION}"));
    let s = root.join("proxy-server");
    let a = root.join("proxy-agent");
    (s.exists() && a.exists()).then_some((s, a))
}

/// konnectivity in HTTP CONNECT mode on a Unix socket; the agent (mTLS) reaches the server's
/// agent port across the link (gRPC has no HTTP CONNECT proxy support for loopback targets).
pub async fn konnectivity(w: &World, rtt: Duration, tag: &str) -> Option<Peer> {
    let (server_bin, agent_bin) = konnectivity_bins()?;
    let pki = &w.pki;
    let d = w.dir.path();
    let ca = pki.write_ca(d);
    let (scrt, skey) = pki
        .server_cert(&["127.0.0.1", "localhost"])
        .write(d, &format!("konn-server-{tag}"));
    let (acrt, akey) = pki
        .client_cert("konnectivity-agent")
        .write(d, &format!("konn-agent-{tag}"));
    let sock = w.dir.join(&format!("konn-{tag}.sock"));
    let agent_port = free_port();
    let p = |x: &Path| x.display().to_string();
    let server = spawn(
        Command::new(server_bin).args([
            "--mode=http-connect",
            &format!("--uds-name={}", p(&sock)),
            "--delete-existing-uds-file",
            "--server-port=0",
            &format!("--agent-port={agent_port}"),
            "--agent-bind-address=127.0.0.1",
            &format!("--admin-port={}", free_port()),
            "--admin-bind-address=127.0.0.1",
            &format!("--health-port={}", free_port()),
            "--health-bind-address=127.0.0.1",
            &format!("--cluster-cert={}", p(&scrt)),
            &format!("--cluster-key={}", p(&skey)),
            &format!("--cluster-ca-cert={}", p(&ca)),
            "--server-count=1",
            "-v=0",
        ]),
        &w.dir.join(&format!("konn-server-{tag}.log")),
    );
    listening(
        SocketAddr::from(([127, 0, 0, 1], agent_port)),
        "konnectivity proxy-server",
    )
    .await;
    let link = Link::new(rtt);
    let front = relay(
        &link,
        Ipv4Addr::LOCALHOST,
        SocketAddr::from(([127, 0, 0, 1], agent_port)),
    )
    .await;
    let agent = spawn(
        Command::new(agent_bin).args([
            "--proxy-server-host=127.0.0.1",
            &format!("--proxy-server-port={}", front.port()),
            &format!("--ca-cert={}", p(&ca)),
            &format!("--agent-cert={}", p(&acrt)),
            &format!("--agent-key={}", p(&akey)),
            &format!("--admin-server-port={}", free_port()),
            "--admin-bind-address=127.0.0.1",
            &format!("--health-server-port={}", free_port()),
            "--health-server-host=127.0.0.1",
            "-v=0",
        ]),
        &w.dir.join(&format!("konn-agent-{tag}.log")),
    );
    let dialer = w.dialer(Entry::Connect(sock));
    Some(Peer {
        name: "konnectivity",
        dialer,
        link,
        pids: vec![server.0.id(), agent.0.id()],
        _procs: vec![server, agent],
    })
}

/// OpenVPN (Debian's) as Gardener's VPN runs it: TCP, the client in the shoot reaching the
/// server in the seed through the CONNECT proxy, TUN on both ends; the callers reach the
/// shoot's TUN address by the host route through the seed.
pub async fn openvpn(w: &World, rtt: Duration, tag: &str) -> Peer {
    let d = w.dir.path();
    let pki = &w.pki;
    let ca = pki.write_ca(d);
    let (scrt, skey) = pki
        .server_cert(&["vpn-seed-server"])
        .write(d, &format!("ovpn-server-{tag}"));
    let (ccrt, ckey) = pki
        .client_cert("vpn-shoot")
        .write(d, &format!("ovpn-client-{tag}"));
    let port = 1194u16;
    let server = spawn(
        w.seed.command("openvpn").args(openvpn::server_args(
            SocketAddr::from((SEED, port)),
            ["10.8.171.1", "10.8.171.2"],
            openvpn::Tls {
                ca: &ca,
                cert: &scrt,
                key: &skey,
            },
            1,
        )),
        &w.dir.join(&format!("ovpn-server-{tag}.log")),
    );
    let link = Link::new(rtt);
    let proxy = connect_proxy(SocketAddr::from((SEED, port))).await;
    let front = relay(&link, HOST_SHOOT, proxy).await;
    let mut client_args = openvpn::client_args(
        SocketAddr::from((SEED, port)),
        front,
        "vpn",
        ["10.8.171.2", "10.8.171.1"],
        openvpn::Tls {
            ca: &ca,
            cert: &ccrt,
            key: &ckey,
        },
        1,
    );
    client_args.extend(["--route", "10.213.171.0", "255.255.255.252"].map(String::from));
    let client = spawn(
        w.shoot.command("openvpn").args(client_args),
        &w.dir.join(&format!("ovpn-client-{tag}.log")),
    );
    let dialer = Dialer {
        entry: Entry::Tcp,
        webhook: SocketAddr::new(IpAddr::V4(VPN_SHOOT), WEBHOOK_PORT),
        source: SocketAddr::new(IpAddr::V4(VPN_SHOOT), SOURCE_PORT),
        tls: w.caller_tls.clone(),
    };
    Peer {
        name: "openvpn",
        dialer,
        link,
        pids: vec![server.0.id(), client.0.id()],
        _procs: vec![server, client],
    }
}
