//! `Shrink` after the join made by the real druid through the proxy: what etcd-druid#1426
//! (open, not in v0.38.1) will do when the bootstrap block is cleared — leadership moved to a
//! destination member, then the source members removed — done through etcd's API by
//! seed-world's one copy of it (`seed_world::etcd::{move_leader, remove}`). Each member is
//! reached through `kubectl port-forward` (the members' addresses live in the node's network
//! namespace) and a local bridge that speaks the members' client TLS (seed-world's client is
//! plain, the lab's members listen on plain client URLs too). A removed member's pod restarts
//! and its backup-restore would add it back as a learner while a source member still serves
//! its client Service (scale-up detection, `pkg/initializer/initializer.go`): #1426's
//! anti-rejoin guard, played here by removing it again until the source `Etcd` is scaled to 0
//! (gardenlet's cleanup of the source).

use super::join_observe::Sides;
use super::node::{poll, Node, LONG, POLL};
use isthmus_seed_world::etcd::{self, MemberDef, Place};
use rustls::pki_types::ServerName;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Instant;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

/// `kubectl port-forward` of a pod's client port to a free local port, and a plain listener
/// on another that carries each connection over TLS to it; stopped on drop.
struct Forward {
    child: Child,
    url: String,
}

impl Forward {
    fn new(
        node: &Node,
        rt: &tokio::runtime::Runtime,
        tls: &Arc<rustls::ClientConfig>,
        ns: &str,
        pod: &str,
    ) -> Self {
        let mut child = node
            .kubectl_command(&["-n", ns, "port-forward", &format!("pod/{pod}"), ":2379"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        // kubectl writes a line per connection; a closed pipe would end it (SIGPIPE).
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        // "Forwarding from 127.0.0.1:40123 -> 2379"
        let forwarded = line
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("port-forward {ns}/{pod}: {line:?}"))
            .to_owned();
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connector = TlsConnector::from(tls.clone());
        // A name the members' server certificates carry (join_tls.rs).
        let name = ServerName::try_from(format!("{}-client", super::join_tls::ETCD)).unwrap();
        rt.spawn(async move {
            while let Ok((mut plain, _)) = listener.accept().await {
                let (connector, name, to) = (connector.clone(), name.clone(), forwarded.clone());
                tokio::spawn(async move {
                    let Ok(tcp) = TcpStream::connect(&to).await else {
                        return;
                    };
                    if let Ok(mut tls) = connector.connect(name, tcp).await {
                        let _ = tokio::io::copy_bidirectional(&mut plain, &mut tls).await;
                    }
                });
            }
        });
        Forward { child, url }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A member as seed-world knows it: by name, or by the in-cluster peer URL a learner is added
/// with before it has a name (a source member backup-restore adds back, above).
fn member(name: String, peer: String) -> MemberDef {
    MemberDef {
        name,
        exposed_peer_url: peer.clone(),
        in_cluster_peer_url: peer,
        listen_peer_url: String::new(),
        client_url: String::new(),
        tls_client_url: String::new(),
        place: Place::Netns("isthmus-node".into()),
    }
}

/// The source `src` (pods `<etcd>-<i>` in `src_ns` on `sides.src`, members by pod name)
/// leaves the cluster to the destination's three (pods in `dest_ns` on `sides.dst`, members
/// `<prefix>-<pod>`); `tls` is the members' client TLS. Returns where the time went (what,
/// from, to).
pub fn shrink(
    sides: &Sides,
    tls: &Arc<rustls::ClientConfig>,
    (src_ns, dest_ns, prefix): (&str, &str, &str),
) -> Vec<(String, Instant, Instant)> {
    let t0 = Instant::now();
    let etcd = super::join_tls::ETCD;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let forward = |node: &Node, ns: &str| -> Vec<Forward> {
        (0..3)
            .map(|i| Forward::new(node, &rt, tls, ns, &format!("{etcd}-{i}")))
            .collect()
    };
    let node = sides.src;
    let sources = forward(sides.src, src_ns);
    let dests = forward(sides.dst, dest_ns);
    let all: Vec<String> = sources
        .iter()
        .chain(&dests)
        .map(|f| f.url.clone())
        .collect();
    let after: Vec<String> = dests.iter().map(|f| f.url.clone()).collect();
    let removals = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            let c = etcd::connect(&after).await?;
            for i in 0..3 {
                let peer = format!("https://{etcd}-{i}.{etcd}-peer.{src_ns}.svc:2380");
                etcd::remove(&c, &member(format!("{etcd}-{i}"), peer), &after).await?;
            }
            Ok::<_, isthmus_seed_world::Error>(())
        })
    };
    let first = member(format!("{prefix}-{etcd}-0"), String::new());
    let forwarded = Instant::now();
    rt.block_on(etcd::move_leader(&all, &first)).unwrap();
    let moved = Instant::now();
    removals(&rt).unwrap();
    drop(sources);
    let removed = Instant::now();

    // gardenlet's cleanup of the source: druid allows no decrease of `replicas` but to 0, and
    // its CEL rule no advertised member at an index >= `replicas` (the controller, at `Grow`,
    // advertises none of an `Etcd` at 0).
    node.kubectl(&[
        "-n",
        src_ns,
        "patch",
        "etcd",
        etcd,
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"druid.gardener.cloud/operation":"reconcile"}},
            "spec":{"replicas":0,"etcd":{"additionalAdvertisePeerURLs":null}}}"#,
    ]);
    poll(
        node,
        "only the destination's 3 voters, source pods gone",
        LONG,
        POLL,
        || {
            removals(&rt).map_err(|e| e.to_string())?;
            let list = rt
                .block_on(async {
                    let mut c = etcd::connect(&after).await?;
                    etcd::list(&mut c).await
                })
                .map_err(|e| e.to_string())?;
            let pods = node.pods_jsonpath(
                src_ns,
                "app.kubernetes.io/component=etcd-statefulset",
                "{.items[*].metadata.name}",
            );
            let ours = list
                .iter()
                .filter(|l| l.name.starts_with(prefix) && !l.learner)
                .count();
            if ours == 3 && list.len() == 3 && pods.trim().is_empty() {
                Ok(())
            } else {
                Err(format!("{list:?}; source pods {pods:?}"))
            }
        },
    );
    vec![
        ("port-forwards to the 6 members".into(), t0, forwarded),
        (
            format!("leadership moved to {}", first.name),
            forwarded,
            moved,
        ),
        ("3 source members removed".into(), moved, removed),
        (
            "source Etcd scaled to 0, its pods gone".into(),
            removed,
            Instant::now(),
        ),
    ]
}
