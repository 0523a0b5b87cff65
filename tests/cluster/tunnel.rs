//! The temporary VPN as pods (the chart's tunnel server through `helm upgrade`, its config
//! rendered by the chart and its TLS files in the Secret it names; the agent rendered from the
//! chart for the shoot, its config in its Secret): the agent
//! (kube-system, "the shoot") dials the load balancer with the VPN's name as SNI, the
//! proxy's VPN route (rendered by the controller from a destination migration's `spec.vpn` at
//! `Join`, with PROXY v2: `spec.vpn.proxyProtocol`) takes it to the tunnel server, which
//! trusts the pod network's header;
//! a client labelled as the shoot's kube-apiserver then reaches the etcd pod through the
//! server's CONNECT front, the agent's session and the agent's dial.

use super::node::{poll, source_ranges_value, Node, EXT_IP, RELEASE, STRANGER_IP, SYSTEM};
use super::shoot::NS;
use isthmus_testkit::{Scratch, TestPki};
use std::time::{Duration, Instant};

const VPN: &str = "vpn.shoot--foo--bar.seed-a.internal.example.com";
/// In the destination migration's namespace: its `spec.vpn.target` may name only a Service
/// of its own namespace (the controller refuses others: `TargetOutsideNamespace`).
const SERVER: &str = "isthmus-tunnel-server.shoot--foo--baz.svc.cluster.local";
const ETCD: &str = "etcd-main-0.etcd-main-peer.shoot--foo--bar.svc.cluster.local";
/// The namespace of the destination migration whose temporary VPN this is.
pub const DST_NS: &str = "shoot--foo--baz";
const LONG: Duration = Duration::from_secs(300);

fn secret(node: &Node, ns: &str, name: &str, dir: &Scratch, files: &[&str]) {
    let mut args = vec!["-n", ns, "create", "secret", "generic", name];
    let from: Vec<String> = files
        .iter()
        .map(|f| format!("--from-file={f}={}", dir.join(f).display()))
        .collect();
    args.extend(from.iter().map(String::as_str));
    node.kubectl(&args);
}

pub fn agent_session_through_the_proxy(node: &Node, lb: &str, etcd_ca: &std::path::Path) {
    let dir = Scratch::new("cluster-tunnel");
    let pki = TestPki::new();
    pki.write_ca(dir.path());
    pki.server_cert(&[VPN, SERVER]).write(dir.path(), "server");
    pki.server_cert(&[SERVER]).write(dir.path(), "connect");
    pki.peer_cert(&["agent.shoot--foo--bar"])
        .write(dir.path(), "agent");
    pki.peer_cert(&["kube-apiserver.shoot--foo--bar"])
        .write(dir.path(), "apiserver");
    std::fs::copy(etcd_ca, dir.join("etcd-ca.crt")).unwrap();
    let tls = "/etc/isthmus";
    // The server's config is the chart's (trusting the seed's pod network, 10.244.0.0/24, for
    // the route's PROXY v2 header; the client names below); its Secret holds the TLS files.
    std::fs::copy(dir.join("ca.crt"), dir.join("connect-ca.crt")).unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "servers:\n  - {{ address: \"{lb}:8443\", server_name: {VPN} }}\n\
             tls: {{ ca: {tls}/ca.crt, cert: {tls}/agent.crt, key: {tls}/agent.key }}\n\
             allow: [\"10.244.0.0/16:2379\"]\n"
        ),
    )
    .unwrap();
    let server_files = [
        "ca.crt",
        "server.crt",
        "server.key",
        "connect-ca.crt",
        "connect.crt",
        "connect.key",
    ];
    // The temporary VPN is the destination's (its route exists from Join to Shrink): a
    // destination migration of another shoot on this seed, at Join, names it; its tunnel
    // server runs in that shoot's namespace.
    node.kubectl(&["create", "namespace", DST_NS]);
    secret(node, DST_NS, "isthmus-tunnel-server", &dir, &server_files);
    let agent_files = ["agent.yaml", "ca.crt", "agent.crt", "agent.key"];
    secret(
        node,
        "kube-system",
        "isthmus-tunnel-agent",
        &dir,
        &agent_files,
    );
    let client_files = ["ca.crt", "apiserver.crt", "apiserver.key", "etcd-ca.crt"];
    secret(node, DST_NS, "tunnel-client", &dir, &client_files);
    // The seed's side through the release: a tunnel server in the shoot's namespace, and the
    // shoot's egress (here: the pod network) admitted to the load balancer's VPN port.
    node.helm_upgrade(&[
        "--set",
        &format!("tunnel.servers[0].namespace={DST_NS}"),
        "--set",
        "tunnel.servers[0].agentClientNames[0]=agent.shoot--foo--bar",
        "--set",
        "tunnel.servers[0].connectClientNames[0]=kube-apiserver.shoot--foo--bar",
        "--set-json",
        &source_ranges_value(&[
            &format!("{EXT_IP}/32"),
            &format!("{STRANGER_IP}/32"),
            "10.244.0.0/16",
        ]),
    ]);
    // The shoot's side: the agent, rendered from the chart on its own as for a shoot.
    let chart = String::from_utf8(node.script(&["chart"]).stdout).unwrap();
    node.apply(&node.helm(&[
        "template",
        RELEASE,
        chart.trim(),
        "--set",
        "tunnel.agent.enabled=true",
        "--set",
        "image.pullPolicy=Never",
        "--show-only",
        "templates/tunnel-agent.yaml",
    ]));
    // Gardenlet's grant in that namespace comes with the migration.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let grant = std::fs::read_to_string(root.join("deploy/examples/access-destination.yaml"))
        .unwrap_or_else(|e| panic!("deploy/examples/access-destination.yaml: {e}"));
    node.apply(&grant.replace(&format!("namespace: {NS}"), &format!("namespace: {DST_NS}")));
    let mut template = isthmus_testkit::minimal_etcd("etcd-main", DST_NS, 2)["spec"].clone();
    template.as_object_mut().unwrap().remove("replicas");
    let migration = serde_json::json!({
        "apiVersion": "isthmus.dev/v1alpha1",
        "kind": "EtcdMigration",
        "metadata": {"name": "etcd-main", "namespace": DST_NS},
        "spec": {
            "role": "destination",
            "step": "Join",
            "etcdName": "etcd-main",
            "seedName": "seed-a",
            "internalDomain": "internal.example.com",
            "members": 2,
            "dns": {"type": "aws-route53", "secretRef": {"name": "dns-internal", "namespace": DST_NS}},
            "loadBalancer": {"name": "isthmus-proxy", "namespace": SYSTEM},
            "destination": {
                "memberNamePrefix": "dest",
                "sourceMembers": [{
                    "name": "etcd-main-0",
                    "peerUrls": ["https://etcd-main-0.shoot--foo--baz.seed-b.internal.example.com:2380"],
                    "clientUrls": ["https://etcd-main-0.shoot--foo--baz.seed-b.internal.example.com:2379"],
                }],
                "etcdTemplate": {"labels": {"app": "etcd-statefulset"}, "spec": template},
            },
            // The route sends PROXY v2; the server trusts the pod network, where the proxy
            // pods dial from (`agents.trusted_proxies` above).
            "vpn": {"dnsName": VPN, "target": format!("{SERVER}:9443"), "port": 8443, "proxyProtocol": "v2"},
        },
    });
    node.apply(&migration.to_string());
    poll(
        node,
        "the VPN route in the ConfigMap",
        LONG,
        Duration::from_millis(200),
        || {
            let cm = node.jsonpath(SYSTEM, "cm/isthmus-proxy-routes", "{.data}");
            if cm.contains(VPN) {
                Ok(())
            } else {
                Err(cm)
            }
        },
    );
    let t0 = Instant::now();
    // A client labelled as the shoot's kube-apiserver (the CONNECT front's policy admits it).
    node.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: kube-apiserver-probe, namespace: {DST_NS}, labels: {{app: kubernetes, role: apiserver}}}}
spec:
  containers:
    - name: probe
      image: isthmus.local/test-etcd:v3.6.16
      imagePullPolicy: Never
      command: [/pause]
      volumeMounts: [{{name: tls, mountPath: /tls, readOnly: true}}]
  volumes:
    - {{name: tls, secret: {{secretName: tunnel-client}}}}
"#
    ));
    node.kubectl(&[
        "-n",
        DST_NS,
        "wait",
        "--for=condition=Ready",
        "pod/kube-apiserver-probe",
        "--timeout=120s",
    ]);
    let proxy = format!("https://{SERVER}:8132");
    let target = format!("https://{ETCD}:2379/health");
    let body = poll(
        node,
        "etcd's /health through the tunnel (server CONNECT -> agent session via the proxy -> etcd)",
        LONG,
        Duration::from_secs(1),
        || {
            let out = node.try_kubectl(&[
                "-n",
                DST_NS,
                "exec",
                "kube-apiserver-probe",
                "--",
                "/usr/bin/curl",
                "-sS",
                "--max-time",
                "10",
                "--proxy",
                &proxy,
                "--proxy-cacert",
                "/tls/ca.crt",
                "--proxy-cert",
                "/tls/apiserver.crt",
                "--proxy-key",
                "/tls/apiserver.key",
                "--cacert",
                "/tls/etcd-ca.crt",
                &target,
            ])?;
            if out.contains("\"health\":\"true\"") {
                Ok(out)
            } else {
                Err(out)
            }
        },
    );
    println!(
        "figure: VPN route written -> agent session through the proxy carrying a CONNECT to etcd: {:.1?} ({})",
        t0.elapsed(),
        body.trim()
    );
    let agents = node.jsonpath(
        "kube-system",
        "deploy/isthmus-tunnel-agent",
        "{.status.readyReplicas}",
    );
    println!(
        "checked: tunnel server and {agents} agent pods; etcd reached through the temporary VPN"
    );
}
