//! gardenlet's `Deploy` of a migrating `Etcd` (the real code, through the harness), measured:
//! what it wiped of isthmus' fields, how long until the controller wrote them again, how many
//! reconciles etcd-druid (the stand-in, acting on `Deploy`'s own request) made of the wiped
//! spec, and how long until the step was reached again.

use super::record::{present, wiped, Recorder, Sample};
use super::world::{reach, Side, World, SOURCE_ARGS, STEP_TIMEOUT};
use isthmus_controller::crd::Step;
use isthmus_seed_world::druid::DruidTask;
use isthmus_testkit::gardener::GardenerEtcd;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The fields a `Deploy` removes that the controller puts back (`plan::overwrite`).
const REASSERTABLE: &[&str] = &[
    "etcd.additionalAdvertisePeerURLs",
    "etcd.peerUrlTls.skipClientSANVerification",
];

/// One `Deploy`'s figures.
#[derive(Debug, Clone)]
pub struct Figure {
    pub side: Side,
    pub step: Step,
    /// isthmus' fields it changed (`record::wiped`).
    pub wiped: Vec<String>,
    /// The generation its patch made, and the `gardener.cloud/timestamp` it wrote.
    pub generation: i64,
    pub timestamp: String,
    /// How long from its patch until every removed reassertable field was back.
    pub reasserted: Option<Duration>,
    /// etcd-druid's reconciles of a generation without them: begun (it handed that spec to
    /// the StatefulSet, whose pods roll onto it), and of those finished (the members ran it:
    /// the stand-in's pods rolled onto in-cluster peer URLs only).
    pub wiped_begun: usize,
    pub wiped_finished: usize,
    /// How long from its patch until the step was reached again.
    pub reached: Duration,
    /// The `EtcdSpecOverwritten=True` reasons the status showed after the patch.
    pub findings: Vec<String>,
    /// Whether the last status before the patch showed the step reached. The finding does not
    /// depend on it (the controller remembers what it applied, `kube_adapter::applied`); a
    /// Deploy that lands while the step is re-reached (after the other side's Deploy) is said
    /// too.
    pub ready_at_patch: bool,
}

impl Figure {
    pub fn json(&self) -> Value {
        let who = match self.side {
            Side::Source => "source",
            Side::Destination => "destination",
        };
        json!({"etcd": who, "step": format!("{:?}", self.step), "deployWiped": self.wiped,
               "wipedGeneration": self.generation,
               "reassertedAfterMs": self.reasserted.map(|d| d.as_millis() as u64),
               "druidReconcilesOfWipedSpec": {"begun": self.wiped_begun,
                                              "finished": self.wiped_finished},
               "stepReachedAgainAfterMs": self.reached.as_millis() as u64,
               "findings": self.findings, "readyAtPatch": self.ready_at_patch})
    }
}

struct Parts<'a> {
    gardenlet: &'a GardenerEtcd,
    etcd: &'a Recorder,
    status: &'a Recorder,
    druid: &'a DruidTask,
    args: &'static [&'static str],
}

fn parts(w: &World, side: Side) -> Parts<'_> {
    match side {
        Side::Source => Parts {
            gardenlet: &w.gardenlet_a,
            etcd: &w.rec_a,
            status: &w.mig_a,
            druid: &w.druid_a,
            args: SOURCE_ARGS,
        },
        Side::Destination => Parts {
            gardenlet: &w.gardenlet_b,
            etcd: &w.rec_b,
            status: &w.mig_b,
            druid: &w.druid_b,
            args: &[],
        },
    }
}

/// Waits for the first sample from `from` on that `pred` accepts.
async fn first(rec: &Recorder, from: usize, what: &str, pred: impl Fn(&Sample) -> bool) -> Sample {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Some(s) = rec.since(from).into_iter().find(|s| pred(s)) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not seen within {STEP_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs gardenlet's `Deploy` on `side`'s `Etcd` while the migration is at `step` (already
/// reached), then, when `reasserts`, waits until the controller wrote back what it removed,
/// said so (`EtcdSpecOverwritten=True`) and `step` is reached again (the watch sees every
/// status version). Else the status is as it was.
pub async fn deploy(w: &World, side: Side, step: Step, reasserts: bool) -> Figure {
    let p = parts(w, side);
    let (mark, status_mark) = (p.etcd.len(), p.status.len());
    let acted_before = p.druid.generations();
    let out = p.gardenlet.redeploy(p.args).await;
    let ts = out["timestamp"].as_str().unwrap().to_string();
    let before = out["before"].clone();
    let at = first(p.etcd, mark, "Deploy's patch", |s| s.timestamp() == ts).await;
    let wiped = wiped(&before, &at.obj);
    let removed: Vec<&str> = REASSERTABLE
        .iter()
        .copied()
        .filter(|n| wiped.iter().any(|x| x == &format!("{n} removed")))
        .collect();
    let back = match reasserts && !removed.is_empty() {
        false => None,
        true => Some(
            first(p.etcd, mark, "isthmus' fields back", |s| {
                s.generation() > at.generation() && present(&s.obj, &removed)
            })
            .await,
        ),
    };
    let ready_at_patch = p
        .status
        .since(0)
        .iter()
        .rfind(|s| s.revision() <= at.revision())
        .is_some_and(|s| s.ready());
    let reached = match back {
        None => {
            let admin = match side {
                Side::Source => &w.a.admin,
                Side::Destination => &w.b.admin,
            };
            reach(admin, step, &format!("{side:?} after its Deploy")).await;
            at.at.elapsed()
        }
        Some(_) => {
            // The pass that said the wipe, then the step reached again — that very pass when
            // the step never left: a wipe landing between a pass' read and its apply is
            // written over unseen by that plan (its step stays reached) and said by the next
            // pass (`kube_adapter::applied`).
            let said = first(p.status, status_mark, "a pass that said the wipe", |s| {
                s.revision() > at.revision()
                    && s.condition("EtcdSpecOverwritten")
                        .is_some_and(|(status, _)| status == "True")
            })
            .await;
            let again = first(p.status, status_mark, "the step reached again", |s| {
                s.at >= said.at && s.ready()
            })
            .await;
            again.at - at.at
        }
    };
    // The generations that lacked the fields: from Deploy's patch to the one that has them.
    let last_wiped = back
        .as_ref()
        .map_or(at.generation(), |b| b.generation() - 1);
    let acted = p.druid.generations();
    let count = |list: &[i64], from: usize| match back {
        None => 0,
        Some(_) => list[from..]
            .iter()
            .filter(|g| (at.generation()..=last_wiped).contains(g))
            .count(),
    };
    let wiped_begun = count(&acted.reconciled, acted_before.reconciled.len());
    let wiped_finished = count(&acted.rolled_out, acted_before.rolled_out.len());
    Figure {
        side,
        step,
        wiped,
        generation: at.generation(),
        timestamp: ts,
        reasserted: back.map(|b| b.at - at.at),
        wiped_begun,
        wiped_finished,
        reached,
        ready_at_patch,
        findings: p
            .status
            .since(status_mark)
            .iter()
            .filter(|s| s.revision() > at.revision())
            .filter_map(|s| s.condition("EtcdSpecOverwritten"))
            .filter(|(status, _)| status == "True")
            .map(|(_, reason)| reason)
            .fold(Vec::new(), |mut v, r| {
                if !v.contains(&r) {
                    v.push(r);
                }
                v
            }),
    }
}
