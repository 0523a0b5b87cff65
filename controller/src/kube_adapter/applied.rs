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
//! its plan, and is said by the next pass. Lost with the process: a new leader falls back to
//! the last status.

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
}

/// Per `Etcd` (`namespace/name`), what isthmus' last apply left there.
#[derive(Debug, Default)]
pub struct AppliedEtcds(Mutex<HashMap<String, Entry>>);

/// What a pass read of the memory: the planner's input, and the notes it saw.
pub(super) struct Read {
    pub(super) applied: Option<EtcdApplied>,
    pub(super) notes: u64,
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl AppliedEtcds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What isthmus applied to the `Etcd` `ns/name` whose uid is `uid` (another object of
    /// that name had none of it).
    pub(super) fn read(&self, ns: &str, name: &str, uid: Option<&str>) -> Read {
        match self.lock().get(&key(ns, name)) {
            Some(e) if Some(e.uid.as_str()) == uid => Read {
                applied: Some(e.applied.clone()),
                notes: e.notes,
            },
            _ => Read {
                applied: None,
                notes: 0,
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
        let unplanned = map
            .get(&k)
            .filter(|e| e.uid == uid && e.notes > read.notes)
            .and_then(|e| e.applied.seen_without.clone());
        let notes = map.get(&k).map_or(0, |e| e.notes);
        map.insert(
            k,
            Entry {
                uid,
                api,
                applied: EtcdApplied {
                    step,
                    fields: fields.clone(),
                    generation: etcd.metadata.generation.unwrap_or(0),
                    seen_without: unplanned,
                },
                notes,
            },
        );
    }

    /// Forgets `ns/name` (released or deleted: nothing of isthmus' is to be kept there).
    pub(super) fn forget(&self, ns: &str, name: &str) {
        self.lock().remove(&key(ns, name));
    }

    /// A version of an `Etcd` as the watch delivered it: a later generation than isthmus'
    /// apply that lacks fields it applied is kept (the first such) for the planner.
    pub fn note(&self, etcd: &DynamicObject) {
        let (Some(ns), Some(uid)) = (etcd.namespace(), etcd.uid()) else {
            return;
        };
        let mut map = self.lock();
        let Some(e) = map.get_mut(&key(&ns, &etcd.name_any())) else {
            return;
        };
        let later = etcd.metadata.generation.unwrap_or(0) > e.applied.generation;
        if e.uid != uid || !later || e.applied.seen_without.is_some() {
            return;
        }
        let Ok(v) = serde_json::to_value(etcd) else {
            return;
        };
        let fields = etcd_observe(&v, e.api).fields;
        if !lacking(&fields, &e.applied.fields, e.api).is_empty() {
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

    /// A wiped version the watch delivers between a pass's read and its apply outlives that
    /// apply (the next pass says it); one the pass read does not.
    #[test]
    fn a_wiped_version_is_kept_until_a_pass_planned_with_it() {
        let memory = AppliedEtcds::default();
        let api = DruidApi::default();
        let nothing = memory.read("shoot", "etcd-main", Some("u1"));
        assert!(nothing.applied.is_none());
        memory.record(&etcd(2, true), api, Step::Expose, &fields(), &nothing);
        // Our own version, an older one, another object of the name: nothing.
        memory.note(&etcd(2, true));
        memory.note(&etcd(1, false));
        let mut other = etcd(3, false);
        other.metadata.uid = Some("u2".into());
        memory.note(&other);
        let read = memory.read("shoot", "etcd-main", Some("u1"));
        assert_eq!(read.applied.as_ref().unwrap().seen_without, None);
        assert!(memory
            .read("shoot", "etcd-main", Some("u2"))
            .applied
            .is_none());

        // gardenlet's wipe lands after the read; the pass's apply writes over it.
        memory.note(&etcd(3, false));
        memory.record(&etcd(4, true), api, Step::Expose, &fields(), &read);
        let next = memory.read("shoot", "etcd-main", Some("u1"));
        let applied = next.applied.clone().unwrap();
        assert_eq!(applied.generation, 4);
        assert!(applied.seen_without.unwrap().advertise.is_empty());
        // That pass planned with it: its apply clears it.
        memory.record(&etcd(4, true), api, Step::Expose, &fields(), &next);
        let after = memory.read("shoot", "etcd-main", Some("u1"));
        assert_eq!(after.applied.unwrap().seen_without, None);
        memory.forget("shoot", "etcd-main");
        assert!(memory
            .read("shoot", "etcd-main", Some("u1"))
            .applied
            .is_none());
    }
}
