//! Parsing and validating a 10k-route proxy configuration, what every reload of a large seed
//! pays before the new snapshot is swapped in.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

fn file(routes: usize) -> String {
    let mut s =
        String::from("listeners:\n  - name: peer\n    address: \"0.0.0.0:2380\"\n    routes:\n");
    for i in 0..routes {
        s += &format!("      - {{ sni: \"etcd-main-{}.shoot--p{i}--c.seed-a.internal.example.com\", upstream: u{} }}\n", i % 3, i % 100);
    }
    s += "upstreams:\n";
    for u in 0..100 {
        s += &format!("  - name: u{u}\n    endpoints: [\"etcd-main-{u}.etcd-main-peer.ns.svc.cluster.local:2380\"]\n");
    }
    s
}

fn bench(c: &mut Criterion) {
    let text = file(10_000);
    isthmus_config::parse_proxy("bench.yaml", &text).unwrap();
    let mut g = c.benchmark_group("config");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("parse_validate_10k_routes", |b| {
        b.iter(|| isthmus_config::parse_proxy("bench.yaml", black_box(&text)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
