//! A shoot's control-plane namespace on the node: gardenlet's `Etcd` of the shoot, made into a
//! real etcd pod by the node's etcd-druid as on a seed (one member; peer, client and
//! backup-restore TLS; the client Secrets as Gardener's secrets manager keeps them; the pod
//! labels gardenlet's Deploy gives it), the upstream CRDs, and the `EtcdMigration` the
//! orchestrator creates.

use super::join_tls;
use super::node::{poll, Node, EXT_IP, SYSTEM};
use super::traffic::Client;
use isthmus_testkit::gardener::{ETCD_CA_BUNDLE_SECRET, ETCD_CLIENT_SECRET};
use isthmus_testkit::{Scratch, TestPki};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const NS: &str = "shoot--foo--bar";
const ETCD: &str = "etcd-main";
/// The exposed name of member 0 (`<pod>.<namespace>.<seed>.<internal-domain>`): the SNI.
pub const SNI: &str = "etcd-main-0.shoot--foo--bar.seed-a.internal.example.com";
/// From apply to Ready: started beside the druid step's three `Etcd`s, on 2 busy cores.
const READY: Duration = Duration::from_secs(600);

#[derive(Debug)]
pub struct Shoot {
    /// Holds the certificate files for the test's lifetime.
    _dir: Scratch,
    /// The CA that signed etcd's certificates (what clients trust).
    pub ca: PathBuf,
    /// A client certificate and key etcd accepts (druid's etcd requires one).
    pub cert: PathBuf,
    pub key: PathBuf,
    t0: Instant,
}

impl Shoot {
    /// The namespace, its TLS Secrets and gardenlet's `Etcd`; returns at once (druid makes
    /// the pod while the druid step runs beside it: [`Shoot::ready`]).
    pub fn start(node: &Node) -> Self {
        let t0 = Instant::now();
        let dir = Scratch::new("cluster-shoot");
        let pki = TestPki::new();
        let ca = pki.write_ca(dir.path());
        let names = join_tls::names(NS, "seed-a");
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // Both serve and dial (etcd's gateway dials its own client port with its server pair).
        pki.peer_cert(&names).write(dir.path(), "server");
        pki.peer_cert(&names).write(dir.path(), "peer");
        let (cert, key) = pki
            .client_cert("isthmus-controller")
            .write(dir.path(), "client");
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        node.kubectl(&["create", "namespace", NS]);
        // The client Secrets as Gardener's secrets manager keeps them: what druid mounts for
        // backup-restore and the controller reads etcd's member list with (the `Etcd`'s
        // `spec.etcd.clientUrlTls` names them).
        for secret in isthmus_testkit::gardener::etcd_client_secrets(
            NS,
            ETCD_CLIENT_SECRET,
            &read(ca.clone()),
            &read(cert.clone()),
            &read(key.clone()),
        ) {
            node.apply(&secret.to_string());
        }
        let tls = |name: &str, file: &str| {
            json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": NS},
                "stringData": {
                    "tls.crt": read(dir.join(&format!("{file}.crt"))),
                    "tls.key": read(dir.join(&format!("{file}.key"))),
                },
            })
            .to_string()
        };
        node.apply(&tls(&format!("{ETCD}-server"), "server"));
        node.apply(&tls(&format!("{ETCD}-peer-server"), "peer"));
        node.apply(
            &json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{ETCD}-peer-ca"), "namespace": NS},
                "stringData": {"bundle.crt": read(ca.clone())},
            })
            .to_string(),
        );
        node.apply(&etcd().to_string());
        Shoot {
            _dir: dir,
            ca,
            cert,
            key,
            t0,
        }
    }

    /// Waits until druid made the `Etcd` Ready (its one pod Ready).
    pub fn ready(&self, node: &Node) {
        poll(
            node,
            "the shoot's Etcd Ready",
            READY,
            Duration::from_secs(1),
            || {
                let r = node.jsonpath(NS, &format!("etcd/{ETCD}"), "{.status.ready}");
                (r == "true").then_some(()).ok_or(r)
            },
        );
        let owner = node.jsonpath(
            NS,
            &format!("statefulset/{ETCD}"),
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
        );
        assert_eq!(
            owner,
            format!("Etcd/{ETCD}"),
            "the shoot's etcd StatefulSet's owner"
        );
        println!(
            "figure: the shoot's Etcd (1 member, TLS) applied to status.ready by etcd-druid, beside the druid step: {:.1?}",
            self.t0.elapsed()
        );
    }

    /// After the source migration's `Expose`: the controller's fields on the `Etcd`, druid
    /// rolled the member onto them (the generation observed, the request taken, the
    /// StatefulSet's one pod updated and Ready) and backup-restore put the exposed peer URL
    /// into etcd, as etcd's member list through the proxy shows, and restarted etcd with it.
    pub fn rolled_onto_exposed_url(&self, node: &Node, client: &Client) {
        let t0 = Instant::now();
        let urls = poll(
            node,
            "druid's roll of the shoot's member onto its exposed peer URL",
            READY,
            Duration::from_secs(1),
            || {
                let e: Value = serde_json::from_str(&node.kubectl(&[
                    "-n",
                    NS,
                    "get",
                    &format!("etcd/{ETCD}"),
                    "-o",
                    "json",
                ]))
                .unwrap();
                let (meta, status) = (&e["metadata"], &e["status"]);
                let asked = ["druid.gardener.cloud/operation", "gardener.cloud/operation"]
                    .iter()
                    .any(|a| !meta["annotations"][a].is_null());
                let sts = node.jsonpath(
                    NS,
                    &format!("statefulset/{ETCD}"),
                    "{.status.currentRevision}={.status.updateRevision} {.status.readyReplicas}",
                );
                let rolled = sts.split_once(' ').is_some_and(|(rev, ready)| {
                    rev.split_once('=').is_some_and(|(a, b)| a == b) && ready == "1"
                });
                let synced = status["observedGeneration"] == meta["generation"] && !asked;
                // backup-restore restarts etcd through the wrapper's /stop once it changed the
                // peer URL (`updatePeerURLIfChanged`): the member is settled once that ran.
                let etcd = node.jsonpath(
                    NS,
                    &format!("pod/{ETCD}-0"),
                    "{.status.containerStatuses[?(@.name==\"etcd\")].restartCount}/{.status.containerStatuses[?(@.name==\"etcd\")].ready}",
                );
                let restarted = etcd.split_once('/').is_some_and(|(n, ready)| {
                    n.parse::<u32>().is_ok_and(|n| n >= 1) && ready == "true"
                });
                let fields = !e["spec"]["etcd"]["additionalAdvertisePeerURLs"].is_null();
                let urls = client.peer_urls(node).unwrap_or_default();
                if fields
                    && synced
                    && rolled
                    && restarted
                    && status["ready"] == true
                    && urls.iter().any(|u| u.contains(SNI))
                {
                    Ok(urls)
                } else {
                    Err(format!(
                        "fields {fields}, synced {synced}, StatefulSet {sts:?}, etcd container (restarts/ready) {etcd}, ready {}, peer URLs {urls:?}",
                        status["ready"]
                    ))
                }
            },
        );
        println!(
            "figure: the shoot's Etcd at Expose: druid's roll onto the exposed peer URL to Ready (member list through the proxy: {urls:?}): {:.1?} after the routes were served",
            t0.elapsed()
        );
    }

    /// The upstream CRDs (etcd-druid's `Etcd`, Gardener's `DNSRecord`), then the source
    /// `EtcdMigration` of the shoot's `Etcd` at `Expose` for one member with the controller's
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

/// gardenlet's `Etcd` of the shoot: the spec of `join_tls.rs` for one member, its TLS under
/// the Secret names testkit's `Etcd` uses (the client's Gardener's), and the pod labels
/// gardenlet's Deploy adds (gardener v1.149.3 `pkg/component/etcd/etcd/etcd.go`): the seed's
/// deny-all (`grm.rs`) leaves backup-restore its DNS and the runtime API server.
fn etcd() -> Value {
    let mut spec = join_tls::etcd_spec(1);
    let gardener = isthmus_testkit::etcd_spec(ETCD);
    spec["etcd"]["clientUrlTls"] = gardener["etcd"]["clientUrlTls"].clone();
    spec["etcd"]["peerUrlTls"] = gardener["etcd"]["peerUrlTls"].clone();
    spec["backup"]["tls"] = gardener["etcd"]["clientUrlTls"].clone();
    assert_eq!(
        spec["etcd"]["clientUrlTls"]["tlsCASecretRef"]["name"],
        ETCD_CA_BUNDLE_SECRET
    );
    let labels = spec["labels"].as_object_mut().unwrap();
    for to in [
        "dns",
        "public-networks",
        "private-networks",
        "runtime-apiserver",
    ] {
        labels.insert(
            format!("networking.gardener.cloud/to-{to}"),
            json!("allowed"),
        );
    }
    json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": {"name": ETCD, "namespace": NS, "labels": spec["labels"]},
        "spec": spec,
    })
}
