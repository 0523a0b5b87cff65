//! Each step's duration on the real seeds beside the lab's (issue 45 point 3: "its timeline
//! shows each step's duration next to the lab's"): the rows, how the lab's report gives each
//! one, and the newest lab report on disk to read them from.

use super::steps::{
    Step, BETWEEN, DESTINATION_API, DNS_MOVE, EXPOSE, GROW, JOIN, SHRINK, SOURCE_API_GONE, WHOLE,
};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

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
}
