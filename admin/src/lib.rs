//! The admin and observability HTTP of every isthmus component (proxy, tunnel, controller),
//! and what every long-running component shares besides: the accept-error backoff, rate-limited
//! logs, the file watch.
//!
//! - [`http1`]: HTTP/1 servers no client can hold (header timeout, head size cap, a
//!   connection cap that closes the oldest connection; for the admin endpoints also a write
//!   deadline ([`deadline`]), a connection age and a small send buffer).
//! - [`routes`]: `/metrics` (OpenMetrics text), `/healthz`, `/readyz`, `/config`,
//!   `/config/hash`, with their content types; a component serves the ones it has. Large
//!   bodies are encoded one at a time and shared between the clients that hold them
//!   ([`bodies`]).
//! - [`backoff`]: what an accept loop does after `accept` failed.
//! - [`ratelog`]: at most one log line per key and interval under attack, with the count.
//! - [`watch`]: when a file read at start (configuration, certificates) was replaced.
//! - [`logging`]: the stderr subscriber of every binary (`--log-format text|json`).
//!
//! What it must never do: let any number of clients, however slow, keep `/readyz` from
//! answering or hold memory beyond the documented bound.

#![forbid(unsafe_code)]

pub mod backoff;
pub mod bodies;
pub mod deadline;
pub mod http1;
pub mod logging;
pub mod ratelog;
pub mod routes;
pub mod watch;

pub use routes::{serve, ConfigSource, Endpoints};
