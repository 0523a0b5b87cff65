//! The seed-side tunnel server: accepts agent sessions (it is their HTTP/2 *client*) and
//! offers kube-apiserver an HTTP/1.1 CONNECT endpoint whose streams it spreads over them.

mod connect;
mod handshake;
mod reload;
mod session;
mod sessions;
mod slots;

use crate::metrics::{Metrics, RefusedLabels};
use crate::{http2, Error};
use isthmus_admin::http1::Gate;
use isthmus_admin::ratelog::RateLog;
use isthmus_config::{Cidr, HttpLimits};
use isthmus_config::{ConnectListenerConfig, Http2Config, TunnelServerConfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::{TlsAcceptor, TlsStream};
use tokio_util::sync::CancellationToken;

/// Everything the server needs besides its sockets.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// TLS for agent sessions (client certificates required).
    pub agents_tls: Arc<rustls::ServerConfig>,
    /// TLS for the CONNECT endpoint; `None` for plain HTTP (Unix socket).
    pub connect_tls: Option<Arc<rustls::ServerConfig>>,
    /// HTTP/2 settings.
    pub http2: Http2Config,
    /// How long a CONNECT may wait for an agent's answer.
    pub connect_timeout: Duration,
    /// How long a CONNECT waits for a session when none is live.
    pub session_wait: Duration,
    /// How long open streams may take to finish after shutdown starts.
    pub drain_timeout: Duration,
    /// Interval of the round-trip probe on each session (`ping_rtt_seconds`).
    pub probe_interval: Duration,
    /// Caps and timeouts against floods, and where refusals are counted.
    pub limits: ServerLimits,
}

/// The server's caps and timeouts (see `agents` and `connect.limits` in the configuration).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Time an agent connection has from accept to the end of its TLS handshake.
    pub handshake_timeout: Duration,
    /// Agent TLS handshakes in progress at once; one more closes the oldest handshake of
    /// the source holding the most.
    pub max_handshakes: usize,
    /// Agent TLS handshakes in progress from one source; one more closes its own oldest.
    pub max_handshakes_per_source: usize,
    /// Peers whose PROXY v2 header names the source (the seed's isthmus proxies).
    pub trusted_proxies: Vec<Cidr>,
    /// Agent sessions at once; more are closed after their handshake.
    pub max_sessions: usize,
    /// Time a session has from the end of its TLS handshake until it is verified (HTTP/2
    /// handshake and the first probe's round trip); then it is closed.
    pub setup_timeout: Duration,
    /// The CONNECT front's HTTP limits (its header timeout also bounds its TLS handshake).
    pub connect: HttpLimits,
    /// `isthmus_tunnel_refused_total{listener, reason}`; the TLS configs built by
    /// [`ServerOptions::from_config`] count refused client names into it.
    pub refused: Family<RefusedLabels, Counter>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(5),
            max_handshakes: 256,
            max_handshakes_per_source: 8,
            trusted_proxies: Vec::new(),
            max_sessions: 16,
            setup_timeout: Duration::from_secs(10),
            connect: HttpLimits::default(),
            refused: Family::default(),
        }
    }
}

impl ServerLimits {
    pub(crate) fn refuse(&self, listener: &'static str, reason: &'static str) {
        self.refused
            .get_or_create(&RefusedLabels { listener, reason })
            .inc();
    }
}

impl ServerOptions {
    /// Reads the TLS files named in `c`, and logs what `c` leaves open
    /// ([`TunnelServerConfig::warnings`]).
    pub fn from_config(c: &TunnelServerConfig) -> Result<Self, Error> {
        for w in c.warnings() {
            tracing::warn!("{w}");
        }
        let limits = ServerLimits {
            handshake_timeout: c.agents.handshake_timeout.get(),
            max_handshakes: c.agents.max_handshakes,
            max_handshakes_per_source: c.agents.max_handshakes_per_source,
            trusted_proxies: c.agents.trusted_proxies.clone(),
            max_sessions: c.agents.max_sessions,
            setup_timeout: c.agents.setup_timeout.get(),
            connect: c.connect.limits,
            refused: Family::default(),
        };
        let (agents_tls, connect_tls) = reload::build(c, &limits.refused)?;
        Ok(Self {
            agents_tls,
            connect_tls,
            http2: c.http2.clone(),
            connect_timeout: c.connect_timeout.get(),
            session_wait: c.session_wait.get(),
            drain_timeout: c.drain_timeout.get(),
            probe_interval: c.http2.keepalive_interval.get(),
            limits,
        })
    }
}

/// Where the CONNECT endpoint listens.
#[derive(Debug)]
pub enum ConnectListener {
    /// TCP, with TLS if [`ServerOptions::connect_tls`] is set.
    Tcp(TcpListener),
    /// A Unix socket, plain HTTP.
    Unix(UnixListener),
}

impl ConnectListener {
    /// Binds what `c` names: its TCP `address`, or its `unix` socket, re-created with mode
    /// 0600 (bound under a temporary name, restricted, then renamed into place, so that it is
    /// never reachable with wider permissions). Validation has refused plain TCP beyond
    /// loopback.
    pub async fn bind(c: &ConnectListenerConfig) -> Result<Self, Error> {
        match (&c.address, &c.unix) {
            (Some(a), _) => TcpListener::bind(a)
                .await
                .map(ConnectListener::Tcp)
                .map_err(|e| Error::io(format!("bind CONNECT {a}"), e)),
            (None, Some(path)) => bind_unix(path).map(ConnectListener::Unix),
            (None, None) => Err(Error::io(
                "CONNECT listener",
                std::io::Error::other("set address or unix"),
            )),
        }
    }
}

fn bind_unix(path: &Path) -> Result<UnixListener, Error> {
    use std::os::unix::fs::PermissionsExt;
    let what = |e| Error::io(format!("bind CONNECT {}", path.display()), e);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(what)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(what)?;
    std::fs::rename(&tmp, path).map_err(what)?;
    Ok(listener)
}

/// State shared by the server's tasks.
pub(crate) struct Shared {
    pub(crate) sessions: sessions::Sessions,
    pub(crate) metrics: Metrics,
    /// The TLS of the next handshakes (replaced by [`Server::reload_tls`]).
    pub(crate) tls: reload::TlsNow,
    /// Log lines of refusals a stranger can cause, at most one per reason and interval.
    pub(crate) ratelog: RateLog,
    pub(crate) http2: h2::client::Builder,
    pub(crate) keepalive: http2::Keepalive,
    pub(crate) connect_timeout: Duration,
    pub(crate) session_wait: Duration,
    pub(crate) probe_interval: Duration,
    /// Cancelled when the server stops for good: sessions and streams are dropped.
    pub(crate) shutdown: CancellationToken,
    pub(crate) limits: ServerLimits,
    /// Agent connections before the end of their TLS handshake.
    pub(crate) slots: Arc<slots::Slots>,
    /// Sessions past their handshake.
    pub(crate) sessions_open: Arc<AtomicUsize>,
    /// The CONNECT front's HTTP/1 limits.
    pub(crate) connect_gate: Arc<Gate>,
}

/// Counts one in an `AtomicUsize` while alive.
pub(crate) struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// Counts one more unless `max` are counted already.
    pub(crate) fn try_new(n: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v < max).then_some(v + 1)
        })
        .ok()
        .map(|_| Counted(n.clone()))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A tunnel server. Cheap to clone; all clones are the same server.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
    opts: ServerOptions,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("live_sessions", &self.live_sessions())
            .finish()
    }
}

impl Server {
    /// Creates a server whose metrics go into `registry`.
    pub fn new(opts: ServerOptions, registry: &mut Registry) -> Self {
        let shared = Arc::new(Shared {
            sessions: sessions::Sessions::default(),
            metrics: Metrics::new(registry),
            tls: reload::TlsNow::new(opts.agents_tls.clone(), opts.connect_tls.clone()),
            ratelog: RateLog::default(),
            http2: http2::client(&opts.http2),
            keepalive: http2::Keepalive::new(&opts.http2),
            connect_timeout: opts.connect_timeout,
            session_wait: opts.session_wait,
            probe_interval: opts.probe_interval,
            shutdown: CancellationToken::new(),
            limits: opts.limits.clone(),
            slots: slots::Slots::new(
                opts.limits.max_handshakes,
                opts.limits.max_handshakes_per_source,
            ),
            sessions_open: Arc::default(),
            connect_gate: Gate::new(opts.limits.connect),
        });
        let r = registry.sub_registry_with_prefix("isthmus_tunnel");
        r.register(
            "refused",
            "Connections refused by listener (agents, connect) and reason (client_name, \
             evicted, proxy_protocol, untrusted_proxy_header, too_many_sessions, \
             setup_timeout)",
            opts.limits.refused.clone(),
        );
        Self { shared, opts }
    }

    /// Sessions that take new streams; the server is ready when this is ≥ 1.
    pub fn live_sessions(&self) -> usize {
        self.shared.sessions.live()
    }

    /// Streams open over all sessions.
    pub fn streams_in_flight(&self) -> usize {
        self.shared.sessions.streams()
    }

    /// Stops sending new streams to the current sessions (they finish their open ones);
    /// sessions that connect afterwards are used as usual.
    pub fn drain_sessions(&self) {
        self.shared.sessions.drain_all();
    }

    /// Runs until `shutdown` is cancelled, then stops accepting, drains the sessions, waits
    /// up to the drain timeout for open streams, and drops everything. Bind `agents` with
    /// `TCP_DEFER_ACCEPT` (the binary uses `isthmus_proxy::bind_deferred`): a connection that
    /// sends nothing then waits in the kernel instead of taking a handshake slot.
    pub async fn run(
        &self,
        agents: TcpListener,
        connect: ConnectListener,
        shutdown: CancellationToken,
    ) {
        let stop_accepting = CancellationToken::new();
        let a = tokio::spawn(accept_agents(
            self.shared.clone(),
            agents,
            stop_accepting.clone(),
        ));
        let c = tokio::spawn(accept_connect(
            self.shared.clone(),
            connect,
            stop_accepting.clone(),
        ));
        shutdown.cancelled().await;
        stop_accepting.cancel();
        let _ = tokio::join!(a, c);
        self.drain_sessions();
        let ended = self.shared.sessions.all_streams_ended();
        let _ = tokio::time::timeout(self.opts.drain_timeout, ended).await;
        tracing::info!(left = self.streams_in_flight(), "tunnel server stopped");
        self.shared.shutdown.cancel();
    }
}

async fn backoff(e: &std::io::Error) {
    tracing::warn!(error = %e, "accept failed");
    isthmus_admin::backoff::after_accept_error(e).await;
}

async fn accept_agents(shared: Arc<Shared>, listener: TcpListener, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                // Admission (a handshake slot, taken from an older handshake if need be)
                // happens in the session's task: accepting never waits for a peer.
                Ok((tcp, peer)) => { tokio::spawn(session::run(shared.clone(), tcp, peer)); }
                Err(e) => backoff(&e).await,
            },
        }
    }
}

async fn accept_connect(shared: Arc<Shared>, listener: ConnectListener, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            // The TLS of the moment: a reload applies to the next client.
            r = accept_one(&listener, || shared.tls.connect().map(TlsAcceptor::from)) => match r {
                Ok(conn) => {
                    let shared = shared.clone();
                    // The slot covers the TLS handshake and the request; an upgraded tunnel
                    // runs in its own task and no longer holds it.
                    let admission = shared.connect_gate.admit();
                    tokio::spawn(async move {
                        let kill = shared.shutdown.clone();
                        let evicted = shared.clone();
                        tokio::select! {
                            _ = kill.cancelled() => {},
                            done = admission.run(conn.serve(shared)) => if done.is_none() {
                                evicted.limits.refuse("connect", "evicted");
                            },
                        }
                    });
                }
                Err(e) => backoff(&e).await,
            },
        }
    }
}

/// An accepted CONNECT client before its (optional) TLS handshake.
enum Accepted {
    Tcp(tokio::net::TcpStream, Option<TlsAcceptor>),
    Unix(tokio::net::UnixStream),
}

async fn accept_one(
    l: &ConnectListener,
    tls: impl FnOnce() -> Option<TlsAcceptor>,
) -> std::io::Result<Accepted> {
    Ok(match l {
        ConnectListener::Tcp(l) => {
            let (s, _) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Accepted::Tcp(s, tls())
        }
        ConnectListener::Unix(l) => Accepted::Unix(l.accept().await?.0),
    })
}

impl Accepted {
    async fn serve(self, shared: Arc<Shared>) {
        match self {
            Accepted::Unix(s) => connect::serve(shared, s).await,
            Accepted::Tcp(s, None) => connect::serve(shared, s).await,
            Accepted::Tcp(s, Some(acceptor)) => {
                let timeout = shared.limits.connect.header_read_timeout.get();
                match tokio::time::timeout(timeout, acceptor.accept(s)).await {
                    Ok(Ok(tls)) => connect::serve(shared, TlsStream::from(tls)).await,
                    Ok(Err(e)) => tracing::info!(error = %e, "CONNECT client TLS handshake failed"),
                    Err(_) => tracing::info!("CONNECT client TLS handshake timed out"),
                }
            }
        }
    }
}
