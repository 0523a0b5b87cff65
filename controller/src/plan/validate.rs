//! What the controller refuses in a spec the API server accepted: everything it would
//! otherwise fail on later, each named by its field path. The CRD checks what CEL can (CIDR
//! syntax, port ranges and collisions, name syntax); this repeats those checks (an older CRD
//! may be installed, and a local backend has none) and adds what needs the namespace or the
//! composed names. A refused spec is reported as the `SpecInvalid` condition and an Event,
//! and nothing is planned for it until the spec changes.

use super::conditions::{self as cond, Verdict};
use super::ctx::duration_secs;
use super::names::members;
pub use super::seed_rules::{SeedRules, DEFAULT_CLUSTER_DOMAIN};
use crate::crd::{DruidApi, EtcdMigrationSpec, Role, SEED_INGRESS_CLIENT, SEED_INGRESS_PEER_BASE};

/// One refused field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// Field path, `spec.allowedSources[0]`.
    pub field: String,
    /// CamelCase reason (`InvalidCIDR`, `PortConflict`, ...).
    pub reason: &'static str,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The `SpecInvalid` condition for `problems` (the first one's reason, every message).
pub fn verdict(problems: &[SpecProblem]) -> Verdict {
    let reason = problems.first().map_or("InvalidSpec", |p| p.reason);
    let message: Vec<String> = problems.iter().map(ToString::to_string).collect();
    Verdict::done(cond::SPEC_INVALID, reason, message.join("; "))
}

/// Every problem of `spec` for a migration in `namespace` on a seed whose controller runs
/// with `seed`; empty when the controller can carry it out.
pub fn validate(spec: &EtcdMigrationSpec, namespace: &str, seed: &SeedRules) -> Vec<SpecProblem> {
    let mut out = Vec::new();
    let mut bad = |field: String, reason: &'static str, message: String| {
        out.push(SpecProblem {
            field,
            reason,
            message,
        });
    };
    for (i, s) in spec.allowed_sources.iter().enumerate() {
        if let Err(e) = isthmus_config::Cidr::parse(s) {
            bad(format!("spec.allowedSources[{i}]"), "InvalidCIDR", e);
        }
    }
    match (spec.role, &spec.destination) {
        (Role::Destination, None) => bad(
            "spec.destination".into(),
            "MissingDestinationSpec",
            "required for role destination".into(),
        ),
        (Role::Source, Some(_)) => bad(
            "spec.destination".into(),
            "UnexpectedField",
            "for role destination only".into(),
        ),
        _ => {}
    }
    if let Some(d) = &spec.destination {
        if let Some(t) = d
            .join_timeout
            .as_deref()
            .filter(|t| duration_secs(t).is_none())
        {
            bad(
                "spec.destination.joinTimeout".into(),
                "InvalidDuration",
                format!("{t:?} is not a Go duration (10m, 90s, 1h30m) that fits 64 bits"),
            );
        }
        if let Some(v) = d.etcd_version.as_deref().filter(|v| minor(v).is_none()) {
            bad(
                "spec.destination.etcdVersion".into(),
                "InvalidVersion",
                format!("{v:?} is not <major>.<minor>[.<patch>]"),
            );
        }
        if let Some(t) = d.etcd_template.as_ref().filter(|t| !t.spec.is_object()) {
            bad(
                "spec.destination.etcdTemplate.spec".into(),
                "InvalidTemplate",
                format!("must be an object, not {}", t.spec),
            );
        }
    }
    if spec.override_default_url && spec.druid_api != DruidApi::AdditionalAdvertisedUrls {
        bad(
            "spec.overrideDefaultUrl".into(),
            "UnsupportedField",
            "exists only in the additionalAdvertisedURLs API (druidApi: AdditionalAdvertisedUrls)"
                .into(),
        );
    }
    if spec.dns.secret_ref.namespace != namespace {
        bad(
            "spec.dns.secretRef.namespace".into(),
            "SecretOutsideNamespace",
            format!(
                "{:?} is another namespace: the DNS records of {namespace} use its own provider credentials, never another shoot's",
                spec.dns.secret_ref.namespace
            ),
        );
    }
    ports(spec, &mut bad);
    vpn_target(spec, namespace, &seed.cluster_domain, &mut bad);
    names(spec, namespace, &mut bad);
    let named = out.iter().map(|p| p.field.clone()).collect();
    let mut bad = |field: String, reason: &'static str, message: String| {
        out.push(SpecProblem {
            field,
            reason,
            message,
        });
    };
    seed.check(spec, namespace, &named, &mut bad);
    out
}

/// The lowest port the proxy pods can bind: they run without `NET_BIND_SERVICE`.
pub const UNPRIVILEGED: u16 = 1024;

/// The member listener ports stay in range and apart, and the VPN's port is none of them.
fn ports(spec: &EtcdMigrationSpec, bad: &mut impl FnMut(String, &'static str, String)) {
    let p = spec.ports;
    let n = u16::from(spec.members.max(1)) - 1;
    if p.client_base >= p.peer_base {
        bad(
            "spec.ports.clientBase".into(),
            "PortConflict",
            format!(
                "{} must be below peerBase {}: client ports count down, peer ports up",
                p.client_base, p.peer_base
            ),
        );
    }
    if p.peer_base.checked_add(n).is_none()
        || p.client_base
            .checked_sub(n)
            .is_none_or(|c| c < UNPRIVILEGED)
    {
        bad(
            "spec.ports".into(),
            "PortRange",
            format!(
                "{} members do not fit in the ports {UNPRIVILEGED}-65535",
                spec.members
            ),
        );
    }
    let Some(vpn) = &spec.vpn else { return };
    let member_port = match &spec.seed_ingress {
        None => (0..spec.members).any(|i| vpn.port == p.peer(i) || vpn.port == p.client(i)),
        Some(_) => {
            vpn.port == SEED_INGRESS_CLIENT
                || (SEED_INGRESS_PEER_BASE..SEED_INGRESS_PEER_BASE + u16::from(spec.members))
                    .contains(&vpn.port)
        }
    };
    if vpn.port < UNPRIVILEGED {
        bad(
            "spec.vpn.port".into(),
            "PortRange",
            format!(
                "{} is below {UNPRIVILEGED}: the proxy pods run without NET_BIND_SERVICE and could not bind it",
                vpn.port
            ),
        );
    } else if member_port {
        bad(
            "spec.vpn.port".into(),
            "PortConflict",
            format!("{} is an etcd member listener port", vpn.port),
        );
    }
}

/// etcd's in-cluster client and peer ports: never a VPN target.
const ETCD_PORTS: [u16; 2] = [2379, 2380];

/// The VPN's route has no allow-list (the shoot's nodes dial it from anywhere): its target
/// must be exactly the name of a Service of this migration's namespace in this cluster's
/// domain (not another shoot's, not a name under some other domain the proxy pods' resolver
/// would follow anywhere), and not one of etcd's Services or ports.
fn vpn_target(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    cluster_domain: &str,
    bad: &mut impl FnMut(String, &'static str, String),
) {
    let Some(vpn) = &spec.vpn else { return };
    let field = || "spec.vpn.target".to_string();
    let form = format!("<service>.{namespace}.svc.{cluster_domain}:<port>");
    let Some((host, port)) = vpn.target.rsplit_once(':') else {
        bad(
            field(),
            "InvalidTarget",
            format!("{:?} is not {form}", vpn.target),
        );
        return;
    };
    match port.parse::<u16>() {
        Ok(p) if ETCD_PORTS.contains(&p) => bad(
            field(),
            "EtcdPort",
            format!("port {p} is etcd's: the VPN must not reach etcd"),
        ),
        Ok(p) if p > 0 => {}
        _ => bad(
            field(),
            "InvalidTarget",
            format!("port {port:?} is not 1-65535"),
        ),
    }
    let etcd_services = [
        format!("{}-client", spec.etcd_name),
        format!("{}-peer", spec.etcd_name),
    ];
    match host.split('.').collect::<Vec<_>>().as_slice() {
        [service, ns, "svc", ..] if *ns != namespace => bad(
            field(),
            "TargetOutsideNamespace",
            format!(
                "{service} is a Service of namespace {ns}: the VPN may reach only its own namespace {namespace}"
            ),
        ),
        [service, _, "svc", ..] if etcd_services.iter().any(|e| e == service) => bad(
            field(),
            "EtcdService",
            format!("{service} is one of etcd's Services: the VPN must not reach etcd"),
        ),
        [_, _, "svc", domain @ ..] if domain.join(".") != cluster_domain => bad(
            field(),
            "TargetOutsideCluster",
            format!(
                "{host:?} is not a Service name of this cluster: want {form} (the cluster domain is --cluster-domain)"
            ),
        ),
        [_, _, "svc", ..] => {}
        _ => bad(field(), "InvalidTarget", format!("{host:?} is not {form}")),
    }
}

/// The DNS names composed from the spec and the namespace are valid names (253 characters,
/// labels of 63): the CRD checks each part, only the controller sees the namespace.
fn names(
    spec: &EtcdMigrationSpec,
    namespace: &str,
    bad: &mut impl FnMut(String, &'static str, String),
) {
    let Some(m) = members(spec, namespace).into_iter().last() else {
        return;
    };
    let first_label = m.dns_name.split('.').next().unwrap_or_default();
    let field = match (&spec.seed_ingress, first_label.len() > 63) {
        // `<seedName>-<etcdName>-<i>-<namespace>` is one label.
        (Some(_), true) => "spec.seedName",
        (Some(_), false) => "spec.seedIngress.domain",
        (None, _) => "spec.internalDomain",
    };
    if m.dns_name.len() > 253 || m.dns_name.split('.').any(|l| l.len() > 63) {
        bad(
            field.into(),
            "InvalidDNSName",
            format!(
                "the exposed name {:?} in namespace {namespace} is not a DNS name (at most 253 characters, labels of at most 63)",
                m.dns_name
            ),
        );
    }
}

/// `(major, minor)` of an etcd version (`3.5`, `3.5.27`, `v3.5.27`).
fn minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    match parts.next() {
        None => Some((major, minor)),
        Some(patch) => patch.parse::<u64>().ok().map(|_| (major, minor)),
    }
}

/// The destination's etcd version (`spec.destination.etcdVersion`) against the source
/// cluster's, as etcd reports it: etcd-druid joins only a cluster of the same minor version
/// (etcd-druid `docs/usage/bootstrapping-with-existing-cluster.md`, prerequisite 6). `None`
/// when they match.
pub fn etcd_version(destination: &str, source: &str) -> Option<SpecProblem> {
    let same = matches!((minor(destination), minor(source)), (Some(d), Some(s)) if d == s);
    (!same).then(|| SpecProblem {
        field: "spec.destination.etcdVersion".into(),
        reason: "EtcdVersionMismatch",
        message: format!(
            "the destination's etcd-druid deploys etcd {destination}, the source cluster runs {source}: etcd-druid joins only the same minor version"
        ),
    })
}
