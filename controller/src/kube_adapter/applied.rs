//! What isthmus last applied to each `Etcd`, remembered by the controller (`plan::EtcdApplied`):
//! the step, the fields, the generation the apply returned. It tells the planner which of its
//! fields isthmus had on the `Etcd` at this step, so that re-writing fields another writer
//! removed is always said (`EtcdSpecOverwritten`, `plan::overwrite`). The last status a pass
//! reads cannot tell it: it comes from the watch cache, which may not hold the status the
//! previous pass wrote yet (gardenlet's `Deploy` wakes a pass at once), and isthmus' fields
//! are there before a step is reached too.
//!
//! The `Etcd` watch also shows each later generation ([`AppliedEtcds::note`]): a version another
//! writer made between a pass's read and its apply is written over by that apply unseen by
//! its plan, and is said by the next pass. The watch may deliver that version only after the
//! apply returned a newer generation (it is late under load: CI once at load average ~58 on
//! 2 cores), so the generations between a pass's read and its apply are kept until the watch
//! has delivered past them, not compared with the apply's alone. Lost with the process: a
//! new leader falls back to the last status.

use crate::crd::{DruidApi, Step};
use crate::gardener::etcd_observe;
use crate::plan::{lacking, EtcdApplied, EtcdFields};
use kube::api::DynamicObject;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug)]
struct Entry {
    uid: String,
    api: DruidApi,
    applied: EtcdApplied,
    /// Versions noted lacking fields since the entry was made (a pass's read is stamped with
    /// it: a note after the read was not planned with).
    notes: u64,
    /// Generations no pass planned with that an apply wrote over: `(read, applied)`, both
    /// exclusive, per apply that returned a generation more than one past the one its pass
    /// read. Dropped once the watch delivered a generation at or past `applied` (it delivers
    /// one object's versions in order).
    written_over: Vec<(i64, i64)>,
    /// The highest generation the watch delivered: a version of it or below was judged when
    /// its spec first came (druid's status writes repeat a generation).
    delivered: i64,
}

/// At most this many windows are kept (a watch that stopped delivering would grow them).
const WINDOWS: usize = 8;

/// Per `Etcd` (`namespace/name`), what isthmus' last apply left there.
#[derive(Debug, Default)]
pub struct AppliedEtcds(Mutex<HashMap<String, Entry>>);

/// What a pass read of the memory: the planner's input, the notes it saw, and the generation
/// of the `Etcd` it planned with.
pub(super) struct Read {
    pub(super) applied: Option<EtcdApplied>,
    pub(super) notes: u64,
    /// The `Etcd` read: uid and generation.
    pub(super) etcd: Option<(String, i64)>,
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl AppliedEtcds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What isthmus applied to the `Etcd` `ns/name`, read by a pass as `etcd` (another object
    /// of that name, or none, had none of it).
    pub(super) fn read(&self, ns: &str, name: &str, etcd: Option<&DynamicObject>) -> Read {
        let etcd = etcd.and_then(|o| Some((o.uid()?, o.metadata.generation.unwrap_or(0))));
        match self.lock().get(&key(ns, name)) {
            Some(e) if etcd.as_ref().is_some_and(|(uid, _)| *uid == e.uid) => Read {
                applied: Some(e.applied.clone()),
                notes: e.notes,
                etcd,
            },
            _ => Read {
                applied: None,
                notes: 0,
                etcd,
            },
        }
    }

    /// Remembers an apply of `fields` at `step` that returned `etcd`; a version noted since
    /// `read` (unplanned) is kept for the next pass.
    pub(super) fn record(
        &self,
        etcd: &DynamicObject,
        api: DruidApi,
        step: Step,
        fields: &EtcdFields,
        read: &Read,
    ) {
        let (Some(ns), Some(uid)) = (etcd.namespace(), etcd.uid()) else {
            return;
        };
        let mut map = self.lock();
        let k = key(&ns, &etcd.name_any());
        let same = map.get(&k).filter(|e| e.uid == uid);
        let unplanned = same
            .filter(|e| e.notes > read.notes)
            .and_then(|e| e.applied.seen_without.clone());
        let notes = map.get(&k).map_or(0, |e| e.notes);
        let generation = etcd.metadata.generation.unwrap_or(0);
        let mut written_over = same.map(|e| e.written_over.clone()).unwrap_or_default();
        let delivered = same.map_or(0, |e| e.delivered);
        // A generation between the one planned with and the apply's own: another writer's,
        // which the watch may not have delivered yet.
        match &read.etcd {
            Some((read_uid, r)) if *read_uid == uid && generation - r > 1 => {
                written_over.push((*r, generation));
            }
            _ => {}
        }
        let excess = written_over.len().saturating_sub(WINDOWS);
        written_over.drain(..excess);
        map.insert(
            k,
            Entry {
                uid,
                api,
                applied: EtcdApplied {
                    step,
                    fields: fields.clone(),
                    generation,
                    seen_without: unplanned,
                },
                notes,
                written_over,
                delivered,
            },
        );
    }

    /// Forgets `ns/name` (released or deleted: nothing of isthmus' is to be kept there).
    pub(super) fn forget(&self, ns: &str, name: &str) {
        self.lock().remove(&key(ns, name));
    }

    /// A version of an `Etcd` as the watch delivered it: one no pass planned with — a later
    /// generation than isthmus' last apply, or one an apply wrote over, delivered after it —
    /// that lacks fields isthmus applied is kept (the first such) for the planner.
    pub fn note(&self, etcd: &DynamicObject) {
        let (Some(ns), Some(uid)) = (etcd.namespace(), etcd.uid()) else {
            return;
        };
        let mut map = self.lock();
        let Some(e) = map.get_mut(&key(&ns, &etcd.name_any())) else {
            return;
        };
        if e.uid != uid {
            return;
        }
        let generation = etcd.metadata.generation.unwrap_or(0);
        let later = generation > e.applied.generation;
        let written_over = generation > e.delivered
            && e.written_over
                .iter()
                .any(|(read, applied)| (read + 1..*applied).contains(&generation));
        e.delivered = e.delivered.max(generation);
        e.written_over.retain(|(_, applied)| *applied > generation);
        if !(later || written_over) || e.applied.seen_without.is_some() {
            return;
        }
        let Ok(v) = serde_json::to_value(etcd) else {
            return;
        };
        let fields = etcd_observe(&v, e.api).fields;
        let lacks = lacking(&fields, &e.applied.fields, e.api);
        if !lacks.is_empty() {
            if !later {
                tracing::debug!(etcd = %key(&ns, &etcd.name_any()), generation, applied = e.applied.generation, lacking = ?lacks, "a version an apply wrote over, delivered after it");
            }
            e.applied.seen_without = Some(fields);
            e.notes += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::MemberUrls;
    use serde_json::json;

    fn etcd(generation: i64, advertised: bool) -> DynamicObject {
        let mut spec = json!({"replicas": 3, "etcd": {}});
        if advertised {
            spec["etcd"]["additionalAdvertisePeerURLs"] =
                json!([{"memberName": "m-0", "urls": ["https://m0.example:2380"]}]);
        }
        serde_json::from_value(json!({
            "apiVersion": "druid.gardener.cloud/v1alpha1", "kind": "Etcd",
            "metadata": {"name": "etcd-main", "namespace": "shoot", "uid": "u1",
                         "generation": generation},
            "spec": spec,
        }))
        .unwrap()
    }

    fn fields() -> EtcdFields {
        EtcdFields {
            advertise: vec![MemberUrls {
                name: "m-0".into(),
                peer_urls: vec!["https://m0.example:2380".into()],
                client_urls: Vec::new(),
            }],
            ..Default::default()
        }
    }

    fn read(memory: &AppliedEtcds, etcd: &DynamicObject) -> Read {
        memory.read("shoot", "etcd-main", Some(etcd))
    }

    /// A wiped version the watch delivers between a pass's read and its apply outlives that
    /// apply (the next pass says it); one the pass read does not.
    #[test]
    fn a_wiped_version_is_kept_until_a_pass_planned_with_it() {
        let memory = AppliedEtcds::default();
        let api = DruidApi::default();
        let nothing = read(&memory, &etcd(1, false));
        assert!(nothing.applied.is_none());
        memory.record(&etcd(2, true), api, Step::Expose, &fields(), &nothing);
        // Our own version, an older one, another object of the name: nothing.
        memory.note(&etcd(2, true));
        memory.note(&etcd(1, false));
        let mut other = etcd(3, false);
        other.metadata.uid = Some("u2".into());
        memory.note(&other);
        let r = read(&memory, &etcd(2, true));
        assert_eq!(r.applied.as_ref().unwrap().seen_without, None);
        assert!(read(&memory, &other).applied.is_none());

        // gardenlet's wipe lands after the read; the pass's apply writes over it.
        memory.note(&etcd(3, false));
        memory.record(&etcd(4, true), api, Step::Expose, &fields(), &r);
        let next = read(&memory, &etcd(4, true));
        let applied = next.applied.clone().unwrap();
        assert_eq!(applied.generation, 4);
        assert!(applied.seen_without.unwrap().advertise.is_empty());
        // That pass planned with it: its apply clears it, and druid's status write of the
        // wiped generation, delivered late, is not said again.
        memory.record(&etcd(4, true), api, Step::Expose, &fields(), &next);
        memory.note(&etcd(3, false));
        let after = read(&memory, &etcd(4, true));
        assert_eq!(after.applied.unwrap().seen_without, None);
        memory.forget("shoot", "etcd-main");
        assert!(read(&memory, &etcd(4, true)).applied.is_none());
    }

    /// Under load the watch delivers gardenlet's wipe only after the apply that wrote over it
    /// returned a newer generation (CI, load average ~58 on 2 cores: the wipe was never said),
    /// even after another pass planned with that newer one: still kept for the next pass.
    /// A version a pass planned with, delivered late, is not.
    #[test]
    fn a_wipe_the_watch_delivers_after_the_apply_over_it_is_kept() {
        let memory = AppliedEtcds::default();
        let api = DruidApi::default();
        let first = read(&memory, &etcd(1, false));
        memory.record(&etcd(2, true), api, Step::Join, &fields(), &first);
        memory.note(&etcd(2, true));
        // A pass reads generation 2; gardenlet's wipe makes 3; the pass's apply makes 4.
        let r = read(&memory, &etcd(2, true));
        memory.record(&etcd(4, true), api, Step::Join, &fields(), &r);
        // Another pass reads 4 before the watch delivered 3, and changes nothing.
        let again = read(&memory, &etcd(4, true));
        assert_eq!(again.applied.as_ref().unwrap().seen_without, None);
        memory.record(&etcd(4, true), api, Step::Join, &fields(), &again);
        // The watch delivers 3 now, then druid's status write of it: kept, once.
        memory.note(&etcd(3, false));
        let next = read(&memory, &etcd(4, true));
        let seen = next.applied.clone().unwrap().seen_without;
        assert!(seen.unwrap().advertise.is_empty(), "the late wipe is kept");
        memory.record(&etcd(4, true), api, Step::Join, &fields(), &next);
        memory.note(&etcd(3, false));
        memory.note(&etcd(4, true));
        let said = read(&memory, &etcd(4, true));
        assert_eq!(said.applied.unwrap().seen_without, None);

        // A wipe the pass read (and said), delivered after its apply: not kept.
        let saw = read(&memory, &etcd(5, false));
        memory.record(&etcd(6, true), api, Step::Join, &fields(), &saw);
        memory.note(&etcd(5, false));
        let clear = read(&memory, &etcd(6, true));
        assert_eq!(clear.applied.unwrap().seen_without, None);
    }
}
