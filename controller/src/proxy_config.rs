//! The shared proxy ConfigMap: every migration's routes on this seed rendered into one isthmus
//! proxy file, and the rule for when a new file counts as rolled out.
//!
//! The file is JSON, written with `serde_json` from the proxy's own schema
//! (`isthmus_config::ProxyConfig`), and read by the proxy with `serde_json`: one schema, one
//! writer, one reader. It is checked once, as the typed value it is built as (every SNI,
//! endpoint and CIDR parsed, then the proxy's own validation), never by parsing the text back;
//! a problem is traced to the migration whose route or upstream sits at its field path.

mod build;
mod ports;

pub use build::{Claim, Conflict, LeftOut};

use crate::plan::conditions::Verdict;
use crate::plan::MemberRoute;
use isthmus_config::{hash_bytes, ProxyConfig};
use std::net::SocketAddr;

/// Key of the proxy file in the ConfigMap (mounted as `/etc/isthmus/proxy.json`).
pub const CONFIG_KEY: &str = "proxy.json";

/// Listeners that exist whether or not a migration uses them, so the proxy binds the same
/// ports the LoadBalancer Service forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Admin address inside the pod; the controller reads `/config` from each pod's IP on
    /// this port, so it must not be loopback. Its IP is every listener's too: the wildcard
    /// of the pods' families (`0.0.0.0`, or `::` for a dual-stack socket).
    pub admin: SocketAddr,
    /// `(listener name, port)`.
    pub listeners: Vec<(String, u16)>,
    /// The load balancer's addresses when it sends PROXY protocol headers: every listener
    /// then accepts a header from these peers only (`proxy_protocol: accept`,
    /// `trusted_proxies`). Empty: no PROXY protocol.
    pub trusted_proxies: Vec<String>,
    /// The sources (CIDRs) a migration's member routes admit when its spec lists no
    /// `allowedSources`: the seed-wide default. Empty (the default): none, so such a
    /// migration's members are reachable by nobody until it lists its peers.
    pub default_allowed_sources: Vec<String>,
}

impl Layout {
    /// Peer and client listeners for member indices `0..members` plus the VPN listener.
    pub fn standard(
        ports: crate::crd::PortScheme,
        members: u8,
        vpn_port: u16,
        admin: SocketAddr,
    ) -> Self {
        Self {
            admin,
            listeners: crate::plan::names::standard_listeners(ports, members, vpn_port),
            trusted_proxies: Vec::new(),
            default_allowed_sources: Vec::new(),
        }
    }

    /// What a spec is checked against on a seed rendering this layout (`plan::validate`): its
    /// admin port and listeners.
    pub fn rules(&self) -> crate::plan::SeedRules {
        crate::plan::SeedRules::new(self.admin.port(), self.listeners.clone())
    }

    /// Whether every proxy can bind this layout (the controller's flags, checked at start):
    /// one name per port, none on the admin port or below 1024, and a file the proxy loads.
    pub fn check(&self) -> Result<(), RenderError> {
        use crate::plan::validate::UNPRIVILEGED;
        for (name, port) in &self.listeners {
            if *port == self.admin.port() || *port < UNPRIVILEGED {
                return Err(RenderError::Invalid(format!(
                    "listener {name}: port {port} is the admin port or below {UNPRIVILEGED}"
                )));
            }
        }
        render(self, &[]).map(|_| ())
    }
}

/// How long a spliced connection may stay idle (no byte either way) before the proxy closes
/// it, on every upstream rendered. Long enough that it cannot cut etcd: a watch may stay
/// silent as long as nothing changes, but etcd's server pings every idle client connection
/// after `--grpc-keepalive-interval` (2 h by default), and peer streams carry heartbeats
/// (Istio's 1 h default silently cut idle watches); short enough that a connection parked by
/// a client that went away without a FIN, or by an attacker, is closed within hours.
pub const IDLE_TIMEOUT: isthmus_config::Duration = isthmus_config::Duration::from_secs(3 * 3600);

/// The connections one source may hold on a listener, rendered as its
/// `max_connections_per_source`: 64 per route on the listener (a member's etcd opens at most
/// ~18 connections from the other seed, 2 streams and up to 4 pipeline connections per remote
/// member, and reconnects may overlap with dying ones; a seed's egress NAT may carry every
/// shoot's peers from one address), at least 256. One source then cannot take the whole
/// `max_connections` (100,000, or what fits the open-files limit) of the proxy.
pub fn connections_per_source(routes: usize) -> usize {
    routes.saturating_mul(64).max(256)
}

/// Rendering failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// JSON serialisation failed.
    #[error("cannot serialise the proxy config: {0}")]
    Json(String),
    /// The file would be invalid: the layout's own part (`None`), or a migration's routes.
    #[error("the proxy would refuse the rendered file: {0}")]
    Invalid(String),
}

/// The rendered file and its SHA-256 (what each proxy's `/config` reports once loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// JSON text.
    pub text: String,
    /// `hash_bytes(text)`.
    pub hash: String,
}

/// The file of every migration's routes, and the migrations left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The file.
    pub rendered: Rendered,
    /// Migrations whose routes the file does not hold, and why.
    pub left_out: Vec<LeftOut>,
    /// Routes the file does not hold because an earlier claim holds them.
    pub conflicts: Vec<Conflict>,
}

/// Renders `routes` (of one migration, or already merged) into one proxy file; any problem is
/// an error. Output is sorted, so equal inputs give byte-identical files (and hashes).
pub fn render(layout: &Layout, routes: &[MemberRoute]) -> Result<Rendered, RenderError> {
    render_with(layout, routes, |_| {})
}

/// Like [`render`], with settings outside the controller's concern (`watch_interval`, drain
/// times) changed by `tune` before the file is written.
pub fn render_with(
    layout: &Layout,
    routes: &[MemberRoute],
    tune: impl FnOnce(&mut ProxyConfig),
) -> Result<Rendered, RenderError> {
    let claim = Claim {
        owner: String::new(),
        routes: routes.to_vec(),
    };
    let mut built = build::build(layout, std::slice::from_ref(&claim))?;
    if let Some(p) = built.left_out.first() {
        return Err(RenderError::Invalid(format!("{}: {}", p.path, p.message)));
    }
    if let Some(c) = built.conflicts.first() {
        return Err(RenderError::Invalid(format!(
            "{} on {} goes to two places",
            c.sni, c.listener
        )));
    }
    tune(&mut built.config);
    write(&built.config)
}

/// Renders the routes of every migration in `claims` (in order of precedence: the older
/// migration first) into one file. A route that an earlier claim holds (the same SNI on the
/// same listener, or the same upstream name, going elsewhere) stays the earlier claim's; a
/// migration whose routes would make the proxy refuse the file is left out, with the field
/// path of the problem, so the others keep working; a problem of the layout is an error.
pub fn render_claims(layout: &Layout, claims: &[Claim]) -> Result<Outcome, RenderError> {
    let built = build::build(layout, claims)?;
    Ok(Outcome {
        rendered: write(&built.config)?,
        left_out: built.left_out,
        conflicts: built.conflicts,
    })
}

/// Serialises a configuration as the proxy reads it.
pub fn write(config: &ProxyConfig) -> Result<Rendered, RenderError> {
    let text = serde_json::to_string(config).map_err(|e| RenderError::Json(e.to_string()))?;
    let hash = hash_bytes(text.as_bytes());
    Ok(Rendered { text, hash })
}

/// Whether a migration's member routes admit only listed sources: its `allowedSources`, else
/// the seed's default (`ExposureRestricted`).
pub fn exposure(allowed_sources: &[String], layout: &Layout) -> Verdict {
    use crate::plan::conditions::EXPOSURE_RESTRICTED as T;
    let (listed, reason) = if allowed_sources.is_empty() {
        (&layout.default_allowed_sources[..], "SeedDefault")
    } else {
        (allowed_sources, "AllowedSources")
    };
    let everything = |s: &String| isthmus_config::Cidr::parse(s).is_ok_and(|c| c.is_everything());
    if let Some(open) = listed.iter().find(|s| everything(s)) {
        return Verdict::refused(
            T,
            "OpenToAnySource",
            format!("the members' routes admit every address ({open} in {reason})"),
        );
    }
    if listed.is_empty() {
        return Verdict::done(
            T,
            "NoSourceAllowed",
            "no spec.allowedSources and no seed default: the members' routes admit no source; \
             list the other seed's egress networks in spec.allowedSources",
        );
    }
    Verdict::done(
        T,
        reason,
        format!("the members' routes admit only {}", listed.join(", ")),
    )
}

/// The rollout is complete when at least one proxy pod answered and every pod reports `hash`.
/// A pod that did not answer counts as not rolled out: better to wait than to expose a member
/// through a proxy that cannot route it.
pub fn rolled_out<E>(hash: &str, reports: &[Result<String, E>]) -> bool {
    !reports.is_empty() && reports.iter().all(|r| matches!(r, Ok(h) if h == hash))
}
