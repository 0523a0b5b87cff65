//! A shoot's control-plane namespace on the node: a real etcd pod (TLS on its client port,
//! in-cluster name from its headless peer Service, as etcd-druid names them), gardenlet's
//! `Etcd` object and the upstream CRDs, and the `EtcdMigration` the orchestrator creates.

use super::node::{poll, Node, EXT_IP, SYSTEM};
use isthmus_testkit::{Scratch, TestPki};
use std::path::PathBuf;
use std::time::Duration;

pub const NS: &str = "shoot--foo--bar";
/// The exposed name of member 0 (`<pod>.<namespace>.<seed>.<internal-domain>`): the SNI.
pub const SNI: &str = "etcd-main-0.shoot--foo--bar.seed-a.internal.example.com";
const IN_CLUSTER: &str = "etcd-main-0.etcd-main-peer.shoot--foo--bar.svc.cluster.local";

#[derive(Debug)]
pub struct Shoot {
    /// Holds the certificate files for the test's lifetime.
    _dir: Scratch,
    /// The CA that signed etcd's serving certificate (what clients trust).
    pub ca: PathBuf,
}

impl Shoot {
    /// The namespace, its TLS Secrets and the etcd StatefulSet; returns once the pod is Ready.
    pub fn deploy(node: &Node) -> Self {
        let dir = Scratch::new("cluster-shoot");
        let pki = TestPki::new();
        let ca = pki.write_ca(dir.path());
        pki.server_cert(&[SNI, IN_CLUSTER, "localhost"])
            .write(dir.path(), "server");
        pki.client_cert("isthmus-controller")
            .write(dir.path(), "client");
        let f = |n: &str| dir.join(n).display().to_string();
        node.kubectl(&["create", "namespace", NS]);
        node.kubectl(&[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "etcd-main-server",
            &format!("--from-file=ca.crt={}", ca.display()),
            &format!("--from-file=tls.crt={}", f("server.crt")),
            &format!("--from-file=tls.key={}", f("server.key")),
        ]);
        // What the controller reads etcd's member list with: the Secrets the `Etcd`'s
        // `spec.etcd.clientUrlTls` names, as Gardener's secrets manager keeps them.
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        for secret in isthmus_testkit::gardener::etcd_client_secrets(
            NS,
            isthmus_testkit::gardener::ETCD_CLIENT_SECRET,
            &read(&ca.display().to_string()),
            &read(&f("client.crt")),
            &read(&f("client.key")),
        ) {
            node.apply(&secret.to_string());
        }
        node.apply(&etcd_manifest());
        poll(
            node,
            "the etcd pod Ready",
            Duration::from_secs(180),
            Duration::from_millis(500),
            || {
                let r = node.jsonpath(
                    NS,
                    "pod/etcd-main-0",
                    "{.status.conditions[?(@.type==\"Ready\")].status}",
                );
                if r == "True" {
                    Ok(())
                } else {
                    Err(format!("Ready={r:?}"))
                }
            },
        );
        Shoot { _dir: dir, ca }
    }

    /// The upstream CRDs (etcd-druid's `Etcd`, Gardener's `DNSRecord`), gardenlet's source
    /// `Etcd`, then the source `EtcdMigration` at `Expose` for one member with the controller's
    /// access grant in the namespace (`deploy/examples/access-source.yaml`).
    pub fn migrate(&self, node: &Node) {
        let crds = isthmus_testkit::cache::upstream_crds();
        for f in [
            "druid.gardener.cloud_etcds.yaml",
            "extensions.gardener.cloud_dnsrecords.yaml",
        ] {
            let yaml = std::fs::read_to_string(crds.join(f)).unwrap_or_else(|e| {
                panic!("{}: {e} (scripts/upstream-crds.sh)", crds.join(f).display())
            });
            node.apply(&yaml);
        }
        for crd in [
            "etcds.druid.gardener.cloud",
            "dnsrecords.extensions.gardener.cloud",
        ] {
            node.kubectl(&[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ]);
        }
        self.migrate_for(node, SYSTEM);
    }

    /// The source `EtcdMigration` for the controller released in `release_ns` (its load
    /// balancer there), with the controller's access grant to that namespace's ServiceAccount.
    pub fn migrate_for(&self, node: &Node, release_ns: &str) {
        // With the migration, the orchestrator grants the controller its writes in the
        // namespace (controller/README.md, "RBAC: least privilege"); granted first, so the
        // controller's first pass is not refused.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let grant = std::fs::read_to_string(root.join("deploy/examples/access-source.yaml"))
            .unwrap_or_else(|e| panic!("deploy/examples/access-source.yaml: {e}"));
        node.apply(&grant.replace(
            &format!("namespace: {SYSTEM}"),
            &format!("namespace: {release_ns}"),
        ));
        let etcd = isthmus_testkit::minimal_etcd("etcd-main", NS, 1);
        node.apply(&etcd.to_string());
        node.apply(&format!(
            r#"apiVersion: isthmus.dev/v1alpha1
kind: EtcdMigration
metadata:
  name: etcd-main
  namespace: {NS}
spec:
  role: source
  step: Expose
  etcdName: etcd-main
  seedName: seed-a
  internalDomain: internal.example.com
  members: 1
  dns:
    type: aws-route53
    secretRef: {{name: dns-internal, namespace: {NS}}}
  loadBalancer: {{name: isthmus-proxy, namespace: {release_ns}}}
  allowedSources: ["{EXT_IP}/32"]
"#
        ));
    }
}

fn etcd_manifest() -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: etcd-main-peer
  namespace: {NS}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{app: etcd-statefulset, name: etcd-main}}
  ports:
    - {{name: client, port: 2379}}
    - {{name: peer, port: 2380}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: etcd-main
  namespace: {NS}
spec:
  serviceName: etcd-main-peer
  replicas: 1
  selector:
    matchLabels: {{app: etcd-statefulset, name: etcd-main}}
  template:
    metadata:
      labels: {{app: etcd-statefulset, name: etcd-main}}
    spec:
      containers:
        - name: etcd
          image: isthmus.local/test-etcd:v3.6.16
          imagePullPolicy: Never
          args:
            - --name=etcd-main-0
            - --data-dir=/var/etcd/data
            - --listen-client-urls=https://0.0.0.0:2379
            - --advertise-client-urls=https://{IN_CLUSTER}:2379
            - --listen-peer-urls=http://127.0.0.1:2380
            - --initial-advertise-peer-urls=http://127.0.0.1:2380
            - --initial-cluster=etcd-main-0=http://127.0.0.1:2380
            - --cert-file=/tls/tls.crt
            - --key-file=/tls/tls.key
            - --log-level=warn
          readinessProbe:
            tcpSocket: {{port: 2379}}
            periodSeconds: 1
          volumeMounts:
            - {{name: data, mountPath: /var/etcd}}
            - {{name: tls, mountPath: /tls, readOnly: true}}
      volumes:
        - name: data
          emptyDir: {{}}
        - name: tls
          secret: {{secretName: etcd-main-server}}
"#
    )
}
