//! What the etcd-druid stand-in remembers of one seed's `Etcd` between passes: the
//! generation it reconciles, what the members run, what it observed.

use isthmus_controller::plan::{EtcdFields, EtcdObs};
use std::collections::BTreeSet;
use std::time::Instant;

/// What the etcd-druid stand-in remembers of one seed's `Etcd` between passes (etcd-druid
/// keeps it in its work queue and the object's status).
#[derive(Debug, Default)]
pub struct DruidState {
    /// The generation being reconciled and its fields.
    pub(super) target: Option<(i64, EtcdFields)>,
    /// The fields last acted on: what the members run.
    pub(super) acted: Option<EtcdFields>,
    /// The last generation reconciled.
    pub(super) observed: Option<i64>,
    /// Every generation reconciled.
    pub(super) done: BTreeSet<i64>,
    pub(super) last_removal: Option<Instant>,
}

impl DruidState {
    /// A reconcile request (or the creation) for `e`'s generation: unless it is the target
    /// already, it becomes the target and its fields what the members run. Returns whether
    /// that generation had been reconciled before (a breach of the contract).
    pub(super) fn request(&mut self, e: &EtcdObs) -> bool {
        if self.target.as_ref().map(|t| t.0) == Some(e.generation) {
            return false;
        }
        let again = self.done.contains(&e.generation);
        self.target = Some((e.generation, e.fields.clone()));
        self.acted = Some(e.fields.clone());
        again
    }

    /// After a step: a target that needs no more (`busy` false) is reconciled, its generation
    /// observed. Returns that generation.
    pub(super) fn finish(&mut self, busy: bool) -> Option<i64> {
        let g = match (&self.target, busy) {
            (Some((g, _)), false) => *g,
            _ => return None,
        };
        self.observed = Some(g);
        self.done.insert(g);
        self.target = None;
        Some(g)
    }
}
