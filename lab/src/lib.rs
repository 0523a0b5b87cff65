//! The isthmus live-migration lab: two seeds as network namespaces joined through a userspace
//! link emulator, each with its own isthmus proxy process and hosts-file DNS, a real etcd 3.4
//! cluster migrated from one to the other (3 → 5 → 6 → 3) while a kube-apiserver-like client
//! writes and reads, and a report (JSON + SVG) of what the client saw. The migration is
//! driven either by the `isthmus controller` processes of both seeds against their own
//! kube-apiservers (`control`, `--controllers`) or by the controller's planner called as a
//! library (`drive`, `backend`).
//!
//! What it is for: `isthmus-lab demo` (`src/main.rs`) and the end-to-end tests in `tests/lab.rs`.
//! What it must never do: touch anything outside the namespaces, veth pairs, `/etc/netns/`
//! entries, nftables tables inside its namespaces and scratch directory it creates (all removed
//! on drop), or hide a failed invariant.

#![forbid(unsafe_code)]

pub mod api;
pub mod backend;
pub mod client;
pub mod control;
pub mod drive;
pub mod druid;
pub mod error;
pub mod etcd;
pub mod lab;
pub mod link;
pub mod migrate;
pub mod pki;
pub mod proxy;
pub mod report;
pub mod rolling;
pub mod seeds;
pub mod specs;
pub mod svg;
pub mod topology;
pub mod webhook;

pub use error::{Error, Result};
pub use migrate::{run, Options, Scenario};
pub use report::Report;
