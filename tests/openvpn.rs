//! OpenVPN (Debian `openvpn`) through the proxy's `http_connect` listener with Gardener's
//! `X-Gardener-Destination` header, as `vpn-shoot` reaches the seed today.
//!
//! Two network namespaces joined by a veth pair: the "seed" runs the proxy (listening on its
//! veth address), the OpenVPN server (on its loopback, reachable only through the proxy) and a
//! small HTTP server on the tunnel address; the "shoot" runs the OpenVPN client with
//! `--http-proxy` and fetches a page from the seed through the tunnel. Fixed ports and
//! addresses are safe: both namespaces exist for this test alone. Needs root, iproute2,
//! openvpn, curl and python3 (`.ci/run` installs them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::openvpn::{self, DESTINATION_HEADER as HEADER};
use isthmus_testkit::{Netns, Scratch, TestPki};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEST: &str = "outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local";

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command, log: &std::path::Path) -> Proc {
    let log = std::fs::File::create(log).unwrap();
    Proc(
        cmd.stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

#[test]
fn openvpn_tunnels_through_the_http_connect_listener() {
    isthmus_testkit::tier::needs_tools(
        &["openvpn", "ip", "curl", "python3"],
        "run .ci/run or scripts/install-deps.sh",
    );
    let seed = Netns::new("vpnseed")
        .unwrap_or_else(|e| panic!("network namespaces unavailable (run as root): {e}"));
    let shoot = Netns::new("vpnshoot").unwrap();
    seed.link(&shoot, "10.213.7.1/30", "10.213.7.2/30").unwrap();
    let dir = Scratch::new("openvpn");
    let pki = TestPki::new();
    let ca = pki.write_ca(dir.path());
    let (scrt, skey) = pki
        .server_cert(&["vpn-seed-server"])
        .write(dir.path(), "server");
    let (ccrt, ckey) = pki.client_cert("vpn-shoot").write(dir.path(), "client");
    std::fs::write(
        dir.join("proxy.yaml"),
        format!(
            "admin: {{ address: \"127.0.0.1:9901\" }}
listeners:
  - name: vpn
    address: \"10.213.7.1:8132\"
    kind: http_connect
    route_header: {HEADER}
    routes:
      - {{ header_value: \"{DEST}\", upstream: vpn-seed-server-0 }}
upstreams:
  - {{ name: vpn-seed-server-0, endpoints: [\"127.0.0.1:1194\"] }}
"
        ),
    )
    .unwrap();
    let _proxy = spawn(
        seed.command(env!("CARGO_BIN_EXE_isthmus"))
            .args(["proxy", "--config"])
            .arg(dir.join("proxy.yaml")),
        &dir.join("proxy.log"),
    );
    let server_tls = openvpn::Tls {
        ca: &ca,
        cert: &scrt,
        key: &skey,
    };
    let _server = spawn(
        seed.command("openvpn").args(openvpn::server_args(
            "127.0.0.1:1194".parse().unwrap(),
            ["10.8.99.1", "10.8.99.2"],
            server_tls,
            3,
        )),
        &dir.join("server.log"),
    );
    std::fs::write(dir.join("index.html"), "through-the-tunnel\n").unwrap();
    let _web = spawn(
        seed.command("python3")
            .args([
                "-m",
                "http.server",
                "8080",
                "--bind",
                "10.8.99.1",
                "--directory",
            ])
            .arg(dir.path()),
        &dir.join("web.log"),
    );
    let client_tls = openvpn::Tls {
        ca: &ca,
        cert: &ccrt,
        key: &ckey,
    };
    let _client = spawn(
        shoot.command("openvpn").args(openvpn::client_args(
            "10.0.0.1:1194".parse().unwrap(),
            "10.213.7.1:8132".parse().unwrap(),
            DEST,
            ["10.8.99.2", "10.8.99.1"],
            client_tls,
            3,
        )),
        &dir.join("client.log"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = shoot
            .command("curl")
            .args(["-sf", "--max-time", "2", "http://10.8.99.1:8080/index.html"])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).trim() == "through-the-tunnel" {
            break;
        }
        if Instant::now() > deadline {
            let log = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            panic!(
                "no traffic through the tunnel within 60 s\n--- client\n{}\n--- server\n{}\n--- proxy\n{}",
                log("client.log"),
                log("server.log"),
                log("proxy.log")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let metrics = seed
        .command("curl")
        .args(["-sf", "http://127.0.0.1:9901/metrics"])
        .output()
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    let forwarded = format!(
        "isthmus_proxy_connections_total{{listener=\"vpn\",route=\"{DEST}\",upstream=\"vpn-seed-server-0\",outcome=\"forwarded\"}}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with(&forwarded)),
        "the tunnel did not go through the route:\n{metrics}"
    );
}
