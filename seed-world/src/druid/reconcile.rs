//! etcd-druid's spec reconciliation as the stand-in does it: a requested (or new) generation
//! handed to the StatefulSet unless the `Etcd` is suspended (etcd-druid v0.38.1
//! `internal/controller/etcd/reconcile_spec.go` `shouldReconcileSpec`), and the contract
//! checked on the way: a request put back for a generation already answered, and a spec change
//! etcd-druid#1426's CEL rules would refuse while an operation runs.

use super::{scale, DruidStandIn};
use isthmus_controller::plan::SUSPEND_SPEC_RECONCILE;
use serde_json::Value;

impl DruidStandIn {
    /// A spec change etcd-druid#1426's CEL rules would refuse while an operation runs.
    pub(super) fn check_cel(&mut self, v: &Value) {
        if self.st.seen.as_ref() == Some(&v["spec"]) {
            return;
        }
        if let Some(prev) = &self.st.seen {
            if let Some(why) = scale::refused(prev, &v["spec"], self.st.scale_op) {
                self.violations.push(format!("{}: {why}", self.label));
            }
        }
        self.st.seen = Some(v["spec"].clone());
    }

    /// Hands the spec of a requested (or new) generation to the StatefulSet, unless the
    /// `Etcd` is suspended; a request for a generation already answered is a violation.
    pub(super) fn reconcile_spec(&mut self, v: &Value, requested: bool) {
        let generation = v["metadata"]["generation"].as_i64().unwrap_or(0);
        let created = v["status"]["observedGeneration"].is_null() && self.st.observed.is_none();
        let suspended = v["metadata"]["annotations"]
            .get(SUSPEND_SPEC_RECONCILE)
            .is_some();
        if suspended || !(requested || created) {
            return;
        }
        if self.st.observed == Some(generation) {
            if requested && self.st.answered == Some(generation) {
                let label = &self.label;
                self.violations.push(format!(
                    "{label}: reconcile requested again for Etcd generation {generation}, \
                     which etcd-druid had reconciled"
                ));
                self.st.answered = None;
            }
            return;
        }
        let before = self.st.sts.as_ref().map(|s| &s["spec"]);
        if let Some(op) = scale::on_target(before, &v["spec"]) {
            self.st.scale_op = Some(op);
            self.st.scale_seen = true;
        }
        self.st.sts = Some(v.clone());
        self.st.observed = Some(generation);
        self.st.reconciled.push(generation);
    }
}
