//! The release's end: the migrations finish (the orchestrator deletes them and the controller
//! cleans up after each, the on-demand load balancer last), then `helm uninstall`, after which nothing the chart made is left
//! but what must outlive it.

use super::checks::LONG;
use super::node::{poll, Node, RELEASE, SYSTEM};
use super::traffic::POLL;
use std::time::Instant;

/// Every object of the cluster (namespaced ones in every namespace) that `selector` matches,
/// as `kind.group/name` (namespaced: `namespace/kind.group/name`).
fn objects(node: &Node, selector: Option<&str>) -> Vec<String> {
    let mut found = Vec::new();
    for namespaced in [true, false] {
        let kinds = node.kubectl(&[
            "api-resources",
            "--verbs=list",
            &format!("--namespaced={namespaced}"),
            "-o",
            "name",
        ]);
        // Events come and go on their own.
        let kinds: Vec<&str> = kinds.lines().filter(|k| !k.starts_with("events")).collect();
        let mut args: Vec<String> = vec!["get".into(), kinds.join(",")];
        if namespaced {
            args.push("-A".into());
        }
        if let Some(s) = selector {
            args.extend(["-l".into(), s.into()]);
        }
        args.extend([
            "-o".into(),
            "jsonpath={range .items[*]}{.metadata.namespace}/{.kind}/{.metadata.name}{\"\\n\"}{end}"
                .into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        found.extend(node.kubectl(&args).lines().map(str::to_owned));
    }
    found.sort();
    found
}

pub fn uninstall(node: &Node) {
    // The orchestrator deletes each finished migration; the controller's finalizer removes
    // its DNS records, routes and Etcd fields first.
    let t0 = Instant::now();
    node.kubectl(&["delete", "etcdmigrations", "--all", "-A", "--wait=false"]);
    poll(
        node,
        "every EtcdMigration cleaned up and gone",
        LONG,
        POLL,
        || {
            let left = node.kubectl(&["get", "etcdmigrations", "-A", "-o", "name"]);
            if left.trim().is_empty() {
                Ok(())
            } else {
                Err(left)
            }
        },
    );
    let routes = node.jsonpath(SYSTEM, "cm/isthmus-proxy-routes", "{.data.proxy\\.json}");
    assert!(
        !routes.contains("\"sni\""),
        "routes left after the migrations: {routes}"
    );
    let gone = t0.elapsed();
    // The on-demand load balancer goes after the last migration (the chart's default).
    poll(
        node,
        "the on-demand LoadBalancer Service deleted",
        LONG,
        POLL,
        || match node.try_kubectl(&["-n", SYSTEM, "get", "svc/isthmus-proxy", "-o", "name"]) {
            Err(e) if e.contains("NotFound") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    println!(
        "figure: EtcdMigrations deleted -> cleaned up and gone: {gone:.1?}; -> the on-demand LoadBalancer Service deleted: {:.1?}",
        t0.elapsed()
    );
    // Gardenlet's grants went with the migrations (deploy/examples/access-*.yaml): the
    // orchestrator's objects, not the release's.
    for ns in [super::shoot::NS, super::tunnel::DST_NS] {
        node.kubectl(&[
            "-n",
            ns,
            "delete",
            "role/isthmus-controller",
            "rolebinding/isthmus-controller",
        ]);
    }
    // The shoot's agent was never the seed release's: the shoot removes it.
    node.kubectl(&[
        "-n",
        "kube-system",
        "delete",
        "deploy/isthmus-tunnel-agent",
        "--wait=false",
    ]);
    let t0 = Instant::now();
    node.helm(&[
        "uninstall",
        RELEASE,
        "-n",
        SYSTEM,
        "--wait",
        "--timeout",
        "5m",
    ]);
    let took = t0.elapsed();
    poll(node, "the release's pods gone", LONG, POLL, || {
        let pods = node.kubectl(&[
            "get",
            "pods",
            "-A",
            "-l",
            "app.kubernetes.io/part-of=isthmus",
            "-o",
            "name",
        ]);
        if pods.trim().is_empty() {
            Ok(())
        } else {
            Err(pods)
        }
    });
    // What stays, and why: the CRD (helm.sh/resource-policy: keep; deleting it would delete
    // every EtcdMigration of the seed). Everything else the chart labelled is gone.
    let left = objects(node, Some("app.kubernetes.io/part-of=isthmus"));
    assert_eq!(
        left,
        ["/CustomResourceDefinition/etcdmigrations.isthmus.dev"],
        "left behind by helm uninstall"
    );
    // gardener-resource-manager removed the policies it made from the chart's Services.
    poll(
        node,
        "gardener-resource-manager's policies gone",
        LONG,
        POLL,
        || {
            let left = node.kubectl(&[
                "get",
                "networkpolicy",
                "-A",
                "-l",
                &format!("networking.resources.gardener.cloud/service-namespace={SYSTEM}"),
                "-o",
                "name",
            ]);
            if left.trim().is_empty() {
                Ok(())
            } else {
                Err(left)
            }
        },
    );
    // In the release's namespace: the namespace itself (helm does not delete a namespace it
    // created), what Kubernetes and the controller's leader election put there, and the
    // seed's own policies (gardenlet's, not the release's).
    let seed_policies = [
        "allow-to-dns",
        "allow-to-private-networks",
        "allow-to-public-networks",
        "allow-to-runtime-apiserver",
        "deny-all",
    ];
    let in_ns: Vec<String> = objects(node, None)
        .into_iter()
        .filter(|o| o.starts_with(&format!("{SYSTEM}/")))
        .filter(|o| {
            !seed_policies
                .iter()
                .any(|p| *o == format!("{SYSTEM}/NetworkPolicy/{p}"))
        })
        .collect();
    let expected = [
        format!("{SYSTEM}/ConfigMap/kube-root-ca.crt"),
        format!("{SYSTEM}/Lease/isthmus-controller"),
        format!("{SYSTEM}/ServiceAccount/default"),
    ];
    assert_eq!(in_ns, expected, "left in {SYSTEM}");
    let releases = node.helm(&["list", "-A", "-q"]);
    assert!(releases.trim().is_empty(), "{releases}");
    println!(
        "figure: helm uninstall --wait: {took:.1?}; left behind: the CRD (resource-policy keep), the namespace {SYSTEM}, its Lease isthmus-controller (the controller's leader election), kube-root-ca.crt and the default ServiceAccount (Kubernetes')"
    );
}
