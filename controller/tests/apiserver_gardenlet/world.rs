//! Two seeds whose `Etcd`s gardenlet's own code writes: each a real kube-apiserver with the
//! pinned CRDs and `deploy/`'s RBAC, the controller as its ServiceAccount, the etcd-druid and
//! DNS provider stand-ins of the seed world (`isthmus_seed_world`), and one real etcd cluster
//! (its `Loopback`). The source `Etcd` is
//! created by Gardener v1.149.3's `Deploy` (the `gardener-etcd` harness, `--replicas 1`: one
//! source member here); the destination's `etcdTemplate` is what that `Deploy` writes in the
//! destination namespace (deployed once, read, deleted: isthmus creates the `Etcd`). Both
//! namespaces' secrets managers issue from one `ca-etcd` (`pki`), as a migrated shoot keeps it.

use super::common::NS;
use super::pki::EtcdCa;
use super::record::Recorder;
pub use super::two_seeds::*;
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, EtcdTemplate, MemberUrls, Step};
use isthmus_controller::gardener::{etcd_client_tls, etcd_resource};
use isthmus_seed_world::druid::{DruidTask, EtcdDruid};
use isthmus_seed_world::etcd::{Cluster, Loopback};
use isthmus_seed_world::seed::Seed;
use isthmus_testkit::gardener::{self as gardener, GardenerEtcd};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// The source's `Deploy` flags: one replica (one source member here), HA (peer TLS).
pub const SOURCE_ARGS: &[&str] = &["--replicas", "1"];

/// Which seed's `Etcd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

pub struct World {
    pub a: Seed,
    pub b: Seed,
    pub etcd: Arc<Mutex<Cluster>>,
    pub src: EtcdMigrationSpec,
    pub dst: EtcdMigrationSpec,
    pub druid_a: DruidTask,
    pub druid_b: DruidTask,
    pub gardenlet_a: GardenerEtcd,
    pub gardenlet_b: GardenerEtcd,
    /// Every version of each seed's `Etcd` and `EtcdMigration`.
    pub rec_a: Recorder,
    pub rec_b: Recorder,
    pub mig_a: Recorder,
    pub mig_b: Recorder,
    controllers: Vec<JoinHandle<()>>,
}

impl Drop for World {
    fn drop(&mut self) {
        for c in &self.controllers {
            c.abort();
        }
    }
}

fn etcds(c: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(c.clone(), NS, &etcd_resource())
}

/// The live `etcd-main` of a seed, without managedFields.
pub async fn etcd_object(c: &Client) -> Option<Value> {
    let o = etcds(c).get_opt("etcd-main").await.unwrap()?;
    let mut v = serde_json::to_value(o).unwrap();
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    Some(v)
}

/// The etcd client Secrets an `Etcd` spec names (the grant's Secrets).
fn client_secrets(spec: &Value) -> Vec<String> {
    etcd_client_tls(spec, NS).unwrap().secret_names()
}

impl World {
    /// The seeds, the source `Etcd` deployed by Gardener, the stand-ins and one controller
    /// per seed; `promote: false` holds the joining members' promotion (an abort case).
    pub async fn start(promote: bool) -> World {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                std::env::var("RUST_LOG").unwrap_or_else(|_| "isthmus_controller=info".into()),
            )
            .with_test_writer()
            .try_init();
        let (src, mut dst) = specs();
        let members = members(&src, &dst);
        let ca = EtcdCa::new();
        let (mut cluster, connect) = Loopback::cluster_of_ca(&members, NS, "etcd-main", &ca);
        // The source's one member, as druid runs it before any migration.
        cluster.bootstrap(&["etcd-main-0".into()]).await.unwrap();
        // Learners stay learners: the window an abort needs.
        cluster.hold_promotion = !promote;
        let etcd = Arc::new(Mutex::new(cluster));
        let (mut a, mut b) = tokio::join!(
            Seed::start("seed-a", "203.0.113.7", NS),
            Seed::start("seed-b", "198.51.100.9", NS)
        );
        for s in [&a, &b] {
            // Deploy also writes a VPA, a ServiceMonitor and a PrometheusRule.
            for crd in gardener::crd_paths() {
                s.api.apply_yaml(&crd).await;
            }
            s.api
                .apply_yaml_str(&serde_json::to_string(&ca.takeover_secret(NS)).unwrap())
                .await;
        }
        let gardenlet_a = GardenerEtcd::new(&a.api.admin_kubeconfig(), NS);
        let gardenlet_b = GardenerEtcd::new(&b.api.admin_kubeconfig(), NS);
        let (deployed_a, deployed_b) =
            tokio::join!(gardenlet_a.deploy(SOURCE_ARGS), gardenlet_b.deploy(&[]));
        // The destination's template: what Deploy wrote there, without replicas; the Etcd
        // itself goes (isthmus creates it with the bootstrap block).
        let written = &deployed_b["after"];
        let mut tspec = written["spec"].clone();
        tspec.as_object_mut().unwrap().remove("replicas");
        let labels = serde_json::from_value(written["metadata"]["labels"].clone()).unwrap();
        etcds(&b.admin)
            .delete("etcd-main", &DeleteParams::default())
            .await
            .unwrap();
        if let Some(d) = dst.destination.as_mut() {
            d.etcd_template = Some(EtcdTemplate {
                labels,
                annotations: Default::default(),
                spec: tspec.clone(),
            });
        }
        a.grant_secrets(&src, NS, &client_secrets(&deployed_a["after"]["spec"]))
            .await;
        b.grant_secrets(&dst, NS, &client_secrets(&tspec)).await;
        for s in [&mut a, &mut b] {
            s.dns_provider(NS);
        }
        let (druid_a, druid_b) = druids(&a, &b, &etcd);
        let mig = kube::core::ApiResource::erase::<EtcdMigration>(&());
        let recorder = |c: &Client, r: &kube::core::ApiResource, name: &str| {
            Recorder::start(Api::namespaced_with(c.clone(), NS, r), name)
        };
        let (rec_a, rec_b) = (
            recorder(&a.admin, &etcd_resource(), "etcd-main"),
            recorder(&b.admin, &etcd_resource(), "etcd-main"),
        );
        let (mig_a, mig_b) = (
            recorder(&a.admin, &mig, "shoot"),
            recorder(&b.admin, &mig, "shoot"),
        );
        let (ctl_a, _) = a.controller("controller-a-0", connect.clone()).await;
        let (ctl_b, _) = b.controller("controller-b-0", connect).await;
        World {
            a,
            b,
            etcd,
            src,
            dst,
            druid_a,
            druid_b,
            gardenlet_a,
            gardenlet_b,
            rec_a,
            rec_b,
            mig_a,
            mig_b,
            controllers: vec![ctl_a, ctl_b],
        }
    }

    /// Creates both migrations, waits for both exposures and hands the source's exposed
    /// members to the destination.
    pub async fn expose_both(&self) {
        for (c, s) in [(&self.a.admin, &self.src), (&self.b.admin, &self.dst)] {
            migrations(c)
                .create(
                    &PostParams::default(),
                    &EtcdMigration::new("shoot", s.clone()),
                )
                .await
                .unwrap();
        }
        let s = reach(&self.a.admin, Step::Expose, "source").await;
        reach(&self.b.admin, Step::Expose, "destination").await;
        let exposed: Vec<MemberUrls> = serde_json::from_value(s["exposedMembers"].clone()).unwrap();
        let patch = json!({"spec": {"destination": {"sourceMembers": exposed}}});
        migrations(&self.b.admin)
            .patch("shoot", &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }

    /// Requests for a generation druid had reconciled that were not gardenlet's: none may be
    /// isthmus' (gardenlet's Deploy asks even when its patch changed no spec).
    pub fn isthmus_violations(&self, gardenlet_generations: &[(Side, i64)]) -> Vec<String> {
        let mut out = Vec::new();
        for (side, d) in [
            (Side::Source, &self.druid_a),
            (Side::Destination, &self.druid_b),
        ] {
            for v in d.violations() {
                let gardenlets = gardenlet_generations.iter().any(|(s, g)| {
                    *s == side
                        && v.ends_with(&format!("generation {g}, which etcd-druid had reconciled"))
                });
                if !gardenlets {
                    out.push(v);
                }
            }
        }
        out
    }
}
