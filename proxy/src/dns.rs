//! Endpoint host names resolved in the background with hickory-resolver.
//!
//! Each name gets one refresher task that re-resolves when the answer's TTL (clamped to the
//! configured floor and ceiling) runs out. A failed resolution keeps the last good addresses:
//! a DNS hiccup must never turn into refused etcd peer connections. The task ends by itself
//! when the last [`DnsEntry`] for the name is dropped (its snapshot was replaced and no
//! connection holds it), so nothing needs to be stopped explicitly.

use crate::metrics::{DnsLabels, Metrics};
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolverConfig as HickoryConfig,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use isthmus_config::ResolverConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, warn};

/// The resolver and its settings; cheap to clone.
#[derive(Clone)]
pub struct Dns {
    resolver: TokioResolver,
    config: ResolverConfig,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns").field("config", &self.config).finish()
    }
}

/// Why the resolver could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up DNS resolution: {0}")]
pub struct DnsError(String);

impl Dns {
    /// A resolver using `config.nameservers`, or the system configuration when empty.
    pub fn new(config: &ResolverConfig, metrics: Arc<Metrics>) -> Result<Self, DnsError> {
        let provider = TokioRuntimeProvider::default();
        let mut builder = if config.nameservers.is_empty() {
            TokioResolver::builder(provider).map_err(|e| DnsError(e.to_string()))?
        } else {
            let servers = config
                .nameservers
                .iter()
                .map(|s| {
                    let mut udp = ConnectionConfig::udp();
                    udp.port = s.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = s.port();
                    NameServerConfig::new(s.ip(), true, vec![udp, tcp])
                })
                .collect();
            TokioResolver::builder_with_config(HickoryConfig::from_name_servers(servers), provider)
        };
        let opts = builder.options_mut();
        opts.positive_min_ttl = Some(config.min_ttl.get());
        opts.positive_max_ttl = Some(config.max_ttl.get());
        opts.ip_strategy = hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
        let resolver = builder.build().map_err(|e| DnsError(e.to_string()))?;
        Ok(Self {
            resolver,
            config: config.clone(),
            metrics,
        })
    }

    /// The settings this resolver was built with.
    pub fn config(&self) -> &ResolverConfig {
        &self.config
    }

    /// Starts following `host:port`.
    pub fn follow(&self, host: &str, port: u16) -> Arc<DnsEntry> {
        let (tx, rx) = watch::channel(Arc::<[SocketAddr]>::from(Vec::new()));
        let (answered_tx, answered) = watch::channel(false);
        tokio::spawn(refresh(
            self.clone(),
            host.to_owned(),
            port,
            tx,
            answered_tx,
        ));
        Arc::new(DnsEntry { rx, answered })
    }
}

/// The current addresses of one name.
#[derive(Debug)]
pub struct DnsEntry {
    rx: watch::Receiver<Arc<[SocketAddr]>>,
    /// True once a DNS server answered for the name: addresses, or that it has none.
    answered: watch::Receiver<bool>,
}

impl DnsEntry {
    /// Waits up to `patience` for the first answer (addresses, or that the name has none; a
    /// timed-out query is not an answer); whether it came.
    pub async fn first_answer(&self, patience: Duration) -> bool {
        let mut answered = self.answered.clone();
        let waited = tokio::time::timeout(patience, answered.wait_for(|a| *a)).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// The addresses now; waits up to `patience` for the very first answer.
    pub async fn addrs(&self, patience: Duration) -> Arc<[SocketAddr]> {
        let now = self.rx.borrow().clone();
        if !now.is_empty() {
            return now;
        }
        let mut rx = self.rx.clone();
        let first = tokio::time::timeout(patience, rx.wait_for(|a| !a.is_empty())).await;
        match first {
            Ok(Ok(a)) => a.clone(),
            _ => now,
        }
    }
}

async fn refresh(
    dns: Dns,
    host: String,
    port: u16,
    tx: watch::Sender<Arc<[SocketAddr]>>,
    answered: watch::Sender<bool>,
) {
    let labels = DnsLabels { name: host.clone() };
    let c = &dns.config;
    loop {
        let pause = match dns.resolver.lookup_ip(host.as_str()).await {
            Ok(lookup) => {
                let addrs: Vec<SocketAddr> =
                    lookup.iter().map(|ip| SocketAddr::new(ip, port)).collect();
                let ttl = lookup
                    .valid_until()
                    .saturating_duration_since(Instant::now());
                dns.metrics.dns_result(&labels, "success");
                dns.metrics
                    .dns_addresses
                    .get_or_create(&labels)
                    .set(addrs.len() as i64);
                debug!(name = %host, ?addrs, ?ttl, "resolved");
                answered.send_if_modified(|a| !std::mem::replace(a, true));
                if !addrs.is_empty() {
                    tx.send_if_modified(|old| {
                        let changed = old.as_ref() != addrs.as_slice();
                        if changed {
                            *old = addrs.into();
                        }
                        changed
                    });
                }
                ttl.clamp(c.min_ttl.get(), c.max_ttl.get())
            }
            Err(e) => {
                // The server said the name has no addresses: an answer. A timeout is not.
                if e.is_no_records_found() {
                    answered.send_if_modified(|a| !std::mem::replace(a, true));
                }
                dns.metrics.dns_result(&labels, "failure");
                warn!(name = %host, error = %e, kept = tx.borrow().len(), "resolution failed; keeping the last good addresses");
                c.retry_after_failure.get()
            }
        };
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}
