//! The link between seeds a and b (`scripts/cluster.sh link`, issue 45 point 2): without it no
//! route joins their outsides; with it up at the demo's RTT, seed a's outside reaches seed b's
//! kube-apiserver and a LoadBalancer Service of seed b (and b's outside reaches a's), through
//! the emulator only: a cut breaks the connections, a restore brings them back, `link down`
//! leaves no route again. The round trips through it are printed as figures, not asserted.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const EXT_A: &str = "isthmus-node-ext";
const EXT_B: &str = "isthmus-b-ext";
/// Each seed's kube-apiserver on its node address (anonymous `/readyz` answers `ok`).
const API_A: &str = "https://10.200.0.2:6443/readyz";
const API_B: &str = "https://10.201.0.2:6443/readyz";
const RTT: &str = "50ms";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `scripts/cluster.sh ARGS…`, which must succeed; its stdout.
fn cluster(args: &[&str]) -> String {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster.sh"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster.sh {args:?}:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A GET of `url` by curl inside namespace `ns` on a new connection: the body, and the
/// seconds from the start to the TCP connect, the end of the TLS handshake and the first byte
/// of the answer; `Err` says why it failed.
fn curl_in(ns: &str, url: &str) -> Result<(String, [f64; 3]), String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sSk", "--max-time", "10"])
        .args([
            "-w",
            "\n%{time_connect} %{time_appconnect} %{time_starttransfer}",
        ])
        .arg(url)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    if !out.status.success() {
        return Err(format!("{}{}", stdout, text(&out.stderr)));
    }
    let (body, times) = stdout.rsplit_once('\n').unwrap();
    let t: Vec<f64> = times.split(' ').map(|t| t.parse().unwrap()).collect();
    Ok((body.to_string(), [t[0], t[1], t[2]]))
}

/// Polls `f` until it returns `Ok`, at most `secs` seconds.
pub fn poll<T>(what: &str, secs: u64, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what}: not after {secs} s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn ok_body(r: Result<(String, [f64; 3]), String>, want: &str) -> Result<(), String> {
    match r {
        Ok((body, _)) if body == want => Ok(()),
        Ok((body, _)) => Err(format!("answered {body:?}")),
        Err(e) => Err(e),
    }
}

fn duration(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.max(0.0))
}

/// Brings the link up between seeds a and b (both up), checks it, takes it down again.
pub fn joins_seeds_a_and_b() {
    let before = curl_in(EXT_A, API_B);
    assert!(
        before.is_err(),
        "seed b reached without the link: {before:?}"
    );

    let t0 = Instant::now();
    cluster(&["link", "up", "--seeds", "a,b", "--rtt", RTT]);
    println!(
        "figure: scripts/cluster.sh link up --seeds a,b: {:.1?}",
        t0.elapsed()
    );

    // 20 new connections from a's outside to b's kube-apiserver: each a TLS 1.3 handshake
    // (one round trip after the connect, which the relay answers at once) and a GET (another).
    let (mut handshakes, mut gets) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let (body, [connect, tls, first]) = curl_in(EXT_A, API_B).unwrap();
        assert_eq!(body, "ok", "seed b's /readyz through the link");
        handshakes.push(duration(tls - connect));
        gets.push(duration(first - tls));
    }
    let p = isthmus_testkit::percentile;
    println!(
        "figure: seed a's outside -> seed b's kube-apiserver through the link at --rtt {RTT}, \
         20 connections: TLS handshake p50 {:.1?} max {:.1?}; GET /readyz p50 {:.1?} max {:.1?}",
        p(&handshakes, 50.0),
        p(&handshakes, 100.0),
        p(&gets, 50.0),
        p(&gets, 100.0)
    );
    ok_body(curl_in(EXT_B, API_A), "ok").expect("seed a's /readyz from seed b's outside");

    // A LoadBalancer Service of seed b (CoreDNS's health port, address from kube-router)
    // through seed b's outside and kube-proxy.
    cluster(
        &[
            "--seed",
            "b",
            "kubectl",
            "-n",
            "kube-system",
            "expose",
            "deployment/coredns",
        ]
        .into_iter()
        .chain([
            "--name",
            "link-probe",
            "--type",
            "LoadBalancer",
            "--port",
            "8080",
        ])
        .collect::<Vec<_>>(),
    );
    let lb = poll("seed b's LoadBalancer address", 60, || {
        let ip = cluster(&[
            "--seed",
            "b",
            "kubectl",
            "-n",
            "kube-system",
            "get",
            "svc/link-probe",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ]);
        if ip.starts_with("10.201.1.") {
            Ok(ip)
        } else {
            Err(format!("address {ip:?}"))
        }
    });
    let health = format!("http://{lb}:8080/health");
    poll("seed b's LoadBalancer Service from a's outside", 60, || {
        ok_body(curl_in(EXT_A, &health), "OK")
    });

    // The emulator is the only path: cut, nothing connects; restored, it does again.
    cluster(&["link", "cut"]);
    poll("the cut link refusing seed b", 10, || {
        match curl_in(EXT_A, API_B) {
            Ok(r) => Err(format!("still answered: {r:?}")),
            Err(_) => Ok(()),
        }
    });
    cluster(&["link", "restore"]);
    poll("the restored link reaching seed b", 10, || {
        ok_body(curl_in(EXT_A, API_B), "ok")
    });

    cluster(&["link", "down"]);
    let after = curl_in(EXT_A, &health);
    assert!(after.is_err(), "seed b reached after link down: {after:?}");
}
