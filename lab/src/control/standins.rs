//! The stand-ins that act on what the controllers write, one pass each per tick, only through
//! the seeds' APIs (and etcd's own API, as etcd-druid does):
//!
//! - kubelet: the route ConfigMap → the proxy's volume (`kubelet.rs`);
//! - the DNS provider: every `DNSRecord` of both seeds → both seeds' hosts files (the lab's DNS,
//!   split horizon as in `backend.rs`), then `status.observedGeneration` and
//!   `lastOperation: Succeeded`, and the `gardener.cloud/operation` annotation taken away;
//! - etcd-druid (`druid.rs`): the `Etcd`, on a reconcile request only → membership
//!   operations and rolling updates (`crate::druid`, `crate::rolling`: the same code the
//!   planner-driven runs use), then the status etcd-druid writes.
//!
//! Every change a stand-in sees is recorded (the report's list of what the controllers wrote),
//! and so is every condition change of both migrations (the condition timeline).

use super::{ControlPlane, ROUTES, SYSTEM};
use crate::backend::idx;
use crate::error::{Error, Result};
use crate::etcd::Side;
use crate::lab::Lab;
use crate::report::Event;
use crate::specs::{self, NAMESPACE};
use isthmus_controller::crd::EtcdMigration;
use isthmus_controller::gardener::{dnsrecord_observe, dnsrecord_resource, etcd_resource};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

const SIDES: [Side; 2] = [Side::Source, Side::Destination];

fn kube(what: &str, e: kube::Error) -> Error {
    Error::State(format!("{what}: {e}"))
}

fn now() -> String {
    crate::drive::now()
}

impl Lab {
    fn admin(&self, side: Side) -> Result<kube::Client> {
        self.control
            .as_ref()
            .map(|c| c.admin(side))
            .ok_or_else(|| Error::State("no seed control plane".into()))
    }

    /// Records what a stand-in saw the controllers write.
    fn written(&mut self, side: Side, what: String) {
        let what = format!("{}: {what}", specs::seed_name(side));
        self.control_event(|c| &mut c.written, what.clone());
        self.event(format!("controller wrote {what}"));
    }

    /// Adds `what`, now, to the control plane's list that `list` picks.
    fn control_event(&mut self, list: fn(&mut ControlPlane) -> &mut Vec<Event>, what: String) {
        let t_ms = self.now_ms();
        if let Some(c) = self.control.as_mut() {
            list(c).push(Event { t_ms, what });
        }
    }

    /// One pass of every stand-in over both seeds.
    pub(crate) async fn control_tick(&mut self) -> Result<()> {
        for side in SIDES {
            self.kubelet(side).await?;
        }
        self.dns_provider().await?;
        for side in SIDES {
            self.druid_tick(side).await?;
        }
        for side in SIDES {
            self.conditions(side).await?;
        }
        Ok(())
    }

    async fn kubelet(&mut self, side: Side) -> Result<()> {
        let api: Api<ConfigMap> = Api::namespaced(self.admin(side)?, SYSTEM);
        let Some(c) = self.control.as_mut() else {
            return Ok(());
        };
        if let Some(rv) = c.seeds[idx(side)].volume.sync(&api, ROUTES).await? {
            self.written(
                side,
                format!("ConfigMap {ROUTES} (resourceVersion {rv}), delivered to the proxy"),
            );
        }
        Ok(())
    }

    async fn dns_provider(&mut self) -> Result<()> {
        let mut changed = false;
        let mut pending = Vec::new();
        for side in SIDES {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.admin(side)?, NAMESPACE, &dnsrecord_resource());
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| kube("listing DNSRecords", e))?;
            let mut records = std::collections::BTreeMap::new();
            for r in list.items {
                let v = serde_json::to_value(&r).map_err(|e| Error::State(e.to_string()))?;
                let obs = dnsrecord_observe(&v);
                let name = r.metadata.name.clone().unwrap_or_default();
                if !obs.ready() || obs.operation.is_some() {
                    pending.push((side, name.clone(), obs.generation, obs.operation.is_some()));
                }
                records.insert(name, obs);
            }
            let obs = &mut self.migrations[idx(side)].obs;
            let before: Vec<(&String, i64)> = obs
                .dns_records
                .iter()
                .map(|(n, r)| (n, r.generation))
                .collect();
            let after: Vec<(&String, i64)> =
                records.iter().map(|(n, r)| (n, r.generation)).collect();
            if before != after {
                changed = true;
                let names: Vec<String> = records.values().map(|r| r.spec.name.clone()).collect();
                obs.dns_records = records;
                self.written(side, format!("DNSRecords now {names:?}"));
            }
        }
        if changed {
            self.write_hosts()?;
        }
        // Only once the hosts files say so is a record reported written.
        for (side, name, generation, annotated) in pending {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.admin(side)?, NAMESPACE, &dnsrecord_resource());
            let status = json!({
                "apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "DNSRecord",
                "status": {"observedGeneration": generation, "lastOperation": {
                    "type": "Reconcile", "state": "Succeeded", "progress": 100,
                    "description": "hosts files written (DNS provider stand-in)",
                    "lastUpdateTime": now()}},
            });
            let pp = PatchParams::apply("dns-provider-stand-in").force();
            api.patch_status(&name, &pp, &Patch::Apply(status))
                .await
                .map_err(|e| kube("DNSRecord status", e))?;
            if annotated {
                let drop_op =
                    json!({"metadata": {"annotations": {"gardener.cloud/operation": null}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(drop_op))
                    .await
                    .map_err(|e| kube("DNSRecord annotation", e))?;
            }
        }
        Ok(())
    }

    /// One pass of the etcd-druid stand-in (`druid.rs`) over `side`, recorded.
    async fn druid_tick(&mut self, side: Side) -> Result<()> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.admin(side)?, NAMESPACE, &etcd_resource());
        let Some(mut state) = self
            .control
            .as_mut()
            .map(|c| std::mem::take(&mut c.druid[idx(side)]))
        else {
            return Ok(());
        };
        let pass = self.druid(side, &api, &mut state).await;
        if let Some(c) = self.control.as_mut() {
            c.druid[idx(side)] = state;
        }
        let pass = pass?;
        for w in pass.written {
            self.written(side, w);
        }
        for v in pass.violations {
            self.event(format!("violation: {v}"));
            if let Some(c) = self.control.as_mut() {
                c.druid_violations.push(v);
            }
        }
        Ok(())
    }

    /// Records every condition of `side`'s migration whose status or reason changed.
    async fn conditions(&mut self, side: Side) -> Result<()> {
        let api: Api<EtcdMigration> = Api::namespaced(self.admin(side)?, NAMESPACE);
        let Some(m) = api
            .get_opt(super::gardenlet::MIGRATION)
            .await
            .map_err(|e| kube("reading the migration", e))?
        else {
            return Ok(());
        };
        let now: Vec<(String, String)> = m
            .status
            .unwrap_or_default()
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), format!("{} ({})", c.status, c.reason)))
            .collect();
        let Some(ctl) = self.control.as_mut() else {
            return Ok(());
        };
        let before = std::mem::replace(&mut ctl.conditions[idx(side)], now.clone());
        for (t, s) in now {
            if !before.contains(&(t.clone(), s.clone())) {
                let what = format!("condition ({}): {t} {s}", specs::seed_name(side));
                self.control_event(|c| &mut c.timeline, what.clone());
                self.event(what);
            }
        }
        Ok(())
    }
}
