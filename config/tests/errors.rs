//! What an operator sees for a broken file: every error, each with file:line:col and path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_config::{parse_proxy, ProxyConfig};

fn errors(yaml: &str) -> Vec<String> {
    parse_proxy("p.yaml", yaml)
        .unwrap_err()
        .to_string()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn semantic_errors_are_all_reported_with_positions() {
    let yaml = "\
listeners:
  - name: a
    address: \"0.0.0.0:2380\"
    routes:
      - { sni: \"x.example.com\", upstream: up }
  - name: b
    address: \"0.0.0.0:2380\"
    default_upstream: missing
    routes:
      - { sni: \"etcd-main-0.example.com\", upstream: etcd-main-9 }
      - { sni: \"bad*.example.com\", upstream: up }
upstreams:
  - { name: up, endpoints: [\"10.0.0.1:2380\", \"no-port\"] }
  - { name: up, endpoints: [] }
";
    assert_eq!(
        errors(yaml),
        vec![
            "p.yaml:7:14: listeners[1].address: 0.0.0.0:2380 is already used by listener \"a\"",
            "p.yaml:8:23: listeners[1].default_upstream: no upstream named \"missing\"",
            "p.yaml:10:53: listeners[1].routes[0].upstream: no upstream named \"etcd-main-9\"",
            "p.yaml:11:16: listeners[1].routes[1].sni: invalid SNI \"bad*.example.com\": label \"bad*\" must be 1-63 of a-z, 0-9, '-' (a wildcard may only be a leading \"*.\")",
            "p.yaml:13:46: upstreams[0].endpoints[1]: invalid endpoint \"no-port\": write host:port, [ipv6]:port or ip:port",
            "p.yaml:14:13: upstreams[1].name: duplicate upstream name \"up\"",
            "p.yaml:14:28: upstreams[1].endpoints: needs at least one endpoint",
        ]
    );
}

#[test]
fn structural_errors_in_several_list_elements_are_all_reported() {
    let yaml = "\
listeners:
  - name: a
    address: \"0.0.0.0:2380\"
    rutes: []
  - name: b
    address: \"0.0.0.0:99999\"
upstreams:
  - { name: up, endpoints: [\"10.0.0.1:2380\"], weight: 3 }
";
    let e = errors(yaml);
    assert_eq!(e.len(), 3, "{e:#?}");
    assert!(
        e[0].starts_with("p.yaml:4:5: listeners[0].rutes: "),
        "{}",
        e[0]
    );
    assert!(e[0].contains("Unknown field `rutes`"), "{}", e[0]);
    assert!(
        e[1].starts_with("p.yaml:6:14: listeners[1].address: "),
        "{}",
        e[1]
    );
    assert!(
        e[2].starts_with("p.yaml:8:47: upstreams[0].weight: "),
        "{}",
        e[2]
    );
}

#[test]
fn top_level_typos_syntax_errors_and_bad_durations_have_positions() {
    let e = errors("listener: []\n");
    assert!(
        e[0].starts_with("p.yaml:1:1: listener: Unknown field `listener`"),
        "{e:?}"
    );
    let e = errors("listeners:\n  - name: a\n   address: [\n");
    assert!(e[0].starts_with("p.yaml:3:"), "{e:?}");
    let e = errors("drain_timeout: 10 seconds\n");
    assert!(
        e[0].starts_with("p.yaml:1:16: drain_timeout: invalid duration"),
        "{e:?}"
    );
}

#[test]
fn null_default_upstream_means_none_and_empty_file_means_defaults() {
    let c = parse_proxy(
        "p.yaml",
        "listeners:\n  - { name: a, address: \"[::1]:2380\", default_upstream: null }\n",
    )
    .unwrap();
    assert_eq!(c.listeners[0].default_upstream, None);
    assert_eq!(c.listeners[0].max_client_hello_bytes, 16384);
    assert_eq!(c.listeners[0].client_hello_timeout.to_string(), "10s");
    let empty: ProxyConfig = parse_proxy("p.yaml", "").unwrap();
    assert!(empty.listeners.is_empty());
    assert_eq!(empty.admin.address.to_string(), "127.0.0.1:9901");
    assert_eq!(empty.watch_interval.to_string(), "200ms");
}

#[test]
fn every_example_config_in_the_repository_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("proxy") && name.ends_with(".yaml") {
            isthmus_config::load_proxy_file(&path).unwrap_or_else(|e| panic!("{e}"));
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no example proxy configs found in {}",
        dir.display()
    );
}

#[test]
fn policy_fields_parse_with_defaults_nulls_and_precise_errors() {
    let c = parse_proxy(
        "p.yaml",
        "listeners:
  - name: vpn
    address: \"0.0.0.0:8443\"
    kind: http_connect
    route_header: X-Gardener-Destination
    proxy_protocol: accept
    trusted_proxies: [\"10.0.0.0/8\"]
    tcp_keepalive: null
    routes:
      - { header_value: \"outbound|1194||vpn-seed-server-0.shoot--foo--bar.svc.cluster.local\", upstream: vpn-0 }
upstreams:
  - name: vpn-0
    endpoints: [\"vpn-seed-server-0.shoot--foo--bar.svc.cluster.local:1194\"]
    connect_timeout: 10s
    max_connections: 1024
    send_proxy_protocol: v2
    load_balancing: round_robin
    idle_timeout: null
    tcp_keepalive: { time: 30s }
",
    )
    .unwrap();
    assert_eq!(c.listeners[0].tcp_keepalive, None);
    assert_eq!(c.upstreams[0].idle_timeout, None);
    let k = c.upstreams[0].tcp_keepalive.unwrap();
    assert_eq!(
        (k.time.to_string(), k.interval.to_string(), k.probes),
        ("30s".into(), "10s".into(), 6)
    );
    assert_eq!(c.upstreams[0].outlier_detection.consecutive_failures, 5);

    let e = errors(
        "listeners:
  - name: vpn
    address: \"0.0.0.0:8443\"
    kind: http_connect
    routes: [ { sni: a.example.com, upstream: u } ]
upstreams:
  - name: u
    endpoints: [\"a:1\"]
    tcp_keepalive: { time: 30s, probs: 3 }
",
    );
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].starts_with("p.yaml:9:33: upstreams[0].tcp_keepalive.probs: Unknown field `probs`"),
        "{e:?}"
    );
    let e = errors(
        "listeners:
  - name: vpn
    address: \"0.0.0.0:8443\"
    kind: http_connect
    routes: [ { sni: a.example.com, upstream: u } ]
upstreams:
  - { name: u, endpoints: [\"a:1\"], max_connections: 0, load_balancing: fastest }
",
    );
    assert!(e[0].contains("upstreams[0].load_balancing: "), "{e:?}");
}

#[test]
fn http_connect_listener_rules() {
    let e = errors(
        "listeners:
  - name: vpn
    address: \"0.0.0.0:8443\"
    kind: http_connect
    routes: [ { sni: a.example.com, upstream: u } ]
upstreams:
  - { name: u, endpoints: [\"a:1\"], max_connections: 0 }
",
    );
    assert_eq!(
        e,
        vec![
            "p.yaml:2:9: listeners[0].route_header: an http_connect listener needs the header to route on, e.g. X-Gardener-Destination",
            "p.yaml:5:15: listeners[0].routes[0].header_value: missing: the value of route_header to match",
            "p.yaml:5:22: listeners[0].routes[0].sni: this http_connect listener routes on header_value, not sni",
            "p.yaml:7:53: upstreams[0].max_connections: must be at least 1",
        ]
    );
}

#[test]
fn source_limits_allow_lists_and_trusted_proxies_are_checked() {
    let yaml = "\
listeners:
  - name: a
    address: \"0.0.0.0:2380\"
    allowed_sources: [\"10.0.0.0/8\"]
    max_pending_hellos_per_source: 0
    max_connections_per_source: 0
    max_connections: 0
  - name: b
    address: \"0.0.0.0:2381\"
    proxy_protocol: require
  - name: c
    address: \"0.0.0.0:2382\"
    trusted_proxies: [\"192.0.2.0/24\"]
";
    let e = errors(yaml);
    assert_eq!(e.len(), 5, "{e:#?}");
    let text = e.join("\n");
    for want in [
        "listeners[0].max_pending_hellos_per_source: must be at least 1",
        "listeners[0].max_connections_per_source: must be at least 1",
        "listeners[0].max_connections: must be at least 1",
        "listeners[1].trusted_proxies: required with proxy_protocol",
        "listeners[2].trusted_proxies: only used with proxy_protocol",
    ] {
        assert!(text.contains(want), "missing {want:?} in {text}");
    }
    let bad_cidr =
        "listeners: [{ name: a, address: \"0.0.0.0:1024\", allowed_sources: [\"10.1.2.3/8\"] }]";
    assert_eq!(
        errors(bad_cidr),
        vec!["p.yaml:1:67: listeners[0].allowed_sources[0]: invalid CIDR \"10.1.2.3/8\": host bits are set (write the network address)"]
    );
    let ok = "\
listeners:
  - name: a
    address: \"[::]:2380\"
    allowed_sources: [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]
    proxy_protocol: accept
    trusted_proxies: [\"10.250.0.0/16\"]
    max_pending_hellos_per_source: 4
    max_connections_per_source: 100
";
    let c: ProxyConfig = parse_proxy("p.yaml", ok).unwrap();
    let l = &c.listeners[0];
    assert_eq!(l.allowed_sources.len(), 3);
    assert_eq!(l.allowed_sources[2].to_string(), "192.0.2.7/32");
    assert_eq!(l.max_connections_per_source, Some(100));
    let defaults: ProxyConfig = parse_proxy(
        "p.yaml",
        "listeners: [{ name: a, address: \"0.0.0.0:1024\" }]",
    )
    .unwrap();
    assert_eq!(defaults.listeners[0].max_pending_hellos_per_source, 32);
    assert_eq!(defaults.listeners[0].max_connections_per_source, None);
    let zero =
        "upstreams: [{ name: u, endpoints: [\"10.0.0.1:1\"], max_connections_per_source: 0 }]";
    assert_eq!(
        errors(zero),
        ["p.yaml:1:79: upstreams[0].max_connections_per_source: must be at least 1"]
    );
}

/// Issue 47, point 1: a listener on the admin endpoint's port (its probes were spread over
/// both), two listeners on one port under different names (a wildcard covers the specific
/// address), and a port below 1024 (a restarted pod without CAP_NET_BIND_SERVICE
/// crash-loops) are refused with their positions; the last only unless the file allows it.
#[test]
fn listeners_may_not_share_a_port_with_the_admin_endpoint_or_each_other_nor_take_a_low_one() {
    let yaml = "\
admin: { address: \"0.0.0.0:9901\" }
listeners:
  - { name: vpn-9901, address: \"10.0.0.1:9901\" }
  - { name: peer-8443, address: \"0.0.0.0:8443\" }
  - { name: vpn-8443, address: \"10.0.0.2:8443\" }
  - { name: other-8443, address: \"[fd00::1]:8443\" }
  - { name: vpn-443, address: \"[::]:443\" }
";
    assert_eq!(
        errors(yaml),
        vec![
            "p.yaml:3:32: listeners[0].address: 10.0.0.1:9901 takes the port of the admin endpoint (admin.address 0.0.0.0:9901): the probes would reach this listener",
            "p.yaml:5:32: listeners[2].address: 10.0.0.2:8443 shares its port with listener \"peer-8443\" (0.0.0.0:8443): a wildcard address takes the port on every address",
            "p.yaml:7:31: listeners[4].address: port 443 is below 1024: binding it needs CAP_NET_BIND_SERVICE, which the chart's pods do not have (a restarted pod would crash-loop); use a port of 1024 or more, or set allow_privileged_ports: true where the process has the capability",
        ]
    );
    // Where the process has the capability, the file says so.
    let allowed = format!("allow_privileged_ports: true\n{yaml}");
    let e = errors(&allowed);
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e.iter().all(|e| !e.contains("below 1024")), "{e:#?}");
    let low_admin = "allow_privileged_ports: false\nadmin: { address: \"127.0.0.1:901\" }\n";
    assert_eq!(
        errors(low_admin),
        ["p.yaml:2:19: admin.address: port 901 is below 1024: binding it needs CAP_NET_BIND_SERVICE, which the chart's pods do not have (a restarted pod would crash-loop); use a port of 1024 or more, or set allow_privileged_ports: true where the process has the capability"]
    );
}
