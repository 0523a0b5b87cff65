//! fluent-bit's parser and filters for the JSON logs (Gardener's
//! docs/extensions/logging-and-monitoring.md, fluent-operator's kinds).

use super::common::chart::{render, SEED};
use super::PLAIN;
use serde_json::{json, Value};

/// fluent-bit's wildcard match (`*` any run of characters, the rest literal), as its
/// `flb_router_match` compares a tag with a `Match` pattern.
fn fluent_match(pattern: &str, tag: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == tag,
        Some((head, rest)) => {
            let Some(tail) = tag.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && fluent_match(rest, &tail[i..]))
        }
    }
}

/// The tag the seed's fluent-bit gives a container's log: its tail input's `kubernetes.*` on
/// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` (Gardener's
/// fluentcustomresources/cluster_inputs.go).
fn tag(pod: &str, namespace: &str, container: &str) -> String {
    format!(
        "kubernetes.var.log.containers.{pod}_{namespace}_{container}-{}.log",
        "0123456789abcdef".repeat(4)
    )
}

#[test]
fn fluent_bit_parses_the_json_logs_of_each_container_and_only_those() {
    let docs = render(&SEED, &[]);
    let parsers: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterParser")
        .collect();
    let filters: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterFilter")
        .collect();
    assert_eq!((parsers.len(), filters.len()), (1, 3));
    for d in parsers.iter().chain(&filters) {
        assert_eq!(d["apiVersion"], "fluentbit.fluent.io/v1alpha2");
        assert_eq!(d["metadata"]["labels"]["fluentbit.gardener/type"], "seed");
    }
    let parser = parsers[0];
    assert_eq!(parser["spec"]["json"]["timeKey"], "timestamp");
    // Each workload's pods (its name, a suffix) and container, in the release namespace or a
    // shoot namespace (the tunnel servers).
    let logs = [
        ("isthmus-proxy-x7k2p", "extension-isthmus-a1b2c", "proxy"),
        (
            "isthmus-controller-5d9f8b7c6-q2w3e",
            "extension-isthmus-a1b2c",
            "controller",
        ),
        (
            "isthmus-tunnel-server-6c8d-r4t5y",
            "shoot--foo--bar",
            "tunnel-server",
        ),
    ];
    for (pod, ns, container) in logs {
        let t = tag(pod, ns, container);
        let hits: Vec<&str> = filters
            .iter()
            .filter(|f| fluent_match(f["spec"]["match"].as_str().unwrap(), &t))
            .map(|f| f["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(hits.len(), 1, "{t}: {hits:?}");
        assert!(hits[0].ends_with(&format!("--{container}")), "{hits:?}");
    }
    // The tunnel server's names are the controller's (it runs them, not the chart): the pods
    // of its Deployment, its container, as the controller the chart renders makes them.
    let objects = super::common::chart::tunnel_objects(&docs);
    let d = objects.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let pod = format!("{}-6c8d-r4t5y", d["metadata"]["name"].as_str().unwrap());
    let container = d["spec"]["template"]["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap();
    let t = tag(&pod, "shoot--foo--bar", container);
    assert!(
        filters
            .iter()
            .any(|f| fluent_match(f["spec"]["match"].as_str().unwrap(), &t)),
        "{t}: no filter parses the tunnel server's log"
    );
    // Not the logs of anybody else's proxy or controller.
    for t in [
        tag("istio-ingressgateway-5f7-x", "istio-ingress", "istio-proxy"),
        tag(
            "gardener-resource-manager-7c-y",
            "garden",
            "gardener-resource-manager",
        ),
        tag("etcd-druid-6b-z", "garden", "etcd-druid"),
    ] {
        assert!(
            !filters
                .iter()
                .any(|f| fluent_match(f["spec"]["match"].as_str().unwrap(), &t)),
            "{t}"
        );
    }
    // What each filter does to a real isthmus log line (the binary's `--log-format json`):
    // the parser's time key is there in its format, and the record it leaves has what
    // Plutono shows (severity, log, source).
    let line = real_log_line();
    let mut record: serde_json::Map<String, Value> = serde_json::from_str(&line).unwrap();
    let time = record[parser["spec"]["json"]["timeKey"].as_str().unwrap()]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        parser["spec"]["json"]["timeFormat"],
        "%Y-%m-%dT%H:%M:%S.%L%z"
    );
    assert!(time_matches(&time), "{time} is not %Y-%m-%dT%H:%M:%S.%L%z");
    for f in &filters {
        let items = f["spec"]["filters"].as_array().unwrap();
        assert_eq!(items[0]["parser"]["parser"], "isthmus-parser");
        assert_eq!(items[0]["parser"]["keyName"], "log");
        assert_eq!(
            items[1]["nest"],
            json!({"operation": "lift", "nestedUnder": "log"})
        );
        assert_eq!(
            items[2]["nest"],
            json!({"operation": "lift", "nestedUnder": "fields"})
        );
    }
    // Lift `fields`, then the renames.
    let items = filters[0]["spec"]["filters"].as_array().unwrap();
    if let Some(Value::Object(fields)) = record.remove("fields") {
        record.extend(fields);
    }
    for (from, to) in items[3]["modify"]["rules"][0]["rename"]
        .as_object()
        .unwrap()
    {
        let v = record
            .remove(from)
            .unwrap_or_else(|| panic!("no {from} in {line}"));
        record.insert(to.as_str().unwrap().to_owned(), v);
    }
    for key in ["severity", "log", "source"] {
        assert!(record[key].is_string(), "{key} in {record:?}");
    }
    // A plain cluster has no fluent-operator.
    assert!(!render(&[PLAIN], &[])
        .iter()
        .any(|d| d["kind"] == "ClusterFilter" || d["kind"] == "ClusterParser"));
}

/// `%Y-%m-%dT%H:%M:%S.%L%z` as fluent-bit's strptime reads it: `%L` fractional seconds,
/// `%z` `Z` or `±hh[:]mm`.
fn time_matches(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T'))
        || !(digits(11..13) && at(13, b':') && digits(14..16) && at(16, b':') && digits(17..19))
        || !at(19, b'.')
    {
        return false;
    }
    let frac = b[20..].iter().take_while(|c| c.is_ascii_digit()).count();
    let zone = &t[20 + frac..];
    frac > 0
        && (zone == "Z"
            || (zone.len() >= 5
                && (zone.starts_with('+') || zone.starts_with('-'))
                && zone[1..].chars().all(|c| c.is_ascii_digit() || c == ':')))
}

/// The first line `isthmus --log-format json` logs: a proxy started on a scratch file, killed
/// once it has logged.
fn real_log_line() -> String {
    use std::io::{BufRead, BufReader};
    let dir = isthmus_testkit::Scratch::new("chart-log-line");
    let file = dir.join("proxy.json");
    std::fs::write(
        &file,
        r#"{"admin": {"address": "127.0.0.1:0"}, "listeners": [{"name": "l", "address": "127.0.0.1:0", "routes": []}], "upstreams": []}"#,
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_isthmus"))
        .args(["--log-format", "json", "proxy", "--config"])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!line.trim().is_empty(), "the proxy logged nothing");
    line
}
