//! A real 3-member etcd 3.4 cluster (Debian `etcd-server`) whose peer traffic goes only
//! through the isthmus proxy, and a fourth member joining the running cluster through it.
//!
//! Everything runs in a private network namespace: its `/etc/hosts` maps each member's DNS
//! name to the proxy (127.0.0.1), which has one listener per member index (2380 + i), as
//! Gardener exposes them. Ports inside the namespace are fixed: the namespace is created for
//! this test alone, so nothing else can hold them, and etcd needs its URLs before it starts.
//! Needs root, iproute2 and etcd; `.ci/run` installs them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_testkit::{Netns, Scratch, TestPki};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

const DOMAIN: &str = "seed-a.test";
const WAIT: Duration = Duration::from_secs(60);

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn peer_name(i: usize) -> String {
    format!("etcd-{i}.{DOMAIN}")
}
fn peer_url(i: usize) -> String {
    format!("https://{}:{}", peer_name(i), 2380 + i)
}
fn client_url(i: usize) -> String {
    format!("http://127.0.0.1:{}", 22379 + i)
}

fn proxy_yaml(members: usize) -> String {
    let mut y =
        String::from("admin: { address: \"127.0.0.1:9901\" }\nwatch_interval: 100ms\nlisteners:\n");
    for i in 0..members {
        y += &format!(
            "  - name: etcd-peer-{i}\n    address: \"127.0.0.1:{}\"\n    routes: [ {{ sni: \"{}\", upstream: etcd-{i} }} ]\n",
            2380 + i,
            peer_name(i)
        );
    }
    y += "upstreams:\n";
    for i in 0..members {
        y += &format!(
            "  - {{ name: etcd-{i}, endpoints: [\"127.0.0.1:{}\"] }}\n",
            12380 + i
        );
    }
    y
}

fn start_member(ns: &Netns, dir: &Path, i: usize, cluster: &str, state: &str) -> Proc {
    let d = |f: &str| dir.join(f).display().to_string();
    let log = std::fs::File::create(dir.join(format!("etcd-{i}.log"))).unwrap();
    let child = ns
        .command("etcd")
        .args([
            "--name",
            &format!("etcd-{i}"),
            "--data-dir",
            &d(&format!("data-{i}")),
            "--listen-peer-urls",
            &format!("https://127.0.0.1:{}", 12380 + i),
            "--initial-advertise-peer-urls",
            &peer_url(i),
            "--listen-client-urls",
            &client_url(i),
            "--advertise-client-urls",
            &client_url(i),
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            "isthmus-test",
            "--peer-cert-file",
            &d(&format!("etcd-{i}.crt")),
            "--peer-key-file",
            &d(&format!("etcd-{i}.key")),
            "--peer-trusted-ca-file",
            &d("ca.crt"),
            "--peer-client-cert-auth",
            "--experimental-peer-skip-client-san-verification",
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
        ])
        .env("ETCD_UNSUPPORTED_ARCH", "")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Proc(child)
}

fn etcdctl(ns: &Netns, endpoints: &str, args: &[&str]) -> Output {
    ns.command("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoints, "--command-timeout", "5s"])
        .args(args)
        .output()
        .unwrap()
}

fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>, dir: &Path) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            let logs: String = (0..4)
                .filter_map(|i| std::fs::read_to_string(dir.join(format!("etcd-{i}.log"))).ok())
                .map(|l| l.lines().rev().take(15).collect::<Vec<_>>().join("\n"))
                .collect::<Vec<_>>()
                .join("\n---\n");
            panic!("timed out waiting for {what}; last etcd log lines:\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn metrics(ns: &Netns) -> String {
    let out = ns
        .command("curl")
        .args(["-sf", "http://127.0.0.1:9901/metrics"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn forwarded(m: &str, i: usize) -> f64 {
    let series = format!(
        "isthmus_proxy_connections_total{{listener=\"etcd-peer-{i}\",route=\"{}\",upstream=\"etcd-{i}\",outcome=\"forwarded\"}}",
        peer_name(i)
    );
    isthmus_testkit::metric(m, &series)
}

#[test]
fn etcd_cluster_forms_serves_and_grows_through_the_proxy() {
    isthmus_testkit::tier::needs_tools(
        &["etcd", "etcdctl", "ip", "curl"],
        "run .ci/run or `apt-get install etcd-server etcd-client iproute2 curl`",
    );
    let ns = Netns::new("etcd")
        .unwrap_or_else(|e| panic!("network namespaces unavailable (run as root): {e}"));
    let names: Vec<String> = (0..4).map(peer_name).collect();
    let hosts: Vec<(&str, &str)> = names.iter().map(|n| ("127.0.0.1", n.as_str())).collect();
    ns.set_hosts(&hosts);
    let dir = Scratch::new("etcd");
    let pki = TestPki::new();
    pki.write_ca(dir.path());
    for (i, n) in names.iter().enumerate() {
        pki.peer_cert(&[n]).write(dir.path(), &format!("etcd-{i}"));
    }
    std::fs::write(dir.join("proxy.yaml"), proxy_yaml(3)).unwrap();
    let proxy_log = std::fs::File::create(dir.join("proxy.log")).unwrap();
    let _proxy = Proc(
        ns.command(env!("CARGO_BIN_EXE_isthmus"))
            .args(["proxy", "--config"])
            .arg(dir.join("proxy.yaml"))
            .stderr(proxy_log)
            .spawn()
            .unwrap(),
    );
    poll(
        "proxy admin",
        || metrics(&ns).contains("isthmus_proxy").then_some(()),
        dir.path(),
    );

    let cluster3: String = (0..3)
        .map(|i| format!("etcd-{i}={}", peer_url(i)))
        .collect::<Vec<_>>()
        .join(",");
    let _members: Vec<Proc> = (0..3)
        .map(|i| start_member(&ns, dir.path(), i, &cluster3, "new"))
        .collect();
    let all3: String = (0..3).map(client_url).collect::<Vec<_>>().join(",");
    poll(
        "3 healthy members",
        || {
            etcdctl(&ns, &all3, &["endpoint", "health"])
                .status
                .success()
                .then_some(())
        },
        dir.path(),
    );

    // A write on member 0 is read, linearizably, on member 2.
    let put = etcdctl(
        &ns,
        &client_url(0),
        &["put", "/isthmus/k", "through-the-proxy"],
    );
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let get = etcdctl(
        &ns,
        &client_url(2),
        &["get", "/isthmus/k", "--print-value-only", "--consistency=l"],
    );
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "through-the-proxy"
    );

    // Peer traffic went through every member's listener.
    let m = metrics(&ns);
    for i in 0..3 {
        assert!(
            forwarded(&m, i) >= 1.0,
            "no peer connection through listener {i}:\n{m}"
        );
    }

    // A fourth member joins the running cluster: first the proxy learns its route (the file
    // watcher picks the change up), then `member add` (retried: etcd refuses it for a few
    // seconds after members reconnect), then the member starts with state `existing`.
    std::fs::write(dir.join("proxy.yaml"), proxy_yaml(4)).unwrap();
    poll(
        "listener etcd-peer-3",
        || {
            metrics(&ns)
                .contains("listener=\"etcd-peer-3\"")
                .then_some(())
        },
        dir.path(),
    );
    poll(
        "member add",
        || {
            let out = etcdctl(
                &ns,
                &all3,
                &[
                    "member",
                    "add",
                    "etcd-3",
                    &format!("--peer-urls={}", peer_url(3)),
                ],
            );
            out.status.success().then_some(())
        },
        dir.path(),
    );
    let cluster4 = format!("{cluster3},etcd-3={}", peer_url(3));
    let _m3 = start_member(&ns, dir.path(), 3, &cluster4, "existing");
    poll(
        "member 3 healthy and caught up",
        || {
            let out = etcdctl(
                &ns,
                &client_url(3),
                &["get", "/isthmus/k", "--print-value-only", "--consistency=l"],
            );
            (String::from_utf8_lossy(&out.stdout).trim() == "through-the-proxy").then_some(())
        },
        dir.path(),
    );
    let list = etcdctl(&ns, &all3, &["member", "list"]);
    let list = String::from_utf8_lossy(&list.stdout);
    assert_eq!(
        list.lines().filter(|l| l.contains(", started, ")).count(),
        4,
        "{list}"
    );
    // Member 3 can catch up over connections it dials itself (etcd's stream readers and
    // pipelines), so the others' connections to it may come a moment later.
    poll(
        "a peer connection to member 3 through the proxy (none means its peer traffic \
         bypassed the proxy)",
        || (forwarded(&metrics(&ns), 3) >= 1.0).then_some(()),
        dir.path(),
    );
}
