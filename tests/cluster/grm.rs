//! The Gardener path of the chart's NetworkPolicies: on a seed, gardener-resource-manager
//! builds them from the chart's Service annotations and pod labels, inside gardenlet's
//! deny-all. Here the real resource manager (v1.149.3, its NetworkPolicy controller) runs on
//! the node, gardenlet's policies come from its stand-in (scripts/cluster/seed-policies.yaml),
//! the release switches off its explicit policies (`helm upgrade --set
//! networkPolicy.explicit=false`; the controller's policies of the tunnel server stay while its
//! migration does), and probe pods carrying each component's labels show both
//! sides under kube-router: the flows isthmus needs pass, the others are refused.

use super::checks::LONG;
use super::node::{poll, Node, RELEASE, SYSTEM};
use super::shoot::{NS, SNI};
use super::traffic::{Client, POLL};
use super::tunnel::{DST_NS, EGRESS_POLICY, SERVER_POLICIES};
use std::time::Instant;

const PROBE_IMAGE: &str = "isthmus.local/test-etcd:v3.6.16";

/// The labels of a workload's pod template as a YAML flow map, without the label its
/// controller selects on (a probe must not be adopted or become an endpoint).
fn template_labels(node: &Node, what: &str) -> String {
    let json = node.jsonpath(SYSTEM, what, "{.spec.template.metadata.labels}");
    let mut labels: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{what} labels {json:?}: {e}"));
    labels.remove("app.kubernetes.io/name");
    labels.insert("isthmus-e2e".into(), "probe".into());
    serde_json::to_string(&labels).unwrap()
}

fn probe(node: &Node, ns: &str, name: &str, labels: &str) {
    node.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\nspec:\n  containers:\n    - {{name: probe, image: {PROBE_IMAGE}, imagePullPolicy: Never, command: [/pause]}}\n"
    ));
}

/// Whether `pod` gets a TCP connection to `url` (curl's exit code says how far it got: 7 or
/// 28 is no connection; anything else, a TLS or HTTP answer included, is one).
fn reaches(node: &Node, ns: &str, pod: &str, url: &str, extra: &[&str]) -> Result<String, String> {
    let mut args = vec![
        "-n",
        ns,
        "exec",
        pod,
        "--",
        "/usr/bin/curl",
        "-sS",
        "-k",
        "--connect-timeout",
        "3",
        "--max-time",
        "5",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ];
    args.extend_from_slice(extra);
    args.push(url);
    match node.try_kubectl(&args) {
        Ok(code) => Ok(code),
        Err(e) if e.contains("exit code 7") || e.contains("exit code 28") => Err(e),
        Err(e) => Ok(e),
    }
}

fn pod_ip(node: &Node, ns: &str, selector: &str) -> String {
    node.pods_jsonpath(ns, selector, "{.items[0].status.podIP}")
}

pub fn policies_through_gardener_resource_manager(node: &Node, client: &Client) {
    // The namespaces as a seed labels them: the release's as an extension's, the shoot's.
    node.kubectl(&[
        "label",
        "namespace",
        SYSTEM,
        "gardener.cloud/role=extension",
        "--overwrite",
    ]);
    for ns in [NS, DST_NS] {
        node.kubectl(&[
            "label",
            "namespace",
            ns,
            "gardener.cloud/role=shoot",
            "--overwrite",
        ]);
    }
    let out = node.script(&["grm"]);
    assert!(
        out.status.success(),
        "scripts/cluster.sh grm: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = node.script(&["seed-policies", SYSTEM, NS, DST_NS, "garden"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The Service through which the resource manager admits the proxy to the etcd pods of a
    // migrating shoot namespace (charts/isthmus/README.md): the controller's, made with the
    // migration; it selects the release namespace by the registration label gardenlet puts
    // on it (scripts/cluster/isthmus.sh labels it so), not by its name.
    let registration = "controllerregistration.core.gardener.cloud/name";
    let annotations = node.jsonpath(NS, "svc/isthmus-etcd", "{.metadata.annotations}");
    assert!(
        annotations.contains("all-shoots") && annotations.contains(registration),
        "the controller's isthmus-etcd Service in {NS}: {annotations}"
    );
    let labels = node.kubectl(&[
        "get",
        "namespace",
        SYSTEM,
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(
        labels.contains(&format!("\"{registration}\":\"{RELEASE}\"")),
        "{SYSTEM} lacks gardenlet's registration label: {labels}"
    );
    let t0 = Instant::now();
    node.helm_upgrade(&["--set", "networkPolicy.explicit=false"]);
    // The tunnel server's own policies are the controller's, not the chart's: they stay in
    // both modes while the VPN's migration exists (the resource manager's all-webhook-targets
    // would admit more than the namespace's kube-apiserver to the CONNECT front).
    let kept: Vec<&str> = SERVER_POLICIES.into_iter().chain([EGRESS_POLICY]).collect();
    poll(
        node,
        "the chart's explicit policies gone",
        LONG,
        POLL,
        || {
            let left = node.kubectl(&[
                "get",
                "networkpolicy",
                "-A",
                "-l",
                "app.kubernetes.io/part-of=isthmus",
                "-o",
                "name",
            ]);
            let explicit: Vec<&str> = left
                .lines()
                .filter(|l| !kept.iter().any(|k| l.ends_with(&format!("/{k}"))))
                .collect();
            if explicit.is_empty() {
                Ok(())
            } else {
                Err(left.clone())
            }
        },
    );
    let vpn = node.jsonpath(DST_NS, "etcdmigration/etcd-main", "{.spec.vpn.server}");
    assert!(!vpn.is_empty(), "the VPN's migration in {DST_NS} is gone");
    // The restarted controller (now with --tunnel-kube-apiserver-egress-policy) adds the
    // kube-apiserver's egress on its next pass; the other two stayed.
    poll(
        node,
        "the controller's tunnel-server policies on the Gardener path",
        LONG,
        POLL,
        || {
            let theirs = node.kubectl(&["-n", DST_NS, "get", "networkpolicy", "-o", "name"]);
            let missing: Vec<&&str> = kept
                .iter()
                .filter(|p| {
                    !theirs
                        .lines()
                        .any(|l| l == format!("networkpolicy.networking.k8s.io/{p}"))
                })
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("missing {missing:?} in {DST_NS}: {theirs}"))
            }
        },
    );
    // What the resource manager wrote from the chart's annotations and labels.
    let made = poll(
        node,
        "gardener-resource-manager's policies for the release",
        LONG,
        POLL,
        || {
            let names = node.kubectl(&[
                "get",
                "networkpolicy",
                "-A",
                "-l",
                &format!(
                    "networking.resources.gardener.cloud/service-namespace in ({SYSTEM},{NS},{DST_NS})"
                ),
                "-o",
                "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}",
            ]);
            let want = [
                format!("{SYSTEM}/ingress-to-isthmus-proxy-from-world"),
                format!("{SYSTEM}/ingress-to-isthmus-proxy-admin-tcp-9901"),
                format!("{SYSTEM}/egress-to-{NS}-isthmus-etcd-tcp-2379"),
                format!("{NS}/ingress-to-isthmus-etcd-tcp-2379-from-{SYSTEM}"),
                format!("{SYSTEM}/egress-to-{DST_NS}-isthmus-tunnel-server-tcp-9443"),
            ];
            match want
                .iter()
                .find(|w| !names.lines().any(|l| l == w.as_str()))
            {
                None => Ok(names),
                Some(w) => Err(format!("no {w} yet:\n{names}")),
            }
        },
    );
    println!(
        "figure: helm upgrade to the resource manager's policies -> {} policies written by gardener-resource-manager: {:.1?}",
        made.lines().count(),
        t0.elapsed()
    );

    for (ns, name, labels) in [
        (SYSTEM, "grm-as-proxy", template_labels(node, "ds/isthmus-proxy")),
        (SYSTEM, "grm-as-controller", template_labels(node, "deploy/isthmus-controller")),
        (SYSTEM, "grm-stranger", "{isthmus-e2e: probe}".to_owned()),
        ("garden", "grm-as-prometheus", "{isthmus-e2e: probe, networking.resources.gardener.cloud/to-extensions-all-seed-scrape-targets: allowed}".to_owned()),
        (DST_NS, "grm-as-kube-apiserver", "{isthmus-e2e: probe, app: kubernetes, role: apiserver, networking.resources.gardener.cloud/to-all-webhook-targets: allowed}".to_owned()),
        // Any other webhook client of the namespace (what all-webhook-targets used to admit).
        (DST_NS, "grm-webhook-client", "{isthmus-e2e: probe, networking.resources.gardener.cloud/to-all-webhook-targets: allowed}".to_owned()),
    ] {
        probe(node, ns, name, &labels);
    }
    for (ns, name) in [
        (SYSTEM, "grm-as-proxy"),
        (SYSTEM, "grm-as-controller"),
        (SYSTEM, "grm-stranger"),
        ("garden", "grm-as-prometheus"),
        (DST_NS, "grm-as-kube-apiserver"),
        (DST_NS, "grm-webhook-client"),
    ] {
        node.kubectl(&[
            "-n",
            ns,
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=120s",
        ]);
    }
    let proxy = pod_ip(node, SYSTEM, "app.kubernetes.io/name=isthmus-proxy");
    let etcd = pod_ip(node, NS, "app=etcd-statefulset");
    let tunnel = pod_ip(node, DST_NS, "app.kubernetes.io/name=isthmus-tunnel-server");
    let dns = pod_ip(node, "kube-system", "k8s-app=kube-dns");
    let sni = ["--resolve", &format!("{SNI}:2379:{}", client.lb)];
    let lb_client = format!("https://{SNI}:2379/health");
    let pass: Vec<(&str, &str, String, &[&str], &str)> = vec![
        (SYSTEM, "grm-as-proxy", format!("https://{etcd}:2379/health"), &[], "proxy -> etcd client port (the controller's isthmus-etcd Service)"),
        (SYSTEM, "grm-as-proxy", format!("https://{tunnel}:9443/"), &[], "proxy -> tunnel server's agents port"),
        (SYSTEM, "grm-as-controller", format!("http://{proxy}:9901/readyz"), &[], "controller -> proxy admin (rollout check)"),
        (SYSTEM, "grm-as-controller", lb_client.clone(), &sni, "controller -> etcd through the load balancer's address (kube-proxy short-cuts it to the proxy pod)"),
        (SYSTEM, "grm-as-controller", "https://10.96.0.1:443/healthz".into(), &[], "controller -> kube-apiserver"),
        ("garden", "grm-as-prometheus", format!("http://{proxy}:9901/metrics"), &[], "seed Prometheus -> proxy admin"),
        (DST_NS, "grm-as-kube-apiserver", format!("https://{tunnel}:8132/"), &[], "kube-apiserver -> tunnel CONNECT front"),
    ];
    for (ns, pod, url, extra, what) in &pass {
        poll(node, what, LONG, POLL, || {
            reaches(node, ns, pod, url, extra)
        });
    }
    // The whole path from outside under these policies: the world reaches the listener, the
    // proxy reaches etcd.
    poll(
        node,
        "a client outside through the proxy to etcd",
        LONG,
        POLL,
        || client.health(node, None),
    );
    let refuse: Vec<(&str, &str, String, &str)> = vec![
        (
            SYSTEM,
            "grm-stranger",
            format!("http://{proxy}:9901/readyz"),
            "another pod -> proxy admin",
        ),
        (
            SYSTEM,
            "grm-stranger",
            format!("https://{etcd}:2379/health"),
            "another pod -> etcd",
        ),
        (
            SYSTEM,
            "grm-as-proxy",
            format!("https://{tunnel}:8132/"),
            "proxy -> tunnel CONNECT front",
        ),
        (
            SYSTEM,
            "grm-as-proxy",
            "https://10.96.0.1:443/healthz".into(),
            "proxy -> kube-apiserver",
        ),
        (
            SYSTEM,
            "grm-as-proxy",
            format!("http://{dns}:8181/ready"),
            "proxy -> CoreDNS beyond DNS",
        ),
        (
            SYSTEM,
            "grm-as-controller",
            format!("https://{etcd}:2379/health"),
            "controller -> etcd pod directly",
        ),
        (
            "garden",
            "grm-as-prometheus",
            format!("https://{proxy}:2379/"),
            "seed Prometheus -> proxy listener",
        ),
        (
            DST_NS,
            "grm-as-kube-apiserver",
            format!("https://{tunnel}:9443/"),
            "kube-apiserver -> tunnel agents port",
        ),
        (
            DST_NS,
            "grm-webhook-client",
            format!("https://{tunnel}:8132/"),
            "another webhook client -> tunnel CONNECT front",
        ),
    ];
    for (ns, pod, url, what) in &refuse {
        let r = reaches(node, ns, pod, url, &[]);
        assert!(
            r.is_err(),
            "{what}: reached ({r:?}) under gardener-resource-manager's policies"
        );
    }
    println!(
        "checked: under gardener-resource-manager v1.149.3's policies (from the chart's annotations and labels) and gardenlet's deny-all, {} needed flows pass and {} others are refused",
        pass.len() + 1,
        refuse.len()
    );
    for (ns, name) in [
        (SYSTEM, "grm-as-proxy"),
        (SYSTEM, "grm-as-controller"),
        (SYSTEM, "grm-stranger"),
        ("garden", "grm-as-prometheus"),
        (DST_NS, "grm-as-kube-apiserver"),
        (DST_NS, "grm-webhook-client"),
    ] {
        node.kubectl(&["-n", ns, "delete", "pod", name, "--wait=false"]);
    }
}
