//! The schema of `isthmus tunnel-server --config FILE` and `isthmus tunnel-agent --config FILE`
//! (issue 4). Every field is documented here and in `tunnel/README.md`; keep them in step.

pub use crate::allow::AllowRule;
use crate::schema::{Lists, Schema};
use crate::{nullable, AdminConfig, Cidr, ConfigError, Duration, HttpLimits};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

type Problems = Vec<(String, String)>;

/// The whole `tunnel-server` configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelServerConfig {
    /// Where agents dial in (TLS 1.3, client certificate required).
    pub agents: AgentsListenerConfig,
    /// The HTTP/1.1 CONNECT endpoint kube-apiserver's egress selector uses.
    pub connect: ConnectListenerConfig,
    /// The admin HTTP endpoint (`/metrics`, `/healthz`, `/readyz`). Default `127.0.0.1:9902`.
    #[serde(default = "defaults::server_admin")]
    pub admin: AdminConfig,
    /// HTTP/2 tuning of the agent sessions.
    #[serde(default)]
    pub http2: Http2Config,
    /// How long a CONNECT may wait for an agent to answer before it gets `504`. Default `15s`.
    #[serde(default = "defaults::connect_timeout")]
    pub connect_timeout: Duration,
    /// When no agent session is live, how long a CONNECT waits for one (an agent reconnecting
    /// after a server restart) before it gets `503`. Default `3s`; `0s` answers at once.
    #[serde(default = "defaults::session_wait")]
    pub session_wait: Duration,
    /// After SIGTERM, how long open streams may take to finish. Default `30s`.
    #[serde(default = "defaults::drain_timeout")]
    pub drain_timeout: Duration,
    /// How often this file and the TLS files it names are checked for changes (rewritten, or
    /// a Secret volume's symlink swap); a change re-reads `agents.tls` and `connect.tls` for
    /// the handshakes that follow, as SIGHUP does. Sessions already up are kept. Default
    /// `1s`; `0s` disables watching (SIGHUP still reloads).
    #[serde(default = "defaults::watch_interval")]
    pub watch_interval: Duration,
}

/// The agents' listener.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsListenerConfig {
    /// Address and port, e.g. `0.0.0.0:9443`.
    pub address: SocketAddr,
    /// Server certificate and the CA that agents' client certificates must chain to.
    pub tls: ServerTlsConfig,
    /// Time from accept to the end of the TLS handshake (a PROXY header included); then the
    /// connection is closed and counted (`isthmus_tunnel_handshakes_total{outcome="failed"}`).
    /// An agent needs about two round trips. Default `5s`.
    #[serde(default = "defaults::handshake_timeout")]
    pub handshake_timeout: Duration,
    /// Most TLS handshakes in progress at once. One more connection closes a handshake of the
    /// source that holds the most (`isthmus_tunnel_refused_total{reason="evicted"}`), never
    /// one of a source that has completed a handshake before while such sources hold fewer
    /// than a quarter of the slots: a flood from any number of addresses cannot close the
    /// handshake of an agent that has connected before. Default `256`.
    #[serde(default = "defaults::max_handshakes")]
    pub max_handshakes: usize,
    /// Most handshakes in progress from one source address (IPv6: one /64; behind a trusted
    /// proxy, the client address of its PROXY header); one more closes that source's own
    /// oldest. Default `8`.
    #[serde(default = "defaults::max_handshakes_per_source")]
    pub max_handshakes_per_source: usize,
    /// CIDRs of the peers (the seed's isthmus proxies, `send_proxy_protocol: v2`) whose
    /// PROXY v2 header is believed: its client address is the source that the per-source
    /// share and the logs use. Their connections may also come without a header; another
    /// peer's header is refused (`reason="untrusted_proxy_header"`, logged at `error`).
    /// Default: none.
    #[serde(default)]
    pub trusted_proxies: Vec<Cidr>,
    /// Most agent sessions at once (a shoot has one regular agent, one temporary one and
    /// their replacements during a rotation); one more is closed after its handshake and
    /// counted (`reason="too_many_sessions"`). Default `16`.
    #[serde(default = "defaults::max_sessions")]
    pub max_sessions: usize,
    /// Time from the end of the TLS handshake until the session is verified: the HTTP/2
    /// handshake and the round trip of the server's first probe; then the session is closed
    /// and counted (`reason="setup_timeout"`). An agent needs about two round trips; a peer
    /// that holds a certificate but never answers would otherwise keep one of the
    /// `max_sessions` places. Default `10s`.
    #[serde(default = "defaults::setup_timeout")]
    pub setup_timeout: Duration,
}

/// The CONNECT listener: exactly one of `address` (TCP, optionally TLS) or `unix`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectListenerConfig {
    /// TCP address and port, e.g. `0.0.0.0:9444`.
    #[serde(default)]
    pub address: Option<SocketAddr>,
    /// Path of a Unix socket to listen on instead of TCP (removed and re-created at start).
    #[serde(default)]
    pub unix: Option<PathBuf>,
    /// TLS with mandatory client certificates for the TCP endpoint. Without it the endpoint
    /// speaks plain HTTP, which is refused unless `address` is a loopback address (or `unix`
    /// is used): an unauthenticated door into the shoot's networks must not face a network.
    #[serde(default)]
    pub tls: Option<ServerTlsConfig>,
    /// Limits of the HTTP/1 server (header timeout, which also bounds the TLS handshake;
    /// head size; connections not yet upgraded to a tunnel, the oldest closed first).
    #[serde(default)]
    pub limits: HttpLimits,
}

/// Server-side TLS files (PEM).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsConfig {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates that peers' client certificates must chain to.
    pub client_ca: PathBuf,
    /// DNS names a client certificate must carry, one of them, exactly (ASCII case aside)
    /// as a subject alternative name; a certificate of the right CA for another name, or
    /// only for a wildcard covering it, is refused during the handshake and counted
    /// (`isthmus_tunnel_refused_total{reason="client_name"}`). Default: empty, meaning any
    /// certificate of `client_ca` (the server warns at start); set it.
    #[serde(default)]
    pub allowed_client_names: Vec<String>,
}

/// HTTP/2 settings of an agent session; both ends use the same defaults.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Http2Config {
    /// Receive window of each stream in bytes. Default `4194304` (4 MiB): at 200 ms RTT a
    /// stream can then carry ~160 Mbit/s; the HTTP/2 default of 64 KiB caps it at ~2.6 Mbit/s.
    #[serde(default = "defaults::stream_window")]
    pub stream_window: u32,
    /// Receive window of the whole session in bytes. Default `33554432` (32 MiB): eight
    /// streams can sit on full windows (a stalled reader) and the rest still flow.
    #[serde(default = "defaults::connection_window")]
    pub connection_window: u32,
    /// Interval of HTTP/2 PING keepalives, well under any load balancer's idle timeout.
    /// Default `10s`.
    #[serde(default = "defaults::keepalive_interval")]
    pub keepalive_interval: Duration,
    /// A session whose PING is not answered within this time is closed. Default `20s`.
    #[serde(default = "defaults::keepalive_timeout")]
    pub keepalive_timeout: Duration,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            stream_window: defaults::stream_window(),
            connection_window: defaults::connection_window(),
            keepalive_interval: defaults::keepalive_interval(),
            keepalive_timeout: defaults::keepalive_timeout(),
        }
    }
}

/// The whole `tunnel-agent` configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelAgentConfig {
    /// Tunnel servers to hold sessions to; each name is re-resolved every `resolve_interval`
    /// and one session is held per resolved address.
    pub servers: Vec<ServerEntryConfig>,
    /// The agent's client certificate and the CA that servers' certificates must chain to.
    pub tls: AgentTlsConfig,
    /// Targets the server may open: `CIDR` or `CIDR:port` (`10.250.0.0/16:10250`,
    /// `fd00::/8:443`); a bare IP means a single address. Anything else gets `403`, no dial.
    pub allow: Vec<String>,
    /// The admin HTTP endpoint (`/metrics`, `/healthz`, `/readyz`). Default `127.0.0.1:9903`.
    #[serde(default = "defaults::agent_admin")]
    pub admin: AdminConfig,
    /// HTTP/2 tuning of the sessions.
    #[serde(default)]
    pub http2: Http2Config,
    /// How often server names are re-resolved. Default `30s`.
    #[serde(default = "defaults::resolve_interval")]
    pub resolve_interval: Duration,
    /// How long dialing a target may take before the server gets `504`. Default `10s`.
    #[serde(default = "defaults::dial_timeout")]
    pub dial_timeout: Duration,
    /// First reconnect delay; doubled per failure, with jitter. Default `100ms`.
    #[serde(default = "defaults::backoff_initial")]
    pub backoff_initial: Duration,
    /// Largest reconnect delay. Default `4s`.
    #[serde(default = "defaults::backoff_max")]
    pub backoff_max: Duration,
    /// How long streams of a draining session may take to finish. Default `30s`.
    #[serde(default = "defaults::drain_timeout")]
    pub drain_timeout: Duration,
    /// When set, a session this old (minus up to 10 % jitter, so the value is an upper bound)
    /// is replaced: a new session to the same address is opened and verified, then the old
    /// one drains. For an ingress that drains connections on restart (an isthmus proxy):
    /// keep `max_session_age` + session set-up + the longest stream below its drain timeout.
    /// Default `null` (sessions live as long as their connection).
    #[serde(default, deserialize_with = "nullable::duration")]
    pub max_session_age: Option<Duration>,
}

/// One tunnel server the agent dials.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntryConfig {
    /// `host:port` to dial (the server itself, an isthmus proxy routing on SNI, or the HTTP
    /// CONNECT proxy when `http_connect_header` is set).
    pub address: String,
    /// TLS server name (SNI and certificate check). Default: the host of `address`.
    #[serde(default, deserialize_with = "nullable::string")]
    pub server_name: Option<String>,
    /// When set, `address` is an HTTP CONNECT proxy: the agent sends `CONNECT address` with
    /// this `Name: value` header (Gardener's `X-Gardener-Destination: outbound|1194||…`).
    #[serde(default, deserialize_with = "nullable::string")]
    pub http_connect_header: Option<String>,
}

/// Agent-side TLS files (PEM).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTlsConfig {
    /// CA certificates that the server's certificate must chain to.
    pub ca: PathBuf,
    /// The agent's client certificate chain, leaf first.
    pub cert: PathBuf,
    /// The agent's private key.
    pub key: PathBuf,
}

impl TunnelServerConfig {
    /// What the file allows but should not, one line each with its field path: the server
    /// logs them at start.
    pub fn warnings(&self) -> Vec<String> {
        let open = |at: &str, who: &str| {
            format!(
                "{at}.allowed_client_names is empty: any certificate its client_ca ever signed \
                 is accepted as {who}; list the names"
            )
        };
        let mut w = Vec::new();
        if self.agents.tls.allowed_client_names.is_empty() {
            w.push(open("agents.tls", "an agent"));
        }
        if self
            .connect
            .tls
            .as_ref()
            .is_some_and(|t| t.allowed_client_names.is_empty())
        {
            w.push(open(
                "connect.tls",
                "kube-apiserver, into the shoot's networks",
            ));
        }
        if let Some(c) = self.connect.tls.as_ref() {
            let a = &self.agents.tls;
            let names_apart = !a.allowed_client_names.is_empty()
                && !c.allowed_client_names.is_empty()
                && !a.allowed_client_names.iter().any(|n| {
                    c.allowed_client_names
                        .iter()
                        .any(|m| m.eq_ignore_ascii_case(n))
                });
            if c.client_ca == a.client_ca && !names_apart {
                w.push(
                    "agents.tls.client_ca and connect.tls.client_ca are the same file: an \
                     agent's certificate opens the CONNECT front into the shoot's networks; use \
                     a CA per role, or allowed_client_names that tell the roles apart"
                        .to_owned(),
                );
            }
        }
        w
    }
}

impl TunnelAgentConfig {
    /// The parsed allow-list; entries that fail to parse were already rejected by validation.
    pub fn allow_rules(&self) -> Vec<AllowRule> {
        self.allow
            .iter()
            .filter_map(|a| AllowRule::parse(a).ok())
            .collect()
    }
}

impl Schema for TunnelServerConfig {
    fn validate(&self) -> Problems {
        let mut p = Problems::new();
        match (&self.connect.address, &self.connect.unix) {
            (Some(_), Some(_)) => p.push((
                "connect".into(),
                "set exactly one of address and unix, not both".into(),
            )),
            (None, None) => p.push((
                "connect".into(),
                "set exactly one of address and unix".into(),
            )),
            (None, Some(_)) if self.connect.tls.is_some() => p.push((
                "connect.tls".into(),
                "TLS is only for address, not unix".into(),
            )),
            _ => {}
        }
        if let (Some(a), None) = (self.connect.address, &self.connect.tls) {
            if !a.ip().is_loopback() {
                p.push((
                    "connect.tls".into(),
                    format!(
                        "required: {a} is not a loopback address, and a CONNECT front without \
                         TLS lets anyone who reaches it into the shoot's networks (use tls, a \
                         loopback address or unix)"
                    ),
                ));
            }
        }
        for (at, tls) in [
            ("agents.tls", Some(&self.agents.tls)),
            ("connect.tls", self.connect.tls.as_ref()),
        ] {
            for (i, n) in tls
                .map_or(&[][..], |t| &t.allowed_client_names[..])
                .iter()
                .enumerate()
            {
                if n.is_empty() || n.contains(|c: char| c.is_whitespace() || c == '/') {
                    p.push((
                        format!("{at}.allowed_client_names[{i}]"),
                        format!("{n:?} is not a DNS name"),
                    ));
                } else if n.contains('*') {
                    p.push((
                        format!("{at}.allowed_client_names[{i}]"),
                        format!(
                            "{n:?}: write an exact name (a certificate must carry the name \
                             itself; wildcards are not matched)"
                        ),
                    ));
                }
            }
        }
        p.extend(self.connect.limits.problems("connect.limits"));
        p.extend(self.admin.limits.problems("admin.limits"));
        if self.agents.max_handshakes == 0 || self.agents.max_sessions == 0 {
            p.push((
                "agents".into(),
                "max_handshakes and max_sessions must be at least 1".into(),
            ));
        }
        let per_source = self.agents.max_handshakes_per_source;
        if per_source == 0 || per_source > self.agents.max_handshakes {
            p.push((
                "agents.max_handshakes_per_source".into(),
                format!("{per_source} must be 1 to max_handshakes"),
            ));
        }
        // Port 0 is a fresh port for each listener, never a clash.
        if self.agents.address.port() != 0 && self.connect.address == Some(self.agents.address) {
            p.push((
                "connect.address".into(),
                "is the same as agents.address".into(),
            ));
        }
        if self.session_wait.get() >= self.connect_timeout.get() {
            p.push((
                "session_wait".into(),
                "must be less than connect_timeout".into(),
            ));
        }
        check_http2(&mut p, &self.http2);
        for (at, d) in [
            ("connect_timeout", self.connect_timeout),
            ("agents.handshake_timeout", self.agents.handshake_timeout),
            ("agents.setup_timeout", self.agents.setup_timeout),
            ("drain_timeout", self.drain_timeout),
        ] {
            if d.get().is_zero() {
                p.push((at.into(), "must be more than 0s".into()));
            }
        }
        p
    }
}

impl Schema for TunnelAgentConfig {
    fn validate(&self) -> Problems {
        let mut p = Problems::new();
        if self.servers.is_empty() {
            p.push(("servers".into(), "needs at least one server".into()));
        }
        p.extend(self.admin.limits.problems("admin.limits"));
        for (i, s) in self.servers.iter().enumerate() {
            if split_host_port(&s.address).is_none() {
                p.push((
                    format!("servers[{i}].address"),
                    format!("invalid address {:?}: write host:port", s.address),
                ));
            }
            if let Some(h) = &s.http_connect_header {
                let ok = h.split_once(':').is_some_and(|(n, v)| {
                    !n.is_empty()
                        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        && !v.contains(['\r', '\n'])
                });
                if !ok {
                    p.push((
                        format!("servers[{i}].http_connect_header"),
                        "write `Name: value`".into(),
                    ));
                }
            }
        }
        if self.allow.is_empty() {
            p.push((
                "allow".into(),
                "needs at least one entry (an empty list would refuse every target)".into(),
            ));
        }
        for (i, a) in self.allow.iter().enumerate() {
            if let Err(m) = AllowRule::parse(a) {
                p.push((format!("allow[{i}]"), m));
            }
        }
        check_http2(&mut p, &self.http2);
        if self.backoff_initial.get().is_zero()
            || self.backoff_initial.get() > self.backoff_max.get()
        {
            p.push((
                "backoff_initial".into(),
                "must be more than 0s and at most backoff_max".into(),
            ));
        }
        let age = self.max_session_age.unwrap_or(self.resolve_interval);
        for (at, d) in [
            ("resolve_interval", self.resolve_interval),
            ("dial_timeout", self.dial_timeout),
            ("max_session_age", age),
        ] {
            if d.get().is_zero() {
                p.push((at.into(), "must be more than 0s".into()));
            }
        }
        p
    }
    fn list_errors(lists: &Lists<'_>) -> Vec<ConfigError> {
        lists.probe::<ServerEntryConfig>("servers")
    }
}

/// Splits `host:port` / `[v6]:port` into host and port.
pub fn split_host_port(s: &str) -> Option<(String, u16)> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some((sa.ip().to_string(), sa.port()));
    }
    let (host, port) = s.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
    (!host.is_empty() && !host.contains([':', '[', ']', '/'])).then(|| (host.to_owned(), port))
}

fn check_http2(p: &mut Problems, h: &Http2Config) {
    // RFC 9113: windows are at most 2^31-1; below 64 KiB would be slower than the default.
    let range = 65_535..=0x7fff_ffff;
    if !range.contains(&h.stream_window) {
        p.push((
            "http2.stream_window".into(),
            "must be 65535..=2147483647".into(),
        ));
    }
    if !range.contains(&h.connection_window) || h.connection_window < h.stream_window {
        p.push((
            "http2.connection_window".into(),
            "must be 65535..=2147483647 and ≥ stream_window".into(),
        ));
    }
    if h.keepalive_interval.get().is_zero() || h.keepalive_timeout.get().is_zero() {
        p.push((
            "http2".into(),
            "keepalive_interval and keepalive_timeout must be more than 0s".into(),
        ));
    }
}

mod defaults {
    use crate::{AdminConfig, Duration};
    use std::net::SocketAddr;
    pub fn server_admin() -> AdminConfig {
        AdminConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 9902)),
            limits: Default::default(),
        }
    }
    pub fn agent_admin() -> AdminConfig {
        AdminConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 9903)),
            limits: Default::default(),
        }
    }
    pub fn connect_timeout() -> Duration {
        Duration::from_secs(15)
    }
    pub fn handshake_timeout() -> Duration {
        Duration::from_secs(5)
    }
    pub fn max_handshakes() -> usize {
        256
    }
    pub fn max_handshakes_per_source() -> usize {
        8
    }
    pub fn max_sessions() -> usize {
        16
    }
    pub fn setup_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn watch_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub fn session_wait() -> Duration {
        Duration::from_secs(3)
    }
    pub fn drain_timeout() -> Duration {
        Duration::from_secs(30)
    }
    pub fn stream_window() -> u32 {
        4 << 20
    }
    pub fn connection_window() -> u32 {
        32 << 20
    }
    pub fn keepalive_interval() -> Duration {
        Duration::from_secs(10)
    }
    pub fn keepalive_timeout() -> Duration {
        Duration::from_secs(20)
    }
    pub fn resolve_interval() -> Duration {
        Duration::from_secs(30)
    }
    pub fn dial_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn backoff_initial() -> Duration {
        Duration::from_millis(100)
    }
    pub fn backoff_max() -> Duration {
        Duration::from_secs(4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    const SERVER: &str = r#"
agents:  { address: "0.0.0.0:9443", tls: { cert: s.crt, key: s.key, client_ca: ca.crt } }
connect: { address: "0.0.0.0:9444", tls: { cert: c.crt, key: c.key, client_ca: ca.crt } }
admin:   { address: "0.0.0.0:9902" }
"#;
    const AGENT: &str = r#"
servers:
  - { address: "vpn.shoot--foo--bar.seed-b.internal.example.com:443" }
  - { address: "api.example.com:8443", http_connect_header: "X-Gardener-Destination: outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local", server_name: vpn-seed-server }
tls:   { ca: ca.crt, cert: a.crt, key: a.key }
allow: ["10.96.0.0/12", "10.250.0.0/16:10250", "100.64.0.0/13"]
admin: { address: "0.0.0.0:9903" }
"#;

    #[test]
    fn issue_examples_parse() {
        let s: TunnelServerConfig = parse("server.yaml", SERVER).unwrap();
        assert_eq!(s.connect.address, Some("0.0.0.0:9444".parse().unwrap()));
        let a: TunnelAgentConfig = parse("agent.yaml", AGENT).unwrap();
        assert_eq!(a.servers[1].server_name.as_deref(), Some("vpn-seed-server"));
        assert_eq!(a.allow_rules().len(), 3);
    }

    #[test]
    fn connect_needs_exactly_one_endpoint() {
        let text = SERVER.replace(
            "connect: { address: \"0.0.0.0:9444\",",
            "connect: { unix: /x.sock, address: \"0.0.0.0:9444\",",
        );
        let e = parse::<TunnelServerConfig>("s.yaml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.yaml:3:10: connect: set exactly one of address and unix"),
            "{e}"
        );
        let e = parse::<TunnelServerConfig>("s.yaml", "agents: { address: \"0.0.0.0:1\", tls: { cert: a, key: b, client_ca: c } }\nconnect: {}\n").unwrap_err();
        assert!(e.to_string().contains("connect: set exactly one"), "{e}");
    }

    #[test]
    fn connect_and_agents_share_an_address_only_on_port_0() {
        let same = SERVER.replace("0.0.0.0:9444", "0.0.0.0:9443");
        let e = parse::<TunnelServerConfig>("s.yaml", &same)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("connect.address: is the same as agents.address"),
            "{e}"
        );
        // Port 0 gives each listener a port of its own (tests, benches).
        let any = SERVER
            .replace("0.0.0.0:9443", "127.0.0.1:0")
            .replace("0.0.0.0:9444", "127.0.0.1:0");
        parse::<TunnelServerConfig>("s.yaml", &any).unwrap();
    }

    #[test]
    fn bad_allow_entries_point_at_the_entry() {
        let text = AGENT.replace(
            "\"100.64.0.0/13\"",
            "\"100.64.0.1/13\", \"10.0.0.0/8:0\", nonsense",
        );
        let e = parse::<TunnelAgentConfig>("a.yaml", &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.yaml:6:"), "{e}");
        assert!(
            e.contains("allow[2]: invalid allow entry \"100.64.0.1/13\": host bits"),
            "{e}"
        );
        assert!(
            e.contains("allow[3]: invalid allow entry \"10.0.0.0/8:0\""),
            "{e}"
        );
        assert!(
            e.contains("allow[4]: invalid allow entry \"nonsense\""),
            "{e}"
        );
    }

    #[test]
    fn max_session_age_is_off_by_default_and_more_than_0s() {
        let a: TunnelAgentConfig = parse("a.yaml", AGENT).unwrap();
        assert_eq!(a.max_session_age, None);
        let a: TunnelAgentConfig =
            parse("a.yaml", &format!("{AGENT}max_session_age: null\n")).unwrap();
        assert_eq!(a.max_session_age, None);
        let a: TunnelAgentConfig =
            parse("a.yaml", &format!("{AGENT}max_session_age: 2s\n")).unwrap();
        assert_eq!(a.max_session_age, Some(Duration::from_secs(2)));
        let e = parse::<TunnelAgentConfig>("a.yaml", &format!("{AGENT}max_session_age: 0s\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.yaml:8:18: max_session_age: must be more than 0s"),
            "{e}"
        );
    }

    #[test]
    fn agents_handshake_limits_default_and_validate() {
        let s: TunnelServerConfig = parse("s.yaml", SERVER).unwrap();
        assert_eq!(
            (s.agents.max_handshakes, s.agents.max_handshakes_per_source),
            (256, 8)
        );
        assert_eq!(s.agents.handshake_timeout, Duration::from_secs(5));
        assert!(s.agents.trusted_proxies.is_empty());
        let text = SERVER.replace(
            "client_ca: ca.crt } }\nconnect",
            "client_ca: ca.crt }, trusted_proxies: [\"10.250.0.0/16\"] }\nconnect",
        );
        let s: TunnelServerConfig = parse("s.yaml", &text).unwrap();
        assert_eq!(s.agents.trusted_proxies.len(), 1);
        let text = SERVER.replace(
            "client_ca: ca.crt } }\nconnect",
            "client_ca: ca.crt }, max_handshakes: 4, max_handshakes_per_source: 5 }\nconnect",
        );
        let e = parse::<TunnelServerConfig>("s.yaml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agents.max_handshakes_per_source: 5 must be 1 to max_handshakes"),
            "{e}"
        );
    }

    #[test]
    fn open_client_names_warn_and_wildcards_are_refused() {
        let s: TunnelServerConfig = parse("s.yaml", SERVER).unwrap();
        let w = s.warnings();
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("agents.tls.allowed_client_names is empty"));
        assert!(w[1].starts_with("connect.tls.allowed_client_names is empty"));
        assert!(w[2].starts_with("agents.tls.client_ca and connect.tls.client_ca are the same"));
        let named = SERVER.replace(
            "client_ca: ca.crt } }\nconnect",
            "client_ca: ca.crt, allowed_client_names: [agent.example] } }\nconnect",
        );
        let s: TunnelServerConfig = parse("s.yaml", &named).unwrap();
        assert_eq!(s.warnings().len(), 2);
        let wild = named.replace("[agent.example]", "[\"*.example\"]");
        let e = parse::<TunnelServerConfig>("s.yaml", &wild)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agents.tls.allowed_client_names[0]: \"*.example\": write an exact name"),
            "{e}"
        );
    }

    #[test]
    fn one_ca_for_both_roles_warns_unless_the_names_tell_them_apart() {
        let apart = SERVER
            .replace(
                "s.key, client_ca: ca.crt }",
                "s.key, client_ca: ca.crt, allowed_client_names: [agent.example] }",
            )
            .replace(
                "c.key, client_ca: ca.crt }",
                "c.key, client_ca: ca.crt, allowed_client_names: [kube-apiserver.example] }",
            );
        let s: TunnelServerConfig = parse("s.yaml", &apart).unwrap();
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
        let same = apart.replace("[kube-apiserver.example]", "[Agent.example]");
        let s: TunnelServerConfig = parse("s.yaml", &same).unwrap();
        assert_eq!(s.warnings().len(), 1, "{:?}", s.warnings());
        let two_cas = same.replace(
            "c.key, client_ca: ca.crt",
            "c.key, client_ca: connect-ca.crt",
        );
        let s: TunnelServerConfig = parse("s.yaml", &two_cas).unwrap();
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    }

    #[test]
    fn setup_timeout_and_watch_interval_default() {
        let s: TunnelServerConfig = parse("s.yaml", SERVER).unwrap();
        assert_eq!(s.agents.setup_timeout, Duration::from_secs(10));
        assert_eq!(s.watch_interval, Duration::from_secs(1));
        let zero = SERVER.replace(
            "ca.crt } }\nconnect",
            "ca.crt }, setup_timeout: 0s }\nconnect",
        );
        let e = parse::<TunnelServerConfig>("s.yaml", &zero)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("agents.setup_timeout: must be more than 0s"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_are_errors() {
        let e = parse::<TunnelAgentConfig>("a.yaml", &format!("{AGENT}bogus: 1\n")).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
