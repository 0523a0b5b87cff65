//! Semantic checks that serde cannot express. Each problem is `(field path, message)`; the
//! loader turns the path into a line and column.

use crate::{KeepaliveConfig, ListenerKind, ProxyConfig};
use std::collections::HashSet;

type Problems = Vec<(String, String)>;

/// Every semantic problem of a proxy configuration.
pub(crate) fn proxy(c: &ProxyConfig) -> Problems {
    let mut p = Problems::new();
    let mut upstreams = HashSet::new();
    for (i, u) in c.upstreams.iter().enumerate() {
        upstream(&mut p, &mut upstreams, i, u);
    }
    let mut names = HashSet::new();
    for (i, l) in c.listeners.iter().enumerate() {
        let at = format!("listeners[{i}]");
        check_name(&mut p, || format!("{at}.name"), &l.name);
        if !names.insert(l.name.as_str()) {
            p.push((
                format!("{at}.name"),
                format!("duplicate listener name {:?}", l.name),
            ));
        }
        if l.client_hello_timeout.get().is_zero() {
            p.push((
                format!("{at}.client_hello_timeout"),
                "must be more than 0s".into(),
            ));
        }
        if !(512..=1 << 20).contains(&l.max_client_hello_bytes) {
            p.push((
                format!("{at}.max_client_hello_bytes"),
                format!("{} is outside 512..=1048576", l.max_client_hello_bytes),
            ));
        }
        if l.max_pending_hellos == 0 {
            p.push((
                format!("{at}.max_pending_hellos"),
                "must be at least 1".into(),
            ));
        }
        sources(&mut p, &at, l);
        if !(256..=65536).contains(&l.max_request_bytes) {
            p.push((
                format!("{at}.max_request_bytes"),
                format!("{} is outside 256..=65536", l.max_request_bytes),
            ));
        }
        keepalive(
            &mut p,
            || format!("{at}.tcp_keepalive"),
            l.tcp_keepalive.as_ref(),
        );
        let connect = l.kind == ListenerKind::HttpConnect;
        match (&l.route_header, connect) {
            (None, true) => p.push((
                format!("{at}.route_header"),
                "an http_connect listener needs the header to route on, e.g. X-Gardener-Destination".into(),
            )),
            (Some(_), false) => p.push((
                format!("{at}.route_header"),
                "only an http_connect listener routes on a header".into(),
            )),
            _ => {}
        }
        if let Some(d) = &l.default_upstream {
            if !upstreams.contains(d.as_str()) {
                p.push((
                    format!("{at}.default_upstream"),
                    format!("no upstream named {d:?}"),
                ));
            }
        }
        let mut keys = HashSet::new();
        for (j, r) in l.routes.iter().enumerate() {
            // Paths are formatted only for a problem: a 10k-route file has none.
            let rat = |field: &str| format!("{at}.routes[{j}].{field}");
            let (key, other, other_set) = if connect {
                ("header_value", "sni", r.sni.is_some())
            } else {
                ("sni", "header_value", !r.header_value.is_empty())
            };
            if other_set {
                p.push((
                    rat(other),
                    format!(
                        "this {} listener routes on {key}, not {other}",
                        kind_name(connect)
                    ),
                ));
            }
            let value = match (&r.sni, connect) {
                (_, true) if r.header_value.is_empty() => {
                    Err("missing: the value of route_header to match")
                }
                (_, true) => Ok(r.header_value.as_str()),
                (Some(sni), false) => Ok(sni.as_str()),
                (None, false) => Err("missing: the server name to match, or a *.suffix"),
            };
            match value {
                Ok(v) => {
                    if !keys.insert(v) {
                        p.push((rat(key), format!("duplicate route for {v:?}")));
                    }
                }
                Err(m) => p.push((rat(key), m.into())),
            }
            if !upstreams.contains(r.upstream.as_str()) {
                p.push((
                    rat("upstream"),
                    format!("no upstream named {:?}", r.upstream),
                ));
            }
        }
    }
    // Addresses: no two sockets on one port, none below 1024 unless allowed.
    p.extend(crate::ports::problems(c));
    if c.drain_timeout.get().is_zero() {
        p.push(("drain_timeout".into(), "must be more than 0s".into()));
    }
    p.extend(c.admin.limits.problems("admin.limits"));
    if c.max_connections == 0 {
        p.push(("max_connections".into(), "must be at least 1".into()));
    }
    if c.resolver.min_ttl > c.resolver.max_ttl {
        p.push((
            "resolver.min_ttl".into(),
            format!(
                "{} is above max_ttl {}",
                c.resolver.min_ttl, c.resolver.max_ttl
            ),
        ));
    }
    positive(
        &mut p,
        || "resolver.retry_after_failure".into(),
        Some(c.resolver.retry_after_failure),
    );
    p
}

/// The connection limits, the allow-list and the trusted PROXY peers of one listener.
fn sources(p: &mut Problems, at: &str, l: &crate::ListenerConfig) {
    if l.max_pending_hellos_per_source == 0 {
        p.push((
            format!("{at}.max_pending_hellos_per_source"),
            "must be at least 1".into(),
        ));
    }
    if l.max_connections_per_source == Some(0) {
        p.push((
            format!("{at}.max_connections_per_source"),
            "must be at least 1".into(),
        ));
    }
    if l.max_connections == Some(0) {
        p.push((format!("{at}.max_connections"), "must be at least 1".into()));
    }
    match (l.proxy_protocol, l.trusted_proxies.is_empty()) {
        (crate::ProxyProtocolMode::None, false) => p.push((
            format!("{at}.trusted_proxies"),
            "only used with proxy_protocol accept or require".into(),
        )),
        (crate::ProxyProtocolMode::Accept | crate::ProxyProtocolMode::Require, true) => p.push((
            format!("{at}.trusted_proxies"),
            "required with proxy_protocol: the load balancers' addresses (CIDRs) whose PROXY \
             header is believed; a header from any other peer could claim any client address"
                .into(),
        )),
        _ => {}
    }
}

fn kind_name(connect: bool) -> &'static str {
    if connect {
        "http_connect"
    } else {
        "tls_passthrough"
    }
}

/// The problems of one upstream; its paths are formatted only for a problem (a seed's file
/// has thousands of upstreams and none).
fn upstream<'a>(
    p: &mut Problems,
    names: &mut HashSet<&'a str>,
    i: usize,
    u: &'a crate::UpstreamConfig,
) {
    let at = |field: &str| format!("upstreams[{i}].{field}");
    check_name(p, || at("name"), &u.name);
    if !names.insert(u.name.as_str()) {
        p.push((at("name"), format!("duplicate upstream name {:?}", u.name)));
    }
    if u.endpoints.is_empty() {
        p.push((at("endpoints"), "needs at least one endpoint".into()));
    }
    positive(p, || at("connect_timeout"), Some(u.connect_timeout));
    positive(p, || at("idle_timeout"), u.idle_timeout);
    positive(
        p,
        || at("max_connection_duration"),
        u.max_connection_duration,
    );
    if u.connect_attempts == Some(0) {
        p.push((at("connect_attempts"), "must be at least 1".into()));
    }
    if u.max_connections == Some(0) {
        p.push((at("max_connections"), "must be at least 1".into()));
    }
    if u.max_connections_per_source == Some(0) {
        p.push((
            at("max_connections_per_source"),
            "must be at least 1".into(),
        ));
    }
    let outlier = &u.outlier_detection;
    if outlier.max_ejection_percent > 100 {
        p.push((
            at("outlier_detection.max_ejection_percent"),
            "must be 0 to 100".into(),
        ));
    }
    if outlier.consecutive_failures > 0 {
        positive(
            p,
            || at("outlier_detection.base_ejection_time"),
            Some(outlier.base_ejection_time),
        );
    }
    keepalive(p, || at("tcp_keepalive"), u.tcp_keepalive.as_ref());
}

fn positive(p: &mut Problems, at: impl Fn() -> String, d: Option<crate::Duration>) {
    if d.is_some_and(|d| d.get().is_zero()) {
        p.push((
            at(),
            "must be more than 0s (omit the field for none)".into(),
        ));
    }
}

fn keepalive(p: &mut Problems, at: impl Fn() -> String, k: Option<&KeepaliveConfig>) {
    let Some(k) = k else { return };
    positive(p, || format!("{}.time", at()), Some(k.time));
    positive(p, || format!("{}.interval", at()), Some(k.interval));
    if !(1..=127).contains(&k.probes) {
        p.push((format!("{}.probes", at()), "must be 1 to 127".into()));
    }
}

fn check_name(p: &mut Problems, at: impl Fn() -> String, name: &str) {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        p.push((
            at(),
            format!("invalid name {name:?}: use 1-253 characters of a-z, 0-9, '-', '_', '.'"),
        ));
    }
}
