//! One downstream connection: read the ClientHello, route on its SNI, connect, replay the
//! buffered bytes unchanged, splice.

use crate::duplex;
use crate::hello::{self, Reject};
use crate::metrics::Metrics;
use crate::snapshot::{ListenerSpec, Route};
use crate::upstream;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, field, info_span, warn, Instrument};

/// Handles one accepted connection to completion. Never panics, never returns an error: every
/// outcome is counted and logged here.
pub async fn handle(
    down: TcpStream,
    peer: SocketAddr,
    spec: Arc<ListenerSpec>,
    metrics: Arc<Metrics>,
) {
    let span = info_span!("conn", listener = %spec.name, %peer, sni = field::Empty, upstream = field::Empty);
    async move {
        spec.active.inc();
        serve(down, &spec, &metrics).await;
        spec.active.dec();
    }
    .instrument(span)
    .await;
}

async fn serve(mut down: TcpStream, spec: &ListenerSpec, metrics: &Metrics) {
    let _ = down.set_nodelay(true);
    let mut hello = Vec::new();
    let sni = match hello::read_client_hello(
        &mut down,
        &mut hello,
        spec.max_hello_bytes,
        spec.hello_timeout,
    )
    .await
    {
        Ok(sni) => sni,
        Err(reason) => return reject(down, spec, metrics, reason).await,
    };
    let span = tracing::Span::current();
    if let Some(name) = &sni {
        span.record("sni", name.as_str());
    }
    let Some(route) = pick(spec, sni.as_deref()) else {
        let reason = if sni.is_some() {
            Reject::UnknownSni
        } else {
            Reject::NoSni
        };
        return reject(down, spec, metrics, reason).await;
    };
    span.record("upstream", route.upstream.name.as_str());
    let counters = route.counters(metrics);
    let (mut up, addr) = match upstream::connect(&route.upstream, metrics).await {
        Ok(c) => c,
        Err(e) => {
            counters.unavailable.inc();
            warn!(error = %e, "upstream unavailable, closing");
            return;
        }
    };
    counters.forwarded.inc();
    if let Err(e) = up.write_all(&hello).await {
        debug!(error = %e, %addr, "upstream closed before the ClientHello was replayed");
        return;
    }
    counters.bytes_to_upstream.inc_by(hello.len() as u64);
    drop(hello);
    debug!(%addr, "spliced");
    let limits = duplex::Limits::default();
    match duplex::splice(
        &down,
        &up,
        &counters.bytes_to_upstream,
        &counters.bytes_to_downstream,
        limits,
    )
    .await
    {
        Ok((t, end)) => debug!(
            up = t.downstream_to_upstream,
            down = t.upstream_to_downstream,
            ?end,
            "closed"
        ),
        Err(e) => debug!(error = %e, "closed with error"),
    }
}

fn pick<'a>(spec: &'a ListenerSpec, sni: Option<&str>) -> Option<&'a Arc<Route>> {
    sni.and_then(|n| spec.routes.find(n))
        .or(spec.default_route.as_ref())
}

async fn reject(mut down: TcpStream, spec: &ListenerSpec, metrics: &Metrics, reason: Reject) {
    metrics.reject(&spec.name, reason.as_str());
    debug!(reason = reason.as_str(), "rejected");
    if let (true, Some(alert)) = (spec.reject_with_alert, reason.alert()) {
        let _ = down.write_all(&hello::alert_record(alert)).await;
        let _ = down.shutdown().await;
    }
}
