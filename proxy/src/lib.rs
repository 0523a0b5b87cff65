//! The isthmus L4 SNI router.
//!
//! What it is for: accept TCP connections, read the TLS ClientHello into a capped buffer under
//! a deadline, route on its server name (exact before the longest `*.` wildcard), connect to
//! the route's upstream, replay the buffered bytes unchanged and splice both directions with
//! correct half-close; reload its routes from a file without touching established connections;
//! drain on shutdown; serve `/metrics`, `/healthz`, `/readyz` and `/config`.
//!
//! What it must never do: terminate, decrypt or alter TLS (etcd peer mTLS is end-to-end
//! between members); forward a connection it could not route (no SNI, unknown SNI without a
//! default, non-TLS, malformed, too large, too slow); close an established connection because
//! the configuration changed.

// `deny` rather than `forbid` so that `sys` alone can allow it (the system calls nothing safe
// wraps: pipes, splice(2), the splicer's epoll registration, TCP_DEFER_ACCEPT).
#![deny(unsafe_code)]

mod admin;
pub mod client_hello;
mod conn;
mod dns;
pub mod fds;
mod hello;
pub mod http1;
pub mod http_connect;
mod listen;
pub mod metrics;
mod pool;
pub mod proxy_protocol;
mod ratelog;
pub mod routes;
mod server;
mod snapshot;
mod sources;
mod splice;
pub mod supervise;
mod sys;
mod upstream;

pub use admin::AdminState;
pub use server::{Proxy, ReloadError, Reloaded, StartError, Workers};
