//! Forwarding a routed connection: its upstream's first flight (the PROXY header if asked,
//! then the buffered bytes), the connection under the upstream's policy (`upstream`), the
//! `200` of a CONNECT, then the pair handed to the worker's splicer.

use crate::http_connect;
use crate::intake::{Down, Handler, Intake};
use crate::proxy_protocol::{self, Addresses};
use crate::splice::{self, OpenGuards, Pair};
use crate::upstream::{self, Failure};
use isthmus_config::{ListenerKind, SendProxyProtocol};
use tokio::io::AsyncWriteExt;
use tracing::{debug, warn};

impl Handler {
    /// Connects the admitted connection to its route's upstream and hands the pair to the
    /// splicer; a connection that cannot be forwarded is counted, answered (CONNECT) and
    /// closed.
    pub async fn forward(&self, mut down: Down, intake: Intake) {
        let spec = &*self.spec;
        let Intake {
            route,
            client,
            replay,
            mut active,
        } = intake;
        let up_spec = &route.upstream;
        tracing::Span::current().record("upstream", up_spec.name.as_str());
        let counters = route.counters(&self.metrics);
        let connect = spec.kind == ListenerKind::HttpConnect;
        // The upstream's cap per client address, on the source's count of this listener.
        if let (Some(max), Some(source)) = (
            up_spec.policy.max_connections_per_source,
            active.source.as_mut(),
        ) {
            if !source.route(&up_spec.name, max) {
                counters.source_overflow.inc();
                debug!("the source has max_connections_per_source open to the upstream, closing");
                if let (true, Ok(down)) = (connect, down.registered()) {
                    let _ = down.write_all(&http_connect::response(503)).await;
                }
                return;
            }
        }
        // The upstream's first flight: the PROXY header if asked, then the buffered bytes.
        let mut first = match up_spec.policy.send_proxy_protocol {
            SendProxyProtocol::None => replay,
            version => {
                // The local address costs a system call: asked only when a header needs it.
                let client = client.unwrap_or_else(|| Addresses {
                    source: self.peer,
                    destination: down.local_addr().unwrap_or(self.peer),
                });
                // 107: the longest v1 line; the v2 headers written here are shorter.
                let mut head = Vec::with_capacity(107 + replay.len());
                if version == SendProxyProtocol::V1 {
                    proxy_protocol::encode_v1(&client, &mut head);
                } else {
                    proxy_protocol::encode_v2(&client, &mut head);
                }
                head.extend_from_slice(&replay);
                head
            }
        };
        let up = match upstream::connect(up_spec, &self.metrics, &first).await {
            Ok(c) => c,
            Err(e) => {
                match e {
                    Failure::Overflow(_) => counters.overflow.inc(),
                    Failure::Unavailable { .. } => counters.unavailable.inc(),
                };
                let source = client.map_or(self.peer, |c| c.source);
                if let Some(count) = self
                    .metrics
                    .warnings
                    .event(&up_spec.name, "no_upstream_connection")
                {
                    warn!(listener = %spec.name, client = %source, upstream = %up_spec.name,
                        error = %e, count, "no upstream connection, closing (at most one line per \
                        upstream every 10s; isthmus_proxy_connections_total counts each)");
                }
                if let (true, Ok(down)) = (connect, down.registered()) {
                    let _ = down.write_all(&http_connect::response(503)).await;
                }
                return;
            }
        };
        counters.forwarded.inc();
        counters.bytes_to_upstream.inc_by(up.sent as u64);
        first.drain(..up.sent.min(first.len()));
        if connect {
            let answered = match down.registered() {
                Ok(d) => d.write_all(&http_connect::response(200)).await,
                Err(e) => Err(e),
            };
            if answered.is_err() {
                return;
            }
        }
        debug!(addr = %up.addr, "spliced");
        let down = match down.into_std() {
            Ok(d) => d,
            Err(e) => return debug!(error = %e, "cannot take the client socket over"),
        };
        let policy = &up_spec.policy;
        let pair = Pair {
            down,
            up: up.stream,
            to_up: first,
            to_up_counter: counters.bytes_to_upstream.clone(),
            to_down_counter: counters.bytes_to_downstream.clone(),
            limits: splice::Limits {
                idle_timeout: policy.idle_timeout.map(|d| d.get()),
                max_duration: policy.max_connection_duration.map(|d| d.get()),
            },
            guards: OpenGuards::new(active, up.slot, self.tracker.token()),
            metrics: self.metrics.clone(),
            upstream: up_spec.name.as_str().into(),
            span: tracing::Span::current(),
            keepalive: policy.tcp_keepalive,
        };
        if let Err(e) = self.splicer.adopt(pair) {
            warn!(listener = %spec.name, error = %e, "cannot splice the connection, closing it");
        }
    }
}
