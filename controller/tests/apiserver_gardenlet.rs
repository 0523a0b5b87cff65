//! Surviving gardenlet (issue 44 point 4): Gardener v1.149.3's own etcd `Deploy` (the
//! `gardener-etcd` harness, `testkit::gardener`) re-run on the source and the destination
//! `Etcd` at every step of a migration, against real kube-apiservers with the controller
//! running, etcd-druid's CRD (api v0.38.1) and a real etcd cluster (`apiserver_gardenlet/`).
//! `Deploy` replaces `spec.etcd` and `replicas` with a merge patch carrying its own reconcile
//! request; the controller writes back what it can, says what it cannot
//! (`EtcdSpecOverwritten`), and holds what could lose quorum (`plan::overwrite`). Each
//! `Deploy`'s figures are printed (`--nocapture`): what it wiped, how long until re-asserted,
//! how many reconciles the druid stand-in made of the wiped spec.
//!
//! Needs root (`unshare -m` for the members' `/etc/hosts`), the kube-apiserver build, the
//! upstream CRDs and the harness (`scripts/install-deps.sh`; the harness builds on first use).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "apiserver_gardenlet/deploy.rs"]
mod deploy;
#[path = "apiserver_gardenlet/pki.rs"]
mod pki;
#[path = "apiserver_gardenlet/record.rs"]
mod record;
#[path = "common/two_seeds.rs"]
mod two_seeds;
#[path = "apiserver_gardenlet/world.rs"]
mod world;

use common::NS;
use deploy::{deploy, Figure};
use isthmus_controller::crd::Step;
use isthmus_controller::gardener::etcd_resource;
use isthmus_controller::kube_adapter::FIELD_MANAGER;
use isthmus_testkit::gardener::{crd_paths, GardenerEtcd};
use isthmus_testkit::{wait_until, KubeApiServer};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};
use world::Side;
use world::*;

fn managers(obj: &DynamicObject) -> Value {
    let mut out = serde_json::Map::new();
    for e in obj.metadata.managed_fields.iter().flatten() {
        let key = format!(
            "{}/{}",
            e.manager.as_deref().unwrap_or_default(),
            e.operation.as_deref().unwrap_or_default()
        );
        out.insert(key, serde_json::to_value(&e.fields_v1).unwrap());
    }
    Value::Object(out)
}

fn owns(managers: &Value, who: &str, path: &str) -> bool {
    managers[who].to_string().contains(path)
}

fn code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

/// What the design rests on, measured: after `Deploy`'s merge patch a field it nulled has no
/// owner (isthmus' apply puts it back without force), a `replicas` it changed is its
/// manager's (isthmus' apply of another value conflicts on that field alone and blocks the
/// rest; forced, druid's CEL refuses the decrease; the raised value goes through), and a
/// removed bootstrap block cannot be added back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploys_merge_patch_frees_the_fields_it_nulls_and_takes_the_replicas_it_changes() {
    let server = KubeApiServer::start().await;
    for crd in crd_paths() {
        server.apply_yaml(&crd).await;
    }
    server
        .apply_yaml_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"
        ))
        .await;
    let api: Api<DynamicObject> = Api::namespaced_with(server.admin().await, NS, &etcd_resource());
    let gardenlet = GardenerEtcd::new(&server.admin_kubeconfig(), NS);
    let written = gardenlet.deploy(&[]).await["after"].clone();
    // isthmus' destination Etcd: gardenlet's spec with the migration fields (created by
    // isthmus' apply, as on the destination).
    api.delete("etcd-main", &Default::default()).await.unwrap();
    let mut spec = written["spec"].clone();
    spec["replicas"] = json!(2);
    spec["memberNamePrefix"] = json!("dest");
    spec["etcd"]["additionalAdvertisePeerURLs"] = json!([
        {"memberName": "dest-etcd-main-0", "urls": ["https://m0.example:2380"]},
        {"memberName": "dest-etcd-main-1", "urls": ["https://m1.example:2381"]}]);
    spec["etcd"]["peerUrlTls"]["skipClientSANVerification"] = json!(true);
    spec["etcd"]["bootstrapWithExistingCluster"] = json!({
        "members": [{"name": "etcd-main-0", "peerUrls": ["https://s0.example:2380"]}],
        "clientEndpoints": ["https://s0.example:2379"]});
    let intent = json!({"apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
        "metadata": {"name": "etcd-main", "namespace": NS,
                     "labels": written["metadata"]["labels"]},
        "spec": spec});
    let ssa = PatchParams::apply(FIELD_MANAGER).validation_strict();
    api.patch("etcd-main", &ssa, &Patch::Apply(&intent))
        .await
        .unwrap();

    let out = gardenlet.redeploy(&[]).await;
    let after = api.get("etcd-main").await.unwrap();
    let m = managers(&after);
    let paths = [
        "f:replicas",
        "f:additionalAdvertisePeerURLs",
        "f:skipClientSANVerification",
        "f:bootstrapWithExistingCluster",
    ];
    for (who, _) in m.as_object().unwrap() {
        let owned: Vec<&str> = paths.iter().copied().filter(|p| owns(&m, who, p)).collect();
        println!("after Deploy, {who} owns {owned:?}");
    }
    let isthmus = format!("{FIELD_MANAGER}/Apply");
    let deployer = m
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.ends_with("/Update") && owns(&m, k, "f:replicas"))
        .cloned()
        .expect("Deploy's manager owns replicas");
    println!(
        "Deploy writes as {deployer}; it wiped {:?}",
        record::wiped(&out["before"], &out["after"])
    );
    assert!(!owns(&m, &isthmus, "f:additionalAdvertisePeerURLs"));
    assert!(!owns(&m, &isthmus, "f:skipClientSANVerification"));
    assert!(!owns(&m, &isthmus, "f:replicas"));
    assert!(
        owns(&m, &isthmus, "f:bootstrapWithExistingCluster"),
        "v1.149.3 leaves it"
    );

    let err = api
        .patch("etcd-main", &ssa, &Patch::Apply(&intent))
        .await
        .unwrap_err();
    let (status, msg) = code(&err);
    assert_eq!(status, 409, "{msg}");
    assert!(msg.ends_with(".spec.replicas"), "only replicas: {msg}");
    let err = api
        .patch("etcd-main", &ssa.clone().force(), &Patch::Apply(&intent))
        .await
        .unwrap_err();
    let (status, msg) = code(&err);
    assert_eq!(status, 422, "{msg}");
    assert!(
        msg.contains("Replicas can either be increased or be downscaled to 0"),
        "{msg}"
    );
    let mut raised = intent.clone();
    raised["spec"]["replicas"] = json!(3);
    let back = api
        .patch("etcd-main", &ssa, &Patch::Apply(&raised))
        .await
        .expect("with the raised replicas, no conflict");
    let v = serde_json::to_value(&back).unwrap();
    assert_eq!(
        v["spec"]["etcd"]["peerUrlTls"]["skipClientSANVerification"],
        true
    );
    assert_eq!(
        v["spec"]["etcd"]["additionalAdvertisePeerURLs"],
        intent["spec"]["etcd"]["additionalAdvertisePeerURLs"]
    );
    let m = managers(&back);
    assert!(
        owns(&m, &isthmus, "f:replicas") && owns(&m, &deployer, "f:replicas"),
        "shared: {m:#}"
    );

    // A gardenlet on api v0.38+ nulls the bootstrap block too: allowed, and final.
    let null = json!({"spec": {"etcd": {"bootstrapWithExistingCluster": null}}});
    let pp = PatchParams {
        field_manager: Some("gardenlet".into()),
        ..Default::default()
    };
    api.patch("etcd-main", &pp, &Patch::Merge(&null))
        .await
        .unwrap();
    let err = api
        .patch("etcd-main", &ssa, &Patch::Apply(&raised))
        .await
        .unwrap_err();
    let (status, msg) = code(&err);
    assert_eq!(status, 422, "{msg}");
    assert!(msg.contains("cannot be added after"), "{msg}");
}

/// Figures of every `Deploy`, printed as one JSON document per line.
fn print(figures: &[Figure]) {
    println!("gardenlet Deploy figures (one per Deploy):");
    for f in figures {
        println!("  {}", f.json());
    }
}

/// One print-friendly check that the shoot's etcd keeps a quorum: every voter serves a
/// linearizable read.
async fn quorum(w: &World, when: &str) {
    let members = members_of(&w.etcd).await;
    wait_healthy(&w.etcd).await;
    println!("etcd after {when}: healthy, members {members:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gardenlets_deploy_at_every_step_is_survived() {
    let w = World::start(true).await;
    w.expose_both().await;
    let mut figures = Vec::new();
    // Expose. (The destination `Etcd` does not exist yet: a `Deploy` there would create it
    // without the bootstrap block, `EtcdCreatedWithoutBootstrap`; the orchestrator must not.)
    figures.push(deploy(&w, Side::Source, Step::Expose, true).await);
    for step in [Step::Join, Step::Grow, Step::Shrink] {
        set_step(&w.a.admin, step).await;
        set_step(&w.b.admin, step).await;
        reach(&w.b.admin, step, "destination").await;
        reach(&w.a.admin, step, "source").await;
        quorum(&w, &format!("{step:?}")).await;
        figures.push(deploy(&w, Side::Source, step, true).await);
        // The source's Deploy may have the destination's step re-reached (its members roll).
        reach(&w.b.admin, step, "destination after the source's Deploy").await;
        figures.push(deploy(&w, Side::Destination, step, true).await);
        quorum(&w, &format!("the Deploys at {step:?}")).await;
        let s = status(&w.b.admin).await;
        assert_eq!(condition(&s, "ObjectsApplied").unwrap().0, "True", "{s:#}");
        if step == Step::Join {
            // Deploy raised the destination to 3 members, which druid lets nobody lower.
            assert_eq!(
                condition(&s, "EtcdSpecOverwritten"),
                Some(("True".into(), "ReplicasRaised".into()))
            );
            let members = members_of(&w.etcd).await;
            assert_eq!(
                members.iter().filter(|m| m.0.starts_with("dest-")).count(),
                3
            );
        }
    }
    // Source Complete: its members left at Shrink, the Etcd is gardenlet's; a Deploy's wipe
    // is not undone.
    go_to(&w.a.admin, Step::Complete, "source").await;
    figures.push(deploy(&w, Side::Source, Step::Complete, false).await);
    go_to(&w.b.admin, Step::Complete, "destination").await;
    figures.push(deploy(&w, Side::Destination, Step::Complete, true).await);
    print(&figures);

    for f in &figures {
        let json = f.json();
        let removed = f.wiped.iter().any(|x| x.ends_with(" removed"));
        match f.step {
            // At Complete nothing of isthmus' is wanted any more: the source's wipe stays, the
            // destination had released its fields.
            Step::Complete => assert!(f.reasserted.is_none(), "{json}"),
            // Every Deploy before removed isthmus' fields, and they came back, said so —
            // whatever status the pass that saw the wipe read (`readyAtPatch`): the controller
            // remembers what it applied (`kube_adapter::applied`).
            _ => {
                assert!(removed && f.reasserted.is_some(), "{json}");
                assert!(
                    f.findings
                        .iter()
                        .any(|r| r == "Reasserted" || r == "ReplicasRaised"),
                    "{json}"
                );
            }
        }
    }
    let dest_complete = figures.last().unwrap();
    assert!(dest_complete.wiped.is_empty(), "{}", dest_complete.json());
    let join = figures
        .iter()
        .find(|f| f.side == Side::Destination && f.step == Step::Join)
        .unwrap();
    assert!(
        join.wiped.contains(&"replicas 2 -> 3".to_string()),
        "{}",
        join.json()
    );
    // The source `Etcd` after Complete: wiped by Deploy, left so.
    let e = etcd_object(&w.a.admin).await.unwrap();
    assert!(e["spec"]["etcd"]
        .get("additionalAdvertisePeerURLs")
        .is_none());
    // Only the destination's three members, a quorum, no request of isthmus' for a
    // generation druid had reconciled (gardenlet's Deploy asks even for an unchanged spec).
    assert_eq!(
        members_of(&w.etcd).await,
        voters(&["dest-etcd-main-0", "dest-etcd-main-1", "dest-etcd-main-2"])
    );
    quorum(&w, "Complete").await;
    let gardenlets: Vec<(Side, i64)> = figures.iter().map(|f| (f.side, f.generation)).collect();
    let v = w.isthmus_violations(&gardenlets);
    assert!(v.is_empty(), "{v:?}");
    // Gardener's own waiter on the destination: healthy, its timestamp untouched by isthmus.
    let last = figures.last().unwrap();
    let check = w.gardenlet_b.check(Some(&last.timestamp)).await;
    println!(
        "Gardener's CheckEtcdObject/CheckEtcd on the destination: {:#}",
        check.json
    );
    assert_eq!(
        check.json["checks"]["timestamp"]["ok"], true,
        "{:#}",
        check.json
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_later_gardenlet_that_drops_the_bootstrap_block_holds_join_and_grow() {
    let w = World::start(true).await;
    w.expose_both().await;
    go_to(&w.b.admin, Step::Join, "destination").await;
    // gardenlet on etcd-druid api v0.38+: its Deploy's patch also nulls the bootstrap block
    // (simulated: v1.149.3's Deploy, then the null with the request it would carry).
    let out = w.gardenlet_b.redeploy(&[]).await;
    let null = json!({"metadata": {"annotations": {"gardener.cloud/operation": "reconcile",
                                                   "gardener.cloud/timestamp": out["timestamp"]}},
                      "spec": {"etcd": {"bootstrapWithExistingCluster": null}}});
    let pp = PatchParams {
        field_manager: Some("gardenlet".into()),
        ..Default::default()
    };
    Api::<DynamicObject>::namespaced_with(w.b.admin.clone(), NS, &etcd_resource())
        .patch("etcd-main", &pp, &Patch::Merge(&null))
        .await
        .unwrap();
    let s = wait_condition(
        &w.b.admin,
        "EtcdSpecOverwritten",
        ("True", "BootstrapRemoved"),
    )
    .await;
    let s2 = wait_condition(
        &w.b.admin,
        "DestinationEtcdPeersJoined",
        ("False", "BootstrapRemoved"),
    )
    .await;
    assert_eq!(s2["stepReady"], false);
    println!("EtcdSpecOverwritten: {:#}", s["conditions"]);
    // Everything else is written back; the block is never applied again (no 422).
    wait_until("advertised URLs back", STEP_TIMEOUT, || async {
        let e = etcd_object(&w.b.admin).await.unwrap();
        e["spec"]["etcd"]
            .get("additionalAdvertisePeerURLs")
            .is_some()
    })
    .await;
    let s = status(&w.b.admin).await;
    assert_eq!(
        condition(&s, "ObjectsApplied"),
        Some(("True".into(), "Applied".into())),
        "{s:#}"
    );
    // etcd-druid#1426 (the stand-in) removes the source member on the removal: the
    // destination's voters keep a quorum.
    wait_until(
        "the source member removed by druid",
        STEP_TIMEOUT,
        || async {
            members_of(&w.etcd)
                .await
                .iter()
                .all(|m| m.0.starts_with("dest-"))
        },
    )
    .await;
    quorum(&w, "druid removed the source member").await;
    // Grow is held: not reached, its condition says why.
    set_step(&w.b.admin, Step::Grow).await;
    let s = wait_condition(
        &w.b.admin,
        "EtcdMigrationComplete",
        ("False", "BootstrapRemoved"),
    )
    .await;
    assert_eq!(s["stepReady"], false);
    // Shrink goes on and ends with the destination's members only.
    let s = go_to(&w.b.admin, Step::Shrink, "destination").await;
    assert_eq!(
        condition(&s, "EtcdMigrationComplete"),
        Some(("True".into(), "SourceMembersRemoved".into()))
    );
    quorum(&w, "Shrink").await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(w.b.admin.clone(), NS);
    let found = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| {
            e.reason.as_deref() == Some("BootstrapRemoved")
                && e.note
                    .as_deref()
                    .unwrap_or_default()
                    .contains("bootstrapWithExistingCluster")
        });
    assert!(found, "a Warning Event names the removed field");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abort_after_a_deploy_stops_the_members_gardenlet_scaled_up() {
    // The learners are never promoted: the join can still be aborted.
    let w = World::start(false).await;
    w.expose_both().await;
    set_step(&w.b.admin, Step::Join).await;
    wait_until("a learner joined", STEP_TIMEOUT, || async {
        members_of(&w.etcd).await.iter().any(|m| m.1)
    })
    .await;
    let out = w.gardenlet_b.redeploy(&[]).await;
    println!(
        "Deploy at Join wiped {:?}",
        record::wiped(&out["before"], &out["after"])
    );
    assert_eq!(out["after"]["spec"]["replicas"], 3);
    set_step(&w.b.admin, Step::Abort).await;
    set_step(&w.a.admin, Step::Abort).await;
    // The source's Deploy during its abort wipes what the abort releases anyway.
    w.gardenlet_a.redeploy(SOURCE_ARGS).await;
    let s = reach(&w.b.admin, Step::Abort, "destination").await;
    assert_eq!(
        condition(&s, "LiveMigrationAborted"),
        Some(("True".into(), "CleanedUp".into()))
    );
    assert!(
        etcd_object(&w.b.admin).await.is_none(),
        "destination Etcd deleted"
    );
    assert_eq!(
        members_of(&w.etcd).await,
        vec![("etcd-main-0".into(), false)]
    );
    reach(&w.a.admin, Step::Abort, "source").await;
    quorum(&w, "the abort").await;
}
