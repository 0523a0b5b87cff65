//! SNI route tables as data, with a pure `find`: exact names beat wildcards, and among
//! wildcards the longest suffix wins. Lookup cost is one hash probe per label of the name,
//! independent of the number of routes.

use std::collections::HashMap;

/// Routes from normalised SNI patterns to `T`.
#[derive(Debug, Clone)]
pub struct RouteTable<T> {
    exact: HashMap<Box<str>, T>,
    /// Keyed by the suffix *with* its leading dot: `*.vpn.example.com` is stored as
    /// `.vpn.example.com`, so a candidate suffix of the name can be looked up directly.
    wildcard: HashMap<Box<str>, T>,
}

impl<T> Default for RouteTable<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }
}

impl<T> RouteTable<T> {
    /// Adds a route for an already normalised pattern (lower case, no trailing dot: an
    /// `isthmus_config::SniPattern`). A later insert of the same pattern
    /// replaces the earlier one; validation rejects duplicates before we get here.
    pub fn insert(&mut self, pattern: &str, value: T) {
        match pattern.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') => {
                self.wildcard.insert(suffix.into(), value);
            }
            _ => {
                self.exact.insert(pattern.into(), value);
            }
        }
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len()
    }

    /// True when there are no routes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The route for a server name as the client sent it: case-insensitive, a trailing dot
    /// ignored. A wildcard matches one or more labels in front of its suffix, never the bare
    /// suffix itself.
    pub fn find(&self, sni: &str) -> Option<&T> {
        let sni = sni.strip_suffix('.').unwrap_or(sni);
        if sni.is_empty() || sni.len() > 253 {
            return None;
        }
        // A stack buffer keeps the lookup allocation-free for every valid host name.
        let mut lower = [0u8; 253];
        let lower = &mut lower[..sni.len()];
        lower.copy_from_slice(sni.as_bytes());
        lower.make_ascii_lowercase();
        let name = std::str::from_utf8(lower).ok()?;
        if let Some(v) = self.exact.get(name) {
            return Some(v);
        }
        if self.wildcard.is_empty() {
            return None;
        }
        // Candidate suffixes from the longest (drop the first label) to the shortest.
        name.match_indices('.')
            .find_map(|(i, _)| self.wildcard.get(&name[i..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RouteTable<&'static str> {
        let mut t = RouteTable::default();
        t.insert("etcd-0.seed-a.example.com", "exact");
        t.insert("*.seed-a.example.com", "short");
        t.insert("*.vpn.seed-a.example.com", "long");
        t.insert("*.com", "tld");
        t
    }

    #[test]
    fn exact_beats_wildcard() {
        assert_eq!(table().find("etcd-0.seed-a.example.com"), Some(&"exact"));
    }

    #[test]
    fn longest_wildcard_wins() {
        let t = table();
        assert_eq!(t.find("x.vpn.seed-a.example.com"), Some(&"long"));
        assert_eq!(t.find("a.b.vpn.seed-a.example.com"), Some(&"long"));
        assert_eq!(t.find("etcd-1.seed-a.example.com"), Some(&"short"));
        assert_eq!(t.find("other.example.com"), Some(&"tld"));
    }

    #[test]
    fn case_and_trailing_dot_are_ignored() {
        let t = table();
        assert_eq!(t.find("ETCD-0.Seed-A.example.COM."), Some(&"exact"));
        assert_eq!(t.find("X.VPN.seed-a.example.com."), Some(&"long"));
    }

    #[test]
    fn wildcard_does_not_match_bare_suffix_or_other_names() {
        let mut t = RouteTable::default();
        t.insert("*.vpn.example.com", 1);
        assert_eq!(t.find("vpn.example.com"), None);
        assert_eq!(t.find("xvpn.example.com"), None);
        assert_eq!(t.find(""), None);
        assert_eq!(t.find("."), None);
        assert_eq!(t.find(&"a".repeat(300)), None);
    }
}

/// Routes from HTTP header values: exact values first, then `*` patterns, the one with the
/// most literal characters first (so the most specific pattern wins).
#[derive(Debug, Clone)]
pub struct HeaderTable<T> {
    exact: HashMap<Box<str>, T>,
    patterns: Vec<(Vec<Box<str>>, T)>,
}

impl<T> Default for HeaderTable<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            patterns: Vec::new(),
        }
    }
}

impl<T> HeaderTable<T> {
    /// Adds a route for a value or a pattern containing `*`.
    pub fn insert(&mut self, value: &str, route: T) {
        if value.contains('*') {
            let parts: Vec<Box<str>> = value.split('*').map(Box::from).collect();
            let literal = |p: &[Box<str>]| p.iter().map(|s| s.len()).sum::<usize>();
            let at = self
                .patterns
                .partition_point(|(q, _)| literal(q) >= literal(&parts));
            self.patterns.insert(at, (parts, route));
        } else {
            self.exact.insert(value.into(), route);
        }
    }

    /// The route for a header value (compared exactly, case-sensitively).
    pub fn find(&self, value: &str) -> Option<&T> {
        self.exact.get(value).or_else(|| {
            self.patterns
                .iter()
                .find(|(parts, _)| glob_match(parts, value))
                .map(|(_, t)| t)
        })
    }
}

/// `parts` are the literal pieces between `*`s (at least two).
fn glob_match(parts: &[Box<str>], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    let Some(mut rest) = value.strip_prefix(&**first) else {
        return false;
    };
    let middle = parts.get(1..parts.len().saturating_sub(1)).unwrap_or(&[]);
    for piece in middle {
        match rest.find(&**piece) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(&**last)
}

#[cfg(test)]
mod header_tests {
    use super::*;

    #[test]
    fn exact_then_most_specific_pattern() {
        let mut t = HeaderTable::default();
        t.insert(
            "outbound|1194||vpn-seed-server-0.shoot--a.svc.cluster.local",
            "exact",
        );
        t.insert("outbound|1194||*", "any-vpn");
        t.insert(
            "outbound|1194||vpn-seed-server-*.shoot--a.svc.cluster.local",
            "shoot-a",
        );
        assert_eq!(
            t.find("outbound|1194||vpn-seed-server-0.shoot--a.svc.cluster.local"),
            Some(&"exact")
        );
        assert_eq!(
            t.find("outbound|1194||vpn-seed-server-1.shoot--a.svc.cluster.local"),
            Some(&"shoot-a")
        );
        assert_eq!(
            t.find("outbound|1194||vpn-seed-server.shoot--b.svc.cluster.local"),
            Some(&"any-vpn")
        );
        assert_eq!(t.find("outbound|443||kube-apiserver"), None);
        assert_eq!(t.find(""), None);
    }

    #[test]
    fn glob_edges() {
        let p = |s: &str| s.split('*').map(Box::from).collect::<Vec<Box<str>>>();
        assert!(glob_match(&p("a*a"), "aa"));
        assert!(!glob_match(&p("ab*ba"), "aba"));
        assert!(glob_match(&p("*"), "anything"));
        assert!(glob_match(&p("a*b*c"), "a-x-b-y-c"));
        assert!(!glob_match(&p("a*b*c"), "a-c-b"));
    }
}
