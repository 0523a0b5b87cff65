//! One seed's `EtcdMigration` as the lab keeps it: the spec the orchestrator sets and what the
//! planner observes of the objects it stands for. The planner-driven runs plan from it; the
//! controller-driven runs keep in it what gardenlet set and what the stand-ins saw last.

use crate::clock;
use crate::side::Side;
use crate::specs::{self, NAMESPACE};
use crate::topology::Topology;
use isthmus_controller::crd::{EtcdMigrationSpec, Step};
use isthmus_controller::plan::{EtcdFields, EtcdObs, Observed};

/// One seed's migration: spec and observed world.
#[derive(Debug, Clone)]
pub struct Migration {
    pub spec: EtcdMigrationSpec,
    pub obs: Observed,
}

impl Migration {
    /// `side`'s migration at `Expose`, nothing applied yet; on the source, gardenlet's `Etcd`
    /// as it is before any migration (3 replicas, none of isthmus' fields).
    pub fn new(side: Side, topo: &Topology) -> Self {
        let etcd = (side == Side::Source).then(|| EtcdObs {
            generation: 1,
            observed_generation: Some(1),
            ready: Some(true),
            all_members_updated: Some(true),
            fields: EtcdFields {
                replicas: Some(3),
                ..Default::default()
            },
            ..Default::default()
        });
        Self {
            spec: specs::spec(side, Step::Expose),
            obs: Observed {
                namespace: NAMESPACE.into(),
                now: clock::now(),
                generation: Some(1),
                // The seed's proxy as reached from the host namespace.
                lb_address: Some(topo.seed(side).seed_ip.to_string()),
                etcd,
                ..Observed::default()
            },
        }
    }

    /// Both seeds' migrations, source first.
    pub fn both(topo: &Topology) -> [Self; 2] {
        Side::BOTH.map(|side| Self::new(side, topo))
    }
}
