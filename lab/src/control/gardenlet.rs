//! The gardenlet stand-in: what Gardener's gardenlet does to the `EtcdMigration` objects of a
//! live migration, through the seeds' APIs only. It creates the source's `Etcd` (gardenlet owns
//! it before any migration), both `EtcdMigration`s with the controller's access grant in the
//! shoot namespace (`isthmus_controller::access`), advances `spec.step` and copies the
//! source's `status.exposedMembers` into the destination's `spec.destination.sourceMembers`.
//! Waiting for `status.stepReady` (running the other stand-ins meanwhile) is the driver's
//! loop (`super`).

use super::{Controllers, MIGRATION, SYSTEM};
use crate::error::{Error, Result};
use crate::lab::Lab;
use crate::side::Side;
use crate::specs::{self, NAMESPACE};
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, EtcdTemplate, ObjectRef, Step};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// `side`'s spec as gardenlet writes it for the seeds' real API servers: the lab's spec
/// (etcd-druid's newer `additionalAdvertisedURLs` with `overrideDefaultURL`, see
/// `super::install::with_advertised_urls` for why), the proxy's Service in the controller's
/// namespace, and a destination template the pinned CRD accepts.
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
        let seeds = &self.plane.seeds;
        seeds[Side::Source.index()].api.apply(&etcd).await?;
        for side in Side::BOTH {
            let s = spec(side, Step::Expose);
            // With the migration, gardenlet grants the controller access in the shoot's
            // namespace: its writes there and the etcd client Secrets its `Etcd` names
            // (deploy/examples/).
            let subject = isthmus_controller::access::Subject {
                namespace: SYSTEM.into(),
                name: "isthmus-controller".into(),
            };
            let tls = isthmus_controller::gardener::etcd_client_tls(&etcd["spec"], NAMESPACE)
                .map_err(|e| Error::State(format!("gardenlet stand-in: {e}")))?;
            let api = &seeds[side.index()].api;
            let grant =
                isthmus_controller::access::grant(&s, NAMESPACE, &subject, &tls.secret_names());
            for doc in grant {
                api.apply(&doc).await?;
            }
            let obj = json!({
                "apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
                "metadata": {"name": MIGRATION, "namespace": NAMESPACE},
                "spec": s,
            });
            api.apply(&obj).await?;
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
        let patch = json!({"spec": {"step": step}});
        self.migration_api(side)
            .patch(MIGRATION, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube(&format!("setting step {step:?}"), e))?;
        self.migrations[side.index()].spec.step = step;
        lab.record.event(format!(
            "gardenlet stand-in: {} step {step:?}",
            specs::seed_name(side)
        ));
        Ok(())
    }

    /// Copies the source's `status.exposedMembers` into the destination's spec.
    pub(super) async fn gardenlet_copy_members(&mut self, lab: &mut Lab) -> Result<()> {
        let src = self
            .migration_api(Side::Source)
            .get(MIGRATION)
            .await
            .map_err(|e| kube("reading the source", e))?;
        let exposed = src.status.unwrap_or_default().exposed_members;
        let patch = json!({"spec": {"destination": {"sourceMembers": exposed}}});
        self.migration_api(Side::Destination)
            .patch(MIGRATION, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube("copying sourceMembers", e))?;
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
