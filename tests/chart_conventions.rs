//! Gardener's seed conventions in the rendered chart (issue 46 point 3; Gardener v1.149.3's
//! docs/development/priority-classes.md, component-checklist.md, high-availability-of-components.md,
//! docs/extensions/logging-and-monitoring.md, docs/operations/network_policies.md, and
//! istio-ingressgateway's chart as the precedent of a seed's data plane). Their effect on a
//! cluster (the resource manager applying them, its high-availability webhook, the fluent-bit
//! kinds' schemas): tests/gardenlet_install.rs and tests/chart_apiserver.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::chart::{args, find, render, render_text, SEED};
use serde_json::{json, Value};

const PLAIN: &str = "examples/plain-values.yaml";
const DUAL_STACK: &str = "gardener.seed.networks.ipFamilies={IPv4,IPv6}";

fn pod_spec<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    &find(docs, kind, name)["spec"]["template"]["spec"]
}

#[test]
fn the_proxy_runs_as_a_seed_data_plane_and_the_controller_as_an_extension() {
    let docs = render(&SEED, &[]);
    // istio-ingressgateway's class for the data plane; gardener-system-900 ("Extensions")
    // for the controller, below it and above etcd-druid and the shoots' control planes.
    assert_eq!(
        pod_spec(&docs, "DaemonSet", "isthmus-proxy")["priorityClassName"],
        "gardener-system-critical"
    );
    assert_eq!(
        pod_spec(&docs, "Deployment", "isthmus-controller")["priorityClassName"],
        "gardener-system-900"
    );
    // A plain cluster has neither class.
    let docs = render(&[PLAIN], &[]);
    for (kind, name) in [
        ("DaemonSet", "isthmus-proxy"),
        ("Deployment", "isthmus-controller"),
    ] {
        assert!(pod_spec(&docs, kind, name)["priorityClassName"].is_null());
    }
}

#[test]
fn no_memory_limit_and_vpas_without_a_ceiling_with_a_catch_all_off() {
    let docs = render(&SEED, &[]);
    for (kind, name, container) in [
        ("DaemonSet", "isthmus-proxy", "proxy"),
        ("Deployment", "isthmus-controller", "controller"),
    ] {
        let c = &pod_spec(&docs, kind, name)["containers"][0];
        assert_eq!(c["name"], container);
        // Requests only: no memory limit (gardener#14197: istio-ingressgateway's OOM kills).
        assert!(c["resources"]["limits"].is_null(), "{name}: {c:#}");
        assert!(c["resources"]["requests"]["memory"].is_string(), "{name}");
        let vpa = find(&docs, "VerticalPodAutoscaler", name);
        let policies = vpa["spec"]["resourcePolicy"]["containerPolicies"]
            .as_array()
            .unwrap();
        assert_eq!(policies.len(), 2, "{name}: {policies:#?}");
        let own = &policies[0];
        assert_eq!(own["containerName"], container);
        assert_eq!(own["controlledValues"], "RequestsOnly");
        assert_eq!(own["controlledResources"], json!(["cpu", "memory"]));
        assert!(own["minAllowed"]["memory"].is_string(), "{name}: a floor");
        assert!(own["maxAllowed"].is_null(), "{name}: no ceiling");
        assert!(own.get("mode").is_none() || own["mode"] == "Auto");
        assert_eq!(policies[1], json!({"containerName": "*", "mode": "Off"}));
    }
}

#[test]
fn the_controller_is_spread_by_the_resource_managers_webhook_not_by_hand() {
    let docs = render(&SEED, &[]);
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert_eq!(
        ctl["metadata"]["labels"]["high-availability-config.resources.gardener.cloud/type"],
        "controller"
    );
    let spec = &ctl["spec"]["template"]["spec"];
    assert!(
        spec["topologySpreadConstraints"].is_null() && spec["affinity"].is_null(),
        "hand-written spread under gardenlet: {spec:#}"
    );
    let pdb = find(&docs, "PodDisruptionBudget", "isthmus-controller");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    // Without gardenlet nothing injects it: the chart spreads the replicas itself.
    let docs = render(&[PLAIN], &[]);
    let spread = &pod_spec(&docs, "Deployment", "isthmus-controller")["topologySpreadConstraints"];
    assert_eq!(spread[0]["topologyKey"], "kubernetes.io/hostname");
}

/// fluent-bit's wildcard match (`*` any run of characters, the rest literal), as its
/// `flb_router_match` compares a tag with a `Match` pattern.
fn fluent_match(pattern: &str, tag: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == tag,
        Some((head, rest)) => {
            let Some(tail) = tag.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && fluent_match(rest, &tail[i..]))
        }
    }
}

/// The tag the seed's fluent-bit gives a container's log: its tail input's `kubernetes.*` on
/// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` (Gardener's
/// fluentcustomresources/cluster_inputs.go).
fn tag(pod: &str, namespace: &str, container: &str) -> String {
    format!(
        "kubernetes.var.log.containers.{pod}_{namespace}_{container}-{}.log",
        "0123456789abcdef".repeat(4)
    )
}

#[test]
fn fluent_bit_parses_the_json_logs_of_each_container_and_only_those() {
    let docs = render(&SEED, &[]);
    let parsers: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterParser")
        .collect();
    let filters: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterFilter")
        .collect();
    assert_eq!((parsers.len(), filters.len()), (1, 3));
    for d in parsers.iter().chain(&filters) {
        assert_eq!(d["apiVersion"], "fluentbit.fluent.io/v1alpha2");
        assert_eq!(d["metadata"]["labels"]["fluentbit.gardener/type"], "seed");
    }
    let parser = parsers[0];
    assert_eq!(parser["spec"]["json"]["timeKey"], "timestamp");
    // Each workload's pods (its name, a suffix) and container, in the release namespace or a
    // shoot namespace (the tunnel servers).
    let logs = [
        ("isthmus-proxy-x7k2p", "extension-isthmus-a1b2c", "proxy"),
        (
            "isthmus-controller-5d9f8b7c6-q2w3e",
            "extension-isthmus-a1b2c",
            "controller",
        ),
        (
            "isthmus-tunnel-server-6c8d-r4t5y",
            "shoot--foo--bar",
            "tunnel-server",
        ),
    ];
    for (pod, ns, container) in logs {
        let t = tag(pod, ns, container);
        let hits: Vec<&str> = filters
            .iter()
            .filter(|f| fluent_match(f["spec"]["match"].as_str().unwrap(), &t))
            .map(|f| f["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(hits.len(), 1, "{t}: {hits:?}");
        assert!(hits[0].ends_with(&format!("--{container}")), "{hits:?}");
    }
    // Not the logs of anybody else's proxy or controller.
    for t in [
        tag("istio-ingressgateway-5f7-x", "istio-ingress", "istio-proxy"),
        tag(
            "gardener-resource-manager-7c-y",
            "garden",
            "gardener-resource-manager",
        ),
        tag("etcd-druid-6b-z", "garden", "etcd-druid"),
    ] {
        assert!(
            !filters
                .iter()
                .any(|f| fluent_match(f["spec"]["match"].as_str().unwrap(), &t)),
            "{t}"
        );
    }
    // What each filter does to a real isthmus log line (the binary's `--log-format json`):
    // the parser's time key is there in its format, and the record it leaves has what
    // Plutono shows (severity, log, source).
    let line = real_log_line();
    let mut record: serde_json::Map<String, Value> = serde_json::from_str(&line).unwrap();
    let time = record[parser["spec"]["json"]["timeKey"].as_str().unwrap()]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        parser["spec"]["json"]["timeFormat"],
        "%Y-%m-%dT%H:%M:%S.%L%z"
    );
    assert!(time_matches(&time), "{time} is not %Y-%m-%dT%H:%M:%S.%L%z");
    for f in &filters {
        let items = f["spec"]["filters"].as_array().unwrap();
        assert_eq!(items[0]["parser"]["parser"], "isthmus-parser");
        assert_eq!(items[0]["parser"]["keyName"], "log");
        assert_eq!(
            items[1]["nest"],
            json!({"operation": "lift", "nestedUnder": "log"})
        );
        assert_eq!(
            items[2]["nest"],
            json!({"operation": "lift", "nestedUnder": "fields"})
        );
    }
    // Lift `fields`, then the renames.
    let items = filters[0]["spec"]["filters"].as_array().unwrap();
    if let Some(Value::Object(fields)) = record.remove("fields") {
        record.extend(fields);
    }
    for (from, to) in items[3]["modify"]["rules"][0]["rename"]
        .as_object()
        .unwrap()
    {
        let v = record
            .remove(from)
            .unwrap_or_else(|| panic!("no {from} in {line}"));
        record.insert(to.as_str().unwrap().to_owned(), v);
    }
    for key in ["severity", "log", "source"] {
        assert!(record[key].is_string(), "{key} in {record:?}");
    }
    // A plain cluster has no fluent-operator.
    assert!(!render(&[PLAIN], &[])
        .iter()
        .any(|d| d["kind"] == "ClusterFilter" || d["kind"] == "ClusterParser"));
}

/// `%Y-%m-%dT%H:%M:%S.%L%z` as fluent-bit's strptime reads it: `%L` fractional seconds,
/// `%z` `Z` or `±hh[:]mm`.
fn time_matches(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T'))
        || !(digits(11..13) && at(13, b':') && digits(14..16) && at(16, b':') && digits(17..19))
        || !at(19, b'.')
    {
        return false;
    }
    let frac = b[20..].iter().take_while(|c| c.is_ascii_digit()).count();
    let zone = &t[20 + frac..];
    frac > 0
        && (zone == "Z"
            || (zone.len() >= 5
                && (zone.starts_with('+') || zone.starts_with('-'))
                && zone[1..].chars().all(|c| c.is_ascii_digit() || c == ':')))
}

/// The first line `isthmus --log-format json` logs: a proxy started on a scratch file, killed
/// once it has logged.
fn real_log_line() -> String {
    use std::io::{BufRead, BufReader};
    let dir = isthmus_testkit::Scratch::new("chart-log-line");
    let file = dir.join("proxy.json");
    std::fs::write(
        &file,
        r#"{"admin": {"address": "127.0.0.1:0"}, "listeners": [{"name": "l", "address": "127.0.0.1:0", "routes": []}], "upstreams": []}"#,
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_isthmus"))
        .args(["--log-format", "json", "proxy", "--config"])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!line.trim().is_empty(), "the proxy logged nothing");
    line
}

#[test]
fn the_extension_namespace_is_selected_by_its_registration_label_not_its_name() {
    // gardenlet's namespace is extension-<installation>, renamed with every install: the
    // controller's per-shoot Service admits the proxies by the registration label (the
    // release name is the registration's).
    let docs = render(&SEED, &[]);
    let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    assert!(
        a.contains(
            &"--proxy-namespace-labels=controllerregistration.core.gardener.cloud/name=isthmus"
                .to_owned()
        ),
        "{a:?}"
    );
    // Nothing of the proxy and the controller names the release namespace in a selector.
    let by_name = r#""kubernetes.io/metadata.name":"extension-isthmus""#;
    for d in &docs {
        let tunnel = d["metadata"]["labels"]["app.kubernetes.io/name"] == "isthmus-tunnel-server";
        let text = serde_json::to_string(d).unwrap().replace("\\\"", "\"");
        assert!(
            tunnel || !text.contains(by_name),
            "{}/{} selects the namespace by name",
            d["kind"],
            d["metadata"]["name"]
        );
    }
    // A plain install keeps its namespace: by name there (no registration label).
    let docs = render(&[PLAIN], &[]);
    let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    assert!(a.contains(
        &"--proxy-namespace-labels=kubernetes.io/metadata.name=extension-isthmus".to_owned()
    ));
}

/// The bootstrap file's listener and admin addresses.
fn bootstrap_addresses(docs: &[Value]) -> Vec<String> {
    let file: Value = serde_json::from_str(
        find(docs, "ConfigMap", "isthmus-proxy-routes")["data"]["proxy.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let mut out = vec![file["admin"]["address"].as_str().unwrap().to_owned()];
    for l in file["listeners"].as_array().unwrap() {
        out.push(l["address"].as_str().unwrap().to_owned());
    }
    out
}

#[test]
fn a_dual_stack_seed_gets_both_families_as_istio_ingressgateway_and_pods_listen_on_both() {
    use isthmus_controller::crd::PortScheme;
    use isthmus_controller::proxy_config::{render as render_file, Layout};
    // Single stack (the seed's ipFamilies [IPv4]): the cluster's default, IPv4 wildcards.
    let docs = render(&SEED, &[]);
    let svc = find(&docs, "Service", "isthmus-proxy");
    assert!(svc["spec"]["ipFamilyPolicy"].is_null() && svc["spec"]["ipFamilies"].is_null());
    assert!(bootstrap_addresses(&docs)
        .iter()
        .all(|a| a.starts_with("0.0.0.0:")));
    // Dual stack: [IPv6, IPv4] with PreferDualStack (istio-ingress's service.yaml), and every
    // listener, the admin port and the controller's metrics on `::`.
    let docs = render(&SEED, &[DUAL_STACK]);
    let svc = find(&docs, "Service", "isthmus-proxy");
    assert_eq!(svc["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv6", "IPv4"]));
    let addresses = bootstrap_addresses(&docs);
    assert!(
        addresses.iter().all(|a| a.starts_with("[::]:")),
        "{addresses:?}"
    );
    let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    assert!(a.contains(&"--listen-address=::".to_owned()), "{a:?}");
    assert!(
        a.contains(&"--metrics-address=[::]:8080".to_owned()),
        "{a:?}"
    );
    // The controller's file binds where the bootstrap did (what it renders from that flag).
    let admin: std::net::SocketAddr = "[::]:9901".parse().unwrap();
    let layout = Layout::standard(PortScheme::default(), 3, 8443, admin);
    let file: Value = serde_json::from_str(&render_file(&layout, &[]).unwrap().text).unwrap();
    let mut rendered = vec![file["admin"]["address"].as_str().unwrap().to_owned()];
    for l in file["listeners"].as_array().unwrap() {
        rendered.push(l["address"].as_str().unwrap().to_owned());
    }
    rendered.sort();
    let mut bootstrap = addresses.clone();
    bootstrap.sort();
    assert_eq!(rendered, bootstrap);
    // The proxy takes that file.
    let dir = isthmus_testkit::Scratch::new("chart-dual-stack");
    let path = dir.join("proxy.json");
    std::fs::write(
        &path,
        find(&docs, "ConfigMap", "isthmus-proxy-routes")["data"]["proxy.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_isthmus"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // IPv6 only: the cluster's default family, the IPv6 wildcard.
    let docs = render(&SEED, &["gardener.seed.networks.ipFamilies={IPv6}"]);
    let svc = find(&docs, "Service", "isthmus-proxy");
    assert!(svc["spec"]["ipFamilyPolicy"].is_null());
    assert!(bootstrap_addresses(&docs)
        .iter()
        .all(|a| a.starts_with("[::]:")));
    // The operator's choice wins; a wrong one names the value.
    let docs = render(
        &SEED,
        &[DUAL_STACK, "proxy.service.ipFamilyPolicy=RequireDualStack"],
    );
    assert_eq!(
        find(&docs, "Service", "isthmus-proxy")["spec"]["ipFamilyPolicy"],
        "RequireDualStack"
    );
    let err = render_text(&SEED, &["proxy.service.ipFamilies={IPv5}"]).unwrap_err();
    assert!(
        err.contains("proxy.service.ipFamilies: want IPv4 or IPv6"),
        "{err}"
    );
}

#[test]
fn the_example_extension_pins_the_image_by_digest() {
    let text = std::fs::read_to_string(common::chart::chart_dir().join("examples/extension.yaml"))
        .unwrap();
    let ext = &isthmus_testkit::tools::yaml_docs(&text)[0];
    let digest = ext["spec"]["deployment"]["extension"]["values"]["image"]["digest"]
        .as_str()
        .unwrap();
    assert!(
        digest.len() == 71
            && digest.starts_with("sha256:")
            && digest[7..]
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "{digest}"
    );
    // Every container of the seed's render runs exactly that image.
    let docs = render(&SEED, &[]);
    for (kind, name) in [
        ("DaemonSet", "isthmus-proxy"),
        ("Deployment", "isthmus-controller"),
    ] {
        assert_eq!(
            pod_spec(&docs, kind, name)["containers"][0]["image"],
            format!("registry.example.com/isthmus/isthmus:0.1.0@{digest}")
        );
    }
    let err = render_text(&[], &["image.digest=latest"]).unwrap_err();
    assert!(err.contains("image.digest: want sha256:"), "{err}");
}

/// How many waves of pod starts a DaemonSet rollout over `nodes` takes with `max_surge` (an
/// integer or a percentage, rounded up as the DaemonSet controller rounds it).
fn waves(nodes: u32, max_surge: &Value) -> u32 {
    let surge = match max_surge {
        Value::Number(n) => n.as_u64().unwrap() as u32,
        Value::String(p) => {
            let pct: u32 = p.strip_suffix('%').unwrap().parse().unwrap();
            (nodes * pct).div_ceil(100)
        }
        other => panic!("maxSurge {other}"),
    };
    nodes.div_ceil(surge.max(1))
}

#[test]
fn a_proxy_rollout_swaps_a_quarter_of_the_nodes_at_once_and_never_leaves_a_node_without_a_proxy() {
    let docs = render(&SEED, &[]);
    let rolling = &find(&docs, "DaemonSet", "isthmus-proxy")["spec"]["updateStrategy"];
    assert_eq!(rolling["type"], "RollingUpdate");
    let r = &rolling["rollingUpdate"];
    assert_eq!(
        r["maxUnavailable"], 0,
        "a node without a Ready proxy drops connections"
    );
    // gardener-resource-manager reports the ManagedResource Progressing (the Seed's
    // ExtensionsReady not True) until every node runs the new pod: a 50-node seed waits 4
    // pod starts instead of 50 (one node at a time).
    let fifty = waves(50, &r["maxSurge"]);
    assert_eq!(fifty, 4, "{r}");
    assert_eq!(waves(50, &json!(1)), 50);
    assert_eq!(waves(3, &r["maxSurge"]), 3);
    println!("figure: a 50-node seed's proxy rollout takes {fifty} waves of pod starts with maxSurge {} (50 with 1)", r["maxSurge"]);
    let err = render_text(&[], &["proxy.rollingUpdate.maxUnavailable=1"]).unwrap_err();
    assert!(
        err.contains("proxy.rollingUpdate.maxUnavailable: want 0"),
        "{err}"
    );
}

#[test]
fn nothing_per_shoot_is_in_the_managed_resource() {
    // What gardenlet hands the resource manager (the seed's values and the Extension's): only
    // seed-wide objects, in the release namespace, the dashboard's (garden) or cluster-scoped.
    // A shoot's problem cannot then make the ManagedResource, and the Seed, unhealthy.
    let docs = render(&SEED, &[]);
    for d in &docs {
        let ns = d["metadata"]["namespace"].as_str();
        assert!(
            matches!(ns, None | Some("extension-isthmus" | "garden")),
            "{}/{} in {ns:?}",
            d["kind"],
            d["metadata"]["name"]
        );
        if matches!(
            d["kind"].as_str(),
            Some("Deployment" | "DaemonSet" | "StatefulSet")
        ) {
            assert_eq!(ns, Some("extension-isthmus"));
        }
    }
}
