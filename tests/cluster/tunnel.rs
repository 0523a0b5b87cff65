//! The temporary VPN as pods: the tunnel server is the controller's, made from a destination
//! migration's `spec.vpn.server` in that shoot's namespace (its TLS files in the orchestrator's
//! Secrets, as gardenlet's secrets manager keeps `vpn-seed-server`'s); the agent rendered from
//! the chart for the shoot, its config in its Secret. The agent (kube-system, "the shoot")
//! dials the load balancer with the VPN's name as SNI, the proxy's VPN route (rendered by the
//! controller from the migration's `spec.vpn` at `Join`, with PROXY v2:
//! `spec.vpn.proxyProtocol`) takes it to the tunnel server, which trusts the pod network's
//! header (the chart's `--tunnel-trusted-proxies`, the seed's pod network); a client labelled
//! as the shoot's kube-apiserver then reaches the etcd pod through the server's CONNECT
//! front, the agent's session and the agent's dial.

use super::node::{poll, source_ranges_value, Node, EXT_IP, RELEASE, STRANGER_IP, SYSTEM};
use super::shoot::{Shoot, NS};
use isthmus_testkit::{Scratch, TestPki};
use std::time::{Duration, Instant};

const VPN: &str = "vpn.shoot--foo--bar.seed-a.internal.example.com";
/// The agents' Service of the controller's tunnel server, in the destination migration's
/// namespace (`spec.vpn.target` may name only a Service of its own namespace).
const SERVER: &str = "isthmus-tunnel-server.shoot--foo--baz.svc.cluster.local";
/// The CONNECT front's Service (the kube-apiserver's egress).
const CONNECT: &str = "isthmus-tunnel-connect.shoot--foo--baz.svc.cluster.local";
const ETCD: &str = "etcd-main-0.etcd-main-peer.shoot--foo--bar.svc.cluster.local";
/// The namespace of the destination migration whose temporary VPN this is.
pub const DST_NS: &str = "shoot--foo--baz";
/// The orchestrator's Secrets the migration names (`spec.vpn.server`).
const AGENTS_TLS: &str = "isthmus-tunnel-agents-e2e";
const CONNECT_TLS: &str = "isthmus-tunnel-connect-e2e";
const CA_BUNDLE: &str = "ca-vpn-bundle-e2e";
/// The controller's objects of the CONNECT front and the agents' port, which exist while the
/// migration does (`grm.rs` checks them beside the resource manager's).
pub const SERVER_POLICIES: [&str; 2] = [
    "isthmus-tunnel-server-connect",
    "isthmus-tunnel-server-agents",
];
/// The kube-apiserver pods' egress to the front: written only where the shoot namespace denies
/// egress (the chart's `networkPolicy.explicit=false`, the Gardener path `grm.rs` switches
/// to); on the plain path it would be those pods' only egress.
pub const EGRESS_POLICY: &str = "isthmus-kube-apiserver-to-tunnel-server";
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

/// A `kubernetes.io/tls` Secret from `<stem>.crt`/`<stem>.key`.
fn tls_secret(node: &Node, name: &str, dir: &Scratch, stem: &str) {
    let cert = format!("--cert={}", dir.join(&format!("{stem}.crt")).display());
    let key = format!("--key={}", dir.join(&format!("{stem}.key")).display());
    node.kubectl(&["-n", DST_NS, "create", "secret", "tls", name, &cert, &key]);
}

pub fn agent_session_through_the_proxy(node: &Node, lb: &str, shoot: &Shoot) {
    let dir = Scratch::new("cluster-tunnel");
    let pki = TestPki::new();
    pki.write_ca(dir.path());
    pki.server_cert(&[VPN, SERVER]).write(dir.path(), "server");
    pki.server_cert(&[CONNECT]).write(dir.path(), "connect");
    pki.peer_cert(&["agent.shoot--foo--bar"])
        .write(dir.path(), "agent");
    pki.peer_cert(&["kube-apiserver.shoot--foo--bar"])
        .write(dir.path(), "apiserver");
    // etcd's CA and a client certificate it accepts (the shoot's kube-apiserver's).
    for (from, to) in [
        (&shoot.ca, "etcd-ca.crt"),
        (&shoot.cert, "etcd-client.crt"),
        (&shoot.key, "etcd-client.key"),
    ] {
        std::fs::copy(from, dir.join(to)).unwrap();
    }
    std::fs::copy(dir.join("ca.crt"), dir.join("bundle.crt")).unwrap();
    let tls = "/etc/isthmus";
    std::fs::write(
        dir.join("agent.yaml"),
        format!(
            "servers:\n  - {{ address: \"{lb}:8443\", server_name: {VPN} }}\n\
             tls: {{ ca: {tls}/ca.crt, cert: {tls}/agent.crt, key: {tls}/agent.key }}\n\
             allow: [\"10.244.0.0/16:2379\"]\n"
        ),
    )
    .unwrap();
    // The temporary VPN is the destination's (its route exists from Join to Shrink): a
    // destination migration of another shoot on this seed, at Join, names it; the orchestrator
    // made the server's Secrets with it (one CA signs the server's and both clients'
    // certificates; each endpoint admits its own client names).
    node.kubectl(&["create", "namespace", DST_NS]);
    tls_secret(node, AGENTS_TLS, &dir, "server");
    tls_secret(node, CONNECT_TLS, &dir, "connect");
    secret(node, DST_NS, CA_BUNDLE, &dir, &["bundle.crt"]);
    let agent_files = ["agent.yaml", "ca.crt", "agent.crt", "agent.key"];
    secret(
        node,
        "kube-system",
        "isthmus-tunnel-agent",
        &dir,
        &agent_files,
    );
    let client_files = [
        "ca.crt",
        "apiserver.crt",
        "apiserver.key",
        "etcd-ca.crt",
        "etcd-client.crt",
        "etcd-client.key",
    ];
    secret(node, DST_NS, "tunnel-client", &dir, &client_files);
    // The seed's side through the release: the shoot's egress (here: the pod network)
    // admitted to the load balancer's VPN port (the template's ranges, which the controller
    // applies to its on-demand Service with the migration's pass below). Nothing per shoot:
    // the server is the controller's.
    node.helm_upgrade(&[
        "--set-json",
        &source_ranges_value(&[
            &format!("{EXT_IP}/32"),
            &format!("{STRANGER_IP}/32"),
            "10.244.0.0/16",
        ]),
    ]);
    // The shoot's side: the agent, rendered from the chart on its own as for a shoot, with
    // the image the seed's release runs (the chart's default is its release tag, which this
    // node never loaded).
    let image = node.jsonpath(
        SYSTEM,
        "ds/isthmus-proxy",
        "{.spec.template.spec.containers[0].image}",
    );
    let (repository, tag) = image
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("the proxy's image {image:?} has no tag"));
    let chart = String::from_utf8(node.script(&["chart"]).stdout).unwrap();
    node.apply(&node.helm(&[
        "template",
        RELEASE,
        chart.trim(),
        "--set",
        "tunnel.agent.enabled=true",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        &format!("image.repository={repository}"),
        "--set",
        &format!("image.tag={tag}"),
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
            // The route sends PROXY v2; the controller writes the server's config trusting
            // the pod network, where the proxy pods dial from (`agents.trusted_proxies`).
            "vpn": {
                "dnsName": VPN, "target": format!("{SERVER}:9443"), "port": 8443, "proxyProtocol": "v2",
                // The tunnel server the controller runs for it.
                "server": {
                    "agents": {
                        "tlsSecret": AGENTS_TLS,
                        "clientCa": {"secret": CA_BUNDLE, "key": "bundle.crt"},
                        "clientNames": ["agent.shoot--foo--bar"],
                    },
                    "connect": {
                        "tlsSecret": CONNECT_TLS,
                        "clientCa": {"secret": CA_BUNDLE, "key": "bundle.crt"},
                        "clientNames": ["kube-apiserver.shoot--foo--bar"],
                    },
                },
            },
        },
    });
    let t_server = Instant::now();
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
    // The controller's tunnel server, owned by the migration; the step is held until it is
    // available (`TunnelServerAvailable`).
    poll(
        node,
        "the controller's tunnel server available (TunnelServerAvailable=True)",
        LONG,
        Duration::from_millis(200),
        || {
            let c = node.jsonpath(
                DST_NS,
                "etcdmigration/etcd-main",
                "{.status.conditions[?(@.type==\"TunnelServerAvailable\")].status}",
            );
            if c == "True" {
                Ok(())
            } else {
                Err(format!("TunnelServerAvailable={c:?}"))
            }
        },
    );
    let made = t_server.elapsed();
    let owner = node.jsonpath(
        DST_NS,
        "deploy/isthmus-tunnel-server",
        "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
    );
    assert_eq!(
        owner, "EtcdMigration/etcd-main",
        "the tunnel server's owner"
    );
    let policies = node.kubectl(&["-n", DST_NS, "get", "networkpolicy", "-o", "name"]);
    for p in SERVER_POLICIES {
        assert!(
            policies
                .lines()
                .any(|l| l == format!("networkpolicy.networking.k8s.io/{p}")),
            "the controller's {p} in {DST_NS}: {policies}"
        );
    }
    assert!(
        !policies
            .lines()
            .any(|l| l == format!("networkpolicy.networking.k8s.io/{EGRESS_POLICY}")),
        "{EGRESS_POLICY} written on the plain path (networkPolicy.explicit=true): {policies}"
    );
    println!(
        "figure: EtcdMigration with spec.vpn.server applied -> the controller's tunnel server available: {made:.1?}"
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
    let proxy = format!("https://{CONNECT}:8132");
    // The probe is handed the front's Service address, so it needs no DNS: on the Gardener
    // path the controller's egress policy for the kube-apiserver's pods admits only the front
    // (in a seed they also carry `to-dns` under gardenlet's allow-to-dns).
    let ip = node.jsonpath(DST_NS, "svc/isthmus-tunnel-connect", "{.spec.clusterIP}");
    let resolve = format!("{CONNECT}:8132:{ip}");
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
                "--resolve",
                &resolve,
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
                "--cert",
                "/tls/etcd-client.crt",
                "--key",
                "/tls/etcd-client.key",
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
        "figure: tunnel server available -> agent session through the proxy carrying a CONNECT to etcd: {:.1?} ({})",
        t0.elapsed(),
        body.trim()
    );
    let agents = node.jsonpath(
        "kube-system",
        "deploy/isthmus-tunnel-agent",
        "{.status.readyReplicas}",
    );
    println!(
        "checked: the controller's tunnel server and {agents} agent pods; etcd reached through the temporary VPN"
    );
}
