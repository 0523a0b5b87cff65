//! The chart (charts/isthmus) rendered by the pinned helm: lint, Gardener's seed conventions,
//! the seed's load-balancer settings, ports that agree with the controller, and the labels and
//! annotations gardener-resource-manager turns into NetworkPolicies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::chart::{
    annotation_json, args, check_bootstrap_routes, controller_flag, find, lint, load_balancer,
    namespace_labels, pod_templates, render, render_text, tunnel_servers, SEED,
};
use serde_json::Value;
use std::collections::BTreeSet;

const PLAIN: &str = "examples/plain-values.yaml";
const NP: &str = "networking.resources.gardener.cloud/";

#[test]
fn helm_lint_passes_with_defaults_and_both_examples() {
    lint(&[]);
    lint(&SEED);
    lint(&[PLAIN]);
}

#[test]
fn every_workload_follows_the_seed_conventions() {
    let docs = render(&SEED, &[]);
    let pods = pod_templates(&docs);
    // The tunnel servers are the controller's (controller/tests/tunnel_server.rs).
    assert_eq!(pods.len(), 2, "proxy, controller");
    for (id, t) in &pods {
        let spec = &t["spec"];
        // Which class each runs at: tests/chart_conventions.rs.
        assert!(spec["priorityClassName"].is_string(), "{id}");
        let psc = &spec["securityContext"];
        assert_eq!(psc["runAsNonRoot"], true, "{id}");
        assert_eq!(psc["runAsUser"], 65532, "{id}");
        assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault", "{id}");
        for c in spec["containers"].as_array().unwrap() {
            let sc = &c["securityContext"];
            assert_eq!(sc["privileged"], false, "{id}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{id}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{id}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{id}"
            );
            assert!(
                sc["capabilities"]["add"].is_null(),
                "{id} adds capabilities"
            );
            let r = &c["resources"];
            assert!(
                r["requests"]["cpu"].is_string() && r["requests"]["memory"].is_string(),
                "{id}: requests"
            );
            assert!(r["limits"]["cpu"].is_null(), "{id} has a CPU limit");
        }
    }
    for d in docs
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("Deployment" | "DaemonSet")))
    {
        assert_eq!(
            d["spec"]["revisionHistoryLimit"], 2,
            "{}",
            d["metadata"]["name"]
        );
    }
    // A VPA per seed-wide workload, in place where possible (its policies:
    // tests/chart_conventions.rs).
    for (kind, name) in [
        ("DaemonSet", "isthmus-proxy"),
        ("Deployment", "isthmus-controller"),
    ] {
        let vpa = find(&docs, "VerticalPodAutoscaler", name);
        assert_eq!(vpa["spec"]["targetRef"]["kind"], kind);
        assert_eq!(
            vpa["spec"]["updatePolicy"]["updateMode"],
            "InPlaceOrRecreate"
        );
    }
}

#[test]
fn proxy_runs_only_where_the_load_balancer_sends_and_is_ready_when_it_accepts() {
    let docs = render(&SEED, &[]);
    let ds = find(&docs, "DaemonSet", "isthmus-proxy");
    let spec = &ds["spec"]["template"]["spec"];
    // No toleration of every taint (an empty key with Exists): only the load balancer's nodes.
    assert!(
        spec["tolerations"].is_null(),
        "no tolerations by default: {}",
        spec["tolerations"]
    );
    let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(
        terms[0]["matchExpressions"][0]["key"],
        "node.kubernetes.io/exclude-from-external-load-balancers"
    );
    assert_eq!(terms[0]["matchExpressions"][0]["operator"], "DoesNotExist");
    let docs = render(
        &SEED,
        &[
            "proxy.tolerations[0].key=pool",
            "proxy.tolerations[0].value=lb",
            "proxy.tolerations[0].effect=NoSchedule",
        ],
    );
    let tol = &find(&docs, "DaemonSet", "isthmus-proxy")["spec"]["template"]["spec"]["tolerations"];
    assert_eq!(tol.as_array().unwrap().len(), 1);
    // Readiness is the proxy's own /readyz (503 while its names warm up and while draining), never an
    // upstream check.
    let c = &spec["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    // The new pod is Ready before the old one stops (tests/cluster.rs: 0 failed connections);
    // how many nodes at once: tests/chart_conventions.rs.
    let rolling = &ds["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(rolling["maxUnavailable"], serde_json::json!(0));
    let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap();
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap();
    assert!(
        grace > pre_stop + 5 + 30,
        "grace {grace} <= preStop + drain_delay + drain_timeout"
    );
}

/// Allow-lists deny by default: no `--default-allowed-sources` unless the operator sets
/// `exposure.defaultAllowedSources`.
#[test]
fn default_allowed_sources_only_when_set() {
    let docs = render(&[], &[]);
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert!(!args(&ctl["spec"]["template"])
        .iter()
        .any(|a| a.starts_with("--default-allowed-sources")));
    let docs = render(
        &[],
        &["exposure.defaultAllowedSources={10.1.0.0/16,192.0.2.7/32}"],
    );
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert!(args(&ctl["spec"]["template"])
        .contains(&"--default-allowed-sources=10.1.0.0/16,192.0.2.7/32".to_owned()));
}

#[test]
fn load_balancer_follows_the_seeds_settings_as_istio_ingressgateway_does() {
    let docs = render(&SEED, &["proxy.service.annotations.service\\.beta\\.kubernetes\\.io/aws-load-balancer-type=external"]);
    let svc = &load_balancer(&docs);
    let ann = &svc["metadata"]["annotations"];
    assert_eq!(
        ann["service.beta.kubernetes.io/aws-load-balancer-proxy-protocol"], "*",
        "seed annotation"
    );
    assert_eq!(
        ann["service.beta.kubernetes.io/aws-load-balancer-type"], "external",
        "chart values win"
    );
    assert_eq!(svc["spec"]["loadBalancerClass"], "service.k8s.aws/nlb");
    assert_eq!(svc["spec"]["externalTrafficPolicy"], "Local");
    // proxyProtocol.allowed: the controller renders `proxy_protocol: accept` trusting the
    // load balancer's ranges (the operator's value), and so does the bootstrap file.
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert!(args(&ctl["spec"]["template"]).contains(&"--trusted-proxies=10.250.0.0/26".to_owned()));
    let boot: Value = serde_json::from_str(
        find(&docs, "ConfigMap", "isthmus-proxy-routes")["data"]["proxy.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    for l in boot["listeners"].as_array().unwrap() {
        assert_eq!(l["proxy_protocol"], "accept");
        assert_eq!(l["trusted_proxies"], serde_json::json!(["10.250.0.0/26"]));
    }
    // Without seed settings: no class, Local (client addresses for allowed_sources), no PROXY.
    let docs = render(&[], &[]);
    let svc = &load_balancer(&docs);
    assert_eq!(svc["spec"]["externalTrafficPolicy"], "Local");
    assert!(svc["spec"]["loadBalancerClass"].is_null());
    let ctl = find(&docs, "Deployment", "isthmus-controller");
    assert!(!args(&ctl["spec"]["template"])
        .iter()
        .any(|a| a.starts_with("--trusted-proxies")));
    // The seed's Cluster policy is honoured too.
    let docs = render(
        &SEED,
        &["gardener.seed.spec.settings.loadBalancerServices.externalTrafficPolicy=Cluster"],
    );
    assert_eq!(
        load_balancer(&docs)["spec"]["externalTrafficPolicy"],
        "Cluster"
    );
}

#[test]
fn bad_values_fail_with_a_message_that_names_the_value() {
    let cases = [
        (
            vec!["exposure.scheme=seedIngress", "gardener=null"],
            "needs the seed's ingress domain",
        ),
        (vec!["exposure.members=0"], "exposure.members: want 1 to 10"),
        (
            vec!["exposure.scheme=istio"],
            "exposure.scheme: want perMemberRecords or seedIngress",
        ),
        (
            vec!["proxy.proxyProtocol.enabled=true"],
            "no trusted proxies",
        ),
        (
            vec!["proxy.proxyProtocol.enabled=maybe"],
            "proxy.proxyProtocol.enabled: want true, false or empty",
        ),
        // Issue 46 point 2: per-shoot values are gone; an old values file says where they went.
        (
            vec!["tunnel.servers[0].namespace=shoot--a"],
            "tunnel.servers: gone",
        ),
        (vec!["priorityClassName=x"], "priorityClassName: gone"),
        (
            vec!["proxy.service.mode=sometimes"],
            "proxy.service.mode: want always or onDemand",
        ),
        (
            vec![
                "proxy.proxyProtocol.enabled=true",
                "proxy.proxyProtocol.trustedProxies[0]=0.0.0.0/0",
            ],
            "proxy.proxyProtocol.trustedProxies: 0.0.0.0/0 trusts every address",
        ),
    ];
    for (sets, want) in cases {
        let err = render_text(&[], &sets).expect_err(&format!("{sets:?} rendered"));
        assert!(err.contains(want), "{sets:?}: {err}");
    }
}

/// `(name, port)` of the proxy container, without the admin port.
fn container_ports(docs: &[Value]) -> BTreeSet<(String, i64)> {
    let ds = find(docs, "DaemonSet", "isthmus-proxy");
    ds["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] != "admin")
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn ports_agree_between_load_balancer_pods_bootstrap_and_controller() {
    use isthmus_controller::crd::PortScheme;
    use isthmus_controller::proxy_config::Layout;
    for members in [1u8, 3, 5] {
        let docs = render(&[], &[&format!("exposure.members={members}")]);
        let pods = container_ports(&docs);
        let admin = "0.0.0.0:9901".parse().unwrap();
        let layout: BTreeSet<(String, i64)> =
            Layout::standard(PortScheme::default(), members, 8443, admin)
                .listeners
                .into_iter()
                .map(|(n, p)| (n, i64::from(p)))
                .collect();
        assert_eq!(
            pods, layout,
            "the controller's listeners are the pods' ports"
        );
        let boot: Value = serde_json::from_str(
            find(&docs, "ConfigMap", "isthmus-proxy-routes")["data"]["proxy.json"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let listeners: BTreeSet<(String, i64)> = boot["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["name"].as_str().unwrap().to_owned(),
                    l["address"]
                        .as_str()
                        .unwrap()
                        .rsplit(':')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap(),
                )
            })
            .collect();
        assert_eq!(listeners, pods, "bootstrap listeners");
        let svc = &load_balancer(&docs);
        let targets: BTreeSet<(String, i64)> = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["targetPort"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            targets, pods,
            "the load balancer forwards every listener, and only those"
        );
        let a = args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
        assert!(
            a.contains(&format!("--members={members}"))
                && a.contains(&"--vpn-port=8443".to_owned()),
            "{a:?}"
        );
    }
    // seedIngress: load-balancer ports 2380+i and 2379 onto listeners 12380+i and 12379.
    let docs = render(&SEED, &["exposure.scheme=seedIngress"]);
    let svc = &load_balancer(&docs);
    let map: Vec<(i64, i64)> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                p["targetPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        map,
        vec![
            (2380, 12380),
            (2381, 12381),
            (2382, 12382),
            (2379, 12379),
            (8443, 8443)
        ]
    );
    let pods = container_ports(&docs);
    for (_, target) in &map {
        assert!(
            pods.iter().any(|(_, p)| p == target),
            "{target} not a container port"
        );
    }
}

#[test]
fn bootstrap_routes_file_is_valid_for_the_proxy() {
    for values in [&[][..], &SEED[..]] {
        let docs = render(values, &[]);
        check_bootstrap_routes(&docs);
        let a = args(&find(&docs, "DaemonSet", "isthmus-proxy")["spec"]["template"]);
        assert_eq!(a[..3], ["proxy", "--config", "/etc/isthmus/proxy.json"]);
    }
}

#[test]
fn crd_is_the_controllers_and_outlives_the_release() {
    let docs = render(&[], &[]);
    let mut crd = find(
        &docs,
        "CustomResourceDefinition",
        "etcdmigrations.isthmus.dev",
    )
    .clone();
    // `helm uninstall` leaves it (and so every EtcdMigration of the seed) in place.
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let meta = crd["metadata"].as_object_mut().unwrap();
    meta.remove("annotations");
    meta.remove("labels");
    let generated =
        isthmus_testkit::tools::yaml_docs(&isthmus_controller::crd::crd_yaml().unwrap());
    // helm's toYaml writes `maximum: 10.0` as `10`: numbers compare as numbers.
    assert!(
        as_f64(&crd) == as_f64(&generated[0]),
        "charts/isthmus/files/crd-etcdmigration.yaml is stale: ISTHMUS_UPDATE_CRD=1 cargo test -p isthmus-controller --test crd_yaml"
    );
}

/// `v` with every number as a float.
fn as_f64(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.iter().map(as_f64).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), as_f64(v))).collect()),
        other => other.clone(),
    }
}

/// The label gardener-resource-manager's NetworkPolicy controller (Gardener v1.149.3,
/// pkg/resourcemanager/controller/networkpolicy) asks of a client in `client_ns` for each
/// port of `svc`: `to-[<alias or namespace>-]<service>-<protocol>-<targetPort>`, the alias
/// (or namespace) only across namespaces.
fn grm_labels(svc: &Value, client_ns: &str) -> Vec<String> {
    let ns = svc["metadata"]["namespace"].as_str().unwrap();
    let infix = if ns == client_ns {
        String::new()
    } else {
        let alias = svc["metadata"]["annotations"]
            [format!("{NP}pod-label-selector-namespace-alias")]
        .as_str()
        .unwrap_or(ns);
        format!("{alias}-")
    };
    svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let proto = p["protocol"].as_str().unwrap_or("TCP").to_lowercase();
            format!(
                "{NP}to-{infix}{}-{proto}-{}",
                svc["metadata"]["name"].as_str().unwrap(),
                p["targetPort"]
            )
        })
        .collect()
}

#[test]
fn gardener_resource_manager_gets_what_it_needs_for_every_flow() {
    let docs = render(&SEED, &[]);
    let proxy =
        &find(&docs, "DaemonSet", "isthmus-proxy")["spec"]["template"]["metadata"]["labels"];
    let controller =
        &find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]["metadata"]["labels"];
    let has = |labels: &Value, key: &str| labels[key] == "allowed";
    // Proxy -> etcd in every shoot namespace, through the Service the controller creates there
    // (`isthmus_controller::network`, with the flags the chart gives the controller).
    let controller_args =
        args(&find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]);
    let flag = |name: &str| {
        let prefix = format!("--{name}=");
        controller_args
            .iter()
            .find_map(|a| a.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("controller without {prefix}: {controller_args:?}"))
    };
    let user = isthmus_controller::network::EtcdUser {
        name: "etcd-main".into(),
        uid: "0".into(),
        pod_labels: [("app".to_string(), "etcd-statefulset".to_string())].into(),
    };
    let namespace_labels = namespace_labels(flag("proxy-namespace-labels"));
    let trigger = isthmus_controller::network::etcd_service(
        "shoot--foo--bar",
        &[user],
        &namespace_labels,
        flag("shoot-alias"),
    )
    .unwrap();
    // gardenlet's namespace by its registration label, not its name (which changes).
    assert_eq!(
        annotation_json(&trigger, &format!("{NP}namespace-selectors")),
        serde_json::json!([{"matchLabels": {"controllerregistration.core.gardener.cloud/name": "isthmus"}}])
    );
    for l in grm_labels(&trigger, "extension-isthmus") {
        assert!(has(proxy, &l), "proxy lacks {l}");
        assert!(
            l.len() - NP.len() <= 63,
            "{l}: gardener-resource-manager would shorten it"
        );
    }
    // Proxy -> tunnel servers' agents port, through the Service the controller creates with
    // each server (`isthmus_controller::tunnel_server`, with the chart's flags): only that
    // port; the CONNECT front is for pods of the shoot's namespace (its kube-apiserver).
    let objects = common::chart::tunnel_objects(&docs);
    let tunnel = find(&objects, "Service", "isthmus-tunnel-server");
    // gardenlet's namespace by its registration label, as for etcd above.
    assert_eq!(
        annotation_json(tunnel, &format!("{NP}namespace-selectors")),
        serde_json::json!([{"matchLabels": {"controllerregistration.core.gardener.cloud/name": "isthmus"}}])
    );
    let labels = grm_labels(tunnel, "extension-isthmus");
    assert_eq!(labels.len(), 1, "{labels:?}");
    assert!(has(proxy, &labels[0]), "proxy lacks {}", labels[0]);
    let connect = find(&objects, "Service", "isthmus-tunnel-connect");
    assert!(connect["metadata"]["annotations"]
        .get(format!("{NP}namespace-selectors"))
        .is_none());
    for l in grm_labels(connect, "extension-isthmus") {
        assert!(!has(proxy, &l) && !has(controller, &l), "{l}");
    }
    // Controller -> proxy admin (rollout check), same namespace; the seed Prometheus -> admin.
    let admin = find(&docs, "Service", "isthmus-proxy-admin");
    for l in grm_labels(admin, "extension-isthmus") {
        assert!(has(controller, &l), "controller lacks {l}");
    }
    // Controller -> etcd's member API through the load balancer's address, which kube-proxy
    // takes straight to a proxy pod's client listener: the proxy Service's policies admit
    // pods with its per-port labels; the controller has those of the client listeners only.
    let lb = &load_balancer(&docs);
    let ports = lb["spec"]["ports"].as_array().unwrap();
    for (p, l) in ports.iter().zip(grm_labels(lb, "extension-isthmus")) {
        let client = p["name"].as_str().unwrap().starts_with("client-");
        assert_eq!(has(controller, &l), client, "controller and {l}");
    }
    assert!(
        has(controller, "networking.gardener.cloud/to-runtime-apiserver")
            && has(controller, "networking.gardener.cloud/to-dns")
    );
    assert!(has(proxy, "networking.gardener.cloud/to-dns"));
    for (svc, port) in [
        (admin, 9901),
        (find(&docs, "Service", "isthmus-controller"), 8080),
    ] {
        assert_eq!(
            annotation_json(
                svc,
                &format!("{NP}from-all-seed-scrape-targets-allowed-ports")
            ),
            serde_json::json!([{"port": port, "protocol": "TCP"}])
        );
        assert_eq!(
            svc["metadata"]["annotations"][format!("{NP}pod-label-selector-namespace-alias")],
            "extensions"
        );
    }
    // The world reaches the listeners and nothing else (never the admin port).
    let world: BTreeSet<i64> = annotation_json(lb, &format!("{NP}from-world-to-ports"))
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    let listeners: BTreeSet<i64> = container_ports(&docs).into_iter().map(|(_, p)| p).collect();
    assert_eq!(world, listeners);
    assert!(!world.contains(&9901));
    // Nothing else: no label opens the public or private networks to the proxy.
    let opened: Vec<&String> = proxy
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("networking."))
        .collect();
    assert_eq!(opened.len(), 4, "{opened:?}");
}

#[test]
fn chart_is_packaged_as_an_oci_artifact() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = |args: &[&str]| {
        isthmus_testkit::tools::run_ok(
            std::process::Command::new(root.join("scripts/chart.sh")).args(args),
        )
    };
    run(&["package"]);
    let oci = root.join("target/chart/oci");
    let blob = |digest: &str| {
        std::fs::read(
            oci.join("blobs/sha256")
                .join(digest.trim_start_matches("sha256:")),
        )
        .unwrap()
    };
    let index: Value =
        serde_json::from_slice(&std::fs::read(oci.join("index.json")).unwrap()).unwrap();
    let m = &index["manifests"][0];
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"],
        "0.1.0"
    );
    let manifest_bytes = blob(m["digest"].as_str().unwrap());
    let manifest: Value = serde_json::from_slice(&manifest_bytes).unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.cncf.helm.config.v1+json"
    );
    let layer = &manifest["layers"][0];
    assert_eq!(
        layer["mediaType"],
        "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    );
    let tgz = blob(layer["digest"].as_str().unwrap());
    assert_eq!(tgz.len() as u64, layer["size"].as_u64().unwrap());
    assert_eq!(
        tgz,
        std::fs::read(root.join("target/chart/isthmus-0.1.0.tgz")).unwrap()
    );
    let config: Value =
        serde_json::from_slice(&blob(manifest["config"]["digest"].as_str().unwrap())).unwrap();
    assert_eq!(
        (config["name"].as_str(), config["version"].as_str()),
        (Some("isthmus"), Some("0.1.0"))
    );
    // The archive is a chart helm renders as it renders the folder.
    let out = isthmus_testkit::tools::run_ok(
        std::process::Command::new(isthmus_testkit::tools::helm())
            .args([
                "template",
                "isthmus",
                "--namespace",
                "extension-isthmus",
                "--kube-version",
                "v1.34.4",
            ])
            .arg(root.join("target/chart/isthmus-0.1.0.tgz")),
    );
    assert_eq!(isthmus_testkit::tools::yaml_docs(&out), render(&[], &[]));
}

/// The YAML files `scripts/chart.sh render` owns in `dir` (deploy/ or a scratch copy).
fn rendered_files(dir: &std::path::Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for sub in ["", "examples"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            let path = if sub.is_empty() {
                name.clone()
            } else {
                format!("{sub}/{name}")
            };
            // examples/ also holds hand-written EtcdMigrations and generated access grants.
            let ours = if sub.is_empty() {
                name.ends_with(".yaml")
            } else {
                name == "tunnel.yaml"
            };
            if ours {
                out.insert(path);
            }
        }
    }
    out
}

#[test]
fn deploy_is_the_chart_rendered_for_a_plain_cluster() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = isthmus_testkit::Scratch::new("chart-render");
    std::fs::create_dir_all(dir.join("examples")).unwrap();
    isthmus_testkit::tools::run_ok(
        std::process::Command::new(root.join("scripts/chart.sh"))
            .args(["render"])
            .arg(dir.path()),
    );
    let fresh = rendered_files(dir.path());
    let committed = rendered_files(&root.join("deploy"));
    assert_eq!(
        committed, fresh,
        "deploy/ has other files than the render: run scripts/chart.sh render"
    );
    for f in &fresh {
        let want = std::fs::read_to_string(dir.join(f)).unwrap();
        let have = std::fs::read_to_string(root.join("deploy").join(f)).unwrap();
        assert!(
            want == have,
            "deploy/{f} is not the chart's render: run scripts/chart.sh render"
        );
    }
    // Every object of the plain render is in deploy/, plus its namespace, in an order
    // `kubectl apply -f deploy/` can take: the namespace first.
    let mut objects = 0;
    for f in &fresh {
        objects +=
            isthmus_testkit::tools::yaml_docs(&std::fs::read_to_string(dir.join(f)).unwrap()).len();
    }
    assert_eq!(objects, render(&[PLAIN], &[]).len() + 1);
    assert_eq!(
        fresh.iter().next().map(String::as_str),
        Some("00-namespace.yaml")
    );
    // A plain cluster has no PriorityClass, VPA or Prometheus operator: none is referenced.
    let docs = render(&[PLAIN], &[]);
    for (id, t) in pod_templates(&docs) {
        assert!(t["spec"]["priorityClassName"].is_null(), "{id}");
    }
    assert!(
        !docs.iter().any(|d| matches!(
            d["kind"].as_str(),
            Some("VerticalPodAutoscaler" | "PrometheusRule" | "PodMonitor")
        )),
        "plain values render a kind a plain cluster lacks"
    );
}

/// The verbs of the controller's Role in the release namespace on `resource` named `name`.
fn role_verbs(docs: &[Value], resource: &str, name: &str) -> Vec<String> {
    let role = find(docs, "Role", "isthmus-controller");
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["resources"][0] == resource
                && r["resourceNames"]
                    .as_array()
                    .is_some_and(|n| n.iter().any(|n| n == name))
        })
        .flat_map(|r| r["verbs"].as_array().unwrap().clone())
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// Issue 46 point 4: by default (`proxy.service.mode: onDemand`) the proxies' load balancer
/// is no object of the chart: the chart renders it as the controller's template, gives the
/// controller the flag and the RBAC to create and delete that one Service and read the
/// template; `always` renders it as before, and the controller only reads it. The Service
/// the controller applies is the one `always` renders.
#[test]
fn the_load_balancer_is_made_on_demand_or_rendered_always() {
    for values in [&[][..], &SEED[..], &[PLAIN][..]] {
        let on_demand = render(values, &[]);
        let always = render(values, &["proxy.service.mode=always"]);
        let named = |docs: &[Value], kind: &str, name: &str| {
            docs.iter()
                .any(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        };
        assert!(!named(&on_demand, "Service", "isthmus-proxy"));
        assert!(named(&on_demand, "ConfigMap", "isthmus-proxy-service"));
        assert!(!named(&always, "ConfigMap", "isthmus-proxy-service"));
        assert_eq!(
            controller_flag(&on_demand, "proxy-service-template").as_deref(),
            Some("isthmus-proxy-service")
        );
        assert_eq!(controller_flag(&always, "proxy-service-template"), None);
        let mut made = load_balancer(&on_demand);
        let labels = made["metadata"]["labels"].as_object_mut().unwrap();
        assert_eq!(
            labels.remove("isthmus.dev/on-demand"),
            Some(serde_json::json!("true")),
            "only a Service with this label is ever deleted"
        );
        labels.remove("app.kubernetes.io/managed-by");
        let mut chart = find(&always, "Service", "isthmus-proxy").clone();
        let labels = chart["metadata"]["labels"].as_object_mut().unwrap();
        labels.remove("app.kubernetes.io/managed-by");
        assert_eq!(made, chart);
        assert_eq!(
            role_verbs(&on_demand, "services", "isthmus-proxy"),
            ["get", "create", "patch", "delete"]
        );
        assert_eq!(
            role_verbs(&on_demand, "configmaps", "isthmus-proxy-service"),
            ["get"]
        );
        assert_eq!(role_verbs(&always, "services", "isthmus-proxy"), ["get"]);
        assert!(role_verbs(&always, "configmaps", "isthmus-proxy-service").is_empty());
    }
}

/// Issue 46 point 2: nothing per shoot in the chart. No object lands in a shoot's namespace
/// (the tunnel servers are the controller's, from each EtcdMigration); the controller gets
/// what every tunnel server of the seed shares: its own image, the seed's pod network as the
/// proxies' addresses (`tunnel.trustedProxies` wins), Gardener's priority class of per-shoot
/// control-plane parts, the shoot Prometheus' ServiceMonitor.
#[test]
fn nothing_per_shoot_in_the_chart_and_the_controller_runs_the_tunnel_servers() {
    for values in [&[][..], &SEED[..], &[PLAIN][..]] {
        for d in render(values, &["tunnel.agent.enabled=false"]) {
            let ns = d["metadata"]["namespace"].as_str();
            assert!(
                matches!(ns, None | Some("extension-isthmus" | "garden")),
                "{values:?}: {}/{} in {ns:?}",
                d["kind"],
                d["metadata"]["name"]
            );
        }
    }
    let docs = render(&SEED, &[]);
    let s = tunnel_servers(&docs);
    let image = &find(&docs, "Deployment", "isthmus-controller")["spec"]["template"]["spec"]
        ["containers"][0]["image"];
    assert_eq!(s.image, image.as_str().unwrap());
    assert_eq!(
        s.trusted_proxies,
        ["100.96.0.0/11"],
        "gardener.seed.networks.pods"
    );
    assert_eq!(s.priority_class, "gardener-system-300");
    assert!(s.service_monitor);
    let docs = render(&SEED, &["tunnel.trustedProxies[0]=100.96.4.0/24"]);
    assert_eq!(tunnel_servers(&docs).trusted_proxies, ["100.96.4.0/24"]);
    // The plain cluster: its pod network, no Gardener class, no prometheus-operator.
    let s = tunnel_servers(&render(&[PLAIN], &[]));
    assert_eq!(s.trusted_proxies, ["10.244.0.0/16"]);
    assert_eq!((s.priority_class.as_str(), s.service_monitor), ("", false));
    // Neither: no flag (an empty one would fail the controller's start); it then refuses a
    // migration whose VPN route sends PROXY v2 (controller/tests/tunnel_server.rs).
    assert_eq!(
        controller_flag(&render(&[], &[]), "tunnel-trusted-proxies"),
        None
    );
}

/// Issue 46 (a known limit until now): the tunnel servers' kube-apiserver egress policy only
/// where the shoot namespaces deny egress. The controller gets
/// `--tunnel-kube-apiserver-egress-policy=true` exactly on the Gardener path
/// (`networkPolicy.explicit=false`, gardener-resource-manager's); with explicit policies (a
/// plain cluster) no flag, so the controller's default leaves the policy out (it would be
/// the kube-apiserver pods' only egress there).
#[test]
fn the_kube_apiserver_egress_policy_only_on_the_gardener_path() {
    for values in [&[][..], &SEED[..], &[PLAIN][..]] {
        for (explicit, want) in [("false", Some("true")), ("true", None)] {
            let docs = render(values, &[&format!("networkPolicy.explicit={explicit}")]);
            assert_eq!(
                controller_flag(&docs, "tunnel-kube-apiserver-egress-policy").as_deref(),
                want,
                "{values:?}, explicit={explicit}"
            );
            assert_eq!(tunnel_servers(&docs).kube_apiserver_egress, want.is_some());
        }
    }
}
