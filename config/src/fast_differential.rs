//! Differential test of the fast path against marked-yaml: over many mutants of real
//! configuration files, whenever the fast path returns a value, the marked path must accept
//! the same text and return an equal value. (The reverse is not required: the fast path may
//! give up on anything.) This is what makes the fast path safe to put in front of reloads.

use crate::tunnel::{TunnelAgentConfig, TunnelServerConfig};
use crate::ProxyConfig;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Values a mutant puts in place of a scalar: YAML's special spellings and near misses.
const TOKENS: &[&str] = &[
    "",
    "~",
    "null",
    "Null",
    "true",
    "yes",
    "False",
    "0",
    "-1",
    "0x10",
    "1e3",
    "007",
    "5s",
    "\"5s\"",
    "'10ms'",
    "[]",
    "{}",
    "[a, b]",
    "{ a: 1 }",
    "\"0.0.0.0:1\"",
    "127.0.0.1:0",
    "round_robin",
    "|\n  x",
    "&a 1",
    "*a",
    "!!str 3",
];

use isthmus_testkit::Rng;

/// One mutant: replace the value after a `:` on a random line, drop a line, or duplicate one.
fn mutate(lines: &[&str], rng: &mut Rng) -> String {
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    for _ in 0..=rng.below(2) {
        let i = rng.below(out.len());
        match rng.below(4) {
            0 => {
                out.remove(i);
            }
            1 => {
                let l = out[i].clone();
                out.insert(i, l);
            }
            _ => {
                if let Some(colon) = out[i].rfind(": ") {
                    let token = TOKENS[rng.below(TOKENS.len())];
                    out[i] = format!("{}: {token}", &out[i][..colon]);
                }
            }
        }
        if out.is_empty() {
            break;
        }
    }
    out.join("\n")
}

fn check<T: DeserializeOwned + PartialEq + Debug>(base: &str, mutants: usize) -> (usize, usize) {
    let lines: Vec<&str> = base.lines().collect();
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    let (mut fast_some, mut total) = (0, 0);
    for n in 0..mutants {
        let text = if n == 0 {
            base.to_owned()
        } else {
            mutate(&lines, &mut rng)
        };
        total += 1;
        let Some(fast) = crate::fast::parse::<T>(&text) else {
            continue;
        };
        fast_some += 1;
        let marked = marked_yaml::parse_yaml(0, &text)
            .map_err(|e| e.to_string())
            .and_then(|node| marked_yaml::from_node::<T>(&node).map_err(|e| e.to_string()));
        match marked {
            Ok(m) => assert_eq!(fast, m, "the two paths disagree on:\n{text}"),
            Err(e) => panic!("fast path accepted what marked-yaml refuses ({e}):\n{text}"),
        }
    }
    (fast_some, total)
}

#[test]
fn the_fast_path_agrees_with_marked_yaml_on_every_mutant_it_accepts() {
    let proxy = include_str!("../../examples/proxy.yaml");
    let (some, total) = check::<ProxyConfig>(proxy, 4000);
    eprintln!("proxy: the fast path accepted {some} of {total} mutants");
    // The test must exercise both outcomes, or it proves nothing.
    assert!(some > total / 10 && some < total, "{some} of {total}");

    let server = "\
agents: { address: \"127.0.0.1:0\", tls: { cert: a.pem, key: b.pem, client_ca: c.pem } }
connect: { address: \"127.0.0.1:0\", tls: { cert: a.pem, key: b.pem, client_ca: c.pem } }
admin: { address: \"127.0.0.1:0\" }
connect_timeout: 5s
session_wait: 2s
drain_timeout: 10s
";
    let (some, total) = check::<TunnelServerConfig>(server, 1500);
    eprintln!("tunnel server: {some} of {total}");
    assert!(some > 0);
    let agent = "\
servers:
  - { address: \"vpn.example:443\", server_name: vpn.example }
  - address: proxy.example:8443
    http_connect_header: \"outbound|1194||vpn\"
tls: { ca: ca.pem, cert: a.pem, key: b.pem }
allow: [\"10.0.0.0/8\", \"127.0.0.1/32\"]
admin: { address: \"127.0.0.1:0\" }
resolve_interval: 100ms
dial_timeout: 3s
";
    let (some, total) = check::<TunnelAgentConfig>(agent, 1500);
    eprintln!("tunnel agent: {some} of {total}");
    assert!(some > 0);
}
