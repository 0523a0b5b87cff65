//! Names, URLs and proxy routes derived from a spec: the one place that decides how an exposed
//! member is spelled, so the DNS records, the routes and the advertised URLs always agree.

use crate::crd::{
    EtcdMigrationSpec, MemberUrls, ProxyProtocol, Role, SEED_INGRESS_CLIENT, SEED_INGRESS_PEER_BASE,
};

/// One exposed etcd member of this seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Member index (`0..spec.members`).
    pub index: u8,
    /// Pod name, `<etcdName>-<index>`.
    pub pod: String,
    /// etcd member name: the pod name on the source, `<memberNamePrefix>-<etcdName>-<index>`
    /// on the destination (etcd-druid's `spec.memberNamePrefix` rule: pod names clash across
    /// seeds, member names must not).
    pub member: String,
    /// The DNS name and the SNI: `<pod>.<namespace>.<seed>.<internalDomain>`, or with
    /// `seedIngress` `<seed>-<pod>-<namespace>.<ingressDomain>`.
    pub dns_name: String,
    /// The `DNSRecord` object name; `None` under the seed's wildcard ingress record.
    pub record: Option<String>,
    /// Advertised peer port (the load balancer's).
    pub peer_port: u16,
    /// Advertised client port.
    pub client_port: u16,
    /// The proxy's peer listener port (= `peer_port` unless the LB maps ports).
    pub peer_listener: u16,
    /// The proxy's client listener port.
    pub client_listener: u16,
    /// The peer URL etcd-druid gives the member inside its seed,
    /// `https://<pod>.<etcdName>-peer.<namespace>.svc:<serverPort>` (etcd-druid v0.38.1
    /// `internal/component/configmap/etcdconfig.go` `getAdvertiseURLs`: the peer Service's
    /// name, the namespace, `svc`, `spec.etcd.serverPort` or [`DRUID_SERVER_PORT`]).
    pub in_cluster_peer_url: String,
}

impl Member {
    /// Peer URL advertised to the other seed.
    pub fn peer_url(&self) -> String {
        format!("https://{}:{}", self.dns_name, self.peer_port)
    }
    /// Client URL.
    pub fn client_url(&self) -> String {
        format!("https://{}:{}", self.dns_name, self.client_port)
    }
    /// The exposed URLs only: what this seed advertises and matches etcd's members by.
    pub fn urls(&self) -> MemberUrls {
        MemberUrls {
            name: self.member.clone(),
            peer_urls: vec![self.peer_url()],
            client_urls: vec![self.client_url()],
        }
    }
    /// As reported in `status.exposedMembers`: the peer URLs as etcd holds them once druid
    /// advertises the exposed one. Unless `overrideDefaultURL`, druid keeps the in-cluster URL
    /// first and appends the additional one (`etcdconfig.go` `getAdvertiseURLs`), and the
    /// other seed's druid copies these into its members' `initial-cluster`, which etcd v3.5
    /// accepts only with exactly the URLs the cluster holds (`server/etcdserver/api/membership`
    /// `ValidateClusterAndAssignIDs`, `pkg/netutil` `URLStringsEqual`: same count, sorted).
    pub fn reported_urls(&self, override_default_url: bool) -> MemberUrls {
        let mut urls = self.urls();
        if !override_default_url {
            urls.peer_urls.insert(0, self.in_cluster_peer_url.clone());
        }
        urls
    }
}

/// The `DNSRecord` name of the temporary VPN.
pub const VPN_RECORD: &str = "isthmus-vpn";

/// etcd-druid's peer port when an `Etcd` sets no `spec.etcd.serverPort` (etcd-druid v0.38.1
/// `internal/common/constants.go` `DefaultPortEtcdPeer`, taken by
/// `internal/component/configmap/etcdconfig.go` `getAdvertiseURLs` as
/// `ptr.Deref(etcd.Spec.Etcd.ServerPort, common.DefaultPortEtcdPeer)`).
pub const DRUID_SERVER_PORT: u16 = 2380;

/// The peer port etcd-druid gives the members of an `Etcd` whose `spec` this is (an `Etcd`'s
/// or the destination's template's): `etcd.serverPort`, else [`DRUID_SERVER_PORT`].
pub fn server_port(etcd_spec: &serde_json::Value) -> u16 {
    etcd_spec
        .pointer("/etcd/serverPort")
        .and_then(serde_json::Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(DRUID_SERVER_PORT)
}

/// The destination's peer port before its `Etcd` exists: its template's.
pub(super) fn template_server_port(spec: &EtcdMigrationSpec) -> u16 {
    spec.destination
        .as_ref()
        .and_then(|d| d.etcd_template.as_ref())
        .map_or(DRUID_SERVER_PORT, |t| server_port(&t.spec))
}

/// Every member this seed exposes, named as the spec alone tells: the destination with its
/// `memberNamePrefix` and its template's peer port, the source by pod name with druid's
/// default port (see [`members_named`] for a source `Etcd` that has a prefix or a port of its
/// own).
pub fn members(spec: &EtcdMigrationSpec, namespace: &str) -> Vec<Member> {
    let prefix = match (&spec.role, &spec.destination) {
        (Role::Destination, Some(d)) => Some(d.member_name_prefix.as_str()),
        _ => None,
    };
    members_named(spec, namespace, prefix, template_server_port(spec))
}

/// Every member this seed exposes, with etcd member names `<prefix>-<pod>` (etcd-druid's
/// `spec.memberNamePrefix` rule) or the pod name without a prefix, and in-cluster peer URLs
/// on `server_port` (the `Etcd`'s `spec.etcd.serverPort`, [`server_port`]). A source `Etcd`
/// created by Gardener carries the seed's name as prefix, so a shoot migrated once keeps it.
pub fn members_named(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    prefix: Option<&str>,
    server_port: u16,
) -> Vec<Member> {
    (0..spec.members)
        .map(|index| {
            let pod = format!("{}-{}", spec.etcd_name, index);
            let member = match prefix {
                Some(p) => format!("{p}-{pod}"),
                None => pod.clone(),
            };
            let in_cluster_peer_url = format!(
                "https://{pod}.{}-peer.{namespace}.svc:{server_port}",
                spec.etcd_name
            );
            match &spec.seed_ingress {
                None => Member {
                    index,
                    dns_name: format!(
                        "{pod}.{namespace}.{}.{}",
                        spec.seed_name, spec.internal_domain
                    ),
                    record: Some(format!("isthmus-{pod}")),
                    peer_port: spec.ports.peer(index),
                    client_port: spec.ports.client(index),
                    peer_listener: spec.ports.peer(index),
                    client_listener: spec.ports.client(index),
                    in_cluster_peer_url,
                    member,
                    pod,
                },
                // Gardener's work in progress: the seed's wildcard record, one client port.
                Some(ingress) => Member {
                    index,
                    dns_name: format!("{}-{pod}-{namespace}.{}", spec.seed_name, ingress.domain),
                    record: None,
                    peer_port: 2380 + u16::from(index),
                    client_port: 2379,
                    peer_listener: SEED_INGRESS_PEER_BASE + u16::from(index),
                    client_listener: SEED_INGRESS_CLIENT,
                    in_cluster_peer_url,
                    member,
                    pod,
                },
            }
        })
        .collect()
}

/// The listeners every proxy binds for member indices `0..members` with `ports`, and the VPN's:
/// `(name, port)`, named as [`routes`] names them (`peer-2380`, `client-2379`, `vpn-8443`).
pub fn standard_listeners(
    ports: crate::crd::PortScheme,
    members: u8,
    vpn_port: u16,
) -> Vec<(String, u16)> {
    let mut listeners = Vec::new();
    for i in 0..members {
        listeners.push((format!("peer-{}", ports.peer(i)), ports.peer(i)));
        listeners.push((format!("client-{}", ports.client(i)), ports.client(i)));
    }
    listeners.push((format!("vpn-{vpn_port}"), vpn_port));
    listeners
}

/// One SNI route of one migration in the shared proxy config.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemberRoute {
    /// Listener name (`peer-2380`, `client-2379`, `vpn-8443`); one listener per port,
    /// shared by every migration on the seed.
    pub listener: String,
    /// Listener port.
    pub port: u16,
    /// The SNI matched exactly.
    pub sni: String,
    /// Upstream name, unique per migration (`<namespace>.<pod>.peer`; namespaces and pod names hold no dots, so it is unique).
    pub upstream: String,
    /// `host:port` inside the seed.
    pub endpoint: String,
    /// Sources this route admits: the migration's `allowedSources`; empty means the seed's
    /// default (`--default-allowed-sources`, none unless set).
    pub allowed_sources: Vec<String>,
    /// The PROXY header the upstream gets (the VPN's `spec.vpn.proxyProtocol`; etcd: none,
    /// it speaks TLS from the first byte).
    pub proxy_protocol: ProxyProtocol,
}

/// Routes of the members (and the VPN, if `with_vpn`) of one migration.
pub fn routes(spec: &EtcdMigrationSpec, namespace: &str, with_vpn: bool) -> Vec<MemberRoute> {
    let mut out = Vec::new();
    for m in members(spec, namespace) {
        // etcd-druid's headless peer Service gives each pod a stable in-cluster name.
        let host = format!(
            "{}.{}-peer.{namespace}.svc.cluster.local",
            m.pod, spec.etcd_name
        );
        // Peer first, then client: each listener its etcd port.
        for (kind, port, etcd_port) in [
            ("peer", m.peer_listener, 2380),
            ("client", m.client_listener, 2379),
        ] {
            out.push(MemberRoute {
                listener: format!("{kind}-{port}"),
                port,
                sni: m.dns_name.clone(),
                upstream: format!("{namespace}.{}.{kind}", m.pod),
                endpoint: format!("{host}:{etcd_port}"),
                allowed_sources: spec.allowed_sources.clone(),
                proxy_protocol: ProxyProtocol::None,
            });
        }
    }
    if let (true, Some(vpn)) = (with_vpn, &spec.vpn) {
        out.push(MemberRoute {
            listener: format!("vpn-{}", vpn.port),
            port: vpn.port,
            sni: vpn.dns_name.clone(),
            upstream: format!("{namespace}.vpn"),
            endpoint: vpn.target.clone(),
            // The shoot's nodes dial the VPN from wherever they are; the tunnel server admits
            // only its agents' certificates.
            allowed_sources: vec!["0.0.0.0/0".into(), "::/0".into()],
            proxy_protocol: vpn.proxy_protocol,
        });
    }
    out
}
