//! Each source etcd member's log kept across `Expose`'s roll, and each joining member's
//! backup-restore log across its restarts. `kubectl logs` reads only the container a pod runs
//! now (`--previous`: the one before), so the old container of a member the roll has not
//! reached yet (the one whose side of a lost quorum matters), or the backup-restore that added
//! its member before it crashed twice, would go: each container's log is streamed to files
//! while the step runs, and read from there (etcd's, with each member's id replaced by its
//! name).

use super::join_watch::{parsed, stamp};
use super::node::Node;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a stream's `kubectl` is checked, and re-run after its pod went.
const EVERY: Duration = Duration::from_millis(250);
/// How long a stream waits before it asks again for a pod or container not there yet (a
/// joining member's pod appears minutes after its stream starts; each `kubectl` costs CPU).
/// A container's log stays readable after it ended until it is restarted (at least 10 s of
/// kubelet's back-off), so nothing is missed.
const ABSENT: Duration = Duration::from_secs(2);

/// The raft and peer lines that say whether two running members reached each other.
const PEER_LINES: &[&str] = &[
    "became ",
    "starting a new election",
    "received Msg",
    "rejected Msg",
    "ignored Msg",
    "elected leader",
    "lost leader",
    "stepped down",
    "TCP streaming connection",
    "peer became",
    "failed to reach the peer URL",
    "prober detected unhealthy status",
    "failed to dial",
    "dropped internal Raft message",
    "cast Msg",
    "sent Msg",
    "votes and",
    "MsgTimeoutNow",
    "leadership transfer",
    "updated remote peer",
    "set message encoder",
    "updated member",
    "added member",
    "removed member",
];

/// Fields of those lines that name the other end or the failure.
const FIELDS: &[&str] = &[
    "remote-peer-id",
    "remote-member-id",
    "peer-id",
    "stream-type",
    "message-type",
    "stream-reader-type",
    "stream-writer-type",
    "round-tripper-name",
    "address",
    "error",
    "updated-remote-peer-urls",
];

/// The streams of one namespace's members, each into `<dir>/<pod>.<n>.log` (one file per
/// `kubectl logs -f`, so a restarted pod's new container starts a new file).
pub struct Streams {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    dir: PathBuf,
    pods: Vec<String>,
}

impl Streams {
    /// Streams `container`'s log of each of `pods` in `ns`.
    pub fn start(
        node: &Node,
        ns: &str,
        (pods, container): (&[String], &str),
        dir: PathBuf,
    ) -> Self {
        // Logs of an earlier run would be read as this one's.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = pods
            .iter()
            .map(|pod| {
                let args = ["-n", ns, "logs", "-f", pod, "-c", container];
                let cmd = node.kubectl_command(&args);
                let (stop, dir, pod) = (stop.clone(), dir.clone(), pod.clone());
                std::thread::spawn(move || follow(cmd, &stop, &dir, &pod))
            })
            .collect();
        Self {
            stop,
            threads,
            dir,
            pods: pods.to_vec(),
        }
    }

    /// Ends the streams; each member's etcd entries (every container's, once each), by time.
    pub fn finish(mut self) -> BTreeMap<String, Vec<Value>> {
        self.stop();
        self.pods
            .iter()
            .map(|pod| (pod.clone(), read(&self.dir, pod)))
            .collect()
    }

    /// Each pod's log as text so far, every run's in the order they ran (a re-run repeats
    /// what its container logged before).
    pub fn text(&self) -> BTreeMap<String, String> {
        self.pods
            .iter()
            .map(|pod| {
                let text = files(&self.dir, pod)
                    .filter_map(|p| std::fs::read_to_string(p).ok())
                    .collect::<String>();
                (pod.clone(), text)
            })
            .collect()
    }

    /// Ends the streams; [`Streams::text`].
    pub fn finish_text(mut self) -> BTreeMap<String, String> {
        self.stop();
        self.text()
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// Runs `kubectl logs -f` again each time it ends (the pod restarted, or was not there yet)
/// until `stop`; every run writes its own file.
fn follow(mut cmd: Command, stop: &AtomicBool, dir: &Path, pod: &str) {
    let mut n = 0;
    let mut last = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let path = dir.join(format!("{pod}.{n}.log"));
        let Ok(file) = File::create(&path) else {
            return;
        };
        let Ok(mut child) = cmd.stdout(file).stderr(Stdio::null()).spawn() else {
            return;
        };
        while !stop.load(Ordering::SeqCst) {
            if !matches!(child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(EVERY);
        }
        let _ = child.kill();
        let _ = child.wait();
        // A run that found no container to read (the pod not there yet), or only the ended
        // one the run before read (a container in kubelet's back-off), leaves nothing, and
        // its number goes to the next run: the files are numbered without gaps.
        let text = std::fs::read(&path).unwrap_or_default();
        if text.is_empty() || text == last {
            let _ = std::fs::remove_file(&path);
            std::thread::sleep(ABSENT);
        } else {
            last = text;
            n += 1;
            std::thread::sleep(EVERY);
        }
    }
}

/// A pod's files in the order its runs wrote them (numbered without gaps by [`follow`]).
fn files<'a>(dir: &'a Path, pod: &'a str) -> impl Iterator<Item = PathBuf> + 'a {
    (0..)
        .map(move |n| dir.join(format!("{pod}.{n}.log")))
        .take_while(|p| p.exists())
}

/// A member's entries from all its files, each line once (a re-run stream repeats what the
/// container logged before it), ordered by time.
fn read(dir: &Path, pod: &str) -> Vec<Value> {
    let mut lines = BTreeSet::new();
    for path in files(dir, pod) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        lines.extend(text.lines().map(str::to_owned));
    }
    let mut entries = parsed(lines.iter().map(String::as_str));
    entries.sort_by(|a, b| a["ts"].as_str().cmp(&b["ts"].as_str()));
    entries
}

/// Each member's id (hex, as etcd logs it) to its pod's name, from the lines where a member
/// names itself.
pub fn ids(logs: &BTreeMap<String, Vec<Value>>) -> BTreeMap<String, String> {
    logs.iter()
        .filter_map(|(pod, log)| {
            let id = log.iter().find_map(|e| e["local-member-id"].as_str())?;
            Some((id.to_owned(), pod.clone()))
        })
        .collect()
}

/// `text` with each member id replaced by its name.
fn named(text: &str, ids: &BTreeMap<String, String>) -> String {
    ids.iter()
        .fold(text.to_owned(), |t, (id, name)| t.replace(id, name))
}

/// What a member said about its peers and raft in `[from, to]` (UTC, compared as text): each
/// distinct line (message and the fields naming the other end and the failure) with its
/// count, first and last time.
pub fn peer_lines(
    log: &[Value],
    ids: &BTreeMap<String, String>,
    (from, to): (&str, &str),
) -> Vec<(String, usize, String, String)> {
    let mut seen: BTreeMap<String, (usize, String, String)> = BTreeMap::new();
    for e in log {
        let (Some(ts), Some(msg)) = (stamp(e), e["msg"].as_str()) else {
            continue;
        };
        let ts = ts.as_str();
        if ts < from || ts > to || !PEER_LINES.iter().any(|p| msg.contains(p)) {
            continue;
        }
        let mut line = msg.to_owned();
        for f in FIELDS {
            match &e[*f] {
                Value::Null => {}
                Value::String(s) => line.push_str(&format!(" {f}={s}")),
                v => line.push_str(&format!(" {f}={v}")),
            }
        }
        // Raft's own lines carry terms and indexes that make each one distinct.
        let key = named(&strip_numbers(&line), ids);
        let s = seen.entry(key).or_insert((0, ts.to_owned(), ts.to_owned()));
        s.0 += 1;
        s.2 = ts.to_owned();
    }
    let mut out: Vec<_> = seen
        .into_iter()
        .map(|(line, (n, first, last))| (line, n, first, last))
        .collect();
    out.sort_by(|a, b| a.2.cmp(&b.2));
    out
}

/// `[term: 5]`, `at term 5`, `index: 10` and the like spelled without their numbers, keeping
/// member ids (16 hex digits) whole.
fn strip_numbers(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for word in line.split(' ') {
        if !out.is_empty() {
            out.push(' ');
        }
        let bare = word.trim_matches(|c: char| "[](),:".contains(c));
        if !bare.is_empty() && bare.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&word.replace(bare, "N"));
        } else {
            out.push_str(word);
        }
    }
    out
}

#[test]
fn peer_lines_name_the_members_and_merge_repeats() {
    let log = r#"{"level":"info","ts":"2026-11-30T15:22:59.100Z","msg":"ce39d2ffd6dfd71a became leader at term 7","local-member-id":"ce39d2ffd6dfd71a"}
{"level":"warn","ts":"2026-11-30T15:23:00.000Z","msg":"lost TCP streaming connection with remote peer","remote-peer-id":"8e9e05c52164694d","error":"EOF"}
{"level":"warn","ts":"2026-11-30T15:23:05.000Z","msg":"lost TCP streaming connection with remote peer","remote-peer-id":"8e9e05c52164694d","error":"EOF"}
{"level":"info","ts":"2026-11-30T15:23:06.000Z","msg":"ce39d2ffd6dfd71a became follower at term 8"}
{"level":"warn","ts":"2026-11-30T15:23:07.000Z","msg":"slow fdatasync"}
{"level":"info","ts":"2026-11-30T15:30:00.000Z","msg":"ce39d2ffd6dfd71a became leader at term 9"}"#;
    let entries: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let logs = BTreeMap::from([("etcd-main-2".to_owned(), entries.clone())]);
    let mut ids = ids(&logs);
    assert_eq!(ids["ce39d2ffd6dfd71a"], "etcd-main-2");
    ids.insert("8e9e05c52164694d".into(), "etcd-main-0".into());
    let lines = peer_lines(&entries, &ids, ("2026-11-30T15:22", "2026-11-30T15:24"));
    assert_eq!(
        lines,
        [
            (
                "etcd-main-2 became leader at term N".to_owned(),
                1,
                "2026-11-30T15:22:59.100".to_owned(),
                "2026-11-30T15:22:59.100".to_owned()
            ),
            (
                "lost TCP streaming connection with remote peer remote-peer-id=etcd-main-0 error=EOF"
                    .to_owned(),
                2,
                "2026-11-30T15:23:00.000".to_owned(),
                "2026-11-30T15:23:05.000".to_owned()
            ),
            (
                "etcd-main-2 became follower at term N".to_owned(),
                1,
                "2026-11-30T15:23:06.000".to_owned(),
                "2026-11-30T15:23:06.000".to_owned()
            ),
        ]
    );
}
