//! Configuration of isthmus: the YAML schema of every component, its validation and the
//! immutable snapshots that the proxy swaps on reload.
//!
//! What this crate is for: turning a file an operator wrote into a typed, fully validated value,
//! or into a list of *every* problem in it, each naming the file, line, column and field path
//! (`proxy.yaml:7:19: listeners[1].routes[0].upstream: no upstream named "etcd-main-9"`).
//! What it must never do: I/O beyond reading the one file it is asked to read, networking, or
//! accepting a file it did not fully understand (unknown keys are errors).
//!
//! # Why `marked-yaml`
//! `serde_yaml` is deprecated and unmaintained. We need two things from a YAML library: serde
//! deserialisation with the *field path* of an error, and the *source position* of every node so
//! that semantic errors found after deserialisation (a route naming an unknown upstream) can also
//! point at a line and column. `marked-yaml` (built on the maintained `yaml-rust2` parser) keeps a
//! span on every node and deserialises straight from those nodes with `serde_path_to_error`
//! paths, so one parse gives both. It is pure Rust (no `unsafe-libyaml` C translation) and small.
//! Its one quirk for us: every scalar is text, so YAML `null` is not special. [`nullable`] maps
//! `null`/`~`/empty to `None` where the schema allows null.
//!
//! Positions cost: building the marked tree took most of a 10k-route reload. A file is
//! therefore first read on a position-free fast path (`fast`, mirroring marked-yaml's
//! deserialiser exactly), and parsed the marked way only when that fails or validation finds a
//! problem. The fast path's tree comes from a hand-written scanner for the subset of YAML that
//! configuration files use (~10x faster than `yaml-rust2` on a 10k-route file), or, when the
//! scanner gives up, from `yaml-rust2`'s events; the scanner builds exactly the tree
//! `yaml-rust2` would, or gives up.

#![forbid(unsafe_code)]

mod allow;
pub mod cidr;
mod duration;
mod endpoint;
mod error;
mod fast;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use fast::scan_agrees_with_yaml_rust2;
#[cfg(test)]
mod fast_differential;
mod load;
pub mod nullable;
mod proxy;
pub mod tunnel;
pub mod validate;

pub use cidr::Cidr;
pub use duration::{parse_flag as parse_duration_flag, Duration};
pub use endpoint::Endpoint;
pub use error::{ConfigError, ConfigErrors, LoadError};
pub use load::{hash_bytes, load_file, load_proxy_file, parse, parse_proxy, Lists, Loaded, Schema};
pub use proxy::{
    AdminConfig, HttpLimits, KeepaliveConfig, ListenerConfig, ListenerKind, LoadBalancing,
    OutlierDetection, ProxyConfig, ProxyProtocolMode, ResolverConfig, RouteConfig,
    SendProxyProtocol, UpstreamConfig,
};
pub use tunnel::{
    AgentTlsConfig, AgentsListenerConfig, AllowRule, ConnectListenerConfig, Http2Config,
    ServerEntryConfig, ServerTlsConfig, TunnelAgentConfig, TunnelServerConfig,
};
