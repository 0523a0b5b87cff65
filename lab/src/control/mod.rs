//! The seeds' control planes, for runs the controllers drive (`--controllers`): each seed gets
//! its own real kube-apiserver (`apiserver.rs`) with the pinned upstream CRDs (etcd-druid's
//! `Etcd`, Gardener's `DNSRecord`), isthmus' `EtcdMigration` CRD and `deploy/`'s RBAC, and runs
//! the production `isthmus controller` (`controller.rs`) as its ServiceAccount. The
//! controller plans and writes the objects; stand-ins for the controllers that cannot run here
//! act on them, each only through the API:
//!
//! - kubelet (`kubelet.rs`): the route ConfigMap → the proxy's volume (`..data` swap);
//! - etcd-druid (`druid.rs`) and the DNS provider (`standins.rs`): `Etcd` → etcd members,
//!   `DNSRecord` → the seeds' hosts files, each writing the status its real counterpart
//!   writes (etcd-druid acting only on a reconcile request, as Gardener deploys it);
//! - gardenlet (`gardenlet.rs`): creates both `EtcdMigration`s, advances their steps, copies
//!   `exposedMembers` across.

pub mod apiserver;
pub mod controller;
pub mod druid;
pub mod gardenlet;
pub mod kubelet;
pub mod standins;

use crate::error::{Error, Result};
use crate::etcd::Side;
use crate::seeds::Seed;
use crate::specs::NAMESPACE;
use crate::topology::Topology;
use apiserver::SeedApi;
use controller::Replica;
use kubelet::Volume;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The namespace of the controller, its Lease, the proxy and its route ConfigMap.
pub const SYSTEM: &str = "isthmus-system";
/// The route ConfigMap (`isthmus controller --proxy-configmap`'s default).
pub const ROUTES: &str = "isthmus-proxy-routes";
/// The workspace root, for `deploy/`.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// How a controller-driven run is set up.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// The kube-apiserver binary (the seeds' and the shoot's).
    pub kube_apiserver_bin: PathBuf,
    /// Controller replicas per seed (two: a killed leader is replaced through the Lease).
    pub replicas: usize,
}

/// One seed's control plane.
#[derive(Debug)]
pub struct SeedControl {
    // Field order is drop order: the controllers before their API server.
    pub replicas: Vec<Replica>,
    pub api: SeedApi,
    /// The proxy's route volume.
    pub volume: Volume,
    kubeconfig: PathBuf,
}

/// Both seeds' control planes.
#[derive(Debug)]
pub struct ControlPlane {
    pub seeds: [SeedControl; 2],
    /// What the controllers wrote, as the stand-ins saw it (the report's object list).
    pub written: Vec<crate::report::Event>,
    /// Conditions per seed as last seen (`type` → `status/reason`), for the timeline.
    pub conditions: [Vec<(String, String)>; 2],
    /// Every condition change of both migrations (the condition timeline).
    pub timeline: Vec<crate::report::Event>,
    /// Invalid `EtcdMigration`s the API servers refused, with their answers.
    pub refused: Vec<String>,
    /// Leader changes of the controllers' Leases.
    pub leases: Vec<crate::report::Event>,
    /// The Lease holder last seen per seed.
    holders: [Option<String>; 2],
    /// The etcd-druid stand-in's memory per seed.
    pub druid: [DruidState; 2],
    /// Breaches of the etcd-druid contract the stand-in saw (the report's violations).
    pub druid_violations: Vec<String>,
}

/// What the etcd-druid stand-in (`druid.rs`) remembers of one seed's `Etcd` between passes (etcd-druid keeps it in
/// its work queue and the object's status).
#[derive(Debug, Default)]
pub struct DruidState {
    /// The generation being reconciled and its fields.
    target: Option<(i64, isthmus_controller::plan::EtcdFields)>,
    /// The fields last acted on: what the members run.
    acted: Option<isthmus_controller::plan::EtcdFields>,
    /// The last generation reconciled.
    observed: Option<i64>,
    /// Every generation reconciled.
    done: std::collections::BTreeSet<i64>,
    last_removal: Option<std::time::Instant>,
}

impl ControlPlane {
    /// Starts both seeds' API servers (in parallel) and sets up the objects a seed has before
    /// a migration; the controllers start with [`ControlPlane::start_controllers`].
    pub async fn start(opts: &ControlOptions, topo: &Topology, dir: &Path) -> Result<Self> {
        let bin = &opts.kube_apiserver_bin;
        let (src_dir, dst_dir) = (
            dir.join("seed-api-source"),
            dir.join("seed-api-destination"),
        );
        let (src, dst) = tokio::join!(
            SeedApi::start(bin, &topo.source, &src_dir),
            SeedApi::start(bin, &topo.destination, &dst_dir),
        );
        let mut seeds = Vec::new();
        for (side, api) in [(Side::Source, src?), (Side::Destination, dst?)] {
            let seed = topo.seed(side);
            install(&api, seed, dir).await?;
            let kubeconfig = api
                .service_account_kubeconfig(SYSTEM, "isthmus-controller")
                .await?;
            let volume = Volume::new(&dir.join(format!("routes-{}", seed.label)))?;
            seeds.push(SeedControl {
                replicas: Vec::new(),
                api,
                volume,
                kubeconfig,
            });
        }
        let [source, destination]: [SeedControl; 2] = seeds
            .try_into()
            .map_err(|_| Error::State("two seeds".into()))?;
        Ok(Self {
            seeds: [source, destination],
            written: Vec::new(),
            conditions: Default::default(),
            timeline: Vec::new(),
            refused: Vec::new(),
            leases: Vec::new(),
            holders: Default::default(),
            druid: Default::default(),
            druid_violations: Vec::new(),
        })
    }

    /// Starts `replicas` controller replicas in each seed.
    pub fn start_controllers(
        &mut self,
        isthmus: &Path,
        topo: &Topology,
        replicas: usize,
        dir: &Path,
    ) -> Result<()> {
        for side in [Side::Source, Side::Destination] {
            let seed = topo.seed(side);
            let sc = &mut self.seeds[crate::backend::idx(side)];
            for n in 0..replicas {
                let identity = format!("controller-{}-{n}", seed.label);
                let port = 18080 + u16::try_from(n).unwrap_or(0);
                let r = Replica::start(isthmus, seed, &sc.kubeconfig, &identity, port, dir)?;
                sc.replicas.push(r);
            }
        }
        Ok(())
    }

    /// The holder of `side`'s controller Lease, if any.
    pub async fn lease_holder(&self, side: Side) -> Result<Option<String>> {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(self.admin(side), SYSTEM);
        let lease = leases
            .get_opt("isthmus-controller")
            .await
            .map_err(|e| Error::State(format!("reading the controller Lease: {e}")))?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity))
    }

    /// Records a change of `side`'s Lease holder (at `t_ms`); returns the holder.
    pub async fn watch_lease(&mut self, side: Side, t_ms: f64) -> Result<Option<String>> {
        let holder = self.lease_holder(side).await?;
        let i = crate::backend::idx(side);
        if holder != self.holders[i] {
            self.holders[i] = holder.clone();
            self.leases.push(crate::report::Event {
                t_ms,
                what: format!(
                    "{}: Lease held by {}",
                    crate::specs::seed_name(side),
                    holder.as_deref().unwrap_or("nobody")
                ),
            });
        }
        Ok(holder)
    }

    /// `kill -9` of the replica holding `side`'s Lease; returns its identity.
    pub async fn kill_leader(&mut self, side: Side) -> Result<String> {
        let holder = self
            .lease_holder(side)
            .await?
            .ok_or_else(|| Error::State("no controller holds the Lease".into()))?;
        let r = self.seeds[crate::backend::idx(side)]
            .replicas
            .iter_mut()
            .find(|r| r.identity == holder)
            .ok_or_else(|| Error::State(format!("{holder} is not a lab replica")))?;
        r.kill();
        Ok(holder)
    }

    /// Starts `identity` again (in `side`'s seed).
    pub fn restart_replica(&mut self, side: Side, identity: &str) -> Result<()> {
        let r = self.seeds[crate::backend::idx(side)]
            .replicas
            .iter_mut()
            .find(|r| r.identity == identity)
            .ok_or_else(|| Error::State(format!("{identity} is not a lab replica")))?;
        r.restart()
    }

    /// The admin client of `side`'s seed API.
    pub fn admin(&self, side: Side) -> kube::Client {
        self.seeds[crate::backend::idx(side)].api.admin.clone()
    }
}

/// What a seed has before any migration: the CRDs, the controller's namespace and RBAC
/// (`deploy/`), the shoot's namespace with etcd's client Secret, the proxy's LoadBalancer
/// Service and pod (as the cloud provider and kubelet report them), and on the source the
/// `Etcd` gardenlet created.
async fn install(api: &SeedApi, seed: &Seed, dir: &Path) -> Result<()> {
    let root = Path::new(ROOT);
    let crds = isthmus_testkit::cache::upstream_crds();
    for f in [
        crds.join("druid.gardener.cloud_etcds.yaml"),
        crds.join("extensions.gardener.cloud_dnsrecords.yaml"),
        root.join("deploy/crd-etcdmigration.yaml"),
        root.join("deploy/00-namespace.yaml"),
        root.join("deploy/controller.yaml"),
    ] {
        let text = std::fs::read_to_string(&f).map_err(|e| {
            Error::io(
                format!("{} (scripts/install-deps.sh fetches the CRDs)", f.display()),
                e,
            )
        })?;
        let what = f.display().to_string();
        if what.ends_with("druid.gardener.cloud_etcds.yaml") {
            let mut crd: Value =
                serde_saphyr::from_str(&text).map_err(|e| Error::State(format!("{what}: {e}")))?;
            with_advertised_urls(&mut crd)?;
            api.apply(&crd).await?;
        } else {
            api.apply_yaml(&what, &text).await?;
        }
    }
    let read = |f: &str| {
        let p = dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| Error::io(p.display(), e))
    };
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "etcd-client-tls", "namespace": NAMESPACE},
               "stringData": {"ca.crt": read("ca.crt")?, "tls.crt": read("etcd-client.crt")?,
                              "tls.key": read("etcd-client.key")?}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "isthmus-proxy", "namespace": SYSTEM},
               "spec": {"type": "LoadBalancer", "ports": [{"name": "peer", "port": 2380}],
                        "selector": {"app.kubernetes.io/name": "isthmus-proxy"}}}),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "isthmus-proxy-a", "namespace": SYSTEM,
                            "labels": {"app.kubernetes.io/name": "isthmus-proxy"}},
               "spec": {"nodeName": seed.label, "serviceAccountName": "isthmus-controller",
                        "automountServiceAccountToken": false,
                        "containers": [{"name": "proxy", "image": "isthmus"}]}}),
    ];
    for o in &objects {
        api.apply(o).await?;
    }
    // The cloud provider's and kubelet's status: the load balancer's address (how the other
    // seed reaches this proxy) and the proxy pod's IP inside the seed.
    let lb = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "isthmus-proxy", "namespace": SYSTEM},
        "status": {"loadBalancer": {"ingress": [{"ip": seed.seed_ip.to_string()}]}}});
    status(api, "services", &lb).await?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "isthmus-proxy-a", "namespace": SYSTEM},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}});
    status(api, "pods", &pod).await?;
    Ok(())
}

/// Adds etcd-druid's newer `spec.etcd.additionalAdvertisedURLs` (`peerURLs`/`clientURLs`:
/// `{overrideDefaultURL, members: [{name, urls}]}`) to the pinned v0.38.1 `Etcd` schema, the
/// one change the lab makes to an upstream CRD. Why: with v0.38's `additionalAdvertisePeerURLs`
/// a member advertises its exposed URL *beside* its in-cluster one, and both seeds' members
/// have the same in-cluster URL (both `Etcd`s are `etcd-main` in the shoot's namespace), so
/// etcd refuses to add the first destination member ("Peer URLs already exists", seen here).
/// The newer API's `overrideDefaultURL` is the way out; it is documented upstream but in no
/// published api module (v0.39+ are not served), so the lab declares its shape, exactly as
/// the controller writes it (`isthmus_controller::gardener`).
fn with_advertised_urls(crd: &mut Value) -> Result<()> {
    let members = json!({"type": "object", "properties": {
        "overrideDefaultURL": {"type": "boolean"},
        "members": {"type": "array", "items": {"type": "object", "required": ["name", "urls"],
            "properties": {"name": {"type": "string"},
                           "urls": {"type": "array", "items": {"type": "string"}}}}},
    }});
    let field = json!({"type": "object",
        "description": "etcd-druid's newer advertised-URL API, added to the pinned schema by the isthmus lab",
        "properties": {"peerURLs": members.clone(), "clientURLs": members}});
    let versions = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Error::State("the Etcd CRD has no versions".into()))?;
    for v in versions {
        let etcd = v
            .pointer_mut("/schema/openAPIV3Schema/properties/spec/properties/etcd/properties")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| Error::State("the Etcd CRD has no spec.etcd".into()))?;
        etcd.insert("additionalAdvertisedURLs".into(), field.clone());
    }
    Ok(())
}

/// Applies `body`'s status (field manager `isthmus-lab`).
async fn status(api: &SeedApi, plural: &str, body: &Value) -> Result<()> {
    let ns = body["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    let kind = body["kind"].as_str().unwrap_or_default();
    let ar = kube::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let objs: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(api.admin.clone(), ns, &ar);
    let pp = kube::api::PatchParams::apply("isthmus-lab").force();
    objs.patch_status(name, &pp, &kube::api::Patch::Apply(body))
        .await
        .map_err(|e| Error::State(format!("{kind} {name} status: {e}")))?;
    Ok(())
}

/// A valid `Etcd` spec under the pinned etcd-druid CRD (its required fields, TLS on peer and
/// client URLs), without `replicas`: gardenlet's template.
pub fn etcd_template_spec() -> Value {
    let name = crate::specs::ETCD;
    json!({
        "labels": {"app": "etcd-statefulset", "name": name},
        "backup": {},
        "etcd": {
            "peerUrlTls": {
                "tlsCASecretRef": {"name": format!("{name}-peer-ca"), "dataKey": "bundle.crt"},
                "serverTLSSecretRef": {"name": format!("{name}-peer-server")},
            },
            "clientUrlTls": {
                "tlsCASecretRef": {"name": format!("{name}-ca"), "dataKey": "bundle.crt"},
                "serverTLSSecretRef": {"name": format!("{name}-server")},
                "clientTLSSecretRef": {"name": format!("{name}-client")},
            },
        },
    })
}
