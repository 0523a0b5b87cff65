//! The gardenlet stand-in in the lab's run (the seed world's `gardenlet`, the one the
//! controller's tests use, through the seeds' APIs only): it creates the source's `Etcd`
//! (gardenlet owns it before any migration), both `EtcdMigration`s with the controller's
//! access grant in the shoot namespace, advances `spec.step` and copies the source's
//! `status.exposedMembers` into the destination's `spec.destination.sourceMembers`, each noted
//! in the record; and it tries one invalid `EtcdMigration`. Waiting for `status.stepReady`
//! (running the other stand-ins meanwhile) is the driver's loop (`super`).

use super::{Controllers, MIGRATION, SYSTEM};
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::side::Side;
use crate::specs::{self, NAMESPACE};
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, EtcdTemplate, ObjectRef, Step};
use isthmus_seed_world::gardenlet;
use kube::api::Api;

/// `side`'s spec as gardenlet writes it for the seeds' real API servers: the lab's spec
/// (etcd-druid's newer `additionalAdvertisedURLs` with `overrideDefaultURL`, see
/// `isthmus_seed_world::setup::with_advertised_urls` for why), the proxy's Service in the
/// controller's namespace, and a destination template the pinned CRD accepts.
pub fn spec(side: Side, step: Step) -> EtcdMigrationSpec {
    let mut s = specs::spec(side, step);
    s.load_balancer = ObjectRef {
        name: "isthmus-proxy".into(),
        namespace: SYSTEM.into(),
    };
    s.dns.secret_ref = ObjectRef {
        name: "dns-hosts-file".into(),
        namespace: NAMESPACE.into(),
    };
    if let Some(d) = s.destination.as_mut() {
        d.etcd_template = Some(EtcdTemplate {
            labels: [("app".to_string(), "etcd-statefulset".to_string())].into(),
            annotations: Default::default(),
            spec: isthmus_testkit::etcd_spec(specs::ETCD),
        });
    }
    s
}

fn kube(what: &str, e: kube::Error) -> Error {
    Error::State(format!("gardenlet stand-in: {what}: {e}"))
}

impl Controllers {
    /// `side`'s `EtcdMigration`s, as admin.
    pub(super) fn migration_api(&self, side: Side) -> Api<EtcdMigration> {
        Api::namespaced(self.plane.admin(side), NAMESPACE)
    }

    /// Creates the source's `Etcd` (3 replicas, none of isthmus' fields) and both migrations
    /// at `Expose`, then tries an invalid one.
    pub(super) async fn gardenlet_create(&mut self, lab: &mut Lab) -> Result<()> {
        let etcd = isthmus_testkit::minimal_etcd(specs::ETCD, NAMESPACE, 3);
        gardenlet::create_etcd(&self.plane.admin(Side::Source), &etcd).await?;
        // With the migration, gardenlet grants the controller access in the shoot's
        // namespace: its writes there and the etcd client Secrets its `Etcd` names
        // (deploy/examples/).
        let secrets = gardenlet::client_secrets(&etcd["spec"], NAMESPACE)?;
        for side in Side::BOTH {
            let s = spec(side, Step::Expose);
            let admin = self.plane.admin(side);
            gardenlet::grant(&admin, &s, NAMESPACE, &secrets).await?;
            gardenlet::create_migration(&admin, NAMESPACE, MIGRATION, &s).await?;
            self.migrations[side.index()].spec = s;
        }
        lab.record
            .event("gardenlet stand-in: source Etcd and both EtcdMigrations created (Expose)");
        self.gardenlet_invalid(lab).await
    }

    /// Tries to create an `EtcdMigration` with an invalid field (client ports above the peer
    /// ports, refused by a CEL rule of the CRD) beside the real one on the destination seed,
    /// as a mistyped manifest would be; records the API server's answer. A migration the API
    /// server accepts is a violation (`conclude`), and the real one must go on unaffected.
    async fn gardenlet_invalid(&mut self, lab: &mut Lab) -> Result<()> {
        let mut s = spec(Side::Destination, Step::Expose);
        s.ports.client_base = s.ports.peer_base + 20;
        let obj = EtcdMigration::new("invalid-ports", s);
        let api = self.migration_api(Side::Destination);
        let answer = match api.create(&kube::api::PostParams::default(), &obj).await {
            Ok(_) => "ACCEPTED".to_string(),
            Err(kube::Error::Api(e)) => format!("{} {}: {}", e.code, e.reason, e.message),
            Err(e) => return Err(kube("creating the invalid migration", e)),
        };
        lab.record.event(format!(
            "gardenlet stand-in: an EtcdMigration with clientBase above peerBase: {answer}"
        ));
        self.seen.refused.push(answer);
        Ok(())
    }

    /// Sets `spec.step` of `side`'s migration.
    pub(super) async fn gardenlet_step(
        &mut self,
        lab: &mut Lab,
        side: Side,
        step: Step,
    ) -> Result<()> {
        gardenlet::set_step(&self.plane.admin(side), NAMESPACE, MIGRATION, step).await?;
        self.migrations[side.index()].spec.step = step;
        lab.record.event(format!(
            "gardenlet stand-in: {} step {step:?}",
            specs::seed_name(side)
        ));
        Ok(())
    }

    /// Copies the source's `status.exposedMembers` into the destination's spec.
    pub(super) async fn gardenlet_copy_members(&mut self, lab: &mut Lab) -> Result<()> {
        let (src, dst) = (
            self.plane.admin(Side::Source),
            self.plane.admin(Side::Destination),
        );
        let exposed = gardenlet::copy_exposed_members(&src, &dst, NAMESPACE, MIGRATION).await?;
        let dest = &mut self.migrations[Side::Destination.index()].spec;
        if let Some(d) = dest.destination.as_mut() {
            d.source_members = exposed.clone();
        }
        lab.record.event(format!(
            "gardenlet stand-in: {} exposed source members copied to the destination",
            exposed.len()
        ));
        Ok(())
    }

    /// `side`'s migration as its API server has it now.
    pub(super) async fn gardenlet_read(&self, side: Side) -> Result<EtcdMigration> {
        self.migration_api(side)
            .get(MIGRATION)
            .await
            .map_err(|e| kube("reading the migration", e))
    }
}
