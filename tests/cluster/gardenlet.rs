//! isthmus installed on the node exactly as gardenlet installs an Extension (issue 46 point 1),
//! after `helm uninstall`: the `gardenlet-install` harness (Gardener v1.149.3's
//! ControllerInstallation reconciler: `pkg/chartrenderer`, `extension-isthmus-<random>`, the
//! ManagedResource of class `seed` in `garden`) with gardenlet's injected values and the
//! example `Extension`'s (the image pointed at the node's), applied by the node's real
//! gardener-resource-manager, under gardenlet's policies of the new namespace. Then the
//! proxies Ready and serving an `EtcdMigration`'s routes, a DaemonSet rollout as the care
//! controller sees it (the Seed's not-ready window, and what the chart's `maxSurge` makes of it
//! on a 50-node seed), and the uninstall keeping the CRD and the migration.

use super::checks::{proxy_ready_through_probes, LONG};
use super::node::{poll, Node, RELEASE, ROOT, SYSTEM};
use super::routes::served_by_all;
use super::shoot::{Shoot, NS, SNI};
use super::traffic::POLL;
use isthmus_testkit::gardenlet::{self, GardenletInstall};
use isthmus_testkit::tools::yaml_docs;
use isthmus_testkit::Scratch;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The seed size the rollout figure is scaled to.
const SEED_NODES: u64 = 50;

fn json_of(node: &Node, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&node.kubectl(&a)).unwrap()
}

/// The values files in gardenlet's order: what it injects for this node's seed, the example
/// Extension's values, the node's image instead of the registry's (no digest: the image was
/// loaded, not pulled), then `extra`.
fn values(scratch: &Scratch, extra: &[(&str, Value)]) -> Vec<PathBuf> {
    let write = |name: &str, v: &Value| {
        let p = scratch.join(name);
        std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
        p
    };
    let node_values =
        std::fs::read_to_string(Path::new(ROOT).join("scripts/cluster/extension-values.yaml"))
            .unwrap();
    let mut image = yaml_docs(&node_values)[0]["image"].clone();
    image["digest"] = json!("");
    let mut files = vec![
        Path::new(ROOT).join("scripts/cluster/gardener-values.yaml"),
        write("extension.json", &gardenlet::example_extension_values()),
        write("image.json", &json!({ "image": image })),
    ];
    files.extend(extra.iter().map(|(name, v)| write(name, v)));
    files
}

/// Whether the DaemonSet in `ns` rolled out to its current generation with none of `old`
/// left.
fn rolled(node: &Node, ns: &str, old: &[String]) -> bool {
    let ds = json_of(node, &["-n", ns, "get", "ds/isthmus-proxy"]);
    let (st, want) = (&ds["status"], &ds["status"]["desiredNumberScheduled"]);
    let pods = proxy_pods(node, ns);
    st["observedGeneration"] == ds["metadata"]["generation"]
        && want.as_u64() >= Some(1)
        && &st["updatedNumberScheduled"] == want
        && &st["numberAvailable"] == want
        && !pods.iter().any(|p| old.contains(p))
}

fn proxy_pods(node: &Node, ns: &str) -> Vec<String> {
    node.pods_jsonpath(
        ns,
        "app.kubernetes.io/name=isthmus-proxy",
        "{.items[*].metadata.name}",
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

/// The ManagedResource's condition `type_`: (status, lastTransitionTime in epoch seconds,
/// message).
fn mr_condition(node: &Node, mr: &str, type_: &str) -> (String, u64, String) {
    let o = json_of(node, &["-n", "garden", "get", "managedresource", mr]);
    let c = o["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("{mr} has no {type_}: {:#}", o["status"]));
    let ts = c["lastTransitionTime"].as_str().unwrap();
    (
        c["status"].as_str().unwrap().to_owned(),
        super::checks::epoch(ts),
        c["message"].as_str().unwrap_or_default().to_owned(),
    )
}

pub fn installed_as_gardenlet_installs_it(node: &Node, shoot: &Shoot) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let scratch = Scratch::new("cluster-gardenlet");
    let chart = node.script(&["chart"]);
    assert!(chart.status.success(), "{chart:?}");
    let chart = PathBuf::from(String::from_utf8_lossy(&chart.stdout).trim());
    let h = GardenletInstall::new(&node.kubeconfig(), RELEASE);
    gardenlet::binary(); // built (or found fresh) before the clock starts

    let t0 = Instant::now();
    let out = rt.block_on(h.install(&chart, &values(&scratch, &[])));
    let ci = out["controllerInstallation"].as_str().unwrap().to_owned();
    let ns = out["namespace"]["name"].as_str().unwrap().to_owned();
    assert_eq!(ns, format!("extension-{ci}"));
    // gardenlet's NetworkPolicy controller keeps its policies in every extension namespace.
    let policies = node.script(&["seed-policies", &ns]);
    assert!(policies.status.success(), "{policies:?}");
    poll(node, "the installation ready", LONG, POLL, || {
        let s = rt.block_on(h.status());
        if s.code == 0 {
            Ok(())
        } else {
            Err(s.json.to_string())
        }
    });
    proxy_ready_through_probes(node, &ns);
    let ready = t0.elapsed();
    let holder = poll(node, "the controller's Lease held", LONG, POLL, || {
        let who = node.jsonpath(&ns, "lease/isthmus-controller", "{.spec.holderIdentity}");
        if who.is_empty() {
            Err("no holder".into())
        } else {
            Ok(who)
        }
    });
    node.kubectl(&["-n", &ns, "get", "pod", &holder]);
    let t1 = Instant::now();
    shoot.migrate_for(node, &ns);
    poll(
        node,
        "the migration's routes on every proxy pod",
        LONG,
        Duration::from_millis(100),
        || served_by_all(node, &ns, SNI),
    );
    let served = t1.elapsed();
    println!(
        "figure: gardenlet-install (render {:.2} s, {} objects) -> ManagedResource applied by gardener-resource-manager, proxy DaemonSet Ready, installation ready: {ready:.1?}; Lease held by {holder}; EtcdMigration -> its routes on every proxy pod's /config ({} pods): {served:.1?}",
        out["seconds"]["render"].as_f64().unwrap(),
        out["objects"].as_array().unwrap().len(),
        proxy_pods(node, &ns).len()
    );

    rollout(node, &rt, &h, &scratch, &chart, &ns, &ci);
    uninstall(node, &rt, &h, &out, &ns, &ci);
    println!(
        "figure: the step installed as gardenlet installs it took {:.1?}",
        t0.elapsed()
    );
}

/// A values change of the proxy's pod template re-installed through the harness (a new
/// Extension version or values), sampled with `status` until the DaemonSet rolled out.
fn rollout(
    node: &Node,
    rt: &tokio::runtime::Runtime,
    h: &GardenletInstall,
    scratch: &Scratch,
    chart: &Path,
    ns: &str,
    mr: &str,
) {
    let old = proxy_pods(node, ns);
    let (before, _, _) = mr_condition(node, mr, "ResourcesProgressing");
    assert_eq!(before, "False", "{mr} progressing before the rollout");
    let files = values(
        scratch,
        &[("change.json", json!({"proxy": {"preStopSleepSeconds": 4}}))],
    );
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let rolled_at: Cell<Option<Duration>> = Cell::new(None);
    // Why the resource manager found the objects unhealthy, if it did (the readings only say
    // whether).
    let unhealthy: RefCell<BTreeSet<String>> = RefCell::default();
    let t0 = Instant::now();
    let (installed, samples) = rt.block_on(async {
        tokio::join!(
            h.install(chart, &files),
            gardenlet::watch_status(h, Duration::from_secs(180), || {
                let (rolled_at, old, unhealthy) = (&rolled_at, &old, &unhealthy);
                async move {
                    let (healthy, _, why) = mr_condition(node, mr, "ResourcesHealthy");
                    if healthy != "True" {
                        unhealthy.borrow_mut().insert(why);
                    }
                    if rolled_at.get().is_none() && rolled(node, ns, old) {
                        rolled_at.set(Some(t0.elapsed()));
                    }
                    // Over once the DaemonSet rolled and the care controller says ready again.
                    rolled_at.get().is_some() && h.status().await.code == 0
                }
            })
        )
    });
    assert_eq!(installed["controllerInstallation"], mr, "{installed}");
    let window = gardenlet::assert_rollout_reported(&samples);
    let took = rolled_at.get().unwrap();
    // The resource manager itself reported it: its condition went True and back to False
    // after the re-install (the care controller also counts an unobserved generation).
    let (now, since, _) = mr_condition(node, mr, "ResourcesProgressing");
    assert!(
        now == "False" && since >= wall.as_secs(),
        "ResourcesProgressing {now} since {since}, the re-install at {}",
        wall.as_secs()
    );
    let surge = node.jsonpath(
        ns,
        "ds/isthmus-proxy",
        "{.spec.updateStrategy.rollingUpdate.maxSurge}",
    );
    let waves = gardenlet::surge_waves(SEED_NODES, &surge);
    let nodes = proxy_pods(node, ns).len() as u64;
    let per_wave = window / gardenlet::surge_waves(nodes, &surge) as u32;
    println!(
        "figure: DaemonSet rollout through gardenlet-install (proxy.preStopSleepSeconds changed), {nodes}-node seed: installation not ready (the Seed's ExtensionsReady) for {window:.1?} ({} readings: {} Progressing, {} not Healthy: {:?}), the old pod gone (its preStop and drain included) {took:.1?} after the re-install; maxSurge {surge} on a {SEED_NODES}-node seed: {waves} waves ≈ {:.0?} not ready (one node at a time: {SEED_NODES} waves ≈ {:.0?})",
        samples.len(),
        samples.iter().filter(|s| s.progressing).count(),
        samples.iter().filter(|s| !s.healthy).count(),
        unhealthy.borrow(),
        per_wave * waves as u32,
        per_wave * SEED_NODES as u32,
    );
}

/// gardenlet's uninstall: the ManagedResource deleted, then the namespace. The chart's objects
/// go, the CRD and the migration stay.
fn uninstall(
    node: &Node,
    rt: &tokio::runtime::Runtime,
    h: &GardenletInstall,
    installed: &Value,
    ns: &str,
    mr: &str,
) {
    let t0 = Instant::now();
    let un = rt.block_on(h.uninstall(Duration::from_secs(1), Duration::from_secs(180)));
    let took = t0.elapsed();
    for what in [
        vec!["-n", "garden", "get", "managedresource", mr],
        vec!["get", "namespace", ns],
    ] {
        let r = node.try_kubectl(&what);
        assert!(
            matches!(&r, Err(e) if e.contains("NotFound")),
            "{what:?} after the uninstall: {r:?}"
        );
    }
    // What lived outside the namespace (cluster-scoped, `garden`): only the CRD is left.
    let mut by_ns: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for id in installed["objects"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        let parts: Vec<&str> = id.rsplitn(3, '/').collect();
        let [name, in_ns, gvk] = parts[..] else {
            panic!("bad id {id}")
        };
        if in_ns == ns {
            continue;
        }
        let (api_version, kind) = gvk.rsplit_once('/').unwrap();
        let kind = kind.to_lowercase();
        let ty = match api_version.split_once('/') {
            Some((group, version)) => format!("{kind}.{version}.{group}"),
            None => kind,
        };
        by_ns.entry(in_ns).or_default().push(format!("{ty}/{name}"));
    }
    let mut left = Vec::new();
    for (in_ns, ids) in &by_ns {
        let mut args = vec!["get", "--ignore-not-found", "-o", "name"];
        if !in_ns.is_empty() {
            args.extend(["-n", in_ns]);
        }
        args.extend(ids.iter().map(String::as_str));
        left.extend(node.kubectl(&args).lines().map(str::to_owned));
    }
    assert_eq!(
        left,
        ["customresourcedefinition.apiextensions.k8s.io/etcdmigrations.isthmus.dev"],
        "left by the uninstall"
    );
    let keep = node.kubectl(&[
        "get",
        "crd/etcdmigrations.isthmus.dev",
        "-o",
        "jsonpath={.metadata.annotations.resources\\.gardener\\.cloud/keep-object}",
    ]);
    assert_eq!(keep, "true");
    let migrations = node.kubectl(&[
        "get",
        "etcdmigrations",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
    ]);
    assert_eq!(
        migrations.trim(),
        format!("{NS}/etcd-main"),
        "the EtcdMigrations after the uninstall"
    );
    assert!(
        node.try_kubectl(&["get", "namespace", SYSTEM]).is_ok(),
        "helm's namespace is not gardenlet's to delete"
    );
    println!(
        "figure: gardenlet-install uninstall (ManagedResource gone {:.1} s, namespace gone {:.1} s): {took:.1?}; the CRD and the EtcdMigration kept, {} objects outside the namespace gone",
        un["seconds"]["managedResourceGone"].as_f64().unwrap(),
        un["seconds"]["namespaceGone"].as_f64().unwrap(),
        by_ns.values().map(Vec::len).sum::<usize>() - 1
    );
}
