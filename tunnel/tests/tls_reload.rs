//! Certificates rotated under a running server (issue 47 point 8): the files change, the
//! server reads them again for the handshakes that follow, and the sessions and tunnels up
//! stay up.

mod common;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use isthmus_config::{load_file, TunnelServerConfig};
use isthmus_testkit::{wait_until, TestPki};
use isthmus_tunnel::server::ServerOptions;
use rustls::pki_types::ServerName;
use std::path::Path;
use std::time::Duration;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

const APPLIED: &str = "isthmus_tunnel_tls_reloads_total{outcome=\"applied\"}";

/// Replaces `path` the way a Secret volume does: a new file (a new inode) renamed into place.
#[allow(clippy::unwrap_used)]
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// An HTTP/1 connection to the webhook through the tunnel, kept open between requests.
#[allow(clippy::unwrap_used)]
async fn open_webhook(
    world: &World,
    addr: &ConnectAddr,
    webhook: std::net::SocketAddr,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let io = connect(addr, Some(world.apiserver_tls()), &webhook.to_string())
        .await
        .unwrap();
    let client = TlsConnector::from(world.pki.client_config(None, &["http/1.1"]));
    let name = ServerName::try_from("webhook.test").unwrap();
    let tls = client.connect(name, io).await.unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

#[allow(clippy::unwrap_used)]
async fn get(send: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>) -> Bytes {
    let req = Request::get("/")
        .header("host", "webhook.test")
        .body(Empty::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    resp.into_body().collect().await.unwrap().to_bytes()
}

/// The agents' server certificate and client CA are replaced by another CA's: an agent of the
/// new CA gets in, one of the old CA no longer does, and the session and the tunnel opened
/// before the rotation carry on, without a restart.
#[allow(clippy::unwrap_used)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_without_a_restart_and_sessions_stay() {
    let world = World::new();
    let dir = world.dir.path();
    let (crt, key) = world.server_cert.write(dir, "agents");
    let ca = dir.join("agents-ca.crt");
    std::fs::write(&ca, world.pki.ca_pem()).unwrap();
    let connect_ca = dir.join("connect-ca.crt");
    std::fs::write(&connect_ca, world.pki.ca_pem()).unwrap();
    let (ccrt, ckey) = world.server_cert.write(dir, "connect");
    let path = dir.join("server.yaml");
    let tls = |c: &Path, k: &Path, ca: &Path| {
        format!(
            "{{ cert: {}, key: {}, client_ca: {} }}",
            c.display(),
            k.display(),
            ca.display()
        )
    };
    std::fs::write(
        &path,
        format!(
            "agents: {{ address: \"127.0.0.1:0\", tls: {} }}\nconnect: {{ address: \"127.0.0.1:0\", tls: {} }}\n",
            tls(&crt, &key, &ca),
            tls(&ccrt, &ckey, &connect_ca)
        ),
    )
    .unwrap();
    let config = load_file::<TunnelServerConfig>(&path).unwrap().config;
    let mut opts = ServerOptions::from_config(&config).unwrap();
    opts.probe_interval = Duration::from_millis(200);
    let server = TestServer::start(opts, None, None).await;
    let stop = CancellationToken::new();
    tokio::spawn({
        let (s, p, stop) = (server.server.clone(), path.clone(), stop.clone());
        async move { s.watch_tls(p, Duration::from_millis(50), stop).await }
    });
    let (webhook, _) = start_webhook(&world).await;
    let resolver = SwitchResolver::new(vec![server.agents]);
    let old = TestAgent::start(world.agent_options(
        vec![entry("vpn.test:443")],
        resolver.clone(),
        &["127.0.0.0/8"],
    ));
    live(&server.server, 1, "the agent of the old CA is connected").await;
    let addr = ConnectAddr::Tcp(server.connect);
    let mut tunnel = open_webhook(&world, &addr, webhook).await;
    assert_eq!(get(&mut tunnel).await.as_ref(), b"ok");

    let rotated = TestPki::new();
    let cert = rotated.server_cert(&["vpn.test", "127.0.0.1"]);
    replace(&key, &cert.key_pem);
    replace(&crt, &cert.cert_pem);
    replace(&ca, &rotated.ca_pem());
    wait_until("the rotation is applied", DEADLINE, || async {
        metric(&server.metrics(), APPLIED) >= 1.0
    })
    .await;

    let agent_cert = rotated.client_cert("vpn-shoot");
    let mut o = world.agent_options(vec![entry("vpn.test:443")], resolver.clone(), &[]);
    o.tls = rotated.client_config(Some(&agent_cert), &["h2"]);
    let new = TestAgent::start(o);
    live(&server.server, 2, "the agent of the new CA is connected").await;
    // What was up before the rotation is still up.
    assert_eq!(get(&mut tunnel).await.as_ref(), b"ok");
    assert_eq!(
        metric(
            &old.metrics(),
            "isthmus_tunnel_handshakes_total{outcome=\"ok\"}"
        ),
        1.0
    );
    // The old CA is out: a new agent of it fails its handshake.
    let late = TestAgent::start(world.agent_options(vec![entry("vpn.test:443")], resolver, &[]));
    wait_until("the old CA's agent is refused", DEADLINE, || {
        let m = late.metrics();
        async move { metric(&m, "isthmus_tunnel_handshakes_total{outcome=\"failed\"}") >= 1.0 }
    })
    .await;
    assert_eq!(server.server.live_sessions(), 2);
    // Closed first: the old agent's drain would wait for it.
    drop(tunnel);
    stop.cancel();
    for a in [late, new, old] {
        a.stop().await;
    }
    server.stop().await;
}
