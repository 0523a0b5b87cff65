//! Configuration of isthmus: the schema of every component's file, reading it (YAML written
//! by people, JSON written by the controller) and validating it.
//!
//! What this crate is for: turning a file into a typed, fully validated value, or into a list
//! of *every* problem in it, each naming the file, line, column and field path
//! (`proxy.yaml:7:19: listeners[1].routes[0].upstream: no upstream named "etcd-main-9"`).
//! Values with a syntax of their own (SNI patterns, endpoints, CIDRs, durations) are parsed
//! into their own types while the file is read, once. What it must never do: I/O beyond
//! reading the one file it is asked to read, networking, accepting a file it did not fully
//! understand (unknown keys are errors), or recursing as deep as a file nests (a YAML file's
//! nesting is counted before any tree is built, see [`depth`]).
//!
//! # One reader per kind of file
//! - **JSON** (`*.json`): the routes file the controller renders from these same types with
//!   `serde_json`. Read by `serde_json` straight into the types, no tree in between; the
//!   field path of an error comes from `serde_path_to_error`.
//! - **YAML** (anything else): `marked-yaml`, built on the maintained `yaml-rust2` parser
//!   (`serde_yaml` is deprecated), keeps a position on every node and deserialises straight
//!   from those nodes with `serde_path_to_error` paths, so one parse gives both the field path
//!   of an error and its line and column, also for semantic errors found afterwards. It is
//!   pure Rust and small. Its one quirk: every scalar is text, so YAML `null` is not special;
//!   [`nullable`] maps `null`/`~`/empty to `None` where the schema allows null. Before the
//!   tree is built, yaml-rust2's own events count the nesting ([`depth`]).

#![forbid(unsafe_code)]

mod allow;
pub mod cidr;
mod defaults;
pub mod depth;
mod duration;
mod endpoint;
mod error;
mod json;
mod keepalive;
mod listener;
mod load;
mod marked;
pub mod nullable;
pub mod ports;
mod proxy;
mod schema;
mod sni;
mod text;
pub mod tunnel;
mod upstream;
mod validate;
mod yaml;

pub use cidr::Cidr;
pub use duration::{parse_flag as parse_duration_flag, Duration};
pub use endpoint::Endpoint;
pub use error::{ConfigError, ConfigErrors, LoadError};
pub use keepalive::KeepaliveConfig;
pub use listener::{ListenerConfig, ListenerKind, ProxyProtocolMode, RouteConfig};
pub use load::{hash_bytes, load_file, load_proxy_file, parse, parse_proxy, Loaded};
pub use proxy::{AdminConfig, HttpLimits, ProxyConfig, ResolverConfig, UnlistedSources};
pub use schema::{Lists, Schema};
pub use sni::SniPattern;
pub use tunnel::{
    AgentTlsConfig, AgentsListenerConfig, AllowRule, ConnectListenerConfig, Http2Config,
    ServerEntryConfig, ServerTlsConfig, TunnelAgentConfig, TunnelServerConfig,
};
pub use upstream::{LoadBalancing, OutlierDetection, SendProxyProtocol, UpstreamConfig};
