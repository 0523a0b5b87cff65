//! Test support for isthmus: an rcgen PKI, rustls client/server builders, TLS echo upstreams,
//! scratch directories, polling with deadlines, processes whose log is kept ([`Logged`]), the
//! one metric scraper ([`metric`]), the one seeded random source ([`Rng`]), a real
//! kube-apiserver ([`kube`]), the flags every kube-apiserver of the project starts with
//! ([`flags`]) and Gardener's own etcd deploy ([`gardener`]). Each helper the lab needs too has a
//! fallible twin (`try_*`, `Result`) next to the panicking one the tests use.
//!
//! What it is for: letting every test use *real* TLS on real loopback sockets with a few lines.
//! What it must never do: be a dependency of anything but tests, benchmarks and the lab, or hide a
//! failure (every helper panics with a message that says what it was waiting for).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Where the one-time builds (Kubernetes, etcd, the upstream CRDs) live.
pub mod cache;
mod metrics;
mod pki;
mod poll;
mod rng;
mod scratch;
mod tls;

pub use metrics::metric;
pub use pki::{CertKey, TestPki};
pub use poll::{percentile, wait_until};
pub use rng::Rng;
pub use scratch::Scratch;
pub use tls::{client_config, server_config, tls_connect, tls_connect_from, TlsEchoServer};

mod http;
pub use http::{http_get, wait_draining, wait_ready};

mod netns;
pub use netns::Netns;

mod process;
pub use process::{free_port, Logged};

mod kubelet_stop;
pub use kubelet_stop::stop_like_kubelet;

/// A thread's scheduling policy (`/proc`).
pub mod sched;

mod rss;
pub use rss::rss_kib;

/// OpenVPN's arguments as Gardener's VPN runs it (the OpenVPN test and the tunnels bench).
pub mod openvpn;

/// A userspace link with a round-trip time that can be cut (the lab's and the tunnel's).
pub mod link;

/// Server-side apply of one manifest, as an installer does it.
pub mod apply;
/// A real kube-apiserver (the pinned build) on a real etcd, with clients for an admin and for
/// ServiceAccounts under RBAC.
pub mod kube;
pub use kube::{etcd_spec, minimal_etcd, KubeApiServer};

/// The flags every kube-apiserver of the project starts with (testkit's and the lab's).
pub mod flags;
pub use flags::{ApiServerAuth, ApiServerFlags};

/// gardenlet's install path of a seed extension (the `gardenlet-install` harness, Gardener
/// v1.149.3), the real gardener-resource-manager that applies it, and the
/// kube-controller-manager controllers an uninstall needs without a node.
pub mod controller_manager;
/// Gardener's own etcd deploy, secrets manager and health checks (the `gardener-etcd`
/// harness, Gardener v1.149.3), and its etcd client Secrets' shape.
pub mod gardener;
pub mod gardenlet;
/// The commands of the Gardener harness module both wrap.
mod go_harness;
pub mod resource_manager;
/// The fast and the full tier: the guard of every helper that needs root or a one-time build.
pub mod tier;

/// A real Prometheus for the monitoring tests.
pub mod prometheus;
/// The pinned helm and Prometheus builds, and the seed CRDs the chart uses.
pub mod tools;
pub use prometheus::Prometheus;
