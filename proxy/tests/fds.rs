//! The open-files limit: raised to the hard limit at start, and `max_connections` clamped (and
//! reported) when it would not fit. Alone in its test binary: it lowers the process's limits.

#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

mod common;

use common::*;

fn nofile() -> (u64, u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes one rlimit into a struct we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    (l.rlim_cur, l.rlim_max)
}

#[tokio::test]
async fn the_soft_limit_is_raised_and_the_cap_fits_the_hard_limit() {
    // As a container with `nofile` 256:1024 would start us.
    let low = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 1024,
    };
    // SAFETY: reads one rlimit from a struct that lives across the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let f = Fixture::start(&format!("{}listeners: []\n", admin_yaml())).await;
    assert_eq!(nofile(), (1024, 1024));
    assert_eq!(f.metric("isthmus_proxy_fd_limit").await, 1024.0);
    // 100000 connections do not fit: (1024 - 128 reserved - 256 admin) / 2.
    assert_eq!(
        f.metric("isthmus_proxy_max_connections_effective").await,
        320.0
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
