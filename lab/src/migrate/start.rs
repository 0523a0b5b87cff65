//! How a run starts, the same for both drivers: the seeds and their link, the certificates,
//! the driver with the seeds' proxies, the seeds' DNS, the source's 3 members, what the driver
//! needs before the migration (the controllers), the tunnel with its webhook; then the clients:
//! the lab's own etcd client and the shoot's kube-apiserver with its load and watch.

use super::Run;
use crate::api::ShootApi;
use crate::client::Continuous;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::member;
use crate::options::Options;
use crate::pki;
use crate::record::Record;
use crate::topology::Topology;
use crate::world::{hosts, World};
use isthmus_seed_world::etcd::Cluster;
use std::path::Path;
use tokio::time::Instant;

impl<D: Driver> Run<D> {
    /// Builds the world with `D` driving, and starts the clients.
    pub(super) async fn start(opts: &Options) -> Result<Self> {
        let (mut lab, driver) = world::<D>(opts).await?;
        let w = &lab.world;
        let epoch = lab.record.epoch();
        let initial = w.etcd.marked_names(&w.urls(&w.members())).await?;
        let source = w.urls(&member::source());
        let client = Continuous::start(epoch, &source, opts.interval).await?;
        let webhook = w
            .webhook
            .as_ref()
            .ok_or_else(|| Error::State("the tunnel did not start".into()))?;
        let seeds = [&w.topo.source, &w.topo.destination];
        let (bin, interval) = (&opts.kube_apiserver_bin, opts.interval * 2);
        let api = ShootApi::start(epoch, bin, &w.dir, seeds, webhook, &source, interval).await?;
        lab.world.api = Some(api);
        lab.record
            .event("source kube-apiserver serving; API load, watch and webhook start");
        Ok(Self {
            driver,
            lab,
            client,
            initial,
            join_ms: None,
        })
    }
}

/// The world as a seed pair runs it before any migration, with `D` ready to drive: the 3
/// source members serve, the tunnel carries the webhook's calls.
async fn world<D: Driver>(opts: &Options) -> Result<(Lab, D)> {
    let epoch = Instant::now();
    let dir = &opts.dir;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir.display(), e))?;
    let topo = Topology::new(opts.rtt).await?;
    certificates(dir)?;
    let (mut driver, proxies) = D::start(opts, &topo).await?;
    hosts::write(&topo, driver.migrations())?;
    let mut lab = Lab {
        world: World {
            dir: dir.clone(),
            api: None,
            webhook: None,
            etcd: Cluster::new(dir, topo.member_defs(), opts.pre_vote),
            proxies,
            topo,
        },
        record: Record::new(epoch),
    };
    lab.start_source().await?;
    driver.begin(&mut lab, opts).await?;
    lab.start_tunnel(&opts.proxy_bin, opts.rtt).await?;
    Ok((lab, driver))
}

/// The members' certificates (their exposed and in-cluster names) and the client certificate
/// a controller reads etcd's member list with (Gardener's `etcd-client-<hash>` Secret), from one CA.
fn certificates(dir: &Path) -> Result<()> {
    let ca = pki::ca(dir)?;
    for m in member::all() {
        pki::leaf(&ca, dir, &m.name(), &[&m.dns(), &m.in_cluster_dns()])?;
    }
    pki::leaf(&ca, dir, "etcd-client", &["etcd-client"])
}
