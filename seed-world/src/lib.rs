//! The seed world that isthmus' controller tests and its lab run the controller against: what
//! a Gardener seed does around the controller that cannot run here, each part a small stand-in
//! named for what it replaces and acting only through the seed's API (and etcd's own API, as
//! etcd-druid's pods do), next to the real parts it drives (etcd, kube-apiserver).
//!
//! What it is for: `controller/tests` and `lab/` (one copy of each stand-in for both).
//! What it must never do: be a dependency of the `isthmus` binary or of a production crate
//! (`tests/cli.rs` checks the binary's tree), or stand in for something that runs here.

#![forbid(unsafe_code)]
// Test support moved from `controller/tests/common`: a panic is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The DNS provider's part.
pub mod dns;
/// etcd-druid's parts that cannot run here.
pub mod druid;
mod error;
/// A real etcd cluster, run as etcd-druid's pods would run it.
pub mod etcd;
/// gardenlet's part.
pub mod gardenlet;
/// Where the stand-ins note what they did.
pub mod journal;
/// The proxy pods' `/config/hash`.
pub mod proxy_pods;
/// A controller test's seed: its API server, the stand-ins, the controller.
pub mod seed;
/// What a seed has before any migration.
pub mod setup;
/// The Deployment controller with the kubelet, and the cloud provider's load balancers.
pub mod workloads;

pub use error::{Error, Result};
pub use journal::Journal;

/// The wall clock as RFC 3339, to the second: the times the stand-ins write into objects.
pub(crate) fn now() -> String {
    use k8s_openapi::jiff::Timestamp;
    let secs = Timestamp::now().as_second();
    Timestamp::from_second(secs).map_or_else(|_| String::new(), |t| t.to_string())
}
