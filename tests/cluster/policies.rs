//! Every NetworkPolicy of deploy/ from both sides, with probe pods (curl) carrying the labels
//! the policies select: what the system needs passes, the rest is refused.

use super::checks::LONG;
use super::node::{poll, Node, SYSTEM};
use super::traffic::POLL;

fn pod_ip(node: &Node, ns: &str, selector: &str) -> String {
    node.pods_jsonpath(ns, selector, "{.items[0].status.podIP}")
}

/// kubectl exec curl in a probe pod; Ok when an HTTP answer came back.
fn exec_curl(node: &Node, pod: &str, url: &str) -> Result<String, String> {
    node.try_kubectl(&[
        "-n",
        SYSTEM,
        "exec",
        pod,
        "--",
        "/usr/bin/curl",
        "-sS",
        "-k",
        "--max-time",
        "3",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        url,
    ])
}

/// Each policy from both sides, with probe pods carrying the labels the policies select.
pub fn network_policies(node: &Node) {
    for (name, labels) in [
        (
            "np-as-controller",
            "{app.kubernetes.io/name: isthmus-controller, isthmus-e2e: probe}",
        ),
        ("np-stranger", "{isthmus-e2e: probe}"),
    ] {
        node.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {SYSTEM}, labels: {labels}}}\nspec:\n  containers:\n    - {{name: probe, image: isthmus.local/test-etcd:v3.6.16, imagePullPolicy: Never, command: [/pause]}}\n"
        ));
    }
    node.kubectl(&[
        "-n",
        SYSTEM,
        "wait",
        "--for=condition=Ready",
        "pod/np-as-controller",
        "pod/np-stranger",
        "--timeout=120s",
    ]);
    let proxy = pod_ip(node, SYSTEM, "app.kubernetes.io/name=isthmus-proxy");
    let dns = pod_ip(node, "kube-system", "k8s-app=kube-dns");
    let admin = format!("http://{proxy}:9901/readyz");
    let dns_ready = format!("http://{dns}:8181/ready");
    // Policies take a moment to be programmed after the pods start: poll for the passing side.
    poll(
        node,
        "the controller's pods reaching the proxy admin port",
        LONG,
        POLL,
        || {
            exec_curl(node, "np-as-controller", &admin).and_then(|c| {
                if c == "200" {
                    Ok(())
                } else {
                    Err(c)
                }
            })
        },
    );
    poll(
        node,
        "a pod without a policy reaching CoreDNS's ready port",
        LONG,
        POLL,
        || {
            exec_curl(node, "np-stranger", &dns_ready).and_then(|c| {
                if c == "200" {
                    Ok(())
                } else {
                    Err(c)
                }
            })
        },
    );
    let refused = exec_curl(node, "np-stranger", &admin);
    assert!(
        refused.is_err(),
        "another pod reached the proxy admin port: {refused:?}"
    );
    let refused = exec_curl(node, "np-as-controller", &dns_ready);
    assert!(
        refused.is_err(),
        "the controller's policy let it reach CoreDNS port 8181: {refused:?}"
    );
    node.kubectl(&[
        "-n",
        SYSTEM,
        "delete",
        "pod",
        "np-as-controller",
        "np-stranger",
        "--wait=false",
    ]);
    println!("checked: proxy admin 9901 open to the controller's pods and closed to others; the controller's egress closed beyond its list");
}
