//! The temporary VPN's route as the controller renders it (issue 25 point 1), through the real
//! proxy to the real `isthmus tunnel-server`: with `spec.vpn.proxyProtocol: v2` the server,
//! trusting the proxy (`agents.trusted_proxies`), sees each agent's own address, so its
//! per-source handshake shares count agents and flooders, not the proxy; without it, every
//! agent is the proxy's address (and still gets in: a trusted peer may send no header).
//! Agents dial from 127.9.0.x (Linux routes all of 127/8 locally).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_controller::crd::{EtcdMigrationSpec, ProxyProtocol};
use isthmus_controller::plan::routes;
use isthmus_controller::proxy_config::{render_with, Layout};
use isthmus_proxy::Proxy;
use isthmus_testkit::{wait_until, Logged, Scratch, TestPki};
use prometheus_client::registry::Registry;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "shoot--foo--bar";
const VPN: &str = "vpn-tmp.foo.example.com";
const WAIT: Duration = Duration::from_secs(30);

/// A destination migration whose VPN target is the test's tunnel server (in a seed, the
/// server's Service: the route's endpoint is the target either way).
fn spec(server: SocketAddr, proxy_protocol: ProxyProtocol) -> EtcdMigrationSpec {
    serde_json::from_value(serde_json::json!({
        "role": "destination", "step": "Join", "etcdName": "etcd-main",
        "seedName": "seed-b", "internalDomain": "internal.example.com",
        "dns": {"type": "local", "secretRef": {"name": "dns", "namespace": NS}},
        "loadBalancer": {"name": "isthmus-proxy", "namespace": "isthmus-system"},
        "destination": {"memberNamePrefix": "seed-b", "sourceMembers": []},
        "vpn": {"dnsName": VPN, "target": server.to_string(), "proxyProtocol": proxy_protocol},
    }))
    .unwrap()
}

/// The real proxy serving the controller's file for `spec`'s VPN route (its listener and
/// admin on loopback port 0 instead of the seed's 8443 and 9901).
async fn proxy(dir: &Scratch, name: &str, spec: &EtcdMigrationSpec) -> (Proxy, SocketAddr) {
    let vpn: Vec<_> = routes(spec, NS, true)
        .into_iter()
        .filter(|r| r.listener.starts_with("vpn-"))
        .collect();
    let layout = Layout {
        admin: "127.0.0.1:0".parse().unwrap(),
        listeners: vec![("vpn-8443".into(), 8443)],
        trusted_proxies: Vec::new(),
        default_allowed_sources: Vec::new(),
    };
    let file = render_with(&layout, &vpn, |c| {
        for l in &mut c.listeners {
            l.address = "127.0.0.1:0".parse().unwrap();
        }
    })
    .unwrap();
    let path = dir.join(&format!("{name}.json"));
    std::fs::write(&path, &file.text).unwrap();
    let p = Proxy::start(&path, Registry::default()).await.unwrap();
    let ingress = p.listener_addr("vpn-8443").await.unwrap();
    (p, ingress)
}

/// `isthmus tunnel-server` with its JSON log lines collected; killed on drop.
struct Server {
    process: Logged,
    agents: SocketAddr,
}

impl Server {
    /// The client addresses of the server's agent log lines (`peer`), in order.
    fn peers(&self) -> Vec<String> {
        self.process
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| {
                let peer = v["fields"]["peer"].as_str()?;
                Some(peer.rsplit_once(':')?.0.to_string())
            })
            .collect()
    }
}

/// The server `name`, trusting PROXY headers from 127.0.0.1 if `trusted`.
async fn server(dir: &Scratch, pki: &TestPki, name: &str, trusted: bool) -> Server {
    let ca = pki.write_ca(dir.path());
    pki.server_cert(&[VPN]).write(dir.path(), name);
    let p = |n: &str| dir.join(n).display().to_string();
    let trusted = if trusted { "127.0.0.1/32" } else { "" };
    let config = dir.join(&format!("{name}.yaml"));
    // Every port 0: the server logs the address its agents' listener was given.
    std::fs::write(
        &config,
        format!(
            "agents: {{ address: \"127.0.0.1:0\", trusted_proxies: [{trusted}], \
             tls: {{ cert: {}, key: {}, client_ca: {}, allowed_client_names: [agent.example] }} }}\n\
             connect: {{ address: \"127.0.0.1:0\" }}\n\
             admin: {{ address: \"127.0.0.1:0\" }}\n",
            p(&format!("{name}.crt")),
            p(&format!("{name}.key")),
            ca.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_isthmus"));
    cmd.args(["--log-format", "json", "tunnel-server", "--config"])
        .arg(&config);
    let mut process = Logged::spawn(cmd);
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline && !process.exited() {
        let running = process.lines().iter().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v["fields"]["message"] == "tunnel server running")
                .then(|| v["fields"]["agents"].as_str()?.parse::<SocketAddr>().ok())?
        });
        if let Some(agents) = running {
            assert_ne!(agents.port(), 0, "the bound port, not the file's");
            return Server { process, agents };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no server:\n{}", process.lines().join("\n"));
}

/// An agent's TLS handshake from `source` through `ingress` (mutual TLS, the VPN's name, h2),
/// then a clean close; the server logs the session's end with the client address it saw.
async fn agent_from(pki: &TestPki, source: Ipv4Addr, ingress: SocketAddr) -> std::io::Result<()> {
    let cert = pki.peer_cert(&["agent.example"]);
    let config = pki.client_config(Some(&cert), &["h2"]);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source.into(), 0)).unwrap();
    let tcp = socket.connect(ingress).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(VPN).unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await?;
    tls.shutdown().await?;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, tls.read_to_end(&mut rest)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_proxy_protocol_v2_the_tunnel_server_sees_the_agents_address() {
    let dir = Scratch::new("vpn-proxy-protocol");
    let pki = TestPki::new();
    let server = server(&dir, &pki, "server", true).await;

    // spec.vpn.proxyProtocol: v2 — the server sees the agent's address.
    let (with, ingress) = proxy(&dir, "v2", &spec(server.agents, ProxyProtocol::V2)).await;
    agent_from(&pki, Ipv4Addr::new(127, 9, 0, 1), ingress)
        .await
        .unwrap();
    wait_until("the server logs the agent", WAIT, || async {
        !server.peers().is_empty()
    })
    .await;
    assert!(
        server.peers().iter().all(|p| p == "127.9.0.1"),
        "{:?}",
        server.peers()
    );

    // Default (none) — every agent is the proxy's address.
    let (without, ingress) = proxy(&dir, "none", &spec(server.agents, ProxyProtocol::None)).await;
    agent_from(&pki, Ipv4Addr::new(127, 9, 0, 2), ingress)
        .await
        .unwrap();
    wait_until("the server logs the second agent", WAIT, || async {
        server.peers().iter().any(|p| p == "127.0.0.1")
    })
    .await;
    let peers = server.peers();
    assert!(
        peers.iter().all(|p| p == "127.9.0.1" || p == "127.0.0.1"),
        "{peers:?}"
    );

    for p in [with, without] {
        p.shutdown(Duration::ZERO, Duration::from_secs(1)).await;
    }
}

/// Why `proxyProtocol` is off unless asked for: a tunnel server that does not list the
/// proxies in `agents.trusted_proxies` reads the header as the start of the TLS handshake and
/// refuses every agent behind a `v2` route; without the header, agents get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_trust_the_proxy_refuses_agents_behind_a_v2_route() {
    let dir = Scratch::new("vpn-proxy-protocol-untrusted");
    let pki = TestPki::new();
    let server = server(&dir, &pki, "untrusting", false).await;
    let (with, ingress) = proxy(&dir, "v2", &spec(server.agents, ProxyProtocol::V2)).await;
    let refused = agent_from(&pki, Ipv4Addr::new(127, 9, 0, 3), ingress).await;
    assert!(refused.is_err(), "the handshake went through: {refused:?}");
    let (without, ingress) = proxy(&dir, "none", &spec(server.agents, ProxyProtocol::None)).await;
    agent_from(&pki, Ipv4Addr::new(127, 9, 0, 4), ingress)
        .await
        .unwrap();
    for p in [with, without] {
        p.shutdown(Duration::ZERO, Duration::from_secs(1)).await;
    }
}
