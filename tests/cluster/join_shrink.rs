//! `Shrink` after a join made by the real druid: what etcd-druid#1426 (open, not in v0.38.1)
//! will do when the bootstrap block is cleared — leadership moved to a destination member,
//! then the source members removed — done through etcd's API by seed-world's one copy of it
//! (`seed_world::etcd::{move_leader, remove}`), reached through `kubectl port-forward` (the
//! members' addresses live in the node's network namespace). A removed member's pod restarts
//! and its backup-restore would add it back as a learner while a source member still serves
//! its client Service (scale-up detection, `pkg/initializer/initializer.go`): #1426's
//! anti-rejoin guard, played here by removing it again until the source `Etcd` is scaled to 0
//! (gardenlet's cleanup of the source).

use super::checks::LONG;
use super::node::{poll, Node};
use super::traffic::POLL;
use isthmus_seed_world::etcd::{self, MemberDef, Place};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

/// `kubectl port-forward` of a pod's client port to a free local port; stopped on drop.
struct Forward {
    child: Child,
    url: String,
}

impl Forward {
    fn new(node: &Node, ns: &str, pod: &str) -> Self {
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
        let addr = line
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("port-forward {ns}/{pod}: {line:?}"));
        Forward {
            child,
            url: format!("http://{addr}"),
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A member as seed-world knows it: by name, or by the peer URL it was added with while a
/// learner has no name yet.
fn member(ns: &str, etcd: &str, i: usize) -> MemberDef {
    let peer = format!("http://{etcd}-{i}.{etcd}-peer.{ns}.svc:2380");
    MemberDef {
        name: format!("{etcd}-{i}"),
        exposed_peer_url: peer.clone(),
        in_cluster_peer_url: peer,
        listen_peer_url: String::new(),
        client_url: String::new(),
        tls_client_url: String::new(),
        place: Place::Netns("isthmus-node".into()),
    }
}

pub fn shrink(node: &Node, src_ns: &str, src: &str, dest_ns: &str, dest: &str) {
    let sources: Vec<Forward> = (0..3)
        .map(|i| Forward::new(node, src_ns, &format!("{src}-{i}")))
        .collect();
    let dests: Vec<Forward> = (0..3)
        .map(|i| Forward::new(node, dest_ns, &format!("{dest}-{i}")))
        .collect();
    let all: Vec<String> = sources
        .iter()
        .chain(&dests)
        .map(|f| f.url.clone())
        .collect();
    let after: Vec<String> = dests.iter().map(|f| f.url.clone()).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let removals = |rt: &tokio::runtime::Runtime| {
        rt.block_on(async {
            let c = etcd::connect(&after).await?;
            for i in 0..3 {
                etcd::remove(&c, &member(src_ns, src, i), &after).await?;
            }
            Ok::<_, isthmus_seed_world::Error>(())
        })
    };
    rt.block_on(etcd::move_leader(&all, &member(dest_ns, dest, 0)))
        .unwrap();
    removals(&rt).unwrap();
    drop(sources);

    // gardenlet's cleanup of the source: druid allows no decrease of `replicas` but to 0.
    node.kubectl(&[
        "-n",
        src_ns,
        "patch",
        "etcd",
        src,
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"druid.gardener.cloud/operation":"reconcile"}},"spec":{"replicas":0}}"#,
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
                .filter(|l| l.name.starts_with(dest) && !l.learner)
                .count();
            if ours == 3 && list.len() == 3 && pods.trim().is_empty() {
                Ok(())
            } else {
                Err(format!("{list:?}; source pods {pods:?}"))
            }
        },
    );
}
