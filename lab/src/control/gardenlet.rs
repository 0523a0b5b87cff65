//! The gardenlet stand-in: what Gardener's gardenlet does to the `EtcdMigration` objects of a
//! live migration, through the seeds' APIs only. It creates the source's `Etcd` (gardenlet owns
//! it before any migration), both `EtcdMigration`s with the controller's access grant in the
//! shoot namespace (`isthmus_controller::access`), advances `spec.step`, copies the
//! source's `status.exposedMembers` into the destination's `spec.destination.sourceMembers`, and
//! waits for `status.stepReady` of the generation it set, running the other stand-ins
//! (`standins.rs`) while it waits.

use super::etcd_template_spec;
use crate::backend::idx;
use crate::error::{Error, Result};
use crate::etcd::Side;
use crate::lab::Lab;
use crate::specs::{self, NAMESPACE};
use isthmus_controller::crd::{EtcdMigration, EtcdMigrationSpec, EtcdTemplate, ObjectRef, Step};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

/// The `EtcdMigration` object in both seeds.
pub const MIGRATION: &str = "etcd-main";
/// How long one step may take (as in the planner-driven runs).
const STEP_BUDGET: Duration = Duration::from_secs(180);

/// `side`'s spec as gardenlet writes it for the seeds' real API servers: the lab's spec
/// (etcd-druid's newer `additionalAdvertisedURLs` with `overrideDefaultURL`, see
/// `super::with_advertised_urls` for why), the proxy's Service in the controller's namespace,
/// and a destination template the pinned CRD accepts.
pub fn spec(side: Side, step: Step) -> EtcdMigrationSpec {
    let mut s = specs::spec(side, step);
    s.load_balancer = ObjectRef {
        name: "isthmus-proxy".into(),
        namespace: super::SYSTEM.into(),
    };
    s.dns.secret_ref = ObjectRef {
        name: "dns-hosts-file".into(),
        namespace: NAMESPACE.into(),
    };
    if let Some(d) = s.destination.as_mut() {
        d.etcd_template = Some(EtcdTemplate {
            labels: [("app".to_string(), "etcd-statefulset".to_string())].into(),
            annotations: Default::default(),
            spec: etcd_template_spec(),
        });
    }
    s
}

fn migrations(lab: &Lab, side: Side) -> Result<Api<EtcdMigration>> {
    let c = lab
        .control
        .as_ref()
        .ok_or_else(|| Error::State("no seed control plane".into()))?;
    Ok(Api::namespaced(c.admin(side), NAMESPACE))
}

fn kube(what: &str, e: kube::Error) -> Error {
    Error::State(format!("gardenlet stand-in: {what}: {e}"))
}

impl Lab {
    /// Creates the source's `Etcd` (3 replicas, none of isthmus' fields) and both migrations
    /// at `Expose`.
    pub async fn gardenlet_create(&mut self) -> Result<()> {
        let Some(c) = self.control.as_ref() else {
            return Ok(());
        };
        let mut etcd = json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": specs::ETCD, "namespace": NAMESPACE},
            "spec": etcd_template_spec(),
        });
        etcd["spec"]["replicas"] = json!(3);
        c.seeds[idx(Side::Source)].api.apply(&etcd).await?;
        for side in [Side::Source, Side::Destination] {
            let s = spec(side, Step::Expose);
            // With the migration, gardenlet grants the controller access in the shoot's
            // namespace: its writes there and the etcd client Secret (deploy/examples/).
            let subject = isthmus_controller::access::Subject {
                namespace: super::SYSTEM.into(),
                name: "isthmus-controller".into(),
            };
            for doc in isthmus_controller::access::grant(&s, NAMESPACE, &subject) {
                c.seeds[idx(side)].api.apply(&doc).await?;
            }
            let obj = json!({
                "apiVersion": "isthmus.dev/v1alpha1", "kind": "EtcdMigration",
                "metadata": {"name": MIGRATION, "namespace": NAMESPACE},
                "spec": s,
            });
            c.seeds[idx(side)].api.apply(&obj).await?;
            self.migrations[idx(side)].spec = s;
        }
        self.event("gardenlet stand-in: source Etcd and both EtcdMigrations created (Expose)");
        self.gardenlet_invalid().await
    }

    /// Tries to create an `EtcdMigration` with an invalid field (client ports above the peer
    /// ports, refused by a CEL rule of the CRD) beside the real one on the destination seed,
    /// as a mistyped manifest would be; records the API server's answer. A migration the API
    /// server accepts is a violation (`finish`), and the real one must go on unaffected.
    pub async fn gardenlet_invalid(&mut self) -> Result<()> {
        let mut s = spec(Side::Destination, Step::Expose);
        s.ports.client_base = s.ports.peer_base + 20;
        let obj = EtcdMigration::new("invalid-ports", s);
        let api = migrations(self, Side::Destination)?;
        let answer = match api.create(&kube::api::PostParams::default(), &obj).await {
            Ok(_) => "ACCEPTED".to_string(),
            Err(kube::Error::Api(e)) => format!("{} {}: {}", e.code, e.reason, e.message),
            Err(e) => return Err(kube("creating the invalid migration", e)),
        };
        self.event(format!(
            "gardenlet stand-in: an EtcdMigration with clientBase above peerBase: {answer}"
        ));
        if let Some(c) = self.control.as_mut() {
            c.refused.push(answer);
        }
        Ok(())
    }

    /// Sets `spec.step` of `side`'s migration.
    pub(crate) async fn gardenlet_step(&mut self, side: Side, step: Step) -> Result<()> {
        let api = migrations(self, side)?;
        let patch = json!({"spec": {"step": step}});
        api.patch(MIGRATION, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube(&format!("setting step {step:?}"), e))?;
        self.migrations[idx(side)].spec.step = step;
        self.event(format!(
            "gardenlet stand-in: {} step {step:?}",
            specs::seed_name(side)
        ));
        Ok(())
    }

    /// Copies the source's `status.exposedMembers` into the destination's spec.
    pub(crate) async fn gardenlet_copy_members(&mut self) -> Result<()> {
        let src = migrations(self, Side::Source)?
            .get(MIGRATION)
            .await
            .map_err(|e| kube("reading the source", e))?;
        let exposed = src.status.unwrap_or_default().exposed_members;
        let patch = json!({"spec": {"destination": {"sourceMembers": exposed}}});
        migrations(self, Side::Destination)?
            .patch(MIGRATION, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| kube("copying sourceMembers", e))?;
        if let Some(d) = self.migrations[idx(Side::Destination)]
            .spec
            .destination
            .as_mut()
        {
            d.source_members = exposed.clone();
        }
        self.event(format!(
            "gardenlet stand-in: {} exposed source members copied to the destination",
            exposed.len()
        ));
        Ok(())
    }

    /// One pass of the stand-ins and the Leases; `side`'s migration as it is now.
    async fn gardenlet_pass(&mut self, side: Side) -> Result<EtcdMigration> {
        self.control_tick().await?;
        let t_ms = self.now_ms();
        if let Some(c) = self.control.as_mut() {
            for s in [Side::Source, Side::Destination] {
                c.watch_lease(s, t_ms).await?;
            }
        }
        migrations(self, side)?
            .get(MIGRATION)
            .await
            .map_err(|e| kube("reading the migration", e))
    }

    /// Runs the stand-ins until the controller reports `side`'s step ready for the generation
    /// set last, or `stop` holds.
    pub(crate) async fn gardenlet_wait(
        &mut self,
        side: Side,
        stop: impl Fn(&Lab) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + STEP_BUDGET;
        loop {
            // A seed API server that is away (restarted) is waited for, within the budget.
            let m = match self.gardenlet_pass(side).await {
                Ok(m) => m,
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(error = %e, "stand-ins: retried");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let generation = m.metadata.generation;
            let status = m.status.unwrap_or_default();
            let current = status.observed_generation == generation
                && status.step == Some(self.migrations[idx(side)].spec.step);
            if (current && status.step_ready) || stop(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "{} step {:?} to be ready (conditions {:?})",
                        specs::seed_name(side),
                        self.migrations[idx(side)].spec.step,
                        status.conditions
                    ),
                    after: STEP_BUDGET,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
