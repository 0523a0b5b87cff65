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

/// etcd-druid's parts that cannot run here.
pub mod druid;
/// A real etcd cluster whose members advertise the planner's names.
pub mod etcd;
/// A seed: its API server, its objects, the DNS provider, the proxy pods, the controller.
pub mod seed;
