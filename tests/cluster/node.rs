//! The real node of `scripts/cluster.sh` as a test fixture: brought up once, torn down when
//! dropped (also after a failed step), with its kubectl, its "outside" network namespace and
//! the diagnostics a failure prints. A handle names its seed (`--seed`, issue 45): seed a is
//! the node of `tests/cluster.rs`, `tests/seeds.rs` drives a and b through the same calls.

use super::host::host_state;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The namespace playing "outside the cluster": clients of the LoadBalancer range.
pub const EXT_NS: &str = "isthmus-node-ext";
/// The outside client's address (in `loadBalancerSourceRanges` once the test allows it).
pub const EXT_IP: &str = "10.200.0.1";
/// A second outside address, never allowed.
pub const STRANGER_IP: &str = "10.200.0.3";
pub const SYSTEM: &str = "isthmus-system";
/// The helm release of the chart (scripts/cluster/isthmus.sh).
pub const RELEASE: &str = "isthmus";
/// A step that waits on kubelet and the pods it starts.
pub const LONG: Duration = Duration::from_secs(240);
/// The pause between two polls of the cluster.
pub const POLL: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct Node {
    script: PathBuf,
    /// `--seed` of every script call: `a` is the script's default (and `ISTHMUS_CLUSTER_DIR`'s).
    pub seed: char,
    /// The handle that brought the node up tears it down; copies for threads do not.
    owner: bool,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Node {
    /// `scripts/cluster.sh up` (node, then the chart installed as gardener-operator would). A node left
    /// by an earlier run is torn down first. Returns the time `up` took and the host's state
    /// before it ([`host_state`]).
    pub fn up() -> (Self, Duration, String) {
        let mut node = Node::handle();
        node.owner = true;
        let _ = node.command().arg("down").output();
        let before = host_state();
        let t0 = Instant::now();
        let out = node.command().arg("up").output().unwrap();
        let took = t0.elapsed();
        println!("{}", text(&out.stdout));
        if !out.status.success() {
            panic!(
                "scripts/cluster.sh up failed:\n{}\n{}\n{}",
                text(&out.stdout),
                text(&out.stderr),
                node.diagnostics()
            );
        }
        (node, took, before)
    }

    /// A handle on the node that is up, for another thread.
    pub fn handle() -> Self {
        Node::seed('a')
    }

    /// A handle on seed `seed`'s node (`scripts/cluster.sh --seed SEED`), which is up.
    pub fn seed(seed: char) -> Self {
        Node {
            script: Path::new(ROOT).join("scripts/cluster.sh"),
            seed,
            owner: false,
        }
    }

    /// `scripts/cluster.sh --seed SEED`, to add the subcommand to.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.script);
        c.args(["--seed", &self.seed.to_string()]);
        c
    }

    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = self.command().arg("kubectl").args(args).output().unwrap();
        if out.status.success() {
            Ok(text(&out.stdout))
        } else {
            Err(format!(
                "kubectl {args:?}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            ))
        }
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args)
            .unwrap_or_else(|e| panic!("{e}\n{}", self.diagnostics()))
    }

    /// `kubectl apply -f -` of a manifest.
    pub fn apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = self
            .command()
            .args(["kubectl", "apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply:\n{yaml}\n{}",
            text(&out.stderr)
        );
    }

    /// A command in the outside namespace.
    pub fn outside(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", EXT_NS]);
        c
    }

    /// The cluster's kubectl as a command to spawn (watches), run from the host through the
    /// kubeconfig `up` wrote, so that killing it ends it (the script's own `kubectl` runs it
    /// as a grandchild in the node's namespaces).
    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let kubectl = isthmus_testkit::cache::kube_apiserver().with_file_name("kubectl");
        let mut c = Command::new(kubectl);
        c.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
        c
    }

    /// The seed's state directory (scripts/cluster.sh's `$STATE`: pids, logs, kubeconfig).
    pub fn state_dir(&self) -> PathBuf {
        let default = match self.seed {
            'a' => "target/cluster".to_owned(),
            s => format!("target/cluster-{s}"),
        };
        std::env::var_os("ISTHMUS_CLUSTER_DIR")
            .map_or_else(|| Path::new(ROOT).join(default), PathBuf::from)
    }

    /// The admin kubeconfig `up` wrote for the host (kube-apiserver forwarded to 127.0.0.1).
    pub fn kubeconfig(&self) -> PathBuf {
        self.state_dir().join("kubeconfig")
    }

    /// `helm` against the node (`scripts/cluster.sh helm`): stdout, or panics with the output
    /// and the node's diagnostics.
    pub fn helm(&self, args: &[&str]) -> String {
        let out = self.script(&[&["helm"][..], args].concat());
        if !out.status.success() {
            panic!(
                "helm {args:?}: {}{}\n{}",
                text(&out.stdout),
                text(&out.stderr),
                self.diagnostics()
            );
        }
        text(&out.stdout)
    }

    /// `helm upgrade` of the release with the chart's archive, the values in effect and
    /// `sets` (`--set …`/`--set-json …` arguments): what an operator does by changing the
    /// Extension's values. Returns how long helm took.
    pub fn helm_upgrade(&self, sets: &[&str]) -> Duration {
        let chart = self.script(&["chart"]);
        assert!(chart.status.success(), "{}", text(&chart.stderr));
        let chart = text(&chart.stdout).trim().to_owned();
        let t0 = Instant::now();
        let mut args = vec!["upgrade", RELEASE, &chart, "-n", SYSTEM, "--reuse-values"];
        args.extend_from_slice(sets);
        self.helm(&args);
        t0.elapsed()
    }

    /// The load balancer's `loadBalancerSourceRanges` through the release's values
    /// ([`source_ranges_value`]).
    pub fn source_ranges(&self, extra: &[&str]) {
        self.helm_upgrade(&["--set-json", &source_ranges_value(extra)]);
    }

    /// `kubectl rollout status` of `what` in `ns` (e.g. `deploy/isthmus-controller`), waiting
    /// up to `timeout_s` seconds.
    pub fn rolled_out(&self, ns: &str, what: &str, timeout_s: u32) {
        self.kubectl(&[
            "-n",
            ns,
            "rollout",
            "status",
            what,
            &format!("--timeout={timeout_s}s"),
        ]);
    }

    /// The script itself (`load`, `node`, ...).
    pub fn script(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    pub fn jsonpath(&self, ns: &str, what: &str, path: &str) -> String {
        self.try_kubectl(&["-n", ns, "get", what, "-o", &format!("jsonpath={path}")])
            .unwrap_or_default()
    }

    /// `jsonpath` over the pods of `ns` that match `selector`.
    pub fn pods_jsonpath(&self, ns: &str, selector: &str, path: &str) -> String {
        self.try_kubectl(&[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            selector,
            "-o",
            &format!("jsonpath={path}"),
        ])
        .unwrap_or_default()
    }

    /// Every pod, the isthmus objects, events and the isthmus pods' logs: what a failure shows.
    pub fn diagnostics(&self) -> String {
        let mut s = String::new();
        for args in [
            &[
                "get",
                "nodes,pods,svc,ds,deploy,lease,networkpolicy",
                "-A",
                "-o",
                "wide",
            ][..],
            &["-n", SYSTEM, "describe", "ds,deploy,pods"][..],
            &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
            &[
                "-n",
                SYSTEM,
                "logs",
                "-l",
                "app.kubernetes.io/part-of=isthmus",
                "--tail=30",
                "--prefix",
            ][..],
        ] {
            let out = self.try_kubectl(args).unwrap_or_else(|e| e);
            s.push_str(&format!("--- kubectl {}\n{out}\n", args.join(" ")));
        }
        s
    }
}

/// The `--set-json` value of `loadBalancerSourceRanges`: the examples of
/// scripts/cluster/extension-values.yaml plus `extra`.
pub fn source_ranges_value(extra: &[&str]) -> String {
    let mut ranges = vec!["198.51.100.0/24", "203.0.113.0/24"];
    ranges.extend_from_slice(extra);
    format!(
        "proxy.service.loadBalancerSourceRanges={}",
        serde_json::to_string(&ranges).unwrap()
    )
}

impl Node {
    /// `scripts/cluster.sh down`, then the host must be as `before` (taken before `up`).
    pub fn down_and_check(mut self, before: &str) {
        self.owner = false;
        let out = self.command().arg("down").output().unwrap();
        assert!(out.status.success(), "down: {}", text(&out.stderr));
        assert_eq!(
            host_state(),
            before,
            "the host after scripts/cluster.sh down"
        );
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        if std::env::var_os("ISTHMUS_CLUSTER_KEEP").is_some() {
            println!("ISTHMUS_CLUSTER_KEEP: the node stays up (scripts/cluster.sh down)");
            return;
        }
        let out = self.command().arg("down").output();
        if let Ok(out) = out {
            if !out.status.success() {
                eprintln!("scripts/cluster.sh down: {}", text(&out.stderr));
            }
        }
    }
}

/// The proxy pods' admin endpoint at `path`, from the node's namespace: (pod address, body).
pub fn proxy_admin(node: &Node, ns: &str, path: &str) -> Vec<(String, String)> {
    let ips = node.pods_jsonpath(
        ns,
        "app.kubernetes.io/name=isthmus-proxy",
        "{.items[?(@.status.phase==\"Running\")].status.podIP}",
    );
    ips.split_whitespace()
        .map(|ip| {
            let url = format!("http://{ip}:9901{path}");
            let out = node.script(&["node", "curl", "-sS", "--max-time", "5", &url]);
            (
                ip.to_owned(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        })
        .collect()
}

/// kubelet's verdicts on the pods in `ns` from the namespace's events: each pod's failed
/// probes by kind (`Readiness`, `Liveness`, the event's `count` summed) and its containers'
/// restarts. What a busy seed did to its isthmus pods, printed beside the writer's figures: a
/// figure, so a failed read is said in it rather than failing the test.
pub fn probe_failures(node: &Node, ns: &str) -> Result<Vec<(String, u64, u64, u64)>, String> {
    let get = |args: &[&str]| -> Result<serde_json::Value, String> {
        let mut a = vec!["-n", ns, "get"];
        a.extend_from_slice(args);
        a.extend(["-o", "json"]);
        serde_json::from_str(&node.try_kubectl(&a)?).map_err(|e| e.to_string())
    };
    let events = get(&["events", "--field-selector", "reason=Unhealthy"])?;
    let pods = get(&["pods"])?;
    let mut out = Vec::new();
    for p in pods["items"].as_array().into_iter().flatten() {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        let failed = |kind: &str| -> u64 {
            events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| {
                    e["involvedObject"]["name"] == name
                        && e["message"].as_str().is_some_and(|m| m.starts_with(kind))
                })
                .map(|e| {
                    e["count"]
                        .as_u64()
                        .or(e["series"]["count"].as_u64())
                        .unwrap_or(1)
                })
                .sum()
        };
        let restarts = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["restartCount"].as_u64())
            .sum();
        out.push((
            name.to_owned(),
            failed("Readiness"),
            failed("Liveness"),
            restarts,
        ));
    }
    Ok(out)
}

/// Polls `f` until it returns `Some`, pausing `every` between attempts; after `timeout`
/// panics with `what`, the last error and the node's diagnostics.
pub fn poll<T>(
    node: &Node,
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!(
                "timed out after {timeout:?} waiting for {what}; last: {e}\n{}",
                node.diagnostics()
            ),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// Debian's `etcdctl` (v3.4, clientv3) in the node's network namespace, where the pods' and
/// Services' addresses are, against `endpoint` with `args` (TLS flags among them when the
/// cluster has client TLS: druid turns etcd's JSON gateway off by default, so the test speaks
/// gRPC); stdout, or what failed.
pub fn etcdctl(
    node: &Node,
    endpoint: &str,
    timeout: Duration,
    args: &[&str],
) -> Result<String, String> {
    let timeout = format!("{}s", timeout.as_secs().max(1));
    let mut a = vec![
        "node",
        "etcdctl",
        "--endpoints",
        endpoint,
        "--command-timeout",
        &timeout,
    ];
    a.extend_from_slice(args);
    let out = node.script(&a);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "etcdctl {args:?} at {endpoint}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
