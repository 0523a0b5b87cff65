//! Every object the chart renders, the example `Extension`, and deploy/ (the chart's plain
//! render) with its examples, accepted by a real kube-apiserver (v1.34.4) with the CRDs a
//! Gardener seed has (Gardener v1.149.3's: VPA, PodMonitor, PrometheusRule, fluent-operator's
//! ClusterParser and ClusterFilter) (server-side apply as a dry run, strict field validation; the
//! `EtcdMigration` examples through the CRD's schema and CEL rules).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::chart::{chart_dir, render};
use isthmus_testkit::KubeApiServer;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::{json, Value};

/// Server-side apply with `dryRun=All` and `fieldValidation=Strict`; the API server's error
/// if it refuses.
async fn dry_run(client: &kube::Client, doc: &Value) -> Result<(), String> {
    let (group, version) = doc["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap_or(("", doc["apiVersion"].as_str().unwrap()));
    let gvk = GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap());
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("discovery of {gvk:?}: {e}"))?;
    let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
        Api::namespaced_with(
            client.clone(),
            doc["metadata"]["namespace"].as_str().unwrap(),
            &ar,
        )
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let pp = PatchParams::apply("chart-test")
        .dry_run()
        .validation_strict();
    api.patch(
        doc["metadata"]["name"].as_str().unwrap(),
        &pp,
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

fn id(doc: &Value) -> String {
    format!(
        "{}/{}/{}",
        doc["kind"].as_str().unwrap(),
        doc["metadata"]["namespace"].as_str().unwrap_or(""),
        doc["metadata"]["name"].as_str().unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_and_the_extension_are_accepted_by_a_real_kube_apiserver() {
    let server = KubeApiServer::start().await;
    let admin = server.admin().await;
    for p in isthmus_testkit::tools::seed_crd_paths() {
        server.apply_yaml(&p).await;
    }
    // What a seed has before the chart: its namespaces and Gardener's priority classes.
    let mut base = String::new();
    for ns in [
        "extension-isthmus",
        "garden",
        "monitoring",
        "shoot--foo--bar",
        "isthmus-system",
    ] {
        base.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"
        ));
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    base.push_str("---\n");
    base.push_str(&std::fs::read_to_string(root.join("scripts/cluster/seed.yaml")).unwrap());
    server.apply_yaml_str(&base).await;

    let renders = [
        (
            "gardener",
            // The load balancer rendered (the other two: its template, onDemand).
            render(&common::chart::SEED, &["proxy.service.mode=always"]),
        ),
        ("plain", render(&["examples/plain-values.yaml"], &[])),
        (
            "seedIngress",
            render(
                &common::chart::SEED,
                &["exposure.scheme=seedIngress", "exposure.members=5"],
            ),
        ),
    ];
    let mut checked = 0;
    for (name, docs) in &renders {
        // The CRD first, for real: a dry run cannot make the kind known.
        let crd = docs
            .iter()
            .find(|d| d["kind"] == "CustomResourceDefinition")
            .unwrap();
        server
            .apply_yaml_str(&serde_json::to_string(crd).unwrap())
            .await;
        for doc in docs {
            if let Err(e) = dry_run(&admin, doc).await {
                panic!(
                    "{name}: {} refused: {e}\n{}",
                    id(doc),
                    serde_json::to_string_pretty(doc).unwrap()
                );
            }
            checked += 1;
        }
    }
    // The API server does refuse what is wrong (the check can fail): an unknown field, and a
    // VPA update mode its CRD does not know.
    let mut bad = renders[0]
        .1
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap()
        .clone();
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["dropAll"] = json!(true);
    assert!(dry_run(&admin, &bad).await.unwrap_err().contains("dropAll"));
    let mut bad = renders[0]
        .1
        .iter()
        .find(|d| d["kind"] == "VerticalPodAutoscaler")
        .unwrap()
        .clone();
    // (Gardener v1.149.3's VPA knows `InPlace`; v1.139.0's did not.)
    bad["spec"]["updatePolicy"]["updateMode"] = json!("Sometimes");
    assert!(dry_run(&admin, &bad).await.is_err());
    // fluent-operator's schema: an unknown field of a filter plugin is refused.
    let mut bad = renders[0]
        .1
        .iter()
        .find(|d| d["kind"] == "ClusterFilter")
        .unwrap()
        .clone();
    bad["spec"]["filters"][1]["nest"]["liftUnder"] = json!("log");
    assert!(dry_run(&admin, &bad)
        .await
        .unwrap_err()
        .contains("liftUnder"));

    let text = std::fs::read_to_string(chart_dir().join("examples/extension.yaml")).unwrap();
    let ext = &isthmus_testkit::tools::yaml_docs(&text)[0];
    dry_run(&admin, ext)
        .await
        .unwrap_or_else(|e| panic!("examples/extension.yaml refused: {e}"));
    let mut bad = ext.clone();
    bad["spec"]["deployment"]["extension"]["helm"]["ociRepository"]["reference"] = json!("x");
    assert!(
        dry_run(&admin, &bad).await.is_err(),
        "an unknown Extension field must be refused"
    );
    // deploy/ in the order `kubectl apply -f deploy/` takes it, then its examples (the
    // EtcdMigrations against the CRD with its CEL rules, the tunnel).
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut files = Vec::new();
    for dir in [deploy.clone(), deploy.join("examples")] {
        let mut here: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        here.sort();
        files.extend(here);
    }
    let mut in_deploy = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for doc in isthmus_testkit::tools::yaml_docs(&text) {
            if let Err(e) = dry_run(&admin, &doc).await {
                panic!("{}: {} refused: {e}", f.display(), id(&doc));
            }
            in_deploy += 1;
        }
    }
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("examples/etcdmigration-source.yaml"))
            && in_deploy > 20,
        "{files:?}"
    );
    println!(
        "{checked} rendered objects, the Extension and deploy/'s {in_deploy} objects ({} files) accepted by kube-apiserver {}",
        files.len(),
        server.version()
    );
}
