//! Rendering the chart (charts/isthmus) with the pinned helm, shared by the chart and
//! monitoring tests.

#![allow(dead_code)]

use isthmus_testkit::tools::{helm, run_ok};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What gardenlet injects for an AWS seed with PROXY protocol on its load balancers, and the
/// operator's values for that seed (the load balancer's ranges the chart requires then).
pub const SEED: [&str; 2] = [
    "examples/gardener-values.yaml",
    "examples/extension-values.yaml",
];

/// The proxies' LoadBalancer Service as it reaches the cluster: the chart's
/// (`proxy.service.mode: always`), or the one the controller makes from the chart's template
/// (`onDemand`, `isthmus_controller::load_balancer::service`).
pub fn load_balancer(docs: &[Value]) -> Value {
    if let Some(svc) = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "isthmus-proxy")
    {
        return svc.clone();
    }
    let cm = find(docs, "ConfigMap", "isthmus-proxy-service");
    let text = cm["data"]["service.yaml"].as_str().unwrap();
    let ns = cm["metadata"]["namespace"].as_str().unwrap();
    isthmus_controller::load_balancer::service(text, ns)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .1
}

/// The value of the controller's flag `--name=` (`None` when it is not given).
pub fn controller_flag(docs: &[Value], name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    args(&find(docs, "Deployment", "isthmus-controller")["spec"]["template"])
        .iter()
        .find_map(|a| a.strip_prefix(prefix.as_str()).map(str::to_owned))
}

pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/isthmus")
}

/// `helm template` (release `isthmus` in `extension-isthmus`, Kubernetes v1.34.4) with values
/// files relative to the chart and `--set` pairs; every object as JSON.
pub fn render(values: &[&str], sets: &[&str]) -> Vec<Value> {
    let text = render_text(values, sets).unwrap_or_else(|e| panic!("{e}"));
    isthmus_testkit::tools::yaml_docs(&text)
}

/// The rendered YAML, or helm's error message.
pub fn render_text(values: &[&str], sets: &[&str]) -> Result<String, String> {
    let dir = chart_dir();
    let mut cmd = Command::new(helm());
    cmd.args(["template", "isthmus"]).arg(&dir).args([
        "--namespace",
        "extension-isthmus",
        "--kube-version",
        "v1.34.4",
    ]);
    for v in values {
        cmd.arg("-f").arg(dir.join(v));
    }
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `helm lint --strict` with the values files; panics with its output on failure.
pub fn lint(values: &[&str]) {
    let dir = chart_dir();
    let mut cmd = Command::new(helm());
    cmd.args(["lint", "--strict", "--kube-version", "v1.34.4"])
        .arg(&dir);
    for v in values {
        cmd.arg("-f").arg(dir.join(v));
    }
    run_ok(&mut cmd);
}

/// The one object of `kind` named `name`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} rendered"))
}

/// Every workload's pod template, as `(Kind/name, template)`.
pub fn pod_templates(docs: &[Value]) -> Vec<(String, &Value)> {
    docs.iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("Deployment" | "DaemonSet" | "StatefulSet")
            )
        })
        .map(|d| {
            let id = format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            );
            (id, &d["spec"]["template"])
        })
        .collect()
}

/// The JSON string value of an annotation, parsed.
pub fn annotation_json(obj: &Value, key: &str) -> Value {
    let text = obj["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{} has no annotation {key}", obj["metadata"]["name"]));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{key}: {e}: {text}"))
}

/// The args of a container.
pub fn args(template: &Value) -> Vec<String> {
    template["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// What the chart gives the controller for the tunnel servers it runs (its `--tunnel-*`
/// flags).
pub fn tunnel_servers(docs: &[Value]) -> isthmus_controller::tunnel_server::TunnelServers {
    let flag = |n: &str| controller_flag(docs, n);
    isthmus_controller::tunnel_server::TunnelServers {
        image: flag("tunnel-image").expect("the chart passes --tunnel-image"),
        trusted_proxies: flag("tunnel-trusted-proxies")
            .map(|l| l.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
        priority_class: flag("tunnel-priority-class").unwrap_or_default(),
        service_monitor: flag("tunnel-service-monitor").as_deref() == Some("true"),
        kube_apiserver_egress: flag("tunnel-kube-apiserver-egress-policy").as_deref()
            == Some("true"),
        listen: flag("listen-address")
            .expect("the chart passes --listen-address")
            .parse()
            .unwrap(),
    }
}

/// The objects of the example migration's tunnel server (in `shoot--foo--bar`) as the
/// controller the chart renders would apply them (its `--tunnel-*`, `--proxy-namespace-labels`
/// and `--shoot-alias` flags).
pub fn tunnel_objects(docs: &[Value]) -> Vec<Value> {
    let flag = |n: &str| controller_flag(docs, n).unwrap_or_else(|| panic!("no --{n}"));
    let namespace_labels = namespace_labels(&flag("proxy-namespace-labels"));
    let alias = flag("shoot-alias");
    let proxies = isthmus_controller::tunnel_server::Proxies {
        namespace_labels: &namespace_labels,
        alias: &alias,
    };
    let owner = isthmus_controller::tunnel_server::Owner {
        name: "etcd-main".into(),
        uid: "0".into(),
    };
    let spec = example_destination().spec;
    isthmus_controller::tunnel_server::objects(
        &spec,
        "shoot--foo--bar",
        &owner,
        &proxies,
        &tunnel_servers(docs),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The example destination migration (`deploy/examples/etcdmigration-destination.yaml`),
/// which asks for a tunnel server.
pub fn example_destination() -> isthmus_controller::crd::EtcdMigration {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/examples/etcdmigration-destination.yaml");
    let doc = isthmus_testkit::tools::yaml_docs(&std::fs::read_to_string(p).unwrap()).remove(0);
    serde_json::from_value(doc).unwrap()
}

/// The rendered bootstrap routes file (the `isthmus-proxy-routes` ConfigMap's `proxy.json`)
/// passes `isthmus check-config`: the proxy takes it. Its text.
pub fn check_bootstrap_routes(docs: &[Value]) -> String {
    let text = find(docs, "ConfigMap", "isthmus-proxy-routes")["data"]["proxy.json"]
        .as_str()
        .unwrap()
        .to_owned();
    let dir = isthmus_testkit::Scratch::new("chart-bootstrap");
    let path = dir.join("proxy.json");
    std::fs::write(&path, &text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_isthmus"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The `KEY=VALUE,...` value of `--proxy-namespace-labels` as pairs.
pub fn namespace_labels(flag: &str) -> std::collections::BTreeMap<String, String> {
    flag.split(',')
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect()
}
