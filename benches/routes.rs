//! Route lookup with 10, 10k and 100k routes: exact hits, wildcard hits (the name has three
//! labels in front of the suffix, so several probes) and misses; and a route's allow-list
//! check after the lookup (`Cidr::any_contains` over the route's `allowed_sources`: one network
//! as the controller renders a migration's peer seed, and eight), hit and miss.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use isthmus_config::Cidr;
use isthmus_proxy::routes::RouteTable;
use std::hint::black_box;

fn table(n: usize) -> RouteTable<usize> {
    let mut t = RouteTable::default();
    // Half exact etcd-member-like names, half wildcards, like many shoots on one seed.
    for i in 0..n {
        if i % 2 == 0 {
            t.insert(
                &format!(
                    "etcd-main-{}.shoot--p{i}--c.seed-a.internal.example.com",
                    i % 3
                ),
                i,
            );
        } else {
            t.insert(&format!("*.vpn-{i}.seed-a.internal.example.com"), i);
        }
    }
    t
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("route_find");
    for n in [10usize, 10_000, 100_000] {
        let t = table(n);
        let last_even = (n - 1) & !1;
        let exact = format!(
            "ETCD-main-{}.shoot--p{last_even}--c.seed-a.internal.example.com",
            last_even % 3
        );
        let wild = format!("a.b.c.vpn-{}.seed-a.internal.example.com", n - 1);
        let miss = "etcd-main-0.shoot--nope--c.seed-b.internal.example.com";
        assert!(t.find(&exact).is_some() && t.find(&wild).is_some() && t.find(miss).is_none());
        g.bench_with_input(BenchmarkId::new("exact", n), &exact, |b, s| {
            b.iter(|| t.find(black_box(s)))
        });
        g.bench_with_input(BenchmarkId::new("wildcard", n), &wild, |b, s| {
            b.iter(|| t.find(black_box(s)))
        });
        g.bench_with_input(BenchmarkId::new("miss", n), &miss, |b, s| {
            b.iter(|| t.find(black_box(s)))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("route_sources");
    let source: std::net::IpAddr = "198.51.100.7".parse().unwrap();
    let stranger: std::net::IpAddr = "203.0.113.9".parse().unwrap();
    for n in [1usize, 8] {
        let list: Vec<Cidr> = (0..n)
            .map(|i| Cidr::parse(&format!("198.51.{}.0/24", 100 - i)).unwrap())
            .collect();
        assert!(Cidr::any_contains(&list, source) && !Cidr::any_contains(&list, stranger));
        g.bench_with_input(BenchmarkId::new("admitted", n), &list, |b, l| {
            b.iter(|| Cidr::any_contains(black_box(l), black_box(source)))
        });
        g.bench_with_input(BenchmarkId::new("refused", n), &list, |b, l| {
            b.iter(|| Cidr::any_contains(black_box(l), black_box(stranger)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
