//! The shoot's admission webhook through the tunnel across two real seeds (issue 45 point 3),
//! as the lab runs it with processes (lab/src/webhook): each seed's kube-apiserver pod calls
//! the webhook through its `cluster` egress (`--egress-selector-config-file`: HTTPConnect over
//! mTLS to its own seed's CONNECT front), a tunnel server carries the call over an agent's
//! session into the shoot, and the agent dials the webhook there. This module: the tunnel's
//! TLS, each seed's server side and the kube-apiservers' egress; the shoot's side (the webhook,
//! the agents, the counting) is `shoot_side.rs`, seed a's server `shoot_stand_in.rs`.
//!
//! - Seed b (destination): the temporary VPN is the controller's. The destination migration
//!   carries `spec.vpn.server` ([`Tunnel::destination_vpn`], the contract of
//!   tests/cluster/tunnel.rs: its Secrets, names and fields), so seed b's controller runs the
//!   tunnel server from `Join`, and its proxies route the VPN name on the VPN port (PROXY v2)
//!   to it.
//! - Seed a (source): the stand-in for Gardener's regular VPN server (`shoot_stand_in.rs`).
//!
//! Each seed's kube-apiserver presents a client certificate of its own to the webhook, which
//! counts the AdmissionReviews it answered per certificate.

use super::join_observe::{DST, SRC};
use super::node::{poll, Node, POLL};
use super::shoot_api::{ShootFiles, TLS};
use super::shoot_stand_in::stand_in;
use isthmus_controller::tunnel_server::{
    self as server, AGENTS_PORT, CONNECT_PORT, CONNECT_SERVICE,
};
use isthmus_lab::api::files;
use isthmus_lab::webhook::WEBHOOK_SERVICE;
use isthmus_testkit::{CertKey, Scratch, TestPki};
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

/// The agents' names for the seed a stand-in (their SNI and its certificate) and for seed b's
/// temporary VPN (`spec.vpn.dnsName`, under the migration's internal domain).
pub const VPN_A: &str = "vpn-seed-server.shoot--isthmus--src.seed-a.internal.example.com";
pub const VPN_B: &str = "vpn.shoot--isthmus--dst.seed-b.internal.example.com";
/// The port both seeds' agents dial: the proxies' VPN port (the chart's `proxy.vpnPort`), and
/// the stand-in's load balancer port.
pub const VPN_PORT: u16 = 8443;
/// The stand-in's load balancer Service and policy.
pub const STAND_IN: &str = "vpn-seed-server";
pub const STAND_IN_POLICY: &str = "allow-vpn-seed-server";
/// The agents' client certificate name, which both servers admit.
pub const AGENT: &str = "vpn-shoot.kube-system";
/// The Secrets `spec.vpn.server` names, in each shoot namespace.
const AGENTS_TLS: &str = "tunnel-agents-tls";
const CONNECT_TLS: &str = "tunnel-connect-tls";
const CA_BUNDLE: &str = "ca-vpn-bundle";
/// How long a tunnel server's rollout, an address or an agent's first session may take.
pub const SETUP: Duration = Duration::from_secs(240);

pub fn seed_name(seed: &Node) -> String {
    format!("seed-{}", seed.seed)
}

/// The client certificate's name of `seed`'s kube-apiserver (its CONNECT front admits it).
fn caller(seed: &Node) -> String {
    format!("kube-apiserver.{}", seed_name(seed))
}

/// `spec.vpn` of a migration in `ns` whose tunnel server serves `dns_name` to the agents.
pub fn vpn_spec(ns: &str, dns_name: &str, seed: &Node) -> Value {
    let ca = json!({"secret": CA_BUNDLE, "key": "bundle.crt"});
    json!({
        "dnsName": dns_name, "port": VPN_PORT, "proxyProtocol": "v2",
        "target": format!("{}.{ns}.svc.cluster.local:{AGENTS_PORT}", server::NAME),
        "server": {
            "agents": {"tlsSecret": AGENTS_TLS, "clientCa": ca, "clientNames": [AGENT]},
            "connect": {"tlsSecret": CONNECT_TLS, "clientCa": ca, "clientNames": [caller(seed)]},
        },
    })
}

/// The tunnel's TLS (one CA: both servers', the agents', the kube-apiservers' and the
/// webhook's certificates) and each seed's server side.
pub struct Tunnel {
    pub pki: TestPki,
    pub dir: Scratch,
    /// Each seed's kube-apiserver's client certificate: source, destination.
    pub callers: [CertKey; 2],
    /// The stand-in's load balancer address in seed a.
    pub stand_in: String,
}

impl Tunnel {
    /// The servers' Secrets in both shoot namespaces (which exist), and seed a's stand-in
    /// running behind its load balancer.
    pub fn new(a: &Node, b: &Node) -> Self {
        let pki = TestPki::new();
        let dir = Scratch::new("seeds-shoot-webhook");
        pki.write_ca(dir.path());
        pki.peer_cert(&[AGENT]).write(dir.path(), "agent");
        for (seed, ns, vpn) in [(a, SRC, VPN_A), (b, DST, VPN_B)] {
            let connect = format!("{CONNECT_SERVICE}.{ns}.svc.cluster.local");
            let agents = pki.server_cert(&[vpn]);
            let front = pki.server_cert(&[&connect]);
            for (name, c) in [(AGENTS_TLS, &agents), (CONNECT_TLS, &front)] {
                seed.apply(
                    &json!({
                        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                        "metadata": {"name": name, "namespace": ns},
                        "stringData": {"tls.crt": c.cert_pem, "tls.key": c.key_pem},
                    })
                    .to_string(),
                );
            }
            seed.apply(
                &json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": CA_BUNDLE, "namespace": ns},
                    "stringData": {"bundle.crt": pki.ca_pem()},
                })
                .to_string(),
            );
        }
        let callers = [a, b].map(|s| pki.peer_cert(&[&caller(s)]));
        let stand_in = stand_in(a);
        Self {
            pki,
            dir,
            callers,
            stand_in,
        }
    }

    /// The webhook's serving certificate: kube-apiserver checks a service-referenced webhook
    /// against `<service>.<namespace>.svc`.
    pub fn webhook_cert(&self) -> CertKey {
        let (svc_ns, svc) = WEBHOOK_SERVICE;
        self.pki.server_cert(&[&format!("{svc}.{svc_ns}.svc")])
    }

    /// The destination migration's `spec.vpn`: seed b's controller runs its tunnel server.
    pub fn destination_vpn(&self, b: &Node) -> Value {
        vpn_spec(DST, VPN_B, b)
    }

    /// Each seed's kube-apiserver calls the webhook through its own seed's CONNECT front
    /// (`cluster` egress) with its own client certificate, also towards the webhook.
    pub fn kube_apiservers(&self, shoot: &mut ShootFiles) {
        let f = |name: &str| Path::new(TLS).join(name);
        for (i, ns) in [SRC, DST].into_iter().enumerate() {
            let url = format!("https://{CONNECT_SERVICE}.{ns}.svc.cluster.local:{CONNECT_PORT}");
            let (crt, key) = (f("tunnel-client.crt"), f("tunnel-client.key"));
            let ca = f("tunnel-ca.crt");
            let own = json!({
                "tunnel-ca.crt": self.pki.ca_pem(),
                "tunnel-client.crt": self.callers[i].cert_pem,
                "tunnel-client.key": self.callers[i].key_pem,
                "egress.yaml": files::egress_config(&url, &ca, &crt, &key),
                "webhook.kubeconfig": files::webhook_kubeconfig(&crt, &key),
                "admission.yaml": files::admission_config(&f("webhook.kubeconfig")),
            });
            shoot.per_namespace.insert(ns.to_owned(), own);
        }
        shoot.args.extend([
            format!(
                "--egress-selector-config-file={}",
                f("egress.yaml").display()
            ),
            format!(
                "--admission-control-config-file={}",
                f("admission.yaml").display()
            ),
        ]);
    }
}

pub fn lb_address(seed: &Node, ns: &str, svc: &str) -> String {
    poll(
        seed,
        &format!("{ns}/{svc}'s load balancer address"),
        SETUP,
        POLL,
        || {
            let ip = seed.jsonpath(
                ns,
                &format!("svc/{svc}"),
                "{.status.loadBalancer.ingress[0].ip}",
            );
            ip.parse::<Ipv4Addr>().map(|_| ip.clone()).map_err(|_| ip)
        },
    )
}

#[test]
fn the_vpn_spec_is_the_controllers_type() {
    let v = vpn_spec(DST, VPN_B, &Node::seed('b'));
    let spec: isthmus_controller::crd::VpnSpec = serde_json::from_value(v).unwrap();
    assert_eq!(spec.dns_name, VPN_B);
}
