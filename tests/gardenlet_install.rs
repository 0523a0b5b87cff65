//! isthmus installed the way gardenlet installs an Extension (issue 46 point 1, the part that
//! needs no node): the packaged chart rendered by Gardener v1.149.3's own install path (the
//! `gardenlet-install` harness: `pkg/chartrenderer`, release = the registration's name,
//! namespace `extension-isthmus-<random>` labelled as gardenlet labels it, the ManagedResource
//! of class `seed` in `garden` through `managedresources.Create`) with the seed's injected
//! values and the example `Extension`'s, applied by the real gardener-resource-manager v1.149.3
//! (ManagedResource, health and NetworkPolicy controllers) on a real kube-apiserver v1.34.4,
//! with kube-controller-manager's namespace controller and garbage collector for the uninstall.
//!
//! Shown: every object of the chart applied by the resource manager (`ResourcesApplied=True`,
//! each object carrying its origin annotation), nothing per shoot among them (a shoot's
//! problem cannot make the seed unhealthy), gardenlet's namespace labels and `SEED_NAME`, the
//! controller spread by the resource manager's high-availability webhook (its type label;
//! the chart writes no spread), fluent-bit's parser and filters applied, the resource
//! manager's policies from the chart's Service annotations and from the Service the
//! controller makes in a shoot namespace (it selects the extension namespace by its
//! registration label); then an uninstall (the ManagedResource deleted, as gardenlet does when
//! the Extension goes or `AlwaysExceptNoShoots` drops the last shoot) removes the chart's
//! objects and the namespace but keeps the `EtcdMigration` CRD and every `EtcdMigration`
//! (`resources.gardener.cloud/keep-object`); a reinstall, in a namespace of another name,
//! adopts the kept CRD, and the shoot's Service, untouched, admits the new namespace's proxies.
//! Health and Progressing need pods: the node test's part (`isthmus_testkit::gardenlet::
//! watch_status`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "gardenlet_install/objects.rs"]
mod objects;
#[path = "gardenlet_install/shoot.rs"]
mod shoot;

use isthmus_testkit::controller_manager::ControllerManager;
use isthmus_testkit::gardenlet::{GardenletInstall, GARDENER_VERSION};
use isthmus_testkit::resource_manager::ResourceManager;
use isthmus_testkit::tools::{helm, run_ok, seed_crd_paths, yaml_docs};
use isthmus_testkit::{KubeApiServer, Scratch};
use objects::{condition, get, managed, names};
use serde_json::Value;
use shoot::{etcd_service, proxies_admitted};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CRD: &str = "apiextensions.k8s.io/v1/CustomResourceDefinition//etcdmigrations.isthmus.dev";
const MIGRATION: &str = "isthmus.dev/v1alpha1/EtcdMigration/shoot--foo--bar/etcd-main";
const KEEP: &str = "resources.gardener.cloud/keep-object";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The packaged chart (what the Extension's OCI reference holds; `scripts/chart.sh package`
/// makes the same archive) and the example Extension's `spec.deployment.extension.values` as
/// a values file (what gardener-operator puts into the ControllerDeployment).
fn chart_and_values(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let out = run_ok(
        std::process::Command::new(helm())
            .arg("package")
            .arg(root().join("charts/isthmus"))
            .arg("-d")
            .arg(scratch.path()),
    );
    assert!(out.contains("Successfully packaged"), "{out}");
    let ext =
        std::fs::read_to_string(root().join("charts/isthmus/examples/extension.yaml")).unwrap();
    let values = &yaml_docs(&ext)[0]["spec"]["deployment"]["extension"]["values"];
    let path = scratch.join("extension-values.yaml");
    std::fs::write(&path, serde_json::to_vec(values).unwrap()).unwrap();
    (scratch.join("isthmus-0.1.0.tgz"), path)
}

/// Waits until the ManagedResource's `ResourcesApplied` is True for its current generation;
/// returns it.
async fn applied(client: &kube::Client, mr: &str) -> Value {
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(o) = get(client, mr).await {
            let current = o["status"]["observedGeneration"] == o["metadata"]["generation"];
            if current && condition(&o, "ResourcesApplied") == Some("True") {
                return o;
            }
            last = o;
        }
        assert!(
            Instant::now() < deadline,
            "{mr} not applied after 120 s: {:#}",
            last["status"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardenlet_installs_through_the_resource_manager_and_an_uninstall_keeps_the_migrations() {
    let server = KubeApiServer::start().await;
    let admin = server.admin().await;
    // What a seed has before any extension: its CRDs, the PriorityClass, `garden`.
    for p in seed_crd_paths() {
        server.apply_yaml(&p).await;
    }
    server
        .apply_yaml(&root().join("scripts/cluster/seed.yaml"))
        .await;
    let seed_values = root().join("scripts/cluster/gardener-values.yaml");
    let seed = &yaml_docs(&std::fs::read_to_string(&seed_values).unwrap())[0]["gardener"]["seed"];
    let mut kcm = ControllerManager::start(&server);
    let t0 = Instant::now();
    let grm = ResourceManager::start(&server, seed["clusterIdentity"].as_str().unwrap()).await;
    let grm_ready = t0.elapsed();
    let scratch = Scratch::new("gardenlet-install");
    let (chart, ext_values) = chart_and_values(&scratch);

    let h = GardenletInstall::new(&server.admin_kubeconfig(), "isthmus");
    isthmus_testkit::gardenlet::binary(); // built (or found fresh) before the clock starts
    let t0 = Instant::now();
    // One replica asked for: the resource manager's high-availability webhook decides (2 for
    // the Deployment's type `controller`), as for every seed controller.
    let one = scratch.join("one-replica.yaml");
    std::fs::write(&one, "controller: {replicas: 1}\n").unwrap();
    let out = h
        .install(&chart, &[seed_values.clone(), ext_values.clone(), one])
        .await;
    let ci = out["controllerInstallation"].as_str().unwrap().to_owned();
    let ns = format!("extension-{ci}");
    assert_eq!(out["namespace"]["name"], ns.as_str());
    assert!(
        ci.starts_with("isthmus-") && ci.len() == "isthmus-".len() + 5,
        "{ci}"
    );
    assert_eq!(out["injected"]["version"], GARDENER_VERSION);
    let mr_id = format!("resources.gardener.cloud/v1alpha1/ManagedResource/garden/{ci}");
    let mr = applied(&admin, &mr_id).await;
    let to_applied = t0.elapsed();

    // The ManagedResource as the reconciler creates it.
    assert_eq!(mr["spec"]["class"], "seed");
    assert_eq!(
        mr["metadata"]["labels"]["controllerinstallation-name"],
        ci.as_str()
    );
    assert_eq!(
        mr["metadata"]["labels"]["controllerregistration-name"],
        "isthmus"
    );
    let secret = mr["spec"]["secretRefs"][0]["name"].as_str().unwrap();
    let secret = get(&admin, &format!("v1/Secret/garden/{secret}"))
        .await
        .unwrap();
    assert_eq!(
        secret["immutable"], true,
        "managedresources.Create writes an immutable Secret"
    );
    // The namespace as gardenlet labels it (the policies select it by these, not by its name).
    let namespace = get(&admin, &format!("v1/Namespace//{ns}")).await.unwrap();
    let labels = &namespace["metadata"]["labels"];
    assert_eq!(labels["gardener.cloud/role"], "extension");
    assert_eq!(
        labels["controllerregistration.core.gardener.cloud/name"],
        "isthmus"
    );
    assert_eq!(
        labels["high-availability-config.resources.gardener.cloud/consider"],
        "true"
    );

    // Every object of the chart applied, by the resource manager.
    let objects: Vec<String> = out["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        managed(&mr),
        objects,
        "the ManagedResource's status lists what the harness handed over"
    );
    for kind in [
        "DaemonSet",
        "Deployment",
        "Service",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "ConfigMap",
        "VerticalPodAutoscaler",
        "PodDisruptionBudget",
        "ClusterParser",
        "ClusterFilter",
    ] {
        assert!(
            objects.iter().any(|o| o.contains(&format!("/{kind}/"))),
            "no {kind} in {objects:#?}"
        );
    }
    // Nothing per shoot: seed-wide objects in gardenlet's namespace, the dashboard in `garden`,
    // cluster-scoped ones.
    for id in &objects {
        let in_ns = id.rsplit('/').nth(1).unwrap();
        assert!(
            in_ns.is_empty() || in_ns == ns || in_ns == "garden",
            "{id} is not seed-wide"
        );
    }
    for id in &objects {
        let o = get(&admin, id)
            .await
            .unwrap_or_else(|| panic!("{id} was not applied"));
        // Created once and then left to the controller: the resource manager does not even
        // stamp its origin on it.
        if o["metadata"]["annotations"]["resources.gardener.cloud/ignore"] == "true" {
            continue;
        }
        let origin = o["metadata"]["annotations"]["resources.gardener.cloud/origin"].as_str();
        assert!(
            origin.is_some_and(|v| v.contains(&ci)),
            "{id} has no origin of {ci}: {:#}",
            o["metadata"]
        );
    }
    let ds = objects.iter().find(|o| o.contains("/DaemonSet/")).unwrap();
    let ds = get(&admin, ds).await.unwrap();
    for c in ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
    {
        let env = c["env"].as_array().unwrap();
        assert!(
            env.iter()
                .any(|e| e["name"] == "SEED_NAME" && e["value"] == seed["name"]),
            "{c:#}"
        );
    }
    // The resource manager's high-availability webhook set a controller's 2 replicas (the
    // type label's doing: without it the 1 asked for stays, and 1 replica is not spread) and
    // spread them (the chart writes no spread under gardenlet: tests/chart_conventions.rs).
    // No node here: the spread over hosts is best effort (ScheduleAnyway).
    let ctl = get(
        &admin,
        &format!("apps/v1/Deployment/{ns}/isthmus-controller"),
    )
    .await
    .unwrap();
    assert_eq!(ctl["spec"]["replicas"], 2);
    let spread = &ctl["spec"]["template"]["spec"]["topologySpreadConstraints"];
    assert_eq!(
        spread[0]["topologyKey"], "kubernetes.io/hostname",
        "{spread:#}"
    );
    assert_eq!(
        spread[0]["labelSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "isthmus-controller"
    );
    let crd = get(&admin, CRD).await.unwrap();
    assert_eq!(crd["metadata"]["annotations"][KEEP], "true");
    // The proxy's load balancer is no object of the ManagedResource (`proxy.service.mode:
    // onDemand`): the controller makes it from the chart's template while a migration needs
    // it. Made here as the controller would (no controller runs here), the resource
    // manager's NetworkPolicy controller turns its `from-world-to-ports` into the world's
    // policy in gardenlet's namespace all the same. (v1.149.3 writes the pod-label policies
    // of the other annotations only for namespaces with pods carrying the label: the node
    // test's part.)
    assert!(
        get(&admin, &format!("v1/Service/{ns}/isthmus-proxy"))
            .await
            .is_none(),
        "the load balancer exists before any migration"
    );
    let template = get(&admin, &format!("v1/ConfigMap/{ns}/isthmus-proxy-service"))
        .await
        .unwrap();
    let (_, body) = isthmus_controller::load_balancer::service(
        template["data"]["service.yaml"].as_str().unwrap(),
        &ns,
    )
    .unwrap();
    server
        .apply_yaml_str(&serde_json::to_string(&body).unwrap())
        .await;
    let svc = get(&admin, &format!("v1/Service/{ns}/isthmus-proxy"))
        .await
        .unwrap();
    let world: Value = serde_json::from_str(
        svc["metadata"]["annotations"]["networking.resources.gardener.cloud/from-world-to-ports"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let policy_id =
        format!("networking.k8s.io/v1/NetworkPolicy/{ns}/ingress-to-isthmus-proxy-from-world");
    let deadline = Instant::now() + Duration::from_secs(60);
    let policy = loop {
        if let Some(p) = get(&admin, &policy_id).await {
            break p;
        }
        let all = names(&admin, "networking.k8s.io/v1/NetworkPolicy", &ns).await;
        assert!(
            Instant::now() < deadline,
            "no policy from the proxy Service: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(policy["spec"]["ingress"][0]["ports"], world, "{policy:#}");
    // Installed, not healthy: no pods here (the node test's part).
    let status = h.status().await;
    assert_eq!(
        status.json["conditions"]["Installed"]["status"], "True",
        "{}",
        status.json
    );
    assert_eq!(
        (status.code, &status.json["extensionReady"]),
        (1, &Value::Bool(false))
    );

    // A migration, the Service the controller makes for it in the shoot namespace, and a pod
    // of the proxy's (never scheduled: the resource manager writes a namespace's policies
    // once a pod there carries the label), then the uninstall.
    server
        .apply_yaml_str(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: shoot--foo--bar, labels: {gardener.cloud/role: shoot}}\n",
        )
        .await;
    server
        .apply_yaml(&root().join("deploy/examples/etcdmigration-source.yaml"))
        .await;
    let migration = get(&admin, MIGRATION).await.unwrap();
    let service = etcd_service(&ctl, &migration);
    server.apply_yaml_str(&service.to_string()).await;
    let t2 = Instant::now();
    let egress = proxies_admitted(&server, &admin, &ns).await;
    let to_policy = t2.elapsed();
    let t1 = Instant::now();
    let un = h
        .uninstall(Duration::from_secs(1), Duration::from_secs(180))
        .await;
    let to_uninstalled = t1.elapsed();
    assert!(
        get(&admin, &mr_id).await.is_none()
            && get(&admin, &format!("v1/Namespace//{ns}")).await.is_none()
    );
    let gone: Vec<&String> = objects
        .iter()
        .filter(|o| !o.contains("/CustomResourceDefinition/"))
        .collect();
    for id in &gone {
        assert!(
            get(&admin, id).await.is_none(),
            "{id} outlived the uninstall"
        );
    }
    assert!(
        get(&admin, CRD).await.is_some(),
        "the uninstall deleted the EtcdMigration CRD"
    );
    assert!(
        get(&admin, MIGRATION).await.is_some(),
        "the uninstall deleted the EtcdMigration"
    );

    // A later install (the Extension back) adopts the kept CRD; the migration is still there.
    let again = h.install(&chart, &[seed_values, ext_values]).await;
    let ci2 = again["controllerInstallation"].as_str().unwrap();
    applied(
        &admin,
        &format!("resources.gardener.cloud/v1alpha1/ManagedResource/garden/{ci2}"),
    )
    .await;
    assert!(get(&admin, MIGRATION).await.is_some());
    // The new namespace has another name; the shoot's Service, untouched since, selects it
    // by the registration label: its proxies may reach etcd before the controller runs.
    let ns2 = format!("extension-{ci2}");
    assert_ne!(ns2, ns);
    let kept = get(&admin, "v1/Service/shoot--foo--bar/isthmus-etcd")
        .await
        .unwrap();
    assert_eq!(
        kept["metadata"]["annotations"],
        service["metadata"]["annotations"]
    );
    proxies_admitted(&server, &admin, &ns2).await;
    assert!(!kcm.lines().is_empty() && !grm.lines().is_empty());
    println!(
        "figure: gardener-resource-manager {} ready {grm_ready:.1?} after start; gardenlet-install (render {:.2} s) -> ResourcesApplied=True for {} objects: {to_applied:.1?}; the world's policy ({} listener ports); the shoot Service's egress policy {egress} in the extension namespace {to_policy:.1?} after the Service; uninstall (ManagedResource gone {:.1} s, namespace gone {:.1} s): {to_uninstalled:.1?}, CRD and EtcdMigration kept; kube-apiserver {}",
        isthmus_testkit::resource_manager::VERSION,
        out["seconds"]["render"].as_f64().unwrap(),
        objects.len(),
        world.as_array().unwrap().len(),
        un["seconds"]["managedResourceGone"].as_f64().unwrap(),
        un["seconds"]["namespaceGone"].as_f64().unwrap(),
        server.version()
    );
}
