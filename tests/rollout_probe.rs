//! The controller's rollout probe against the real proxy: it reads the hash of the file in
//! effect from `/config/hash`, before and after a reload.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_controller::kube_adapter::probe::{HashFetcher, HttpFetcher};
use isthmus_proxy::Proxy;
use isthmus_testkit::Scratch;
use prometheus_client::registry::Registry;
use std::time::Duration;

fn file(routes: usize) -> String {
    let mut s = String::from(
        "admin: { address: \"127.0.0.1:0\" }\nwatch_interval: 0s\nlisteners:\n  - name: l\n    \
         address: \"127.0.0.1:0\"\n    routes:\n",
    );
    for i in 0..routes {
        s += &format!("      - {{ sni: \"m{i}.example.com\", upstream: u }}\n");
    }
    s + "upstreams:\n  - { name: u, endpoints: [\"127.0.0.1:9\"] }\n"
}

#[tokio::test]
async fn the_probe_reads_the_hash_of_the_file_in_effect() {
    let dir = Scratch::new("rollout-probe");
    let path = dir.join("proxy.yaml");
    std::fs::write(&path, file(10)).unwrap();
    let proxy = Proxy::start(&path, Registry::default()).await.unwrap();
    let probe = HttpFetcher::new(Duration::from_secs(5));
    let hash = probe.fetch(proxy.admin_addr()).await.unwrap();
    assert_eq!(hash, isthmus_config::hash_bytes(file(10).as_bytes()));
    std::fs::write(&path, file(2000)).unwrap();
    proxy.reload().await.unwrap();
    let hash = probe.fetch(proxy.admin_addr()).await.unwrap();
    assert_eq!(hash, isthmus_config::hash_bytes(file(2000).as_bytes()));
    proxy.shutdown(Duration::ZERO, Duration::from_secs(1)).await;
}
