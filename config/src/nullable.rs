//! Optional scalars that may be written as YAML `null`.
//!
//! `marked-yaml` treats every scalar as text, so `default_upstream: null` would otherwise be the
//! upstream named "null". Use with `#[serde(default, deserialize_with = "nullable::string")]`.

use serde::{Deserialize, Deserializer};

/// `null`, `~`, `Null`, `NULL` and the empty string become `None`.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.filter(|s| !matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL")))
}
