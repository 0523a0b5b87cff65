//! The server and the agent as the tests run them: spawned on the test's runtime with a
//! registry of their own, stopped by cancelling their token.

use super::DEADLINE;
use isthmus_testkit::wait_until;
use isthmus_tunnel::agent::{Agent, AgentOptions};
use isthmus_tunnel::server::{ConnectListener, Server, ServerOptions};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A spawned party: its metrics and how to stop it.
pub struct Running {
    registry: Registry,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn spawn<F>(registry: Registry, run: impl FnOnce(CancellationToken) -> F) -> Running
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(shutdown.clone()));
        Running {
            registry,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }

    fn metrics(&self) -> String {
        encode(&self.registry)
    }
}

pub struct TestServer {
    pub server: Server,
    pub agents: SocketAddr,
    pub connect: SocketAddr,
    running: Running,
}

impl TestServer {
    /// Starts a server; `agents`/`connect` may name fixed addresses (restart on same ports).
    pub async fn start(
        opts: ServerOptions,
        agents: Option<SocketAddr>,
        connect: Option<SocketAddr>,
    ) -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a = TcpListener::bind(agents.unwrap_or(any)).await.unwrap();
        let c = TcpListener::bind(connect.unwrap_or(any)).await.unwrap();
        let (agents, connect) = (a.local_addr().unwrap(), c.local_addr().unwrap());
        Self::start_with(opts, a, ConnectListener::Tcp(c), agents, connect)
    }

    /// Starts a server whose agents listener is bound as the binary binds it
    /// (`TCP_DEFER_ACCEPT`).
    pub async fn start_deferred(opts: ServerOptions) -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let agents = isthmus_proxy::bind_deferred(any, opts.limits.handshake_timeout).unwrap();
        let agents = TcpListener::from_std(agents).unwrap();
        let connect = TcpListener::bind(any).await.unwrap();
        let (a, c) = (agents.local_addr().unwrap(), connect.local_addr().unwrap());
        Self::start_with(opts, agents, ConnectListener::Tcp(connect), a, c)
    }

    pub fn start_with(
        opts: ServerOptions,
        a: TcpListener,
        c: ConnectListener,
        agents: SocketAddr,
        connect: SocketAddr,
    ) -> Self {
        let mut registry = Registry::default();
        let server = Server::new(opts, &mut registry);
        let s = server.clone();
        let running = Running::spawn(registry, |t| async move { s.run(a, c, t).await });
        Self {
            server,
            agents,
            connect,
            running,
        }
    }

    pub async fn stop(self) {
        self.running.stop().await
    }

    pub fn metrics(&self) -> String {
        self.running.metrics()
    }
}

pub struct TestAgent {
    pub agent: Agent,
    running: Running,
}

impl TestAgent {
    pub fn start(opts: AgentOptions) -> Self {
        let mut registry = Registry::default();
        let agent = Agent::new(opts, &mut registry);
        let a = agent.clone();
        let running = Running::spawn(registry, |t| async move { a.run(t).await });
        Self { agent, running }
    }

    pub async fn stop(self) {
        self.running.stop().await
    }

    pub fn metrics(&self) -> String {
        self.running.metrics()
    }

    /// Waits until the agent's `series` is at least `at_least`.
    pub async fn wait_metric(&self, what: &str, series: &str, at_least: f64) {
        wait_until(what, DEADLINE, || {
            let v = super::metric(&self.metrics(), series);
            async move { v >= at_least }
        })
        .await;
    }
}

pub fn encode(r: &Registry) -> String {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, r).unwrap();
    s
}

/// Waits until `server` has `n` live sessions.
pub async fn live(server: &Server, n: usize, what: &str) {
    wait_until(what, DEADLINE, || {
        let ok = server.live_sessions() == n;
        async move { ok }
    })
    .await;
}
