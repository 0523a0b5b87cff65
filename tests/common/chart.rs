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

/// A tunnel server in `shoot--foo--bar`, with the client names the chart requires.
pub const TUNNEL: [&str; 3] = [
    "tunnel.servers[0].namespace=shoot--foo--bar",
    "tunnel.servers[0].agentClientNames[0]=agent.shoot--foo--bar",
    "tunnel.servers[0].connectClientNames[0]=kube-apiserver.shoot--foo--bar",
];

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
