//! `isthmus-lab link`: the lab's link emulator between the real seeds of `scripts/cluster.sh`
//! (issue 45). It runs in the namespace that joins the seeds' outside networks (`isthmus-link`,
//! plumbed by `scripts/cluster/link.sh`), where nftables redirects every TCP connection from
//! one seed to another to one transparent relay of [`crate::link::Link`]: each connection is
//! carried to the address it was dialled with, half the round-trip time added to each
//! direction's data, as between the demo's seeds. Like the demo's relays it terminates TCP, so
//! a connect returns at once and the delay shows from the first byte on (a TLS handshake takes
//! one RTT, each request another).
//!
//! Signals drive it: SIGUSR1 cuts the link (every relayed connection reset, new ones refused),
//! SIGUSR2 restores it, SIGTERM or SIGINT end it. It never routes: the namespace forwards
//! nothing, so what is not TCP does not cross.

use crate::error::{Error, Result};
use crate::link::Link;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Relays on `listen` at round-trip time `rtt` until SIGTERM or SIGINT.
pub async fn run(listen: SocketAddr, rtt: Duration) -> Result<()> {
    let link = Link::new(rtt);
    let bound = link
        .relay_redirected(listen)
        .await
        .map_err(|e| Error::io(format!("the link's relay on {listen}"), e))?;
    let (mut cut, mut restore) = (
        on(SignalKind::user_defined1())?,
        on(SignalKind::user_defined2())?,
    );
    let (mut term, mut int) = (on(SignalKind::terminate())?, on(SignalKind::interrupt())?);
    tracing::info!(%bound, ?rtt, "link up: relaying every redirected TCP connection");
    loop {
        tokio::select! {
            _ = cut.recv() => {
                link.cut();
                tracing::info!("link cut (SIGUSR1)");
            }
            _ = restore.recv() => {
                link.restore();
                tracing::info!(resets = link.resets(), "link restored (SIGUSR2)");
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!(resets = link.resets(), "link down");
    Ok(())
}

fn on(kind: SignalKind) -> Result<Signal> {
    signal(kind).map_err(|e| Error::io(format!("the link's handler of signal {kind:?}"), e))
}
