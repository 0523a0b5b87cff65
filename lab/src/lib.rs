//! The isthmus live-migration lab: two seeds as network namespaces joined through a userspace
//! link emulator, each with its own isthmus proxy process and hosts-file DNS, a real etcd 3.4
//! cluster migrated from one to the other (3 → 5 → 6 → 3) while a kube-apiserver-like client
//! writes and reads, and a report (JSON + SVG) of what the client saw.
//!
//! The migration's script (`migrate`) is written once against a driver (`driver`): either the
//! controller's planner called as a library (`planner`), or the `isthmus controller` processes
//! of both seeds against their own kube-apiservers (`control`, `--controllers`). A run acts on
//! the world (`world`: processes, links) and notes what happened in the record (`record`),
//! which is all the report (`report`, `svg`) reads.
//!
//! What it is for: `isthmus-lab demo` (`src/main.rs`) and the end-to-end tests in `tests/lab.rs`;
//! `isthmus-lab link` (`seed_link`) joins the real seeds of `scripts/cluster.sh` the same way.
//! What it must never do: touch anything outside the namespaces, veth pairs, `/etc/netns/`
//! entries, nftables tables inside its namespaces and scratch directory it creates (all removed
//! on drop), or hide a failed invariant.

#![forbid(unsafe_code)]

pub mod api;
pub mod client;
pub mod clock;
pub mod control;
mod driver;
pub mod error;
/// The real etcd harness (the seed world's: the controller's tests run the same).
pub use isthmus_seed_world::etcd;
pub mod lab;
/// The userspace link (testkit's: the tunnel's tests and benches use the same).
pub use isthmus_testkit::link;
pub mod member;
pub mod migrate;
pub mod migration;
pub mod options;
pub mod pki;
pub mod planner;
pub mod proxy;
pub mod record;
pub mod report;
pub mod seed_link;
pub mod seeds;
pub mod side;
pub mod specs;
pub mod stats;
pub mod svg;
pub mod topology;
pub mod webhook;
pub mod world;

pub use error::{Error, Result};
pub use migrate::run;
pub use options::{Options, Scenario};
pub use report::Report;
