//! Reloads never cut established connections; invalid files never replace a good config.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use isthmus_proxy::Reloaded;
use isthmus_testkit::{
    client_config, server_config, tls_connect, wait_until, TestPki, TlsEchoServer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config(
    routes: &str,
    upstream: std::net::SocketAddr,
    extra_listener: bool,
    watch: &str,
) -> String {
    let extra = if extra_listener {
        "  - name: extra\n    address: \"127.0.0.1:0\"\n    default_upstream: u\n"
    } else {
        ""
    };
    format!(
        "admin: {{ address: \"127.0.0.1:0\" }}
watch_interval: {watch}
listeners:
  - name: l
    address: \"127.0.0.1:0\"
    routes: [{routes}]
{extra}upstreams:
  - {{ name: u, endpoints: [\"{upstream}\"] }}
"
    )
}

async fn echo<S: AsyncReadExt + AsyncWriteExt + Unpin>(s: &mut S, msg: &str) -> String {
    s.write_all(msg.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn a_connection_survives_100_reloads_including_removal_of_its_route_and_listener() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com", "b.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let with_route = "{ sni: \"a.example.com\", upstream: u }";
    let f = Fixture::start(&config(with_route, up.addr, false, "0s")).await;
    let addr = f.addr("l").await;
    let mut tls = tls_connect(client_config(&pki), addr, "a.example.com")
        .await
        .unwrap();
    assert_eq!(echo(&mut tls, "0").await, "up:0");
    for i in 1..=100 {
        // Alternate between route sets; reload 50 removes the route this connection used,
        // and every 10th reload also adds then removes a second listener.
        let routes = if i >= 50 {
            format!("{{ sni: \"b{i}.example.com\", upstream: u }}")
        } else {
            format!("{with_route}, {{ sni: \"b{i}.example.com\", upstream: u }}")
        };
        f.write(&config(&routes, up.addr, i % 10 == 0, "0s"));
        let r = f.proxy.reload().await.unwrap();
        assert!(matches!(r, Reloaded::Applied { .. }), "reload {i}: {r:?}");
        assert_eq!(
            echo(&mut tls, &i.to_string()).await,
            format!("up:{i}"),
            "after reload {i}"
        );
    }
    // New connections follow the new table: the removed route is gone...
    assert!(tls_connect(client_config(&pki), addr, "a.example.com")
        .await
        .is_err());
    // ...while the old connection still works.
    assert_eq!(echo(&mut tls, "end").await, "up:end");
    assert_eq!(
        f.metric("isthmus_proxy_config_reloads_total{result=\"applied\"}")
            .await,
        100.0
    );
}

#[tokio::test]
async fn an_invalid_file_is_rejected_counted_and_the_old_config_stays() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let good = config(
        "{ sni: \"a.example.com\", upstream: u }",
        up.addr,
        false,
        "0s",
    );
    let f = Fixture::start(&good).await;
    let hash = f.proxy.config_hash();
    f.write(&good.replace("upstream: u }", "upstream: nope }"));
    let err = f.proxy.reload().await.unwrap_err().to_string();
    assert!(
        err.contains("listeners[0].routes[0].upstream: no upstream named \"nope\""),
        "{err}"
    );
    assert!(
        err.contains("proxy.yaml:6:48: "),
        "error names file, line and column: {err}"
    );
    f.write("listeners: [ { name: x, address: nonsense } ]");
    assert!(f.proxy.reload().await.is_err());
    assert_eq!(f.proxy.config_hash(), hash);
    assert_eq!(
        f.metric("isthmus_proxy_config_reloads_total{result=\"invalid\"}")
            .await,
        2.0
    );
    let mut tls = tls_connect(client_config(&pki), f.addr("l").await, "a.example.com")
        .await
        .unwrap();
    assert_eq!(echo(&mut tls, "still").await, "up:still");
    let info = format!("isthmus_proxy_config_info{{hash=\"{hash}\"}}");
    assert_eq!(f.metric(&info).await, 1.0);
}

#[tokio::test]
async fn listeners_are_added_and_removed_without_touching_the_others() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let routes = "{ sni: \"a.example.com\", upstream: u }";
    let f = Fixture::start(&config(routes, up.addr, false, "0s")).await;
    let l_addr = f.addr("l").await;
    f.write(&config(routes, up.addr, true, "0s"));
    match f.proxy.reload().await.unwrap() {
        Reloaded::Applied { added, removed, .. } => {
            assert_eq!(added, vec!["extra".to_string()]);
            assert!(removed.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let extra = f.addr("extra").await;
    assert_eq!(
        f.addr("l").await,
        l_addr,
        "untouched listener keeps its socket"
    );
    // The extra listener routes everything to the default upstream.
    let mut tls = tls_connect(client_config(&pki), extra, "a.example.com")
        .await
        .unwrap();
    assert_eq!(echo(&mut tls, "x").await, "up:x");
    f.write(&config(routes, up.addr, false, "0s"));
    f.proxy.reload().await.unwrap();
    assert!(f.proxy.listener_addr("extra").await.is_none());
    wait_until("extra listener closed", WAIT, || async {
        tokio::net::TcpStream::connect(extra).await.is_err()
    })
    .await;
    assert_eq!(
        echo(&mut tls, "y").await,
        "up:y",
        "its connection outlives the listener"
    );
    assert!(matches!(
        f.proxy.reload().await.unwrap(),
        Reloaded::Unchanged
    ));
}

/// A Kubernetes ConfigMap volume updates a file by swapping a `..data` symlink; the watcher
/// notices it without SIGHUP.
#[tokio::test]
async fn a_configmap_style_symlink_swap_is_picked_up_by_the_watcher() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com", "b.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let dir = isthmus_testkit::Scratch::new("configmap");
    let write_version = |v: &str, routes: &str| {
        let d = dir.join(v);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("proxy.yaml"), config(routes, up.addr, false, "50ms")).unwrap();
        let tmp = dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(v, &tmp).unwrap();
        std::fs::rename(&tmp, dir.join("..data")).unwrap();
    };
    write_version("..v1", "{ sni: \"a.example.com\", upstream: u }");
    std::os::unix::fs::symlink("..data/proxy.yaml", dir.join("proxy.yaml")).unwrap();
    let proxy = isthmus_proxy::Proxy::start(&dir.join("proxy.yaml"), Default::default())
        .await
        .unwrap();
    let addr = proxy.listener_addr("l").await.unwrap();
    assert!(tls_connect(client_config(&pki), addr, "b.example.com")
        .await
        .is_err());
    write_version("..v2", "{ sni: \"b.example.com\", upstream: u }");
    wait_until("watcher applied ..v2", WAIT, || async {
        tls_connect(client_config(&pki), addr, "b.example.com")
            .await
            .is_ok()
    })
    .await;
}

/// A reload that removes a route and its upstream removes their series too, while a
/// connection still open on the route keeps working: `/metrics` does not grow with every
/// route a pod has ever had (issue 47, point 4).
#[tokio::test]
async fn the_series_of_removed_routes_and_upstreams_go_with_them() {
    let pki = TestPki::new();
    let id = pki.server_cert(&["a.example.com", "b.example.com"]);
    let up = TlsEchoServer::start("up", server_config(&pki, &id)).await;
    let file = |with_b: bool| {
        let (route, upstream) = if with_b {
            (
                ", { sni: \"b.example.com\", upstream: gone }",
                format!("  - {{ name: gone, endpoints: [\"{}\"] }}\n", up.addr),
            )
        } else {
            ("", String::new())
        };
        format!(
            "admin: {{ address: \"127.0.0.1:0\" }}\nwatch_interval: 0s\nlisteners:\n  \
             - name: l\n    address: \"127.0.0.1:0\"\n    \
             routes: [{{ sni: \"a.example.com\", upstream: u }}{route}]\n\
             upstreams:\n  - {{ name: u, endpoints: [\"{}\"] }}\n{upstream}",
            up.addr
        )
    };
    let f = Fixture::start(&file(true)).await;
    let addr = f.addr("l").await;
    let mut a = tls_connect(client_config(&pki), addr, "a.example.com")
        .await
        .unwrap();
    assert_eq!(echo(&mut a, "a").await, "up:a");
    let mut b = tls_connect(client_config(&pki), addr, "b.example.com")
        .await
        .unwrap();
    assert_eq!(echo(&mut b, "b").await, "up:b");
    let before = f.metrics().await;
    assert!(before.contains("route=\"b.example.com\""), "{before}");
    assert!(before.contains("upstream=\"gone\""), "{before}");
    f.write(&file(false));
    f.proxy.reload().await.unwrap();
    let after = f.metrics().await;
    let left: Vec<&str> = after
        .lines()
        .filter(|l| l.contains("b.example.com") || l.contains("\"gone\""))
        .collect();
    assert!(
        left.is_empty(),
        "series of the removed route left: {left:#?}"
    );
    assert!(after.contains("route=\"a.example.com\",upstream=\"u\""));
    assert_eq!(echo(&mut b, "still").await, "up:still");
}
