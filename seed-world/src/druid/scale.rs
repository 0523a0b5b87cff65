//! What etcd-druid#1426 (open; DEP-08, `docs/proposals/08-scale-in.md`) adds to etcd-druid,
//! for the druid stand-in: the `ScaleOperationComplete` condition, the CEL rules that refuse
//! an opposite-direction change while an operation runs, and the pruning of
//! `status.bootstrapWithExistingCluster` once the source members are removed. v0.38.1 has none
//! of it; the stand-in's member removal is #1426's, so its bookkeeping is too.

use serde_json::{json, Value};

/// The condition's type.
pub const CONDITION: &str = "ScaleOperationComplete";

fn replicas(spec: &Value) -> i64 {
    spec["replicas"].as_i64().unwrap_or(0)
}

fn bootstrap(spec: &Value) -> &Value {
    &spec["etcd"]["bootstrapWithExistingCluster"]
}

/// The operations a spec change from `old` to `new` starts (DEP-08, "Detection"): none for a
/// transition to or from 0 replicas.
pub fn started(old: &Value, new: &Value) -> Vec<&'static str> {
    let mut out = Vec::new();
    let (o, n) = (replicas(old), replicas(new));
    if o > 0 && n > 0 && n != o {
        out.push(if n > o { "ScalingOut" } else { "ScalingIn" });
    }
    if bootstrap(old).is_object() && bootstrap(new)["members"] != bootstrap(old)["members"] {
        out.push("BootstrapMembersRemoval");
    }
    out
}

/// Why #1426's CEL rules refuse the change from `old` to `new` while `running` is in
/// progress, if they do (an operation other than the running one).
pub fn refused(old: &Value, new: &Value, running: Option<&str>) -> Option<String> {
    let running = running?;
    started(old, new)
        .into_iter()
        .find(|op| *op != running)
        .map(|op| {
            format!("a change starting {op} while {CONDITION}=False/{running} (etcd-druid#1426's CEL rules refuse it)")
        })
}

/// The operation a new target starts, as druid records it before acting: a bootstrap members
/// removal first, then a change of `replicas`, and a new `Etcd` joining an existing cluster
/// (a scale-out until the join is done). `prev` is the spec acted on before.
pub fn on_target(prev: Option<&Value>, new: &Value) -> Option<&'static str> {
    let ops = prev.map(|p| started(p, new)).unwrap_or_default();
    if ops.contains(&"BootstrapMembersRemoval") {
        return Some("BootstrapMembersRemoval");
    }
    if let Some(op) = ops.first() {
        return Some(op);
    }
    (prev.is_none() && bootstrap(new).is_object() && replicas(new) > 0).then_some("ScalingOut")
}

/// The condition as druid writes it.
pub fn condition(running: Option<&str>, now: &str) -> Value {
    let (status, reason) = match running {
        Some(r) => ("False", r),
        None => ("True", "NoScaleOperation"),
    };
    json!({"type": CONDITION, "status": status, "reason": reason, "message": "stand-in",
           "lastTransitionTime": now, "lastUpdateTime": now})
}
