//! A run's migration steps as timed lanes, each with the parts it was seen to spend its time
//! on (issue 45 point 3: the
//! demo on two real seeds, `tests/seeds/shoot_report.rs`). The lab's own runs leave
//! [`super::Report::steps`] empty; a run on real seeds records them with a [`Recorder`] and
//! reads the lab's durations from a lab report on disk (`super::compare`).

use serde::Serialize;
use serde_json::Value;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// A part of a step: what the step waited on, from when to when (ms since the run's epoch).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub what: String,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// One step of the migration, as a lane of the picture. `name` is `ROW` or `ROW: detail`:
/// the steps of one row of the comparison (e.g. `Expose: source`, `Expose: destination`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub name: String,
    pub start_ms: f64,
    pub end_ms: f64,
    pub parts: Vec<Part>,
}

impl Step {
    pub fn ms(&self) -> f64 {
        self.end_ms - self.start_ms
    }

    /// The comparison row this step belongs to: its name up to a `:`.
    pub fn row(&self) -> &str {
        self.name.split(':').next().unwrap_or(&self.name).trim()
    }
}

/// The etcd writer beside the shoot API (straight to etcd).
#[derive(Debug, Clone, Default)]
pub struct Writer {
    pub acknowledged: usize,
    pub failed: usize,
    pub lost: usize,
    /// Its writes of a second or more: (start, milliseconds from the epoch to it; took,
    /// milliseconds), to set beside the shoot API's slow requests (etcd's own share).
    pub slow: Vec<(f64, f64)>,
}

/// Records steps as they run, against one epoch (the shoot API load's start): shared by
/// reference between the closures of a test that drives the steps.
#[derive(Debug)]
pub struct Recorder {
    epoch: Instant,
    /// The epoch on the wall clock: Kubernetes' timestamps (conditions, pods) are wall time.
    epoch_wall: SystemTime,
    steps: Mutex<Vec<Step>>,
    members: Mutex<Vec<super::Membership>>,
    writer: Mutex<Option<Writer>>,
    /// etcd's own slow requests, from its members' logs: (start, took; ms) and who said so.
    etcd_slow: Mutex<Vec<(f64, f64, String)>>,
}

impl Recorder {
    pub fn new(epoch: Instant) -> Self {
        let epoch_wall = SystemTime::now()
            .checked_sub(epoch.elapsed())
            .unwrap_or_else(SystemTime::now);
        Self {
            epoch,
            epoch_wall,
            steps: Mutex::new(Vec::new()),
            members: Mutex::new(Vec::new()),
            writer: Mutex::new(None),
            etcd_slow: Mutex::new(Vec::new()),
        }
    }

    /// Milliseconds from the epoch to `t` (negative before it).
    pub fn ms(&self, t: Instant) -> f64 {
        match t.checked_duration_since(self.epoch) {
            Some(d) => d.as_secs_f64() * 1000.0,
            None => -(self.epoch.duration_since(t).as_secs_f64() * 1000.0),
        }
    }

    /// Milliseconds from the epoch to a wall-clock time.
    pub fn wall_ms(&self, t: SystemTime) -> f64 {
        match t.duration_since(self.epoch_wall) {
            Ok(d) => d.as_secs_f64() * 1000.0,
            Err(e) => -(e.duration().as_secs_f64() * 1000.0),
        }
    }

    /// Milliseconds from the epoch to a Kubernetes timestamp (RFC 3339), if it is one.
    pub fn rfc3339_ms(&self, t: &str) -> Option<f64> {
        let ts: k8s_openapi::jiff::Timestamp = t.parse().ok()?;
        Some(self.wall_ms(SystemTime::from(ts)))
    }

    /// Where a pod's start went, from `start` (its objects applied) to `end` (its rollout
    /// seen), by the newest pod of `pods` (a `kubectl get pods -o json` list) and its own
    /// timestamps: created, its first container started, Ready. None without a pod.
    pub fn pod_parts(&self, start: Instant, end: Instant, pods: &Value) -> Vec<Part> {
        let Some(pod) = pods["items"].as_array().and_then(|p| {
            p.iter()
                .max_by_key(|p| p["metadata"]["creationTimestamp"].as_str().unwrap_or(""))
        }) else {
            return Vec::new();
        };
        let at = |t: &Value| t.as_str().and_then(|t| self.rfc3339_ms(t));
        let ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| &c["lastTransitionTime"]);
        let started = &pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"];
        let marks = [
            (
                "Deployment applied, its pod created",
                at(&pod["metadata"]["creationTimestamp"]),
            ),
            ("pod scheduled, container started", at(started)),
            ("kube-apiserver starting until Ready", ready.and_then(at)),
        ];
        let (mut from, end_ms) = (self.ms(start), self.ms(end));
        let mut parts = Vec::new();
        for (what, to) in marks {
            // Kubernetes' timestamps are whole seconds: each part inside the step, in order.
            if let Some(to) = to.map(|t| t.clamp(from, end_ms.max(from))) {
                parts.push(Part {
                    what: what.into(),
                    start_ms: from,
                    end_ms: to,
                });
                from = to;
            }
        }
        parts.push(Part {
            what: "rollout seen".into(),
            start_ms: from,
            end_ms,
        });
        parts
    }

    /// The etcd writer's totals at the end.
    pub fn writer(&self, w: Writer) {
        if let Ok(mut s) = self.writer.lock() {
            *s = Some(w);
        }
    }

    /// A request etcd logged as slow (`apply request took too long`) by `member`, which ended
    /// at `end` (RFC 3339) after `took_ms`.
    pub fn etcd_slow(&self, member: &str, end: &str, took_ms: f64) {
        if let (Some(end), Ok(mut s)) = (self.rfc3339_ms(end), self.etcd_slow.lock()) {
            s.push((end - took_ms, took_ms, member.to_owned()));
        }
    }

    /// What [`Recorder::etcd_slow`] noted, in the order noted.
    pub fn etcd_slow_requests(&self) -> Vec<(f64, f64, String)> {
        self.etcd_slow.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn written(&self) -> Option<Writer> {
        self.writer.lock().ok().and_then(|w| w.clone())
    }

    /// A step from `start` to `end` with its parts (each from, to).
    pub fn step(
        &self,
        name: &str,
        start: Instant,
        end: Instant,
        parts: &[(String, Instant, Instant)],
    ) {
        let parts = parts
            .iter()
            .map(|(what, s, e)| Part {
                what: what.clone(),
                start_ms: self.ms(*s),
                end_ms: self.ms(*e),
            })
            .collect();
        self.push(Step {
            name: name.to_owned(),
            start_ms: self.ms(start),
            end_ms: self.ms(end),
            parts,
        });
    }

    /// A step already in milliseconds since the epoch.
    pub fn push(&self, step: Step) {
        if let Ok(mut s) = self.steps.lock() {
            s.push(step);
        }
    }

    /// Adds parts to the last step named `name` (parts learnt after it was recorded).
    pub fn add_parts(&self, name: &str, parts: Vec<Part>) {
        if let Ok(mut s) = self.steps.lock() {
            if let Some(step) = s.iter_mut().rev().find(|s| s.name == name) {
                step.parts.extend(parts);
            }
        }
    }

    /// The members etcd listed at `t`.
    pub fn members(&self, t: Instant, members: Vec<String>) {
        let t_ms = self.ms(t);
        if let Ok(mut m) = self.members.lock() {
            m.push(super::Membership { t_ms, members });
        }
    }

    /// Every step recorded, by start.
    pub fn steps(&self) -> Vec<Step> {
        let mut s = self.steps.lock().map(|s| s.clone()).unwrap_or_default();
        s.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        s
    }

    /// The membership timeline recorded, by time.
    pub fn membership(&self) -> Vec<super::Membership> {
        let mut m = self.members.lock().map(|m| m.clone()).unwrap_or_default();
        m.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
        m
    }
}

pub const EXPOSE: &str = "Expose";
pub const JOIN: &str = "Join";
pub const GROW: &str = "Grow";
pub const DESTINATION_API: &str = "destination kube-apiserver";
pub const DNS_MOVE: &str = "DNS move";
pub const SOURCE_API_GONE: &str = "source kube-apiserver gone";
pub const SHRINK: &str = "Shrink";
/// The last rows: the whole migration, and what no step accounts for.
pub const WHOLE: &str = "whole migration";
pub const BETWEEN: &str = "between the steps";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorder_measures_from_its_epoch_and_orders_steps() {
        let epoch = Instant::now();
        let r = Recorder::new(epoch);
        let later = epoch + std::time::Duration::from_millis(1500);
        r.step(
            "Join",
            later,
            later + std::time::Duration::from_secs(2),
            &[],
        );
        r.step(
            "Expose: source",
            epoch,
            later,
            &[("routes served".into(), epoch, later)],
        );
        r.add_parts(
            "Join",
            vec![Part {
                what: "x".into(),
                start_ms: 1500.0,
                end_ms: 1600.0,
            }],
        );
        let s = r.steps();
        assert_eq!(s[0].name, "Expose: source");
        assert_eq!(s[0].parts[0].end_ms, 1500.0);
        assert_eq!(
            (s[1].start_ms, s[1].ms(), s[1].parts.len()),
            (1500.0, 2000.0, 1)
        );
        assert_eq!(s[0].row(), EXPOSE);
        let before = epoch.checked_sub(std::time::Duration::from_millis(200));
        if let Some(b) = before {
            assert_eq!(r.ms(b), -200.0);
        }
        // Kubernetes' timestamps, against the same epoch on the wall clock.
        let wall = SystemTime::now() + std::time::Duration::from_secs(3600);
        let stamp = k8s_openapi::jiff::Timestamp::try_from(wall)
            .unwrap()
            .to_string();
        let ms = r.rfc3339_ms(&stamp).unwrap();
        assert!((3_590_000.0..3_610_000.0).contains(&ms), "{stamp}: {ms}");
        assert_eq!(r.rfc3339_ms("yesterday"), None);
    }

    #[test]
    fn a_pods_timestamps_split_its_start_in_order() {
        let now = SystemTime::now();
        let epoch = Instant::now();
        let r = Recorder::new(epoch);
        let stamp = |secs: u64| {
            k8s_openapi::jiff::Timestamp::try_from(now + std::time::Duration::from_secs(secs))
                .unwrap()
                .to_string()
        };
        let pod = |created: u64, ready: u64| {
            serde_json::json!({
                "metadata": {"creationTimestamp": stamp(created)},
                "status": {
                    "conditions": [{"type": "Ready", "lastTransitionTime": stamp(ready)}],
                    "containerStatuses": [{"state": {"running": {"startedAt": stamp(created + 5)}}}],
                },
            })
        };
        // The old pod (created first) is not the one the rollout waited for.
        let pods = serde_json::json!({"items": [pod(2, 100), pod(10, 30)]});
        let end = epoch + std::time::Duration::from_secs(40);
        let parts = r.pod_parts(epoch, end, &pods);
        let what: Vec<&str> = parts.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "Deployment applied, its pod created",
                "pod scheduled, container started",
                "kube-apiserver starting until Ready",
                "rollout seen"
            ]
        );
        // Whole seconds of the wall clock: about 10 s, 5 s, 15 s and 10 s, one after another.
        let secs: Vec<f64> = parts
            .iter()
            .map(|p| ((p.end_ms - p.start_ms) / 1000.0).round())
            .collect();
        assert!(
            secs.iter()
                .zip([10.0, 5.0, 15.0, 10.0])
                .all(|(a, b)| (a - b).abs() <= 1.0),
            "{secs:?}"
        );
        assert!(parts.windows(2).all(|w| w[0].end_ms == w[1].start_ms));
        assert_eq!(parts.last().map(|p| p.end_ms), Some(40_000.0));
        // No pod, no parts.
        assert!(r
            .pod_parts(epoch, end, &serde_json::json!({"items": []}))
            .is_empty());
    }
}
