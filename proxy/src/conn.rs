//! One connection's path, step by step (each step is its own module):
//! `listen` accepts it, `intake` admits it and reads its PROXY header and ClientHello (or
//! CONNECT request) under one deadline into one buffer and routes it (`routes`), `forward`
//! connects to the route's upstream (`upstream`, `pool`, `dns`) and hands the pair to the
//! worker's splicer (`splice`), which holds it until it closes. The connection's task is its
//! [`Handler`], made by the accept loop's `Listener` (`listen`).

use crate::intake::{Down, Handler, Reject};
use crate::sources::ActiveGuard;
use tracing::{debug_span, field, Instrument};

impl Handler {
    /// Handles the accepted connection `down` to completion, counted open by `active` from
    /// its accept on; `refuse`: a cap was reached, the connection is closed at once and
    /// counted. Never panics, never returns an error: every outcome is counted and logged.
    ///
    /// Not an `async fn`: that would hold the instrumented future *and* the block it wraps in
    /// its own state, doubling what every open connection's task holds.
    pub fn run(
        self,
        down: std::net::TcpStream,
        active: ActiveGuard,
        refuse: Option<Reject>,
    ) -> impl std::future::Future<Output = ()> + Send {
        // A debug span, not info: with the default `info` filter an enabled span costs every
        // connection its formatted fields and a registry slot (~0.45 KiB held while it lives,
        // and the formatting on the accept path). Events at info and above carry their
        // context as fields instead.
        let (listener, peer) = (&self.spec.name, self.peer);
        let span = debug_span!("conn", %listener, %peer, client = field::Empty, sni = field::Empty, upstream = field::Empty);
        async move {
            let down = Down::new(down);
            if let Some(reason) = refuse {
                self.reject(down, reason).await;
                return;
            }
            let Some((down, intake)) = self.admit(down, active).await else {
                return;
            };
            self.forward(down, intake).await;
        }
        .instrument(span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::splice::Splicer;
    use std::sync::Arc;
    use tokio_util::task::TaskTracker;

    /// The intake task lives only until the pair is handed to the splicer; its size is what
    /// each connection costs while its ClientHello is read and its upstream connected. The
    /// bound holds in debug builds too (what CI runs): 1344 bytes there, 1312 in release.
    #[tokio::test]
    async fn intake_task_size() {
        let yaml = "listeners:\n  - { name: l, address: \"127.0.0.1:0\" }\n";
        let config = isthmus_config::parse_proxy("t.yaml", yaml).unwrap();
        let metrics = Arc::new(Metrics::register(&mut Default::default()));
        let dns = crate::dns::Dns::new(&config.resolver, metrics.clone()).unwrap();
        let snapshot =
            crate::snapshot::Snapshot::compile(config, String::new(), &metrics, &dns, None);
        let spec = snapshot.listeners["l"].clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = std::net::TcpStream::connect(addr).unwrap();
        let active = ActiveGuard::new(spec.active.clone());
        let handler = Handler {
            spec,
            peer: addr,
            metrics,
            sources: Arc::default(),
            splicer: Splicer::start("splice-test".into(), Default::default(), Default::default())
                .unwrap(),
            tracker: TaskTracker::new(),
        };
        let task = handler.run(stream, active, None);
        let size = std::mem::size_of_val(&task);
        eprintln!("intake task future: {size} bytes");
        assert!(
            size <= 2048,
            "the intake future grew to {size} bytes: every connection still reading its \
             ClientHello holds it"
        );
    }
}
