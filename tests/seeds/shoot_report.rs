//! The report and picture of the shoot's move across the real seeds (issue 45 point 3), made
//! by the lab's own code (`isthmus_lab::report::real`, `isthmus_lab::svg`): the steps as timed
//! lanes with where their time went (recorded by `join_expose.rs` and `shoot_move.rs` through
//! an [`isthmus_lab::report::steps::Recorder`]), the shoot API's requests and invariants, and
//! each step's duration beside the lab's, read from the newest lab report in `target/demo/`
//! (`scripts/demo.sh` writes one; this test never runs the lab). Written to
//! `target/demo/seeds-real/` (`report.json`, `timeline.svg`), the table also as `figure:`
//! lines.

use super::node::Node;
use isthmus_lab::api::report::{ApiReport, Objects};
use isthmus_lab::report::compare::{newest_lab_report, Comparison};
use isthmus_lab::report::real::RealRun;
use isthmus_lab::report::steps::{Recorder, DESTINATION_API, DNS_MOVE};
use isthmus_lab::report::Event;
use isthmus_lab::webhook::Call;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the lab's demo writes its report (scripts/demo.sh), and this run's.
fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/demo")
}

const NO_LAB_REPORT: &str = "no lab report in target/demo/: `sudo ./scripts/demo.sh` writes target/demo/report.json (RTT 50 ms), then run this again for the lab's column";

/// The destination kube-apiserver's step, from `start` (its objects applied) to now (its
/// rollout seen), and where the time went by its pod's own timestamps: the pod created,
/// the container started, the pod Ready.
pub fn destination_ready(steps: &Recorder, seed: &Node, ns: &str, start: Instant) {
    let end = Instant::now();
    // The report's part only: a failed read leaves the step without its parts.
    let pods = seed
        .try_kubectl(&[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "app=kubernetes,role=apiserver",
            "-o",
            "json",
        ])
        .unwrap_or_default();
    let pods: serde_json::Value = serde_json::from_str(&pods).unwrap_or_default();
    let parts = steps.pod_parts(start, end, &pods);
    steps.step(DESTINATION_API, start, end, &[]);
    steps.add_parts(DESTINATION_API, parts);
}

/// What `write` needs of the run besides the recorded steps.
pub struct Measured<'a> {
    pub api: &'a ApiReport,
    pub objects: &'a Objects,
    pub phases: &'a [(String, f64, f64)],
    /// The reviews the shoot's webhook answered, and the failed calls however seen.
    pub webhook: &'a [Call],
    pub webhook_failed: usize,
}

/// Writes the report and the picture to `target/demo/seeds-real/`, prints the summary, the
/// table as `figure:` lines and where the files are.
pub fn write(steps: &Recorder, m: Measured) {
    let lab = newest_lab_report(&[demo_dir()]);
    let recorded = steps.steps();
    let comparison = Comparison::new(
        &recorded,
        lab.as_ref().map(|(p, v)| (p.as_path(), v)),
        NO_LAB_REPORT,
    );
    for st in &recorded {
        let parts: Vec<String> = st
            .parts
            .iter()
            .map(|p| format!("{} {:.1} s", p.what, (p.end_ms - p.start_ms) / 1000.0))
            .collect();
        println!(
            "figure: step {} at {:.1} s: {:.1} s; where the time went: {}",
            st.name,
            st.start_ms / 1000.0,
            st.ms() / 1000.0,
            parts.join(", ")
        );
    }
    for line in comparison.lines() {
        println!("figure: step on the seeds beside the lab: {line}");
    }
    if lab.is_none() {
        println!("figure: {NO_LAB_REPORT}");
    }
    // The name's move as the lab's event (its picture labels it).
    let events = recorded
        .iter()
        .filter(|s| s.row() == DNS_MOVE)
        .map(|s| Event {
            t_ms: s.start_ms,
            what: "the shoot API's name now points at the destination kube-apiserver (client moved to seed b)".into(),
        })
        .collect();
    let report = RealRun {
        rtt_ms: 50.0,
        kube_apiserver: "v1.34.4 (a pod in each seed)".into(),
        api: m.api.clone(),
        objects: m.objects.clone(),
        phases: m.phases.to_vec(),
        steps: recorded,
        members: steps.membership(),
        events,
        writer: steps.written(),
        comparison,
        webhook: m.webhook.to_vec(),
        webhook_failed: m.webhook_failed,
    }
    .report();
    let dir = demo_dir().join("seeds-real");
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("report.json"), dir.join("timeline.svg"));
    std::fs::write(&json, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    std::fs::write(&svg, isthmus_lab::svg::timeline(&report)).unwrap();
    print!("{}", report.summary());
    println!(
        "figure: report: {}  picture: {}",
        json.display(),
        svg.display()
    );
}
