//! The routes file of a large seed: 10,000 routes (1,667 migrations × 3 members × peer and
//! client) rendered by the controller's own `render` (JSON), then read by the proxy's loader,
//! which is what every reload pays before the new snapshot is swapped in. Rendering, parsing
//! alone (serde_json into the typed schema), validating alone, and both are timed separately;
//! `yaml_parse_validate` reads the same text as YAML (JSON is YAML), the path a hand-written
//! file of this size would take.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use isthmus_config::{ProxyConfig, Schema};
use isthmus_controller::crd::{PortScheme, ProxyProtocol};
use isthmus_controller::plan::MemberRoute;
use isthmus_controller::proxy_config::{render, Layout};
use std::hint::black_box;
use std::net::SocketAddr;

const ROUTES: usize = 10_000;

/// What `plan::routes` gives for `migrations` shoots of three members each (peer and client
/// route per member), each shoot with its own peer seed's egress network.
fn routes(migrations: usize) -> Vec<MemberRoute> {
    let ports = PortScheme::default();
    let mut out = Vec::new();
    for m in 0..migrations {
        let ns = format!("shoot--p{m}--c");
        for i in 0..3u8 {
            let pod = format!("etcd-main-{i}");
            let host = format!("{pod}.etcd-main-peer.{ns}.svc.cluster.local");
            let sni = format!("{pod}.{ns}.seed-a.internal.example.com");
            let sources = vec![format!("198.51.{}.0/24", m % 256)];
            for (kind, listener, port) in [
                ("peer", ports.peer(i), 2380),
                ("client", ports.client(i), 2379),
            ] {
                out.push(MemberRoute {
                    listener: format!("{kind}-{listener}"),
                    port: listener,
                    sni: sni.clone(),
                    upstream: format!("{ns}.{pod}.{kind}"),
                    endpoint: format!("{host}:{port}"),
                    allowed_sources: sources.clone(),
                    proxy_protocol: ProxyProtocol::None,
                });
            }
        }
    }
    out.truncate(ROUTES);
    out
}

fn bench(c: &mut Criterion) {
    let layout = Layout::standard(
        PortScheme::default(),
        3,
        8443,
        SocketAddr::from(([0, 0, 0, 0], 9901)),
    );
    let routes = routes(ROUTES.div_ceil(6));
    let file = render(&layout, &routes).unwrap();
    let parsed = isthmus_config::parse_proxy("bench.json", &file.text).unwrap();
    let count: usize = parsed.listeners.iter().map(|l| l.routes.len()).sum();
    assert_eq!(count, ROUTES);
    eprintln!("rendered file: {} bytes", file.text.len());
    if let Err(e) = isthmus_config::parse_proxy("bench.yaml", &file.text) {
        panic!("{}", e.to_string().chars().take(300).collect::<String>());
    }
    let mut g = c.benchmark_group("config");
    g.sample_size(10);
    g.bench_function("render_10k_routes", |b| {
        b.iter(|| render(&layout, black_box(&routes)))
    });
    g.throughput(Throughput::Bytes(file.text.len() as u64));
    g.bench_function("parse_10k_routes", |b| {
        b.iter(|| serde_json::from_str::<ProxyConfig>(black_box(&file.text)).unwrap())
    });
    g.bench_function("parse_validate_10k_routes", |b| {
        b.iter(|| isthmus_config::parse_proxy("bench.json", black_box(&file.text)))
    });
    g.bench_function("yaml_parse_validate_10k_routes", |b| {
        b.iter(|| isthmus_config::parse_proxy("bench.yaml", black_box(&file.text)))
    });
    g.bench_function("validate_10k_routes", |b| {
        b.iter(|| black_box(&parsed).validate())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
