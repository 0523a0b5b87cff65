//! Optional scalars that may be written as YAML `null`.
//!
//! `marked-yaml` treats every scalar as text, so `default_upstream: null` would otherwise be the
//! upstream named "null". Use with `#[serde(default, deserialize_with = "nullable::string")]`.

use crate::duration::Duration;
use crate::keepalive::KeepaliveConfig;
use serde::{Deserialize, Deserializer};

/// `null`, `~`, `Null`, `NULL` and the empty string become `None`.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.filter(|s| !is_null(s)))
}

fn is_null(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

/// A duration that may be `null` (meaning: none).
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    match s {
        None => Ok(None),
        Some(s) if is_null(&s) => Ok(None),
        Some(s) => Duration::parse(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// A keepalive setting that may be `null` (meaning: off).
pub fn keepalive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<KeepaliveConfig>, D::Error> {
    // A visitor rather than `#[serde(untagged)]`: untagged buffers the value as generic data,
    // which loses marked-yaml's typed scalars (every number would be text) and the field path.
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<KeepaliveConfig>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a mapping {time, interval, probes} or null")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            if is_null(s) {
                Ok(None)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Str(s), &self))
            }
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            let d = serde::de::value::MapAccessDeserializer::new(map);
            KeepaliveConfig::deserialize(d).map(Some)
        }
    }
    d.deserialize_any(V)
}
