//! Optional scalars that may be written as YAML `null`.
//!
//! `marked-yaml` treats every scalar as text, so `default_upstream: null` would otherwise be the
//! upstream named "null". Use with `#[serde(default, deserialize_with = "nullable::string")]`.

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
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<crate::Duration>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    match s {
        None => Ok(None),
        Some(s) if is_null(&s) => Ok(None),
        Some(s) => crate::Duration::parse(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// A keepalive setting that may be `null` (meaning: off).
pub fn keepalive<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::proxy::KeepaliveConfig>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Config(crate::proxy::KeepaliveConfig),
        Text(String),
    }
    match Option::<Either>::deserialize(d)? {
        None => Ok(None),
        Some(Either::Config(c)) => Ok(Some(c)),
        Some(Either::Text(s)) if is_null(&s) => Ok(None),
        Some(Either::Text(s)) => Err(serde::de::Error::custom(format!(
            "expected a mapping {{time, interval, probes}} or null, found {s:?}"
        ))),
    }
}
