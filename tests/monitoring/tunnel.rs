//! A temporary VPN for the dashboard's tunnel panels: the real `isthmus tunnel-server` and
//! `tunnel-agent` processes on loopback, mutual TLS from the test's CA, the agent's session
//! up, and kube-apiserver's part played by CONNECT requests to the server's front (one to an
//! echo target the agent allows and dials, one to a target it refuses).

use isthmus_testkit::{free_port, http_get, wait_until, Logged, Scratch, TestPki};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `isthmus --log-format json <args> --config <config>`.
fn spawn(args: &[&str], config: &std::path::Path) -> Logged {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_isthmus"));
    cmd.args(["--log-format", "json"])
        .args(args)
        .arg("--config")
        .arg(config);
    Logged::spawn(cmd)
}

pub struct Tunnel {
    pub server: Logged,
    pub agent: Logged,
    pub server_admin: SocketAddr,
    pub agent_admin: SocketAddr,
    pub connect: SocketAddr,
    _dir: Scratch,
}

impl Tunnel {
    /// Server and agent with the agent's session active (`isthmus_tunnel_sessions{state="active"} 1`
    /// on the server).
    pub async fn start() -> Tunnel {
        let dir = Scratch::new("monitoring-tunnel");
        let pki = TestPki::new();
        let ca = pki.write_ca(dir.path());
        pki.server_cert(&["tunnel.example"])
            .write(dir.path(), "server");
        pki.peer_cert(&["agent.example"]).write(dir.path(), "agent");
        let p = |n: &str| dir.join(n).display().to_string();
        for attempt in 1..=5 {
            let (agents, connect, server_admin, agent_admin) =
                (free_port(), free_port(), free_port(), free_port());
            std::fs::write(
                dir.join("server.yaml"),
                format!(
                    "agents: {{ address: \"127.0.0.1:{agents}\", tls: {{ cert: {}, key: {}, client_ca: {}, allowed_client_names: [agent.example] }} }}\n\
                     connect: {{ address: \"127.0.0.1:{connect}\" }}\n\
                     admin: {{ address: \"127.0.0.1:{server_admin}\" }}\n",
                    p("server.crt"),
                    p("server.key"),
                    ca.display()
                ),
            )
            .unwrap();
            std::fs::write(
                dir.join("agent.yaml"),
                format!(
                    "servers: [ {{ address: \"127.0.0.1:{agents}\", server_name: tunnel.example }} ]\n\
                     tls: {{ ca: {}, cert: {}, key: {} }}\n\
                     allow: [\"127.0.0.0/8\"]\n\
                     admin: {{ address: \"127.0.0.1:{agent_admin}\" }}\n",
                    ca.display(),
                    p("agent.crt"),
                    p("agent.key")
                ),
            )
            .unwrap();
            let mut server = spawn(&["tunnel-server"], &dir.join("server.yaml"));
            let mut agent = spawn(&["tunnel-agent"], &dir.join("agent.yaml"));
            let server_admin = SocketAddr::from(([127, 0, 0, 1], server_admin));
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                if let Ok((200, body)) = http_get(server_admin, "/metrics").await {
                    if body
                        .lines()
                        .any(|l| l == "isthmus_tunnel_sessions{state=\"active\"} 1")
                    {
                        return Tunnel {
                            server,
                            agent,
                            server_admin,
                            agent_admin: SocketAddr::from(([127, 0, 0, 1], agent_admin)),
                            connect: SocketAddr::from(([127, 0, 0, 1], connect)),
                            _dir: dir,
                        };
                    }
                }
                if server.exited() || agent.exited() || std::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let log = format!("server: {:?}\nagent: {:?}", server.lines(), agent.lines());
            assert!(
                log.contains("in use") && attempt < 5,
                "no agent session:\n{log}"
            );
        }
        unreachable!()
    }

    /// A CONNECT to `target` through the server's front; the stream once answered 200, or
    /// the status line of a refusal.
    pub async fn connect(&self, target: &str) -> Result<TcpStream, String> {
        let mut s = TcpStream::connect(self.connect).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).await.unwrap() == 0 {
                break;
            }
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        if head.starts_with("HTTP/1.1 200") {
            Ok(s)
        } else {
            Err(head)
        }
    }
}

/// A TCP echo server on loopback.
pub async fn echo() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A stream through the tunnel to `echo` that carried bytes both ways and stays open, and a
/// CONNECT the agent refuses (a target outside its allow-list).
pub async fn traffic(tunnel: &Tunnel, echo: SocketAddr) -> TcpStream {
    let mut s = tunnel
        .connect(&echo.to_string())
        .await
        .expect("CONNECT to the echo target");
    s.write_all(b"through the tunnel").await.unwrap();
    let mut buf = [0u8; 18];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"through the tunnel");
    let refused = tunnel.connect("192.0.2.1:80").await;
    assert!(
        refused.is_err(),
        "a target outside the agent's allow-list was dialled"
    );
    wait_until(
        "the tunnel's counters on the server",
        Duration::from_secs(30),
        || async {
            let (_, m) = http_get(tunnel.server_admin, "/metrics").await.unwrap();
            m.contains("isthmus_tunnel_connects_total{")
                && m.contains("isthmus_tunnel_bytes_total{")
        },
    )
    .await;
    s
}
