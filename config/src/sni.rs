//! A route's server-name pattern, checked and normalised once while the file is read, so that
//! route tables take it as is and nothing downstream parses the string again.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A host name (`etcd-main-0.shoot--foo--bar.seed-a.example.com`) or a wildcard
/// (`*.vpn.seed-a.example.com`), lower case and without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SniPattern(Box<str>);

impl SniPattern {
    /// Lower-cases `sni`, drops a trailing dot and checks its syntax; the error is the message
    /// an operator sees for the field.
    pub fn parse(sni: &str) -> Result<Self, String> {
        let s = sni.strip_suffix('.').unwrap_or(sni).to_ascii_lowercase();
        let host = s.strip_prefix("*.").unwrap_or(&s);
        if host.is_empty() || host.len() > 253 {
            return Err(format!(
                "invalid SNI {sni:?}: empty or longer than 253 characters"
            ));
        }
        for label in host.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return Err(format!(
                    "invalid SNI {sni:?}: label {label:?} must be 1-63 of a-z, 0-9, '-' \
                     (a wildcard may only be a leading \"*.\")"
                ));
            }
        }
        Ok(Self(s.into_boxed_str()))
    }

    /// The normalised pattern.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it is a `*.suffix` wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.0.starts_with("*.")
    }
}

impl fmt::Display for SniPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SniPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::text::parse_str(d, "a host name or *.suffix", Self::parse)
    }
}

impl Serialize for SniPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::SniPattern;

    #[test]
    fn normalises_and_refuses() {
        let p = SniPattern::parse("ETCD-0.Seed-A.example.com.").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.as_str(), "etcd-0.seed-a.example.com");
        assert!(!p.is_wildcard());
        assert!(SniPattern::parse("*.vpn.example.com").is_ok_and(|p| p.is_wildcard()));
        for bad in [
            "",
            ".",
            "bad*.example.com",
            "a..b",
            "*.",
            "a b.c",
            &"a".repeat(64),
        ] {
            assert!(SniPattern::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
