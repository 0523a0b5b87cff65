//! What the agent is configured with, and how it resolves server names.

use crate::{tls, Error};
use isthmus_config::{AllowRule, Http2Config, ServerEntryConfig, TunnelAgentConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Resolves a server's host name. Swappable so tests can move a name to another address.
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// The addresses of `host:port`.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>>;
}

/// The system resolver.
#[derive(Debug, Clone, Copy, Default)]
pub struct DnsResolver;

impl Resolve for DnsResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// Everything the agent needs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Servers to hold sessions to.
    pub servers: Vec<ServerEntryConfig>,
    /// TLS client config (client certificate, trusted CA, ALPN h2).
    pub tls: Arc<rustls::ClientConfig>,
    /// Targets that may be dialed.
    pub allow: Vec<AllowRule>,
    /// HTTP/2 settings.
    pub http2: Http2Config,
    /// How often names are re-resolved.
    pub resolve_interval: Duration,
    /// Dial timeout for targets.
    pub dial_timeout: Duration,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// How long a draining session's streams may take.
    pub drain_timeout: Duration,
    /// Replace sessions this old (minus up to 10 % jitter); `None`: never.
    pub max_session_age: Option<Duration>,
    /// Name resolution for servers.
    pub resolver: Arc<dyn Resolve>,
}

impl AgentOptions {
    /// Reads the TLS files named in `c`; uses the system resolver.
    pub fn from_config(c: &TunnelAgentConfig) -> Result<Self, Error> {
        Ok(Self {
            servers: c.servers.clone(),
            tls: tls::agent_config(&c.tls.ca, &c.tls.cert, &c.tls.key)?,
            allow: c.allow_rules(),
            http2: c.http2.clone(),
            resolve_interval: c.resolve_interval.get(),
            dial_timeout: c.dial_timeout.get(),
            backoff_initial: c.backoff_initial.get(),
            backoff_max: c.backoff_max.get(),
            drain_timeout: c.drain_timeout.get(),
            max_session_age: c.max_session_age.map(|d| d.get()),
            resolver: Arc::new(DnsResolver),
        })
    }
}
