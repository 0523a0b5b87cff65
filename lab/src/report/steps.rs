//! A run's migration steps as timed lanes, each with the parts it was seen to spend its time
//! on, and the table that puts each step's duration beside the lab's (issue 45 point 3: the
//! demo on two real seeds, `tests/seeds/shoot_report.rs`). The lab's own runs leave
//! [`super::Report::steps`] empty; a run on real seeds records them with a [`Recorder`] and
//! reads the lab's durations from a lab report on disk ([`newest_lab_report`]).

use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
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
#[derive(Debug, Clone, Copy, Default)]
pub struct Writer {
    pub acknowledged: usize,
    pub failed: usize,
    pub lost: usize,
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

    pub fn written(&self) -> Option<Writer> {
        self.writer.lock().ok().and_then(|w| *w)
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

/// How the lab's report gives a step's duration.
#[derive(Debug, Clone, Copy)]
enum LabMeasure {
    /// A phase of the lab (`report.phases[].name`), start to end.
    Phase(&'static str),
    /// `control_plane.destination_ready_ms`.
    DestinationReady,
    /// From a phase's start to the first event containing the text.
    PhaseToEvent(&'static str, &'static str),
    /// An event (containing the text) that takes no time in the lab: 0 ms when it happened.
    Instant(&'static str),
    /// From the first phase's start to the last's end, both named.
    Span(&'static str, &'static str),
}

impl LabMeasure {
    fn describe(self) -> String {
        match self {
            Self::Phase(p) => format!("lab phase `{p}`"),
            Self::DestinationReady => "lab control_plane.destination_ready_ms".into(),
            Self::PhaseToEvent(p, e) => format!("lab phase `{p}` start to event `{e}`"),
            Self::Instant(e) => format!("lab event `{e}` (instant)"),
            Self::Span(a, b) => format!("lab phase `{a}` start to `{b}` end"),
        }
    }

    /// The duration in `lab` (a lab report's JSON), if it has what this reads.
    fn of(self, lab: &Value) -> Option<f64> {
        let phase = |name: &str| {
            lab["phases"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == name)
                .and_then(|p| Some((p["start"].as_f64()?, p["end"].as_f64()?)))
        };
        let event = |what: &str| {
            lab["events"]
                .as_array()?
                .iter()
                .find(|e| e["what"].as_str().is_some_and(|w| w.contains(what)))
                .and_then(|e| e["t_ms"].as_f64())
        };
        match self {
            Self::Phase(p) => phase(p).map(|(s, e)| e - s),
            Self::DestinationReady => lab["control_plane"]["destination_ready_ms"].as_f64(),
            Self::PhaseToEvent(p, e) => Some(event(e)? - phase(p)?.0),
            Self::Instant(e) => event(e).map(|_| 0.0),
            Self::Span(a, b) => Some(phase(b)?.1 - phase(a)?.0),
        }
    }
}

/// The comparison's rows that the lab also has, in the migration's order, and how the lab
/// measures each. A real run's steps are named after these (`Step::row`); a row the lab has
/// no counterpart of (the chart values both seeds need, the names resolving across the seeds)
/// shows the real seeds' duration alone.
const LAB_ROWS: &[(&str, LabMeasure)] = &[
    (EXPOSE, LabMeasure::Phase("expose")),
    (JOIN, LabMeasure::Phase("join")),
    (GROW, LabMeasure::Phase("grow")),
    (DESTINATION_API, LabMeasure::DestinationReady),
    (
        DNS_MOVE,
        LabMeasure::Instant("now points at the destination kube-apiserver"),
    ),
    (
        SOURCE_API_GONE,
        LabMeasure::PhaseToEvent("six", "source kube-apiserver stopped"),
    ),
    (SHRINK, LabMeasure::Phase("shrink")),
];

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

/// One row of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub step: String,
    /// The real seeds' duration (its steps' first start to last end).
    pub seeds_ms: Option<f64>,
    /// The lab's, when a lab report was read and has this step.
    pub lab_ms: Option<f64>,
    /// Where the lab's duration comes from (empty: the lab has no such step).
    pub lab_measure: String,
}

/// Each step's duration on the real seeds beside the lab's.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The lab report read (`None`: none was found).
    pub lab_report: Option<String>,
    /// The lab run's scenario and RTT, or how to make a lab report.
    pub note: String,
    pub rows: Vec<Row>,
}

impl Comparison {
    /// The rows of `steps` beside `lab` (a lab report's JSON and where it was read), or with
    /// an empty lab column and `missing` (how to make one) as the note.
    pub fn new(steps: &[Step], lab: Option<(&Path, &Value)>, missing: &str) -> Self {
        let span = |row: &str| {
            let of: Vec<&Step> = steps.iter().filter(|s| s.row() == row).collect();
            let start = of.iter().map(|s| s.start_ms).reduce(f64::min)?;
            let end = of.iter().map(|s| s.end_ms).reduce(f64::max)?;
            Some(end - start)
        };
        let mut rows: Vec<Row> = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        // The real steps' rows in their order; a lab row the seeds never reached still shows.
        for s in steps {
            if !seen.contains(&s.row()) {
                seen.push(s.row());
            }
        }
        for (name, _) in LAB_ROWS {
            if !seen.contains(name) {
                seen.push(*name);
            }
        }
        for name in seen {
            let measure = LAB_ROWS.iter().find(|(n, _)| *n == name).map(|(_, m)| *m);
            rows.push(Row {
                step: name.to_owned(),
                seeds_ms: span(name),
                lab_ms: lab.and_then(|(_, v)| measure?.of(v)),
                lab_measure: measure.map(LabMeasure::describe).unwrap_or_default(),
            });
        }
        let whole = steps
            .iter()
            .map(|s| s.start_ms)
            .reduce(f64::min)
            .zip(steps.iter().map(|s| s.end_ms).reduce(f64::max))
            .map(|(s, e)| e - s);
        let whole_lab = LabMeasure::Span("expose", "shrink");
        rows.push(Row {
            step: WHOLE.into(),
            seeds_ms: whole,
            lab_ms: lab.and_then(|(_, v)| whole_lab.of(v)),
            lab_measure: whole_lab.describe(),
        });
        // What the real run spent outside every step (checks, the writer's move): the whole
        // less the steps, which do not overlap.
        let stepped: f64 = steps.iter().map(Step::ms).sum();
        rows.push(Row {
            step: BETWEEN.into(),
            seeds_ms: whole.map(|w| (w - stepped).max(0.0)),
            lab_ms: None,
            lab_measure: String::new(),
        });
        let note = match lab {
            Some((path, v)) => format!(
                "lab report {} (scenario {}, RTT {} ms)",
                path.display(),
                v["scenario"].as_str().unwrap_or("?"),
                v["rtt_ms"].as_f64().unwrap_or(f64::NAN)
            ),
            None => missing.to_owned(),
        };
        Self {
            lab_report: lab.map(|(p, _)| p.display().to_string()),
            note,
            rows,
        }
    }

    /// The table as text lines (`step  seeds  lab  lab's measure`).
    pub fn lines(&self) -> Vec<String> {
        let s = |ms: Option<f64>| ms.map_or("-".to_owned(), |m| format!("{:.1} s", m / 1000.0));
        let mut out = vec![format!(
            "{:<30} {:>10} {:>10}   ({})",
            "step", "seeds", "lab", self.note
        )];
        for r in &self.rows {
            out.push(format!(
                "{:<30} {:>10} {:>10}   {}",
                r.step,
                s(r.seeds_ms),
                s(r.lab_ms),
                r.lab_measure
            ));
        }
        out
    }
}

/// The newest lab report (`isthmus-lab demo --report`, JSON with `phases` and `scenario`)
/// among the `.json` files of `dirs`, with its content; files that are not one are skipped.
pub fn newest_lab_report(dirs: &[PathBuf]) -> Option<(PathBuf, Value)> {
    let mut found: Vec<(SystemTime, PathBuf, Value)> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            // A real-seed report has steps of its own; only the lab's own runs count.
            let lab = v["phases"].is_array()
                && v["scenario"].is_string()
                && v["steps"].as_array().is_none_or(Vec::is_empty);
            let modified = e.metadata().and_then(|m| m.modified());
            if let (true, Ok(m)) = (lab, modified) {
                found.push((m, path, v));
            }
        }
    }
    found
        .into_iter()
        .max_by_key(|f| f.0)
        .map(|(_, p, v)| (p, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, start: f64, end: f64) -> Step {
        Step {
            name: name.into(),
            start_ms: start,
            end_ms: end,
            parts: Vec::new(),
        }
    }

    fn lab_report() -> Value {
        serde_json::json!({
            "scenario": "migrate", "rtt_ms": 50.0,
            "control_plane": {"destination_ready_ms": 4200.0},
            "phases": [
                {"name": "source", "start": 0.0, "end": 2000.0},
                {"name": "expose", "start": 2000.0, "end": 12000.0},
                {"name": "join", "start": 12000.0, "end": 30000.0},
                {"name": "five", "start": 30000.0, "end": 40000.0},
                {"name": "grow", "start": 40000.0, "end": 47000.0},
                {"name": "six", "start": 47000.0, "end": 49000.0},
                {"name": "shrink", "start": 49000.0, "end": 60000.0},
            ],
            "events": [
                {"t_ms": 40100.0, "what": "api.shoot.lab now points at the destination kube-apiserver"},
                {"t_ms": 48500.0, "what": "source kube-apiserver stopped: SIGTERM"},
            ],
        })
    }

    #[test]
    fn the_table_pairs_each_real_step_with_the_labs() {
        let steps = [
            step("admit", 0.0, 5000.0),
            step("Expose: source", 5000.0, 65000.0),
            step("Expose: destination", 65000.0, 70000.0),
            step("Join", 80000.0, 180000.0),
            step("Shrink", 200000.0, 230000.0),
        ];
        let lab = lab_report();
        let c = Comparison::new(&steps, Some((Path::new("r.json"), &lab)), "none");
        let row = |n: &str| c.rows.iter().find(|r| r.step == n).unwrap().clone();
        // Both Expose lanes make one row, beside the lab's `expose` phase.
        assert_eq!(row(EXPOSE).seeds_ms, Some(65000.0));
        assert_eq!(row(EXPOSE).lab_ms, Some(10000.0));
        assert_eq!(row(JOIN).lab_ms, Some(18000.0));
        assert_eq!(row(SHRINK).seeds_ms, Some(30000.0));
        assert_eq!(row(SHRINK).lab_ms, Some(11000.0));
        // Rows only the real seeds have keep an empty lab column; rows the run never reached
        // keep an empty seeds column.
        assert_eq!(
            (row("admit").seeds_ms, row("admit").lab_ms),
            (Some(5000.0), None)
        );
        assert_eq!((row(GROW).seeds_ms, row(GROW).lab_ms), (None, Some(7000.0)));
        assert_eq!(row(DESTINATION_API).lab_ms, Some(4200.0));
        assert_eq!(row(DNS_MOVE).lab_ms, Some(0.0));
        assert_eq!(row(SOURCE_API_GONE).lab_ms, Some(1500.0));
        assert_eq!(row(WHOLE).seeds_ms, Some(230000.0));
        assert_eq!(row(WHOLE).lab_ms, Some(58000.0));
        // 230 s in all, 200 s of it in steps.
        assert_eq!(row(BETWEEN).seeds_ms, Some(30000.0));
        // The real steps' order first: admit before Expose.
        let order: Vec<&str> = c.rows.iter().map(|r| r.step.as_str()).collect();
        assert_eq!(&order[..3], ["admit", EXPOSE, JOIN]);
        assert!(
            c.note.contains("r.json") && c.note.contains("RTT 50 ms"),
            "{}",
            c.note
        );
    }

    #[test]
    fn without_a_lab_report_the_lab_column_is_empty_and_says_how_to_make_one() {
        let steps = [step("Join", 0.0, 1000.0)];
        let c = Comparison::new(&steps, None, "make one with scripts/demo.sh");
        assert!(c.rows.iter().all(|r| r.lab_ms.is_none()));
        assert_eq!(c.lab_report, None);
        assert_eq!(c.note, "make one with scripts/demo.sh");
        assert!(c.lines()[0].contains("make one with scripts/demo.sh"));
    }

    #[test]
    fn the_newest_lab_report_is_found_and_a_real_seed_report_is_not() {
        let dir = std::env::temp_dir().join(format!("isthmus-lab-steps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(newest_lab_report(std::slice::from_ref(&dir)).is_none());
        assert!(newest_lab_report(&[dir.join("absent")]).is_none());
        std::fs::write(dir.join("report.json"), lab_report().to_string()).unwrap();
        std::fs::write(dir.join("notes.txt"), "{}").unwrap();
        std::fs::write(dir.join("broken.json"), "{").unwrap();
        // Written later, but a real seeds' report (it has steps): never the lab's.
        let mut real = lab_report();
        real["steps"] = serde_json::json!([{"name": "Join"}]);
        std::fs::write(dir.join("seeds.json"), real.to_string()).unwrap();
        let (path, v) = newest_lab_report(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(path, dir.join("report.json"));
        assert_eq!(v["scenario"], "migrate");
        let _ = std::fs::remove_dir_all(&dir);
    }

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
