//! The two readers: JSON (the controller's routes file) and YAML (files people write) give the
//! same configuration, errors that name the field path, and refuse deep nesting without
//! recursing into it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use isthmus_config::{parse_proxy, ProxyConfig};

const YAML: &str = "\
admin: { address: \"0.0.0.0:9901\" }
routes_without_allowed_sources: deny
listeners:
  - name: peer-2380
    address: \"0.0.0.0:2380\"
    allowed_sources: [\"198.51.100.0/24\"]
    max_connections_per_source: 320
    routes:
      - { sni: \"ETCD-main-0.shoot--a.seed.example.com.\", upstream: a0, allowed_sources: [\"198.51.100.0/24\"] }
      - { sni: \"*.vpn.seed.example.com\", upstream: a0 }
  - { name: vpn, address: \"0.0.0.0:8443\", kind: http_connect, route_header: X-Gardener-Destination }
upstreams:
  - name: a0
    endpoints: [\"etcd-main-0.etcd-main-peer.shoot--a.svc.cluster.local:2380\", \"[fd00::1]:2380\"]
    idle_timeout: 3h
    tcp_keepalive: null
";

fn config() -> ProxyConfig {
    parse_proxy("p.yaml", YAML).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn json_and_yaml_give_the_same_configuration_and_serialising_round_trips() {
    let c = config();
    assert_eq!(
        c.listeners[0].routes[0].sni.as_ref().unwrap().as_str(),
        "etcd-main-0.shoot--a.seed.example.com",
        "normalised once, while reading"
    );
    let json = serde_json::to_string(&c).unwrap();
    let back = parse_proxy("p.json", &json).unwrap_or_else(|e| panic!("{e}\n{json}"));
    assert_eq!(back, c);
    // What is at its default is left out of an upstream and a route.
    assert!(!json.contains("connect_timeout"), "{json}");
    assert!(!json.contains("outlier_detection"), "{json}");
    assert!(json.contains("\"tcp_keepalive\":null"), "{json}");
    // JSON is YAML: the YAML reader gives the same value for the same text.
    assert_eq!(parse_proxy("p.yaml", &json).unwrap(), c);
}

#[test]
fn json_errors_name_the_field_path() {
    let json = serde_json::to_string(&config()).unwrap();
    let bad_sni = json.replace("etcd-main-0.shoot", "etcd main-0.shoot");
    let e = parse_proxy("p.json", &bad_sni).unwrap_err().to_string();
    assert!(
        e.starts_with("p.json:1:")
            && e.contains(": listeners[0].routes[0].sni: invalid SNI \"etcd main-0."),
        "{e}"
    );
    let unknown = json.replace("\"idle_timeout\"", "\"idle_timout\"");
    let e = parse_proxy("p.json", &unknown).unwrap_err().to_string();
    assert!(
        e.contains(": upstreams[0].idle_timout: unknown field `idle_timout`"),
        "{e}"
    );
    let semantic = json.replace("\"upstream\":\"a0\"", "\"upstream\":\"a9\"");
    let e = parse_proxy("p.json", &semantic).unwrap_err().to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 2, "{e}");
    assert!(
        lines[0].contains(": listeners[0].routes[0].upstream: no upstream named \"a9\""),
        "{e}"
    );
    assert!(!lines[0].starts_with("p.json:0:0"), "located: {e}");
    let e = parse_proxy("p.json", "").unwrap_err().to_string();
    assert!(
        e.starts_with("p.json:1:0: EOF"),
        "an empty JSON file is no file: {e}"
    );
}

#[test]
fn ten_thousand_levels_are_refused_without_recursing_into_them() {
    let flow = |open: &str, close: &str| {
        format!(
            "{{\"listeners\": {}{}}}",
            open.repeat(10_000),
            close.repeat(10_000)
        )
    };
    // `- - - … x`: block sequences, 2 bytes a level.
    let compact = format!("listeners:\n{}x\n", "- ".repeat(10_000));
    for text in [flow("[", "]"), flow("{\"a\":", "}"), compact] {
        // A 2 MiB stack like the reload's blocking thread: deep recursion would overflow it.
        let (json, yaml) = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let json = parse_proxy("p.json", &text)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                let yaml = parse_proxy("p.yaml", &text)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                (json, yaml)
            })
            .unwrap()
            .join()
            .unwrap();
        // JSON goes straight into the types, which stop at the first level that does not
        // fit (serde_json would stop at 128 levels anyway). YAML: yaml-rust2's scanner refuses
        // flow nesting past its own limit, and the depth check the rest, before any tree.
        assert!(json.is_err());
        let yaml = yaml.unwrap_err();
        assert!(
            yaml.contains("nested too deeply") || yaml.contains("recursion limit exceeded"),
            "{yaml}"
        );
    }
    let e = parse_proxy("p.yaml", &format!("listeners:\n{}x\n", "- ".repeat(10_000)))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "p.yaml:2:127: nested too deeply: more than 64 levels of collections"
    );
}

#[test]
fn constructors_give_what_the_file_gives() {
    use isthmus_config::{ListenerConfig, UpstreamConfig};
    let c = parse_proxy(
        "p.yaml",
        "listeners: [{ name: l, address: \"127.0.0.1:1\" }]\nupstreams: [{ name: u, endpoints: [] }]\n",
    )
    .unwrap_err();
    // An upstream needs an endpoint: compare the parts on their own.
    assert!(c.to_string().contains("needs at least one endpoint"));
    let l: ListenerConfig =
        serde_json::from_str(r#"{"name": "l", "address": "127.0.0.1:1"}"#).unwrap();
    assert_eq!(ListenerConfig::new("l", "127.0.0.1:1".parse().unwrap()), l);
    let u: UpstreamConfig = serde_json::from_str(r#"{"name": "u", "endpoints": []}"#).unwrap();
    assert_eq!(UpstreamConfig::new("u", Vec::new()), u);
    assert_eq!(ProxyConfig::default(), parse_proxy("p.yaml", "").unwrap());
}

#[test]
fn a_route_lists_its_own_sources_and_a_bad_one_names_its_path() {
    let c = config();
    assert_eq!(
        c.routes_without_allowed_sources,
        isthmus_config::UnlistedSources::Deny
    );
    let routes = &c.listeners[0].routes;
    assert_eq!(routes[0].allowed_sources[0].to_string(), "198.51.100.0/24");
    assert!(routes[1].allowed_sources.is_empty());
    let bad = YAML.replace("[\"198.51.100.0/24\"] }", "[\"198.51.100.1/24\"] }");
    let e = parse_proxy("p.yaml", &bad).unwrap_err().to_string();
    assert!(
        e.starts_with("p.yaml:9:90: ")
            && e.contains(
                ": listeners[0].routes[0].allowed_sources[0]: invalid CIDR \"198.51.100.1/24\""
            ),
        "{e}"
    );
}
