//! Getting a new route file to the proxy pods in a second instead of a minute.
//!
//! kubelet refreshes a ConfigMap volume only when it syncs the pod: on its periodic sync
//! (`syncFrequency`, 1 min, plus jitter: 64–84 s measured on the node) or when the pod object
//! changes. A change of the pod's annotations is such a change (kubelet's
//! `pkg/kubelet/config/config.go`, `podsDifferSemantically`), and the sync that follows
//! remounts every volume that needs it from kubelet's watch of the ConfigMap
//! (`volumemanager`, `ReprocessPod` → `MarkRemountRequired`). So after writing the file the
//! controller writes the file's hash into each proxy pod that does not serve it yet. The file
//! on disk stays the one source of truth: a pod that restarts reads it, and a pod that misses
//! the nudge gets the file at the next periodic sync as before.
//!
//! The right to patch pods is narrowed by a ValidatingAdmissionPolicy in the chart
//! (`charts/isthmus/templates/controller-rbac.yaml`): the controller may change nothing of a
//! pod but this one annotation, and only on the proxy pods.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

/// The annotation that carries `<hash of the file>@<first nudge>@<last nudge>` (unix ms).
pub const ANNOTATION: &str = "isthmus.dev/routes";

/// The least time between two nudges of a pod for one hash: the ConfigMap's watch event can
/// reach kubelet after the pod's, and that remount then writes the old file. Later nudges
/// back off (the wait doubles) up to kubelet's own periodic sync: a pod that never takes the
/// file (a file it refuses, a kubelet that is down) is not patched every second.
const RENUDGE_MS: u128 = 1_000;
const RENUDGE_MAX_MS: u128 = 60_000;

/// How long after the first nudge the rollout is worth checking every second.
const FAST_CHECKS_MS: u128 = 30_000;

/// A pod's nudge for one hash, read from its annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Nudged {
    first: u128,
    last: u128,
}

fn nudged(pod: &Pod, hash: &str) -> Option<Nudged> {
    let mut parts = pod.annotations().get(ANNOTATION)?.split('@');
    if parts.next()? != hash {
        return None;
    }
    let first = parts.next()?.parse().ok()?;
    let last = parts.next()?.parse().ok()?;
    Some(Nudged { first, last })
}

/// What to do with a pod that does not serve `hash` yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Write the nudge now, with this first-nudge time.
    pub nudge_first: Option<u128>,
    /// The first nudge was recent: worth checking the rollout again in a second.
    pub fresh: bool,
}

/// Decides for `pod`, which does not serve `hash` yet, at `now` (unix ms).
pub fn decide(pod: &Pod, hash: &str, now: u128) -> Decision {
    let Some(n) = nudged(pod, hash) else {
        return Decision {
            nudge_first: Some(now),
            fresh: true,
        };
    };
    let wait = (n.last.saturating_sub(n.first)).clamp(RENUDGE_MS, RENUDGE_MAX_MS);
    Decision {
        nudge_first: (now.saturating_sub(n.last) >= wait).then_some(n.first),
        fresh: now.saturating_sub(n.first) < FAST_CHECKS_MS,
    }
}

/// Milliseconds since the epoch (0 for a clock before it).
pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Writes the nudge into `pod` (a merge patch of one annotation). A failure is logged and
/// otherwise ignored: the pod still gets the file at kubelet's next periodic sync.
pub async fn nudge(pods: &Api<Pod>, pod: &Pod, hash: &str, first: u128, now: u128) -> bool {
    let name = pod.name_any();
    let value = format!("{hash}@{first}@{now}");
    let patch = json!({"metadata": {"annotations": {ANNOTATION: value}}});
    match pods
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(pod = %name, error = %e,
                "could not nudge kubelet; the pod gets the routes at its next periodic sync");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotation: Option<&str>) -> Pod {
        let mut p = Pod::default();
        if let Some(a) = annotation {
            p.annotations_mut().insert(ANNOTATION.into(), a.into());
        }
        p
    }

    fn nudge_at(annotation: Option<&str>, now: u128) -> Option<u128> {
        decide(&pod(annotation), "h1", now).nudge_first
    }

    #[test]
    fn a_pod_is_nudged_at_once_for_a_new_hash() {
        assert_eq!(nudge_at(None, 5_000), Some(5_000));
        assert_eq!(nudge_at(Some("h0@1000@4900"), 5_000), Some(5_000));
        assert_eq!(nudge_at(Some("h1"), 5_000), Some(5_000), "malformed");
        assert_eq!(nudge_at(Some("h1@x@4000"), 5_000), Some(5_000), "bad time");
    }

    #[test]
    fn nudges_for_one_hash_back_off_from_a_second_to_a_minute() {
        assert_eq!(nudge_at(Some("h1@4500@4500"), 5_000), None, "0.5 s after");
        assert_eq!(nudge_at(Some("h1@4000@4000"), 5_000), Some(4_000));
        // Nudged at 4 s and 5 s: the next waits 1 s more, then 2, 4, … up to 60 s.
        assert_eq!(nudge_at(Some("h1@4000@5000"), 5_900), None);
        assert_eq!(nudge_at(Some("h1@4000@5000"), 6_000), Some(4_000));
        assert_eq!(nudge_at(Some("h1@4000@8000"), 11_999), None);
        assert_eq!(nudge_at(Some("h1@4000@8000"), 12_000), Some(4_000));
        assert_eq!(nudge_at(Some("h1@0@500000"), 559_999), None);
        assert_eq!(nudge_at(Some("h1@0@500000"), 560_000), Some(0));
    }

    #[test]
    fn the_rollout_is_checked_often_only_in_the_first_half_minute() {
        assert!(decide(&pod(None), "h1", 5_000).fresh);
        assert!(decide(&pod(Some("h1@1000@1000")), "h1", 30_999).fresh);
        assert!(!decide(&pod(Some("h1@1000@1000")), "h1", 31_000).fresh);
    }
}
