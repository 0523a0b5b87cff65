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
//!
//! # The path of a connection, file by file
//! 1. `listen.rs`: one `Listener` per listening socket and worker, its accept loop; the
//!    global cap. The accepted socket stays out of the runtime's epoll unless the intake must
//!    wait for its bytes (`intake/down.rs`).
//! 2. `conn.rs`: one connection's task, a `Handler` (defined in `intake.rs`), the steps below
//!    in order (`Handler::run`).
//! 3. `intake.rs` (`Handler::admit`): admission (`sources.rs`: per-source caps and pending
//!    slots), then the PROXY header (crate `isthmus-proxy-protocol`) and the ClientHello
//!    (`intake/hello.rs` over `client_hello.rs`, pure parsers) or CONNECT request
//!    (`http_connect.rs`), read (`intake/down.rs`) under one deadline into one buffer; the
//!    route looked up (`routes.rs`) in the current snapshot and its allow-list checked
//!    (`admits.rs`); a refusal and what its client is told in `intake/reject.rs`.
//! 4. `forward.rs` (`Handler::forward`): the upstream's first flight, the connection under its
//!    policy (`upstream.rs`; endpoints, balancing and ejection in `pool.rs`, names in
//!    `dns.rs`).
//! 5. `splice.rs` (`splice/`): the worker's splicer, on a thread of its own, moves the bytes
//!    both ways until both directions are over: the handle and hand-over (`splice.rs`,
//!    `splice/pair.rs`), the loop (`splice/thread.rs`, `splice/state.rs`), one connection's
//!    state (`splice/conn.rs`) and its I/O (`splice/turn.rs`, `splice/flow.rs`), and every
//!    scheduling and busy-poll threshold in one value (`splice/tuning.rs`).
//!
//! Beside the path: `socket.rs` (every bind and socket option), `sys.rs` (the only `unsafe`:
//! pipes, splice(2), epoll registration of the listening sockets,
//! `TCP_DEFER_ACCEPT`), `snapshot.rs` (one compiled
//! configuration), `server.rs` (the running proxy; `server/start.rs` start and drain,
//! `server/reload.rs` reload as parse/guard/bind/compile/swap and the file watch; the guard
//! against files that would empty the proxy in `guard.rs`), `admin.rs`
//! (the admin endpoint, on `isthmus-admin`), `metrics.rs` (log lines under attack through `isthmus_admin::ratelog`), `fds.rs`, `supervise.rs`.

// `deny` rather than `forbid` so that `sys` alone can allow it (the system calls nothing safe
// wraps: pipes, splice(2), the listeners' epoll registration,
// TCP_DEFER_ACCEPT).
#![deny(unsafe_code)]

mod admin;
mod admits;
pub mod client_hello;
mod conn;
mod dns;
pub mod fds;
mod forward;
mod guard;
// The hardened HTTP/1 server lives in `isthmus-admin`; `server.rs` names it `crate::http1`.
use isthmus_admin::http1;
pub mod http_connect;
mod intake;
mod listen;
pub mod metrics;
mod pool;
/// The PROXY protocol header (its own crate: the tunnel server reads it too).
pub use isthmus_proxy_protocol as proxy_protocol;

pub mod routes;
pub mod sched;
mod server;
mod snapshot;
mod socket;
mod sources;
mod splice;
pub mod supervise;
mod sys;
mod upstream;

pub use admin::AdminState;
pub use server::{ConnectionThreads, Proxy, ReloadError, Reloaded, StartError};
pub use socket::bind_deferred;
pub use splice::BusyPoll;
