//! The reload guard: a new file that would remove every listener, or most of the routes in
//! effect, is refused unless it says so (`allow_large_removal: true`). An emptied ConfigMap, a
//! truncated file that still parses, a wrong file mounted: each is valid and would take every
//! shoot's exposure down at once, while `/readyz` stays 200.

use isthmus_config::{ListenerKind, ProxyConfig};
use std::collections::HashSet;

/// Below this many routes in effect, dropping most of them is an ordinary edit.
pub const MIN_ROUTES: usize = 10;

/// Why `new` may not replace `old` on a reload, if it may not.
pub fn large_removal(old: &ProxyConfig, new: &ProxyConfig) -> Option<String> {
    if new.allow_large_removal {
        return None;
    }
    if !old.listeners.is_empty() && new.listeners.is_empty() {
        return Some(format!(
            "it removes every listener ({} in effect); set allow_large_removal: true if that is meant",
            old.listeners.len()
        ));
    }
    let before = routes(old);
    if before.len() < MIN_ROUTES {
        return None;
    }
    let kept = routes(new).intersection(&before).count();
    (kept * 2 < before.len()).then(|| {
        format!(
            "it keeps {kept} of the {} routes in effect; set allow_large_removal: true if that is meant",
            before.len()
        )
    })
}

/// Each route as `(listener, SNI pattern or header value)`.
fn routes(c: &ProxyConfig) -> HashSet<(&str, &str)> {
    c.listeners
        .iter()
        .flat_map(|l| {
            l.routes.iter().map(move |r| {
                let key = match (l.kind, &r.sni) {
                    (ListenerKind::TlsPassthrough, Some(sni)) => sni.as_str(),
                    _ => r.header_value.as_str(),
                };
                (l.name.as_str(), key)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::large_removal;
    use isthmus_config::{parse_proxy, ProxyConfig};

    fn config(routes: usize, listeners: usize, allow: bool) -> ProxyConfig {
        let mut text = format!("allow_large_removal: {allow}\nlisteners:\n");
        for l in 0..listeners {
            text += &format!("  - name: l{l}\n    address: \"127.0.0.1:0\"\n    routes:\n");
            for r in 0..routes {
                text += &format!("      - {{ sni: r{r}.example.com, upstream: u }}\n");
            }
        }
        text += "upstreams: [{ name: u, endpoints: [\"127.0.0.1:1\"] }]\n";
        parse_proxy("t.yaml", &text).unwrap()
    }

    #[test]
    fn every_listener_or_most_routes_only_when_the_file_says_so() {
        let running = config(20, 1, false);
        let empty = parse_proxy("t.yaml", "").unwrap();
        assert!(large_removal(&running, &empty)
            .unwrap()
            .contains("removes every listener (1 in effect)"));
        assert!(large_removal(&running, &config(9, 1, false))
            .unwrap()
            .contains("keeps 9 of the 20 routes"));
        assert_eq!(large_removal(&running, &config(10, 1, false)), None);
        assert_eq!(large_removal(&running, &config(0, 0, true)), None);
        // Routes moved to another listener are not kept.
        let mut moved = config(20, 1, false);
        moved.listeners[0].name = "other".into();
        assert!(large_removal(&running, &moved).is_some());
        // Few routes: an ordinary edit.
        assert_eq!(
            large_removal(&config(9, 1, false), &config(0, 1, false)),
            None
        );
        // Nothing to remove: a file without listeners may follow one without listeners.
        assert_eq!(large_removal(&empty, &empty), None);
    }
}
