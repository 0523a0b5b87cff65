//! The report's shoot-API part: what the load and the watch saw, what was read back at the
//! end, and the invariants over them (0 failed requests, 0 missing objects, 0 events the watch
//! skipped, resourceVersions only growing, no read behind an acknowledged write).

use super::load::{ApiSample, Recording};
use super::watch::Seen;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// Requests at the shoot's API.
#[derive(Debug, Clone, Serialize)]
pub struct ApiReport {
    pub requests: usize,
    /// Errors that reached the client after its retries, or slower than 5 s.
    pub failed: usize,
    /// Requests that needed more than one attempt (their first error is in the samples).
    pub retried: usize,
    pub worst_ms: f64,
    /// Longest time between two acknowledged writes.
    pub longest_write_gap_ms: f64,
    /// Reads of the counter behind an acknowledged patch.
    pub stale_reads: usize,
    pub via_source: usize,
    pub via_destination: usize,
    pub webhook: ApiWebhook,
    pub watch: WatchReport,
    pub phases: Vec<crate::stats::PhaseStats>,
    /// Each request of at least 1 s (or the slowest) and where its time went (`audit.rs`).
    pub slow: Vec<String>,
    /// Every request, for the picture (`api_samples.json` has them).
    #[serde(skip)]
    pub samples: Vec<ApiSample>,
}

/// kube-apiserver's calls of the shoot's webhook (through the tunnel).
#[derive(Debug, Clone, Serialize)]
pub struct ApiWebhook {
    /// AdmissionReviews the webhook answered during the load.
    pub calls: usize,
    /// API requests whose (first) error was a failed webhook call.
    pub failed: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct WatchReport {
    pub events: usize,
    /// Acknowledged writes the watch never delivered (and no relist covered).
    pub missing: usize,
    pub out_of_order: usize,
    pub reconnects: usize,
    /// `410 Gone` answers, each followed by a relist.
    pub gone: usize,
}

/// Every acknowledged object read back at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Objects {
    /// Acknowledged writes (creates and patches).
    pub written: usize,
    /// Objects absent at the end or carrying less than their last acknowledged value.
    pub missing: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_examples: Vec<String>,
}

/// What ran as the shoot's control plane.
#[derive(Debug, Clone, Serialize)]
pub struct ControlPlane {
    /// kube-apiserver's version string.
    pub kube_apiserver: String,
    /// How long the destination kube-apiserver took to become ready (`null`: it did not, or
    /// the run never got that far).
    pub destination_ready_ms: Option<f64>,
    pub kube_apiservers: String,
}

impl Objects {
    /// Compares the last acknowledged value of every object with what is stored.
    pub fn check(rec: &Recording, stored: &[ConfigMap]) -> Self {
        let mut want: BTreeMap<&str, u64> = BTreeMap::new();
        for a in &rec.acks {
            let v = want.entry(a.name.as_str()).or_default();
            *v = (*v).max(a.seq);
        }
        let got: BTreeMap<&str, u64> = stored
            .iter()
            .filter_map(|o| Some((o.metadata.name.as_deref()?, super::load::value(o)?)))
            .collect();
        // A patch that failed ambiguously may still have been stored: more is fine, less lost.
        let missing: Vec<String> = want
            .iter()
            .filter(|(n, v)| got.get(*n).is_none_or(|g| g < *v))
            .map(|(n, v)| format!("{n}={v} (stored {:?})", got.get(n)))
            .collect();
        Self {
            written: rec.acks.len(),
            missing: missing.len(),
            missing_examples: missing.into_iter().take(5).collect(),
        }
    }
}

impl ApiReport {
    pub fn new(
        rec: &Recording,
        seen: &Seen,
        webhook_calls: usize,
        phases: &[(String, f64, f64)],
        events: &[crate::stats::Event],
    ) -> Self {
        let mut lat: Vec<f64> = rec.samples.iter().map(|s| s.latency_ms).collect();
        lat.sort_by(f64::total_cmp);
        let mut acks: Vec<f64> = rec.acks.iter().map(|a| a.t_ms).collect();
        let missing = rec
            .acks
            .iter()
            .filter(|a| {
                !seen.events.contains(&(a.name.clone(), a.rv))
                    && seen.relisted.get(&a.name).is_none_or(|r| *r < a.rv)
            })
            .count();
        Self {
            requests: rec.samples.len(),
            failed: rec.samples.iter().filter(|s| !s.ok).count(),
            retried: rec.samples.iter().filter(|s| s.attempts > 1).count(),
            worst_ms: lat.last().copied().unwrap_or(0.0),
            longest_write_gap_ms: crate::stats::longest_gap(&mut acks),
            stale_reads: rec.stale_reads.len(),
            via_source: rec.samples.iter().filter(|s| s.via == "source").count(),
            via_destination: rec
                .samples
                .iter()
                .filter(|s| s.via == "destination")
                .count(),
            webhook: ApiWebhook {
                calls: webhook_calls,
                failed: rec
                    .samples
                    .iter()
                    .filter(|s| s.error.as_deref().is_some_and(|e| e.contains("webhook")))
                    .count(),
            },
            watch: WatchReport {
                events: seen.event_count,
                missing,
                out_of_order: seen.out_of_order,
                reconnects: seen.reconnects,
                gone: seen.gone,
            },
            phases: phases
                .iter()
                .map(|(name, start, end)| phase(name, *start, *end, &rec.samples))
                .collect(),
            slow: super::audit::slow(&rec.samples, phases, events),
            samples: rec.samples.clone(),
        }
    }

    /// Appends what broke an invariant.
    pub fn violations(
        &self,
        objects: &Objects,
        rec: &Recording,
        fault: Option<&crate::stats::Fault>,
        out: &mut Vec<String>,
    ) {
        let unexpected: Vec<&ApiSample> = rec
            .samples
            .iter()
            .filter(|s| !s.ok && !crate::stats::covered(fault, s.start_ms))
            .collect();
        if let Some(first) = unexpected.first() {
            out.push(format!(
                "{} of {} shoot API requests failed (first, at {:.1} s: {:?})",
                unexpected.len(),
                self.requests,
                first.start_ms / 1000.0,
                first.error
            ));
        }
        if objects.written == 0 {
            out.push("no shoot API write was acknowledged".into());
        }
        if objects.missing > 0 {
            out.push(format!(
                "{} acknowledged objects missing or behind: {:?}",
                objects.missing, objects.missing_examples
            ));
        }
        if self.watch.missing > 0 || self.watch.out_of_order > 0 {
            out.push(format!(
                "the watch missed {} acknowledged writes and saw {} out of order",
                self.watch.missing, self.watch.out_of_order
            ));
        }
        if self.stale_reads > 0 {
            out.push(format!(
                "{} reads behind an acknowledged write: {:?}",
                self.stale_reads,
                rec.stale_reads.first()
            ));
        }
        if self.webhook.calls == 0 {
            out.push("kube-apiserver never called the webhook during the load".into());
        }
        let webhook_failed = rec
            .samples
            .iter()
            .filter(|s| {
                s.error.as_deref().is_some_and(|e| e.contains("webhook"))
                    && !crate::stats::covered(fault, s.start_ms)
            })
            .count();
        if webhook_failed > 0 {
            out.push(format!(
                "{webhook_failed} API requests met a failed webhook call"
            ));
        }
    }
}

fn phase(name: &str, start: f64, end: f64, samples: &[ApiSample]) -> crate::stats::PhaseStats {
    let items = samples.iter().map(|s| (s.start_ms, s.latency_ms, s.ok));
    crate::stats::PhaseStats::of(name, start, end, items)
}
