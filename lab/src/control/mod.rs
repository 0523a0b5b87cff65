//! The controllers driver (`--controllers`): each seed gets its own real kube-apiserver
//! (`apiserver.rs`) with the pinned upstream CRDs (etcd-druid's `Etcd`, Gardener's
//! `DNSRecord`), isthmus' `EtcdMigration` CRD and `deploy/`'s RBAC (the seed world's set-up,
//! the one the controller's tests install), and runs
//! the production `isthmus controller` (`controller.rs`) as its ServiceAccount (`plane.rs`).
//! The controller plans and writes the objects; stand-ins for the controllers that cannot run
//! here act on them, each only through the API:
//!
//! - kubelet (`kubelet.rs`): the route ConfigMap → the proxy's volume (`..data` swap);
//! - etcd-druid (the seed world's stand-in, `isthmus_seed_world::druid`, the one the
//!   controller's tests run) and the DNS provider (`standins.rs`): `Etcd` → etcd members,
//!   `DNSRecord` → the seeds' hosts files, each writing the status its real counterpart
//!   writes (etcd-druid acting only on a reconcile request, as Gardener deploys it);
//! - gardenlet (`gardenlet.rs`): creates both `EtcdMigration`s, advances their steps, copies
//!   `exposedMembers` across.
//!
//! What they saw is the report's control-plane section (`record.rs`).

pub mod apiserver;
pub mod controller;
mod faults;
pub mod gardenlet;
pub mod kubelet;
pub mod plane;
pub mod record;
mod standins;

use crate::driver::{Conclusion, Driver, StepDeadline};
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::member::{self, MemberRef};
use crate::migration::Migration;
use crate::options::{Options, Scenario};
use crate::proxy::{self, SeedProxy};
use crate::report::CONTROLLED_STAND_INS;
use crate::side::Side;
use crate::specs;
use crate::topology::Topology;
use crate::world::World;
use isthmus_controller::crd::{EtcdMigration, Step};
use isthmus_controller::proxy_config::CONFIG_KEY;
use isthmus_seed_world::druid::DruidStandIn;
use plane::ControlPlane;
use record::ControlRecord;
use std::time::Duration;

/// The namespace of the controller, its Lease, the proxy and its route ConfigMap.
pub const SYSTEM: &str = "isthmus-system";
/// The route ConfigMap (`isthmus controller --proxy-configmap`'s default).
pub const ROUTES: &str = "isthmus-proxy-routes";
/// The `EtcdMigration` object in both seeds.
pub const MIGRATION: &str = "etcd-main";
/// Controller replicas per seed (two: a killed leader is replaced through the Lease).
pub const REPLICAS: usize = 2;

/// Both seeds' control planes and what the stand-ins remember between passes.
#[derive(Debug)]
pub struct Controllers {
    // Field order is drop order: the tunnel's ingress proxies, then the control planes.
    /// The seeds' tunnel ingress proxies, held for their processes: the tunnel route rides on
    /// a proxy of its own, so the migration's proxy serves exactly the controller's file.
    _ingress: Vec<SeedProxy>,
    plane: ControlPlane,
    /// Each seed's migration as gardenlet set it and the stand-ins last saw it.
    migrations: [Migration; 2],
    /// The etcd-druid stand-in of each seed.
    druid: [DruidStandIn; 2],
    /// Conditions per seed as last seen (`type` → `status (reason)`), for the timeline.
    conditions: [Vec<(String, String)>; 2],
    /// The Lease holder last seen per seed.
    holders: [Option<String>; 2],
    seen: ControlRecord,
}

impl Driver for Controllers {
    async fn start(opts: &Options, topo: &Topology) -> Result<(Self, [SeedProxy; 2])> {
        for side in Side::BOTH {
            pod_network(topo, side)?;
        }
        let mut plane = ControlPlane::start(&opts.kube_apiserver_bin, topo, &opts.dir).await?;
        let (proxies, ingress) = start_proxies(&mut plane, opts, topo).await?;
        let controllers = Self {
            _ingress: ingress,
            plane,
            migrations: Migration::both(topo),
            druid: Side::BOTH.map(|s| DruidStandIn::new(specs::ETCD, specs::seed_name(s))),
            conditions: Default::default(),
            holders: Default::default(),
            seen: ControlRecord::default(),
        };
        Ok((controllers, proxies))
    }

    fn migrations(&self) -> &[Migration; 2] {
        &self.migrations
    }

    async fn begin(&mut self, lab: &mut Lab, opts: &Options) -> Result<()> {
        // gardenlet's objects, then the controllers (as their ServiceAccount).
        self.gardenlet_create(lab).await?;
        let w = &lab.world;
        self.plane
            .start_controllers(&opts.proxy_bin, &w.topo, REPLICAS, &w.dir)?;
        lab.record.event(format!(
            "seed API servers ready; {REPLICAS} isthmus controller replica(s) per seed started"
        ));
        Ok(())
    }

    async fn set_step(&mut self, lab: &mut Lab, side: Side, step: Step) -> Result<()> {
        self.gardenlet_step(lab, side, step).await
    }

    async fn copy_source_members(&mut self, lab: &mut Lab) -> Result<()> {
        self.gardenlet_copy_members(lab).await
    }

    /// Runs the stand-ins until the controller reports `side`'s step ready for the generation
    /// set last, or `stop` holds.
    async fn drive(
        &mut self,
        lab: &mut Lab,
        side: Side,
        stop: &dyn Fn(&World) -> bool,
    ) -> Result<()> {
        let deadline = StepDeadline::start();
        loop {
            // A seed API server that is away (restarted) is waited for, within the budget.
            let m = match self.pass(lab, side).await {
                Ok(m) => m,
                Err(e) if !deadline.passed() => {
                    tracing::warn!(error = %e, "stand-ins: retried");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let step = self.migrations[side.index()].spec.step;
            let generation = m.metadata.generation;
            let status = m.status.unwrap_or_default();
            let current = status.observed_generation == generation && status.step == Some(step);
            if (current && status.step_ready) || stop(&lab.world) {
                // `pass` recorded the conditions before it read this status: the ones the
                // controller wrote with readiness (`LiveMigrationAborted True`) would go
                // unrecorded if nothing reads them again (seen once in CI, under load).
                self.conditions(lab, side).await?;
                return Ok(());
            }
            deadline.check(side, step, &status.conditions)?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn control_fault(&mut self, lab: &mut Lab, scenario: Scenario) -> Result<()> {
        self.fault(lab, scenario).await
    }

    fn conclude(&self, kube_apiserver: &str, violations: &mut Vec<String>) -> Conclusion {
        let real = format!(
            "each seed: kube-apiserver {kube_apiserver} on etcd v3.6, the pinned etcd-druid and \
             Gardener CRDs, deploy/'s RBAC; {} isthmus controller replicas as its ServiceAccount",
            self.plane.seeds[0].replicas.len()
        );
        violations.extend(self.seen.druid_violations.iter().cloned());
        let refused = &self.seen.refused;
        if refused.iter().any(|r| r == "ACCEPTED") || refused.is_empty() {
            violations.push(format!(
                "an invalid EtcdMigration was not refused by the API server: {refused:?}"
            ));
        }
        Conclusion {
            control: Some(self.seen.to_report(real)),
            stand_ins: CONTROLLED_STAND_INS,
        }
    }
}

impl Controllers {
    /// One pass of the stand-ins and the Leases; `side`'s migration as it is now.
    async fn pass(&mut self, lab: &mut Lab, side: Side) -> Result<EtcdMigration> {
        self.tick(lab).await?;
        let t_ms = lab.record.now_ms();
        for s in Side::BOTH {
            self.watch_lease(s, t_ms).await?;
        }
        self.gardenlet_read(side).await
    }
}

/// `side`'s pod network: the members' pod addresses and ports (what the controller's routes
/// dial) translated to their lab ports, and their pod names in the seed's hosts file (the
/// proxy's resolver reads it when it starts: the names must be there first).
fn pod_network(topo: &Topology, side: Side) -> Result<()> {
    let rules: Vec<_> = member::of(side)
        .into_iter()
        .flat_map(|m| {
            [
                (m.pod_ip(), 2380, m.peer_port()),
                (m.pod_ip(), 2379, m.tls_client_port()),
            ]
        })
        .collect();
    topo.seed(side).pod_ports(&rules)?;
    let names: Vec<(String, String)> = member::of(side)
        .into_iter()
        .map(|m: MemberRef| (m.pod_ip().to_string(), m.pod_dns()))
        .collect();
    topo.seed(side).set_hosts(&names)
}

/// Each seed's proxy, reading the controller's ConfigMap from its volume, and its tunnel
/// ingress, a proxy of its own.
async fn start_proxies(
    plane: &mut ControlPlane,
    opts: &Options,
    topo: &Topology,
) -> Result<([SeedProxy; 2], Vec<SeedProxy>)> {
    let (bin, dir) = (&opts.proxy_bin, &opts.dir);
    let initial = proxy::controller_initial()?;
    let tunnel = proxy::render_tunnel_ingress()?;
    let mut proxies = Vec::new();
    let mut ingress = Vec::new();
    for side in Side::BOTH {
        let seed = topo.seed(side);
        let volume = &mut plane.seeds[side.index()].volume;
        let data = [(CONFIG_KEY.to_string(), initial.text.clone())].into();
        volume.write(&data)?;
        let log = dir.join(format!("proxy-{}.log", seed.label));
        let config = volume.path(CONFIG_KEY);
        let p = SeedProxy::start_at(bin, seed, config, log, proxy::ADMIN_PORT, &initial.hash);
        proxies.push(p.await?);
        let config = dir.join(format!("ingress-{}.json", seed.label));
        std::fs::write(&config, &tunnel.text).map_err(|e| Error::io(config.display(), e))?;
        let log = dir.join(format!("ingress-{}.log", seed.label));
        let port = proxy::TUNNEL_ADMIN_PORT;
        ingress.push(SeedProxy::start_at(bin, seed, config, log, port, &tunnel.hash).await?);
    }
    let proxies = proxies
        .try_into()
        .map_err(|_| Error::State("two proxies".into()))?;
    Ok((proxies, ingress))
}
