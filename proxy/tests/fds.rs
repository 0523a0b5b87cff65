//! The open-files limit: raised to the hard limit at start, and `max_connections` clamped (and
//! reported) when it would not fit. Alone in its test binary: it lowers the process's limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

fn nofile() -> (u64, u64) {
    let l = getrlimit(Resource::Nofile);
    (l.current.unwrap(), l.maximum.unwrap())
}

#[tokio::test]
async fn the_soft_limit_is_raised_and_the_cap_fits_the_hard_limit() {
    // As a container with `nofile` 256:1024 would start us.
    let low = Rlimit {
        current: Some(256),
        maximum: Some(1024),
    };
    setrlimit(Resource::Nofile, low).unwrap();
    let f = Fixture::start(&format!("{}listeners: []\n", admin_yaml())).await;
    assert_eq!(nofile(), (1024, 1024));
    assert_eq!(f.metric("isthmus_proxy_fd_limit").await, 1024.0);
    // 100000 connections do not fit: (1024 - 128 reserved - 256 admin - 2 × 64 pipes) / 2.
    assert_eq!(
        f.metric("isthmus_proxy_max_connections_effective").await,
        256.0
    );
    f.write(&format!(
        "{}max_connections: 100\nlisteners: []\n",
        admin_yaml()
    ));
    f.proxy.reload().await.unwrap();
    assert_eq!(
        f.metric("isthmus_proxy_max_connections_effective").await,
        100.0
    );
}
