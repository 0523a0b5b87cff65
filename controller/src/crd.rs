//! The `EtcdMigration` custom resource (`isthmus.dev/v1alpha1`): what the orchestrator asks of
//! this seed's controller, and what the controller reports back. The spec is plain data so that
//! a local backend can build one without Kubernetes.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One shoot's etcd live migration as seen from one seed.
#[derive(CustomResource, Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "isthmus.dev",
    version = "v1alpha1",
    kind = "EtcdMigration",
    namespaced,
    status = "EtcdMigrationStatus",
    shortname = "etcdmig",
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".spec.step"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.stepReady"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.role == 'destination' || !has(self.destination)",
        "message": "spec.destination is for role destination only"
    },
    {
        "rule": "self.role == 'source' || has(self.destination)",
        "message": "role destination needs spec.destination"
    },
    {
        "rule": "!has(self.overrideDefaultUrl) || !self.overrideDefaultUrl || self.druidApi == 'AdditionalAdvertisedUrls'",
        "message": "overrideDefaultUrl exists only in the additionalAdvertisedURLs API (druidApi: AdditionalAdvertisedUrls)"
    },
    {
        "rule": "!has(self.vpn) || has(self.seedIngress) || self.vpn.port < self.ports.peerBase || self.vpn.port >= self.ports.peerBase + self.members",
        "message": "vpn.port is one of the etcd peer listener ports (ports.peerBase + i)",
        "fieldPath": ".vpn.port"
    },
    {
        "rule": "!has(self.vpn) || has(self.seedIngress) || self.vpn.port > self.ports.clientBase || self.vpn.port <= self.ports.clientBase - self.members",
        "message": "vpn.port is one of the etcd client listener ports (ports.clientBase - i)",
        "fieldPath": ".vpn.port"
    },
    {
        "rule": "!has(self.vpn) || !(self.vpn.target.split('.')[0] in [self.etcdName + '-client', self.etcdName + '-peer'])",
        "message": "vpn.target is one of etcd's Services",
        "fieldPath": ".vpn.target"
    },
    {
        "rule": "!has(self.vpn) || !has(self.seedIngress) || (self.vpn.port != 12379 && (self.vpn.port < 12380 || self.vpn.port >= 12380 + self.members))",
        "message": "vpn.port is one of the seed-ingress member listener ports (12379, 12380 + i)",
        "fieldPath": ".vpn.port"
    },
    {
        "rule": "!has(self.vpn) || self.vpn.port < 2370 || self.vpn.port > 2389",
        "message": "vpn.port is one of the member listener ports every proxy binds (peer 2380+i, client 2379-i, i < 10): a listener of another name on it would make the proxies refuse the seed's routes",
        "fieldPath": ".vpn.port"
    },
    {
        "rule": "!has(self.vpn) || !has(self.vpn.server) || self.role == 'destination'",
        "message": "vpn.server: the temporary VPN's tunnel server runs on the destination seed only",
        "fieldPath": ".vpn.server"
    },
    {
        "rule": "!has(self.vpn) || self.vpn.port != 9901",
        "message": "vpn.port is the proxy's admin port (9901; the controller also refuses its --proxy-admin-port): the kubelet's probes would be spread over a TLS listener",
        "fieldPath": ".vpn.port"
    },
    {
        "rule": "has(self.seedIngress) || (self.ports.peerBase == 2380 && self.ports.clientBase == 2379) || (!([8443, 9901].exists(p, (self.ports.clientBase - self.members < p && p <= self.ports.clientBase) || (self.ports.peerBase <= p && p < self.ports.peerBase + self.members))) && (self.ports.clientBase < 2370 || self.ports.clientBase - self.members >= 2389) && (self.ports.peerBase > 2389 || self.ports.peerBase + self.members <= 2370))",
        "message": "ports: the member listener ports overlap the ports every proxy binds under other names (peer 2380+i, client 2379-i for i < 10, the VPN's 8443, the admin port 9901)",
        "fieldPath": ".ports"
    }
]))]
pub struct EtcdMigrationSpec {
    /// Which side of the migration this seed is.
    pub role: Role,
    /// The step the orchestrator wants; the controller converges on it and reports
    /// `status.stepReady` when it is reached.
    pub step: Step,
    /// Name of the `Etcd` resource in this namespace (source: the running one; destination:
    /// the one that joins). Member pods are named `<etcdName>-<index>`.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        length(min = 1, max = 50)
    )]
    pub etcd_name: String,
    /// This seed's name; part of every exposed DNS name.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        length(min = 1, max = 63)
    )]
    pub seed_name: String,
    /// The internal domain; exposed names are `<pod>.<namespace>.<seedName>.<internalDomain>`.
    #[schemars(
        regex(
            pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
        ),
        length(min = 1, max = 200)
    )]
    pub internal_domain: String,
    /// Number of members exposed on this seed (indices `0..members`), 1 to 10. Default 3.
    #[serde(default = "default_members")]
    #[schemars(range(min = 1, max = 10))]
    pub members: u8,
    /// The DNS provider used for the `DNSRecord`s.
    pub dns: DnsProvider,
    /// The Service whose `status.loadBalancer` is the proxy's public address (`deploy/`'s RBAC
    /// lets the controller read `isthmus-system/isthmus-proxy` only).
    pub load_balancer: ObjectRef,
    /// Port scheme of the proxy listeners.
    #[serde(default)]
    pub ports: PortScheme,
    /// Destination-only settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<DestinationSpec>,
    /// The temporary VPN's exposure (destination seed only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpn: Option<VpnSpec>,
    /// Which etcd-druid API generation to write.
    #[serde(default)]
    pub druid_api: DruidApi,
    /// `additionalAdvertisedURLs` generation only: advertise the exposed URLs *instead of* the
    /// in-cluster ones (`overrideDefaultURL`). Needed when source and destination share the
    /// `Etcd` name (Gardener: always `etcd-main`), since then the in-cluster peer names of
    /// both seeds are spelled alike and resolve to different pods in each seed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub override_default_url: bool,
    /// Expose the members under the seed's wildcard ingress record instead of a `DNSRecord`
    /// per member (the scheme of Gardener's work in progress): SNI
    /// `<seedName>-<etcdName>-<i>-<namespace>.<ingressDomain>`, proxy listeners `12380+i`
    /// (peer) and `12379` (client, all members), while etcd keeps advertising `2380+i` and
    /// `2379` (the load balancer maps those ports onto the listeners). Unset: the GEP's
    /// scheme (`ports`, one `DNSRecord` per member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_ingress: Option<SeedIngress>,
    /// Source networks (CIDR or address) allowed to reach this migration's etcd members
    /// through the proxy: the other seed's egress addresses. Rendered as the `allowed_sources`
    /// of this migration's routes, checked after the SNI picked the route, so shoots sharing a
    /// listener never share their peers. Empty: the seed's default (the controller's
    /// `--default-allowed-sources`), which is none unless set: nobody reaches the members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "cidr_list")]
    pub allowed_sources: Vec<String>,
}

/// The seed-ingress exposure scheme (see [`EtcdMigrationSpec::seed_ingress`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeedIngress {
    /// The seed's ingress domain (its wildcard DNS record `*.<domain>` points at the proxy).
    #[schemars(
        regex(
            pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+$"
        ),
        length(max = 200)
    )]
    pub domain: String,
}

/// Listener ports of the seed-ingress scheme: peer `12380 + i`, client `12379`.
pub const SEED_INGRESS_PEER_BASE: u16 = 12380;
/// See [`SEED_INGRESS_PEER_BASE`].
pub const SEED_INGRESS_CLIENT: u16 = 12379;

fn default_members() -> u8 {
    3
}

/// Side of the migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The seed the control plane leaves.
    Source,
    /// The seed the control plane moves to.
    Destination,
}

/// Steps, advanced by the orchestrator in this order (or to `Abort`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, JsonSchema,
)]
pub enum Step {
    /// Expose this seed's members: DNS records, proxy routes (source: also advertise URLs).
    Expose,
    /// Destination: create the joining `Etcd` (2 members) and the temporary VPN record.
    Join,
    /// Destination: 3 destination members (6 in the cluster for a moment).
    Grow,
    /// Destination: clear the bootstrap members; etcd-druid removes the source members.
    Shrink,
    /// Remove the exposure and the migration-only fields.
    Complete,
    /// Undo, allowed only before `DestinationEtcdPeersJoined` is True.
    Abort,
}

/// The DNS provider of the `DNSRecord`s.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsProvider {
    /// Provider type (`aws-route53`, `local`, ...), the `DNSRecord`'s `spec.type`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 63))]
    pub provider_type: String,
    /// The provider credentials' Secret.
    pub secret_ref: ObjectRef,
    /// Optional hosted zone id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// A namespaced object reference.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ObjectRef {
    /// Name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// Proxy ports: member `i` is reached on peer port `peerBase + i` and client port
/// `clientBase - i`, so with the defaults 2380/2379 member 0 keeps etcd's usual ports and the
/// two ranges grow away from each other (2380, 2381, 2382 and 2379, 2378, 2377) and never
/// overlap. One port per member index is required: etcd crashes when two members' peer URLs
/// resolve to the same address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.clientBase < self.peerBase",
    "message": "clientBase must be below peerBase: client ports count down, peer ports up"
}]))]
pub struct PortScheme {
    /// First peer port (member 0). Default 2380.
    #[schemars(range(min = 1024, max = 65000))]
    pub peer_base: u16,
    /// Client port of member 0; member `i` uses `clientBase - i`. Default 2379.
    #[schemars(range(min = 1034, max = 65000))]
    pub client_base: u16,
}

impl Default for PortScheme {
    fn default() -> Self {
        Self {
            peer_base: 2380,
            client_base: 2379,
        }
    }
}

impl PortScheme {
    /// Peer port of member `index`.
    pub fn peer(&self, index: u8) -> u16 {
        self.peer_base.saturating_add(u16::from(index))
    }
    /// Client port of member `index`.
    pub fn client(&self, index: u8) -> u16 {
        self.client_base.saturating_sub(u16::from(index))
    }
}

/// Destination settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DestinationSpec {
    /// etcd-druid `spec.memberNamePrefix` of the destination: member `i` is
    /// `<prefix>-<etcdName>-<i>`, so it cannot clash with the source member of the same pod name.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        length(min = 1, max = 63)
    )]
    pub member_name_prefix: String,
    /// The source members to join: copied from the source's `status.exposedMembers` (their
    /// client URLs become `bootstrapWithExistingCluster.clientEndpoints`).
    #[schemars(length(max = 10))]
    pub source_members: Vec<MemberUrls>,
    /// The destination `Etcd` as gardenlet would deploy it, without the migration fields
    /// (`metadata.labels`/`annotations` and `spec`: `labels`, `backup`, `etcd`, ...). etcd-druid
    /// accepts `bootstrapWithExistingCluster` and `memberNamePrefix` only when an `Etcd` is
    /// created, so isthmus creates the destination `Etcd` from this template plus its own
    /// fields. Without it, the `Etcd` must already exist with those fields. Writing an
    /// EtcdMigration is writing an Etcd: the template is applied as given, images
    /// (`spec.etcd.image`, `spec.backup.image`), backup store and resources included, with
    /// the controller's grant, so only whoever may create that `Etcd` (gardenlet) may write
    /// EtcdMigrations. The live source `Etcd` is on the other seed, out of this controller's
    /// reach: its images cannot be taken from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_template: Option<EtcdTemplate>,
    /// How long `Join` may take before `DestinationEtcdPeersJoined` turns `False` (reason
    /// `JoinTimedOut`), the precondition of an abort. Go duration (`10m`, `90s`). Default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    pub join_timeout: Option<String>,
    /// The etcd version the destination's etcd-druid deploys, `<major>.<minor>` (a patch is
    /// ignored): `3.5` with its `UpgradeEtcdVersion` feature gate, `3.4` without. etcd-druid's
    /// API shows no etcd version (its image vector picks the image), and it joins only a
    /// source cluster of the same minor version (etcd-druid
    /// `docs/usage/bootstrapping-with-existing-cluster.md`), so the destination `Etcd` is
    /// created only once the source cluster's version, read from etcd itself, matches.
    /// Unset: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"), length(max = 20))]
    pub etcd_version: Option<String>,
}

/// The `Etcd` isthmus creates on the destination (see [`DestinationSpec::etcd_template`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdTemplate {
    /// `metadata.labels` of the `Etcd`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// `metadata.annotations` of the `Etcd`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// The `Etcd`'s `spec` without the fields isthmus owns (validated by etcd-druid's CRD when
    /// the `Etcd` is created).
    #[schemars(schema_with = "any_object")]
    pub spec: serde_json::Value,
}

/// `allowedSources`: CIDRs with the host bits zero, or addresses, as the proxy's loader
/// accepts them (`isthmus_config::Cidr`). The CEL IP/CIDR library needs Kubernetes 1.31.
fn cidr_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 64,
        "items": {
            "type": "string",
            "maxLength": 50,
            "pattern": r"^[0-9a-fA-F:.]+(/[0-9]{1,3})?$",
            "x-kubernetes-validations": [{
                "rule": "isIP(self) || (isCIDR(self) && cidr(self).masked() == cidr(self))",
                "message": "must be an IP address or a CIDR with the host bits zero (10.0.0.0/8, 2001:db8::/32)"
            }]
        }
    })
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// A member and its URLs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberUrls {
    /// etcd member name.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        length(min = 1, max = 253)
    )]
    pub name: String,
    /// Peer URLs (`https://<dns>:<port>`).
    #[schemars(
        length(min = 1, max = 5),
        inner(regex(pattern = r"^https://[a-z0-9.-]+(:[0-9]{1,5})?$"))
    )]
    pub peer_urls: Vec<String>,
    /// Client URLs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 5),
        inner(regex(pattern = r"^https://[a-z0-9.-]+(:[0-9]{1,5})?$"))
    )]
    pub client_urls: Vec<String>,
}

/// The temporary VPN's exposure. Its route has no allow-list (the shoot's nodes dial it from
/// anywhere), so its target is held to the tunnel server's kind of address: the fully
/// qualified name of a Service of the migration's namespace in this cluster's domain
/// (checked by the controller: CEL sees neither the namespace nor the domain), on a port that
/// is not etcd's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(int(self.target.split(':')[1]) in [2379, 2380]) && int(self.target.split(':')[1]) >= 1 && int(self.target.split(':')[1]) <= 65535",
    "message": "target: the port must be 1-65535 and not etcd's (2379, 2380)",
    "fieldPath": ".target"
}, {
    "rule": "!has(self.server) || (self.target.split('.')[0] == 'isthmus-tunnel-server' && self.target.endsWith(':9443'))",
    "message": "target: with server, the managed tunnel server's agents Service, isthmus-tunnel-server.<namespace>.svc.<cluster-domain>:9443",
    "fieldPath": ".target"
}]))]
pub struct VpnSpec {
    /// The temporary VPN's DNS name (the agent's SNI), under `internalDomain` (or a domain
    /// the controller's `--vpn-dns-parent` allows).
    #[schemars(
        regex(
            pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+$"
        ),
        length(max = 253)
    )]
    pub dns_name: String,
    /// The tunnel server's Service in the migration's namespace, fully qualified:
    /// `<service>.<namespace>.svc.<cluster-domain>:<port>` (the controller checks the namespace
    /// and its `--cluster-domain`), not one of etcd's Services (`<etcdName>-client`,
    /// `<etcdName>-peer`) nor etcd's ports.
    #[schemars(
        regex(
            pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.svc(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+:[0-9]{1,5}$"
        ),
        length(max = 260)
    )]
    pub target: String,
    /// Proxy port the agent dials, 1024 to 65535 (the proxy pods run without
    /// `NET_BIND_SERVICE`), none of the member listener ports every proxy binds (2370-2389),
    /// not the proxy's admin port. Default 8443.
    #[serde(default = "default_vpn_port")]
    #[schemars(range(min = 1024, max = 65535))]
    pub port: u16,
    /// What the proxy sends the tunnel server before the agent's bytes. `v2` (the default): a
    /// PROXY v2 header naming the agent's address, so that the server's per-source handshake
    /// shares (`agents.max_handshakes_per_source`) tell a flood from an agent; the server lists
    /// the proxies in `agents.trusted_proxies` (the chart renders it so), else it refuses
    /// every agent's handshake. `none`: the server sees every connection as the proxy's, and
    /// one stranger sending ClientHellos for the VPN name evicts the agent's handshakes.
    #[serde(default)]
    pub proxy_protocol: ProxyProtocol,
    /// The tunnel server this controller runs for the migration in its namespace, as
    /// gardenlet runs `vpn-seed-server`: Deployment, config, Services, PDB and the shoot
    /// Prometheus' `ServiceMonitor`, owned by the `EtcdMigration` and removed with the VPN's
    /// route (controller/README.md, "The temporary VPN's tunnel server"). `target` then names
    /// its agents' Service, `isthmus-tunnel-server.<namespace>.svc.<cluster-domain>:9443`.
    /// Unset: `target` is a server someone else runs (the lab's processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<TunnelServerSpec>,
}

/// What the controller needs to run a migration's tunnel server: where its certificates are
/// and whom each endpoint admits. The Secrets are the orchestrator's (Gardener's secrets
/// manager makes `vpn-seed-server`'s the same way), mounted by the kubelet: the controller
/// never reads them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TunnelServerSpec {
    /// The agents' endpoint (port 9443, behind the proxies' VPN route): a certificate for
    /// `vpn.dnsName`, the CA of the agents' client certificates, their names.
    pub agents: TunnelEndpoint,
    /// The CONNECT front for this namespace's kube-apiserver (Service
    /// `isthmus-tunnel-connect`, port 8132): a certificate for that Service's name, the CA
    /// of kube-apiserver's client certificate, its names.
    pub connect: TunnelEndpoint,
}

/// One TLS endpoint of the tunnel server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TunnelEndpoint {
    /// Secret of the migration's namespace holding this endpoint's certificate chain and key
    /// (`tls.crt`, `tls.key`).
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(min = 1, max = 253)
    )]
    pub tls_secret: String,
    /// The CA bundle the clients' certificates must chain to.
    pub client_ca: SecretKey,
    /// DNS names a client certificate must carry, one of them, as a subject alternative name
    /// (`allowed_client_names`): without names any certificate of the CA would get in.
    #[schemars(
        length(min = 1, max = 16),
        inner(
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
            length(max = 253)
        )
    )]
    pub client_names: Vec<String>,
}

/// A key of a Secret in the migration's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    /// The Secret's name.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
        length(min = 1, max = 253)
    )]
    pub secret: String,
    /// The key. Default `bundle.crt` (Gardener's CA bundles, `ca-vpn-bundle-<hash>`).
    #[serde(default = "default_ca_key")]
    #[schemars(regex(pattern = r"^[-._a-zA-Z0-9]+$"), length(min = 1, max = 253))]
    pub key: String,
}

fn default_ca_key() -> String {
    "bundle.crt".into()
}

/// The PROXY protocol header the proxy sends an upstream (see [`VpnSpec::proxy_protocol`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    /// No header: the upstream sees the proxy's address.
    None,
    /// The binary PROXY v2 header with the client's address.
    #[default]
    V2,
}

fn default_vpn_port() -> u16 {
    8443
}

/// etcd-druid API generations (`Etcd` is `druid.gardener.cloud/v1alpha1` in both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum DruidApi {
    /// `spec.etcd.additionalAdvertisePeerURLs: [{memberName, urls}]` (etcd-druid API
    /// v0.38; the GEP spells it `…PeerUrls`, which a real API server drops).
    #[default]
    AdditionalAdvertisePeerUrls,
    /// `spec.etcd.additionalAdvertisedURLs.{peerURLs,clientURLs}.{overrideDefaultURL,
    /// members: [{name, urls}]}` (etcd-druid#1438, merged after v0.38.1 and in no published
    /// `api` module yet, superseding `additionalAdvertisePeerURLs`; its shape lives in
    /// `gardener.rs` only). Set per migration once the seed's etcd-druid and CRD carry it
    /// (docs/etcd-druid-contract.md, "The advertised URLs").
    AdditionalAdvertisedUrls,
}

/// What the controller reports.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMigrationStatus {
    /// `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The step last planned; an `Abort` that is refused keeps planning this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
    /// True when everything `step` asks for is in place.
    #[serde(default)]
    pub step_ready: bool,
    /// This seed's exposed members with their URLs (what the other seed's spec needs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed_members: Vec<MemberUrls>,
    /// GEP-0039 conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A condition as in a Shoot's `status.liveMigration.conditions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// GEP-0039 name (`SourceEtcdPreparedForPeerJoin`, ...).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False`, `Progressing` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// When reason or message last changed (RFC 3339).
    pub last_update_time: String,
}

/// Serialising the CRD failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot serialise the EtcdMigration CRD: {0}")]
pub struct CrdYamlError(String);

/// The `CustomResourceDefinition` as YAML, generated from these types: the source of
/// `deploy/crd-etcdmigration.yaml`.
pub fn crd_yaml() -> Result<String, CrdYamlError> {
    use kube::CustomResourceExt;
    let body =
        serde_saphyr::to_string(&EtcdMigration::crd()).map_err(|e| CrdYamlError(e.to_string()))?;
    Ok(format!(
        "# Generated from controller/src/crd.rs; do not edit. Regenerate with:\n#   ISTHMUS_UPDATE_CRD=1 cargo test -p isthmus-controller --test crd_yaml\n{body}"
    ))
}
