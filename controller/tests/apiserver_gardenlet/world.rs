//! Two seeds whose `Etcd`s gardenlet's own code writes: each a real kube-apiserver with the
//! pinned CRDs and `deploy/`'s RBAC, the controller as its ServiceAccount, the etcd-druid and
//! DNS provider stand-ins of `common/`, and one real etcd cluster. The source `Etcd` is
//! created by Gardener v1.149.3's `Deploy` (the `gardener-etcd` harness, `--replicas 1`: one
//! source member here); the destination's `etcdTemplate` is what that `Deploy` writes in the
//! destination namespace (deployed once, read, deleted: isthmus creates the `Etcd`). Both
//! namespaces' secrets managers issue from one `ca-etcd` (`pki`), as a migrated shoot keeps it.

use super::common::druid_standin::{DruidStandIn, Side};
use super::common::etcd::{free_run, MemberDef, TestEtcd};
use super::common::seed::Seed;
use super::common::{spec, NS};
use super::pki;
use super::record::Recorder;
use isthmus_controller::crd::{
    EtcdMigration, EtcdMigrationSpec, EtcdTemplate, MemberUrls, PortScheme, Role, Step,
};
use isthmus_controller::gardener::{etcd_client_tls, etcd_resource};
use isthmus_controller::plan;
use isthmus_testkit::gardener::{self as gardener, GardenerEtcd};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

pub const STEP_TIMEOUT: Duration = Duration::from_secs(90);
/// The source's `Deploy` flags: one replica (one source member here), HA (peer TLS).
pub const SOURCE_ARGS: &[&str] = &["--replicas", "1"];

pub struct World {
    pub a: Seed,
    pub b: Seed,
    pub etcd: Arc<Mutex<TestEtcd>>,
    pub src: EtcdMigrationSpec,
    pub dst: EtcdMigrationSpec,
    pub druid_a: DruidStandIn,
    pub druid_b: DruidStandIn,
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

/// The two specs with ports on free loopback ports, the source with one member.
fn specs() -> (EtcdMigrationSpec, EtcdMigrationSpec) {
    let pa = free_run(1);
    let pb = loop {
        let p = free_run(3);
        if p.abs_diff(pa) > 300 {
            break p;
        }
    };
    let mut src = spec(Role::Source, Step::Expose);
    src.members = 1;
    src.ports = PortScheme {
        peer_base: pa,
        client_base: pa - 100,
    };
    let mut dst = spec(Role::Destination, Step::Expose);
    dst.ports = PortScheme {
        peer_base: pb,
        client_base: pb - 100,
    };
    if let Some(d) = dst.destination.as_mut() {
        d.source_members = Vec::new();
    }
    (src, dst)
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
    /// per seed; `promote: false` holds the destination members' promotion (an abort case).
    pub async fn start(promote: bool) -> World {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                std::env::var("RUST_LOG").unwrap_or_else(|_| "isthmus_controller=info".into()),
            )
            .with_test_writer()
            .try_init();
        let (src, mut dst) = specs();
        let defs: Vec<MemberDef> = plan::members(&src, NS)
            .into_iter()
            .chain(plan::members(&dst, NS))
            .map(|m| MemberDef {
                name: m.member.clone(),
                dns: m.dns_name.clone(),
                peer_port: m.peer_port,
                client_port: m.client_port,
            })
            .collect();
        let names: Vec<String> = defs.iter().map(|d| d.dns.clone()).collect();
        let mut etcd = TestEtcd::new(defs);
        let ca = pki::issue_for_etcd(etcd.dir.path(), &names);
        etcd.start("etcd-main-0", &["etcd-main-0"], "new");
        etcd.wait_healthy();
        let connect = etcd.connect_to();
        let etcd = Arc::new(Mutex::new(etcd));
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
        let sources = vec!["etcd-main-0".to_string()];
        let druid_a = DruidStandIn::start(
            a.admin.clone(),
            NS,
            Side::Source,
            etcd.clone(),
            sources.clone(),
        );
        let druid_b = DruidStandIn::start(
            b.admin.clone(),
            NS,
            Side::Destination,
            etcd.clone(),
            sources,
        );
        druid_b
            .promote
            .store(promote, std::sync::atomic::Ordering::SeqCst);
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
        let s = reach(&self.a.admin, Step::Expose).await;
        reach(&self.b.admin, Step::Expose).await;
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
            for v in d.violations.lock().unwrap().iter() {
                let gardenlets = gardenlet_generations.iter().any(|(s, g)| {
                    *s == side && v.ends_with(&format!("generation {g}, already reconciled"))
                });
                if !gardenlets {
                    out.push(v.clone());
                }
            }
        }
        out
    }
}

pub fn migrations(c: &Client) -> Api<EtcdMigration> {
    Api::namespaced(c.clone(), NS)
}

pub async fn set_step(c: &Client, step: Step) {
    let patch = json!({"spec": {"step": step}});
    migrations(c)
        .patch("shoot", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

pub async fn status(c: &Client) -> Value {
    let m = migrations(c).get("shoot").await.unwrap();
    serde_json::to_value(m.status.unwrap_or_default()).unwrap()
}

pub fn condition(status: &Value, t: &str) -> Option<(String, String)> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// Waits until `step` is planned and reached; returns the status.
pub async fn reach(c: &Client, step: Step) -> Value {
    let want = serde_json::to_value(step).unwrap();
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let s = status(c).await;
        if s["step"] == want && s["stepReady"] == true {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{step:?} not reached after {STEP_TIMEOUT:?}: {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until condition `t` is `want` (status, reason); returns the status.
pub async fn wait_condition(c: &Client, t: &str, want: (&str, &str)) -> Value {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let s = status(c).await;
        let have = condition(&s, t);
        if have.as_ref().map(|(a, b)| (a.as_str(), b.as_str())) == Some(want) {
            return s;
        }
        assert!(Instant::now() < deadline, "{t} never {want:?}: {s:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// etcd's members as (name, learner), sorted.
pub fn members_of(etcd: &Mutex<TestEtcd>) -> Vec<(String, bool)> {
    let mut m: Vec<(String, bool)> = etcd
        .lock()
        .unwrap()
        .members()
        .into_iter()
        .map(|m| (m.1, m.3))
        .collect();
    m.sort();
    m
}
