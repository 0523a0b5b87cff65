//! The seeds' control planes as processes: each seed's kube-apiserver (and its store), the
//! proxy's route volume, and the `isthmus controller` replicas, started as that seed's
//! ServiceAccount; and the few things the lab does to them (read the Lease holder, kill the
//! holder, start a replica again).

use super::apiserver::SeedApi;
use super::controller::Replica;
use super::kubelet::Volume;
use super::SYSTEM;
use crate::error::{Error, Result};
use crate::seeds::Seed;
use crate::side::Side;
use crate::specs::NAMESPACE;
use crate::topology::Topology;
use isthmus_seed_world::setup::{self, Setup};
use std::path::{Path, PathBuf};

/// One seed's control plane.
#[derive(Debug)]
pub struct SeedControl {
    // Field order is drop order: the controllers before their API server.
    pub replicas: Vec<Replica>,
    pub api: SeedApi,
    /// The proxy's route volume.
    pub volume: Volume,
    kubeconfig: PathBuf,
}

/// Both seeds' control planes (source, destination).
#[derive(Debug)]
pub struct ControlPlane {
    pub seeds: [SeedControl; 2],
}

impl ControlPlane {
    /// Starts both seeds' API servers (`bin`, in parallel) and sets up the objects a seed has
    /// before a migration; the controllers start with [`ControlPlane::start_controllers`].
    pub async fn start(bin: &Path, topo: &Topology, dir: &Path) -> Result<Self> {
        let (src_dir, dst_dir) = (
            dir.join("seed-api-source"),
            dir.join("seed-api-destination"),
        );
        let (src, dst) = tokio::join!(
            SeedApi::start(bin, &topo.source, &src_dir),
            SeedApi::start(bin, &topo.destination, &dst_dir),
        );
        let mut seeds = Vec::new();
        for (side, api) in [(Side::Source, src?), (Side::Destination, dst?)] {
            let seed = topo.seed(side);
            install(&api, seed, dir).await?;
            let kubeconfig = api
                .service_account_kubeconfig(SYSTEM, "isthmus-controller")
                .await?;
            let volume = Volume::new(&dir.join(format!("routes-{}", seed.label)))?;
            seeds.push(SeedControl {
                replicas: Vec::new(),
                api,
                volume,
                kubeconfig,
            });
        }
        let seeds: [SeedControl; 2] = seeds
            .try_into()
            .map_err(|_| Error::State("two seeds".into()))?;
        Ok(Self { seeds })
    }

    /// Starts `replicas` controller replicas (`isthmus`) in each seed.
    pub fn start_controllers(
        &mut self,
        isthmus: &Path,
        topo: &Topology,
        replicas: usize,
        dir: &Path,
    ) -> Result<()> {
        for side in Side::BOTH {
            let seed = topo.seed(side);
            let sc = &mut self.seeds[side.index()];
            for n in 0..replicas {
                let identity = format!("controller-{}-{n}", seed.label);
                let port = 18080 + u16::try_from(n).unwrap_or(0);
                let r = Replica::start(isthmus, seed, &sc.kubeconfig, &identity, port, dir)?;
                sc.replicas.push(r);
            }
        }
        Ok(())
    }

    /// The admin client of `side`'s seed API.
    pub fn admin(&self, side: Side) -> kube::Client {
        self.seeds[side.index()].api.admin.clone()
    }

    /// The holder of `side`'s controller Lease, if any.
    pub async fn lease_holder(&self, side: Side) -> Result<Option<String>> {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(self.admin(side), SYSTEM);
        let lease = leases
            .get_opt("isthmus-controller")
            .await
            .map_err(|e| Error::State(format!("reading the controller Lease: {e}")))?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity))
    }

    /// `kill -9` of the replica holding `side`'s Lease; returns its identity.
    pub async fn kill_leader(&mut self, side: Side) -> Result<String> {
        let holder = self
            .lease_holder(side)
            .await?
            .ok_or_else(|| Error::State("no controller holds the Lease".into()))?;
        self.replica(side, &holder)?.kill();
        Ok(holder)
    }

    /// Starts `identity` again (in `side`'s seed).
    pub fn restart_replica(&mut self, side: Side, identity: &str) -> Result<()> {
        self.replica(side, identity)?.restart()
    }

    fn replica(&mut self, side: Side, identity: &str) -> Result<&mut Replica> {
        self.seeds[side.index()]
            .replicas
            .iter_mut()
            .find(|r| r.identity == identity)
            .ok_or_else(|| Error::State(format!("{identity} is not a lab replica")))
    }
}

/// What a seed has before any migration (the seed world's set-up, with etcd-druid's newer
/// `additionalAdvertisedURLs` declared: the lab's specs use its `overrideDefaultURL`), and the
/// shoot's etcd client Secrets from the lab's certificates in `dir`. (gardenlet creates the
/// source's `Etcd`, `super::gardenlet`.)
async fn install(api: &SeedApi, seed: &Seed, dir: &Path) -> Result<()> {
    let lb = seed.seed_ip.to_string();
    let s = Setup {
        namespace: NAMESPACE,
        lb: &lb,
        node: &seed.label,
        newer_advertised_urls: true,
    };
    setup::install(&api.admin, &s).await?;
    let read = |f: &str| {
        let p = dir.join(f);
        std::fs::read_to_string(&p).map_err(|e| Error::io(p.display(), e))
    };
    let (ca, cert, key) = (
        read("ca.crt")?,
        read("etcd-client.crt")?,
        read("etcd-client.key")?,
    );
    let secret = isthmus_testkit::gardener::ETCD_CLIENT_SECRET;
    setup::etcd_client_secrets(&api.admin, NAMESPACE, secret, (&ca, &cert, &key)).await?;
    Ok(())
}
