//! Piping a tunnelled connection's bytes both ways.

use crate::metrics::Metrics;
use tokio::io::{AsyncRead, AsyncWrite};

/// Copies both ways until both directions are closed (a half-close is forwarded as one),
/// then adds the byte counts. `a` is the side facing kube-apiserver, `b` the target's side.
pub(crate) async fn pipe<A, B>(mut a: A, mut b: B, metrics: &Metrics)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::io::copy_bidirectional(&mut a, &mut b).await {
        Ok((to_target, from_target)) => metrics.add_bytes(to_target, from_target),
        // A reset on either side ends the stream; the bytes already moved are not counted
        // because copy_bidirectional does not report them on error.
        Err(e) => tracing::debug!(error = %e, "stream ended with an error"),
    }
}
