//! The leadership transfers etcd itself logged, as events of the run: the isthmus controller
//! moves the leadership at `Shrink` in its own process, so the lab's journal does not see it,
//! and a request that waited then (a proposal the old leader dropped while it handed over:
//! raft's `stepLeader` drops `MsgProp` while `leadTransferee` is set, and the follower that
//! forwarded it waits for its request timeout, etcd-io/etcd#8975) needs it beside it.

use crate::stats::Event;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

/// Every `finished leadership transfer` line in the members' logs (`<name>.log` in `dir`,
/// etcd v3.4's capnslog: `2026-11-30 10:43:19.366566 I | etcdserver: A finished leadership
/// transfer from A to B (took 201.57ms)`, local time, which is UTC here), as an event at its
/// start, with the members named as their logs name them (`starting member ID`).
pub fn transfers(dir: &Path, epoch: SystemTime) -> Vec<Event> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let logs: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".log")?.to_owned();
            let text = std::fs::read_to_string(e.path()).ok()?;
            text.contains("etcdserver: starting member")
                .then_some((name, text))
        })
        .collect();
    let names: BTreeMap<&str, &str> = logs
        .iter()
        .filter_map(|(name, text)| Some((member_id(text)?, name.as_str())))
        .collect();
    let named = |id: &str| names.get(id).copied().unwrap_or(id).to_owned();
    let mut events: Vec<Event> = logs
        .iter()
        .flat_map(|(_, text)| text.lines().filter_map(|l| finished(l, epoch)))
        .map(|(t_ms, from, to, took)| Event {
            t_ms,
            what: format!(
                "etcd: leadership {} -> {} ({took}, etcd's log)",
                named(from),
                named(to)
            ),
        })
        .collect();
    events.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    events
}

fn member_id(log: &str) -> Option<&str> {
    let rest = log.split("etcdserver: starting member ").nth(1)?;
    rest.split(' ').next()
}

/// (start in ms since `epoch`, from, to, took) of a `finished leadership transfer` line.
fn finished(line: &str, epoch: SystemTime) -> Option<(f64, &str, &str, &str)> {
    let (stamp, rest) = line.split_once(" I | etcdserver: ")?;
    let rest = rest.split(" finished leadership transfer from ").nth(1)?;
    let (from, rest) = rest.split_once(" to ")?;
    let (to, took) = rest.split_once(" (took ")?;
    let took = took.strip_suffix(')')?;
    let end: k8s_openapi::jiff::Timestamp =
        format!("{}Z", stamp.replacen(' ', "T", 1)).parse().ok()?;
    let took_ms = took
        .strip_suffix("ms")
        .and_then(|t| t.parse::<f64>().ok())?;
    let end = SystemTime::from(end);
    let ms = match end.duration_since(epoch) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(_) => return None,
    };
    Some((ms - took_ms, from, to, took))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_transfer_is_an_event_at_its_start_between_named_members() {
        let dir = isthmus_testkit::Scratch::new("lab-leadership");
        std::fs::write(
            dir.join("etcd-main-0.log"),
            "2026-11-30 10:42:20.406115 I | etcdserver: starting member 401d in cluster 11\n\
             2026-11-30 10:43:19.366566 I | etcdserver: 401d finished leadership transfer from 401d to 63d5 (took 201.576541ms)\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("dest-etcd-main-0.log"),
            "2026-11-30 10:42:40.735140 I | etcdserver: starting member 63d5 in cluster 11\n",
        )
        .unwrap();
        std::fs::write(dir.join("proxy-src.log"), "not etcd\n").unwrap();
        // The lab started at 10:42:12 UTC.
        let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_035_332);
        let events = transfers(dir.path(), epoch);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            events[0].what,
            "etcd: leadership etcd-main-0 -> dest-etcd-main-0 (201.576541ms, etcd's log)"
        );
        assert!(
            (events[0].t_ms - 67_165.0).abs() < 1.0,
            "{}",
            events[0].t_ms
        );
    }
}
