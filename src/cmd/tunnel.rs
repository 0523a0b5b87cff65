//! `isthmus tunnel-server --config FILE` and `isthmus tunnel-agent --config FILE`.

use anyhow::Context;
use isthmus_config::{load_file, TunnelAgentConfig, TunnelServerConfig};
use isthmus_tunnel::agent::{Agent, AgentOptions};
use isthmus_tunnel::server::{ConnectListener, Server, ServerOptions};
use prometheus_client::registry::Registry;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Flags of `tunnel-server` and `tunnel-agent`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Signals: SIGTERM/SIGINT drain (stop accepting, open streams finish up to \
drain_timeout). tunnel-server: SIGHUP re-reads agents.tls and connect.tls for the handshakes that \
follow (the file and the TLS files it names are also watched: watch_interval); sessions up stay."
)]
pub struct Args {
    /// The configuration file (YAML).
    #[arg(long, short = 'c')]
    pub config: PathBuf,
    /// Worker threads [default: one per CPU the process may use]. With 1, a tunnelled GB costs
    /// 13–20 % less CPU (no wake-ups across threads), but calls made beside a bulk stream wait
    /// for it (on 2 cores ~6 ms more at p50), and on a busy node one stream was slower
    /// (measured; see tunnel/README.md): for nodes whose cores many tunnels share.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
}

fn runtime(threads: Option<u16>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        b.worker_threads(usize::from(n));
    }
    Ok(b.enable_all().build()?)
}

/// Cancels the token on SIGTERM or SIGINT.
async fn signals(token: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down: draining");
    token.cancel();
    Ok(())
}

pub fn run_server(args: Args) -> anyhow::Result<ExitCode> {
    let config = load_file::<TunnelServerConfig>(&args.config)?.config;
    let opts = ServerOptions::from_config(&config)?;
    runtime(args.threads)?.block_on(async move {
        let mut registry = Registry::default();
        let server = Server::new(opts, &mut registry);
        // TCP_DEFER_ACCEPT: a connection that sends nothing takes no handshake slot.
        let agents = isthmus_proxy::bind_deferred(
            config.agents.address,
            config.agents.handshake_timeout.get(),
        )
        .and_then(tokio::net::TcpListener::from_std)
        .with_context(|| format!("bind agents {}", config.agents.address))?;
        let connect = ConnectListener::bind(&config.connect).await?;
        // New certificates without a restart: a change to the file or a TLS file it names,
        // or SIGHUP (tunnel/README.md).
        let watch = CancellationToken::new();
        tokio::spawn({
            let (server, path, stop) = (server.clone(), args.config.clone(), watch.clone());
            let interval = config.watch_interval.get();
            async move { server.watch_tls(path, interval, stop).await }
        });
        tokio::spawn(hangups(server.clone(), args.config.clone(), watch.clone()));
        let ready_server = server.clone();
        let shutdown = serve_admin(&config.admin, registry, move || {
            ready_server.live_sessions() > 0
        })
        .await?;
        // The bound address, not the file's: with port 0 this is how a caller finds it.
        let bound = agents.local_addr().unwrap_or(config.agents.address);
        tracing::info!(agents = %bound, "tunnel server running");
        server.run(agents, connect, shutdown).await;
        watch.cancel();
        Ok(ExitCode::SUCCESS)
    })
}

/// Re-reads the TLS files on every SIGHUP until `stop` (errors are logged and counted).
async fn hangups(server: Server, path: PathBuf, stop: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading TLS");
                let _ = server.reload_tls(&path);
            }
        }
    }
}

pub fn run_agent(args: Args) -> anyhow::Result<ExitCode> {
    let config = load_file::<TunnelAgentConfig>(&args.config)?.config;
    let opts = AgentOptions::from_config(&config)?;
    runtime(args.threads)?.block_on(async move {
        let mut registry = Registry::default();
        let agent = Agent::new(opts, &mut registry);
        let ready_agent = agent.clone();
        let shutdown = serve_admin(&config.admin, registry, move || {
            ready_agent.live_sessions() > 0
        })
        .await?;
        tracing::info!(servers = config.servers.len(), "tunnel agent running");
        agent.run(shutdown).await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Binds the admin endpoint (ready while `ready` says so), installs the signal handlers, and
/// returns the token that SIGTERM/SIGINT cancel. The admin endpoint answers until the process
/// exits, through the drain: a liveness probe must not fail while open streams finish.
async fn serve_admin(
    config: &isthmus_config::AdminConfig,
    registry: Registry,
    ready: impl Fn() -> bool + Send + Sync + 'static,
) -> anyhow::Result<CancellationToken> {
    let address = config.address;
    let admin = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("bind admin {address}"))?;
    let shutdown = CancellationToken::new();
    tokio::spawn(isthmus_tunnel::admin::serve_with_limits(
        admin,
        Arc::new(registry),
        Arc::new(ready),
        config.limits,
        CancellationToken::new(),
    ));
    tokio::spawn(signals(shutdown.clone()));
    Ok(shutdown)
}
