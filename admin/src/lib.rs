//! The admin and observability HTTP of every isthmus component (proxy, tunnel, controller),
//! and the one accept-error backoff of every accept loop.
//!
//! - [`http1`]: HTTP/1 servers no client can hold (header timeout, head size cap, a
//!   connection cap that closes the oldest connection).
//! - [`routes`]: `/metrics` (OpenMetrics text), `/healthz`, `/readyz`, `/config`, with their
//!   content types; a component serves the ones it has.
//! - [`backoff`]: what an accept loop does after `accept` failed.

#![forbid(unsafe_code)]

pub mod backoff;
pub mod http1;
pub mod routes;

pub use routes::{serve, Endpoints};
