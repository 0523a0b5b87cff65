//! What the planner observes of a seed before each pass, read from the world as the
//! controller reads it from the cluster: whether the proxy serves the routes the plan wants
//! (its `/config` hash), the `Etcd`'s members and ready replicas, and etcd's own member list
//! and leader (what the controller reads through the client exposure).

use super::Planner;
use crate::clock;
use crate::error::Result;
use crate::proxy;
use crate::side::Side;
use crate::world::World;
use isthmus_controller::plan;

impl Planner {
    /// Refreshes what the planner observes of `side`.
    pub(super) async fn observe(&mut self, world: &World, side: Side) -> Result<()> {
        let i = side.index();
        let m = &self.migrations[i];
        // The routes this pass's plan wants (they do not depend on the rollout itself).
        let wanted = plan::plan(&m.spec, &m.obs).routes;
        let file = proxy::render(side, world.seed(side), &wanted)?;
        let rolled_out = world.proxies[i].serving_hash().await.as_deref() == Some(&file.hash);
        let status = match m.obs.etcd {
            Some(_) => Some(world.etcd_status(side).await?),
            None => None,
        };
        let cluster = world.etcd.etcd_cluster().await;
        let m = &mut self.migrations[i];
        m.obs.now = clock::now();
        m.obs.served_routes = rolled_out.then_some(wanted);
        m.obs.etcd_cluster = cluster;
        if let (Some(e), Some((members, ready))) = (m.obs.etcd.as_mut(), status) {
            e.members = members;
            e.ready_replicas = ready;
            // The lab's druid stand-in reports the join once the destination's members vote
            // (etcd-druid writes `status.bootstrapWithExistingCluster` once, at that point).
            if side == Side::Destination && e.joined_at.is_none() && ready >= 2 {
                e.joined_at = Some(clock::now());
            }
        }
        Ok(())
    }
}
