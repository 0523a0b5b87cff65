//! Reading a file into a validated configuration, or into every error it contains: `.json`
//! files with serde_json (what the controller writes), everything else with marked-yaml (what
//! people write).

use crate::error::{ConfigErrors, LoadError};
use crate::schema::Schema;
use crate::ProxyConfig;
use std::path::Path;

/// A validated configuration together with the facts a reload needs.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// The configuration.
    pub config: T,
    /// Lowercase hex SHA-256 of the file's bytes: what `/config` reports and what a controller
    /// compares against the ConfigMap it wrote.
    pub hash: String,
}

/// SHA-256 of `bytes` as lowercase hex.
pub fn hash_bytes(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads and validates a proxy configuration file.
pub fn load_proxy_file(path: &Path) -> Result<Loaded<ProxyConfig>, LoadError> {
    load_file(path)
}

/// Parses and validates proxy configuration text; `file` names it in errors and, by its
/// extension, says whether the text is JSON.
pub fn parse_proxy(file: &str, text: &str) -> Result<ProxyConfig, ConfigErrors> {
    parse(file, text)
}

/// Reads and validates a configuration file of any [`Schema`].
pub fn load_file<T: Schema>(path: &Path) -> Result<Loaded<T>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let config = parse(&path.display().to_string(), &text).map_err(LoadError::Invalid)?;
    Ok(Loaded {
        config,
        hash: hash_bytes(text.as_bytes()),
    })
}

/// Parses and validates configuration text of any [`Schema`]; `file` names it in errors. A
/// name ending in `.json` is read as JSON, anything else as YAML.
pub fn parse<T: Schema>(file: &str, text: &str) -> Result<T, ConfigErrors> {
    let json = Path::new(file)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if json {
        crate::json::parse(file, text)
    } else {
        crate::yaml::parse(file, text)
    }
}
