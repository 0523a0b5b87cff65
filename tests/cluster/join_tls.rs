//! What a migrating druid `Etcd` of `join_expose.rs` stands on in its namespace, as a seed's
//! shoot namespace has it: peer and client TLS whose certificates carry the members' exposed
//! names (one test CA for both seeds, as one Gardener project's etcd CA would be; testkit's
//! `TestPki`, since Gardener's secrets manager, run by the `gardener-etcd` harness, names its
//! Secrets by hash and the step only needs their shape: `clientUrlTls`/`peerUrlTls` are what
//! druid and the controller read), etcd's JSON gateway on (the controller reads membership
//! through it; druid turns it off by default), the controller's grant
//! (`deploy/examples/access-*.yaml` for these names) and a seed's boundary: a NetworkPolicy
//! that admits the etcd pods' peers from their own namespace and the proxies' only, so the
//! other "seed" reaches them through the proxy or not at all (two seeds share this node).

use super::node::{Node, ROOT, SYSTEM};
use isthmus_testkit::{Scratch, TestPki};
use serde_json::{json, Value};

pub const ETCD: &str = "etcd-main";
/// The internal domain of both seeds; node's CoreDNS answers every name under it with the
/// proxies' Service (scripts/cluster/addons.yaml, the DNS provider's stand-in).
pub const DOMAIN: &str = "internal.example.com";
/// The node's pod network (scripts/cluster/gardener-values.yaml): where etcd members and the
/// controller connect to the proxy from.
pub const POD_NETWORK: &str = "10.244.0.0/24";
const CA: &str = "etcd-ca";
const SERVER: &str = "etcd-server";
const PEER: &str = "etcd-peer";
const CLIENT: &str = "etcd-client";

/// The names a member's certificates carry in `ns` on `seed`: Gardener's in-cluster ones
/// (gardener v1.149.3 `pkg/component/etcd/etcd/tls.go`) and the exposed ones
/// (`<pod>.<namespace>.<seed>.<internal-domain>`, controller/README.md).
pub fn names(ns: &str, seed: &str) -> Vec<String> {
    let mut n = vec![
        format!("{ETCD}-local"),
        format!("{ETCD}-client"),
        format!("{ETCD}-client.{ns}"),
        format!("{ETCD}-client.{ns}.svc"),
        format!("{ETCD}-client.{ns}.svc.cluster.local"),
        format!("*.{ETCD}-peer"),
        format!("*.{ETCD}-peer.{ns}"),
        format!("*.{ETCD}-peer.{ns}.svc"),
        format!("*.{ETCD}-peer.{ns}.svc.cluster.local"),
    ];
    n.extend((0..3).map(|i| format!("{ETCD}-{i}.{ns}.{seed}.{DOMAIN}")));
    n
}

/// The Secrets of one namespace; the files stay for the test's own etcdctl.
pub struct Tls {
    pub dir: Scratch,
}

impl Tls {
    /// `etcdctl` flags with the test's client certificate (the server's name is not checked:
    /// the test dials Service addresses).
    pub fn etcdctl_flags(&self) -> Vec<String> {
        let f = |n: &str| self.dir.join(n).display().to_string();
        vec![
            format!("--cacert={}", f("ca.crt")),
            format!("--cert={}", f("client.crt")),
            format!("--key={}", f("client.key")),
            "--insecure-skip-tls-verify".into(),
        ]
    }
}

/// The namespace of one seed's `Etcd`: Secrets, grant and, with `boundary`, the boundary.
/// `role` is `source` or `destination` (which example grant).
pub fn namespace(
    node: &Node,
    pki: &TestPki,
    ns: &str,
    seed: &str,
    role: &str,
    boundary: bool,
) -> Tls {
    // Applied, not created: the shoot's kube-apiserver Service may be there already
    // (`tests/seeds/shoot_api.rs` needs its address before the migration starts).
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    node.apply(&namespace.to_string());
    let dir = Scratch::new("cluster-join-tls");
    pki.write_ca(dir.path());
    let names = names(ns, seed);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Both serve and dial (etcd's gateway dials its own client port with its server pair).
    pki.peer_cert(&names).write(dir.path(), "server");
    pki.peer_cert(&names).write(dir.path(), "peer");
    pki.client_cert("etcd-client").write(dir.path(), "client");
    let f = |n: &str| dir.join(n).display().to_string();
    let secret = |name: &str, files: &[(&str, &str)]| {
        let mut a = vec!["-n", ns, "create", "secret", "generic", name];
        let from: Vec<String> = files
            .iter()
            .map(|(k, file)| format!("--from-file={k}={}", f(file)))
            .collect();
        a.extend(from.iter().map(String::as_str));
        node.kubectl(&a);
    };
    secret(CA, &[("ca.crt", "ca.crt")]);
    for (name, file) in [(SERVER, "server"), (PEER, "peer"), (CLIENT, "client")] {
        let (crt, key) = (format!("{file}.crt"), format!("{file}.key"));
        secret(name, &[("tls.crt", &crt), ("tls.key", &key)]);
    }
    let grant = std::fs::read_to_string(format!("{ROOT}/deploy/examples/access-{role}.yaml"))
        .unwrap()
        .replace("shoot--foo--bar", ns)
        .replace("ca-etcd-bundle-3b9f21c4", CA)
        .replace("etcd-client-5a0c7e1d", CLIENT);
    node.apply(&grant);
    if boundary {
        node.apply(&boundary_policy(ns));
    }
    Tls { dir }
}

/// Peers of the etcd pods in `ns`: their own namespace and the proxies' only.
fn boundary_policy(ns: &str) -> String {
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: seed-boundary, namespace: {ns}}}
spec:
  podSelector: {{}}
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector: {{}}
        - namespaceSelector:
            matchLabels: {{kubernetes.io/metadata.name: {SYSTEM}}}
"#
    )
}

/// The `Etcd` as gardenlet would deploy it (without the migration fields): etcd-druid's
/// example (`examples/etcd/druid_v1alpha1_etcd.yaml`) with TLS on both URLs and the gateway.
pub fn etcd_spec(replicas: u8) -> Value {
    let labels =
        json!({"app": "etcd-statefulset", "gardener.cloud/role": "controlplane", "role": "main"});
    let tls = |server: &str| {
        json!({
            "tlsCASecretRef": {"name": CA, "dataKey": "ca.crt"},
            "serverTLSSecretRef": {"name": server},
            "clientTLSSecretRef": {"name": CLIENT},
        })
    };
    json!({
        "labels": labels,
        "annotations": labels,
        "replicas": replicas,
        "etcd": {
            "metrics": "basic",
            "defragmentationSchedule": "0 */24 * * *",
            "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}},
            "clientPort": 2379,
            "serverPort": 2380,
            "quota": "8Gi",
            "enableGRPCGateway": true,
            "clientUrlTls": tls(SERVER),
            "peerUrlTls": tls(PEER),
        },
        "backup": {
            "port": 8080,
            "fullSnapshotSchedule": "0 */24 * * *",
            "resources": {"requests": {"cpu": "23m", "memory": "128Mi"}},
            "garbageCollectionPolicy": "Exponential",
            "garbageCollectionPeriod": "43200s",
            "deltaSnapshotPeriod": "300s",
            "deltaSnapshotMemoryLimit": "1Gi",
            "compression": {"enabled": true, "policy": "gzip"},
            "leaderElection": {"reelectionPeriod": "5s", "etcdConnectionTimeout": "5s"},
            // As Gardener sets it with client TLS: druid's readiness probe of the etcd
            // container speaks HTTPS only with it (statefulset/builder.go
            // getEtcdContainerReadinessHandler), while etcd-wrapper serves TLS with etcd's.
            "tls": tls(SERVER),
        },
        "sharedConfig": {"autoCompactionMode": "periodic", "autoCompactionRetention": "30m"},
    })
}

/// The source `Etcd` in `ns`, applied as gardenlet would.
pub fn apply_etcd(node: &Node, ns: &str) {
    let etcd = json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": ETCD, "namespace": ns, "labels": etcd_spec(3)["labels"]},
        "spec": etcd_spec(3),
    });
    node.apply(&etcd.to_string());
}
