//! Reading a file into a validated configuration, or into every error it contains: `.json`
//! files with serde_json (what the controller writes), everything else with marked-yaml (what
//! people write).

use crate::error::{ConfigError, ConfigErrors, LoadError};
use crate::{validate, ProxyConfig};
use serde::de::DeserializeOwned;
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

/// A configuration file type: how to check it beyond what serde checks.
pub trait Schema: DeserializeOwned {
    /// Semantic problems as `(field path, message)`; the loader adds line and column.
    fn validate(&self) -> Vec<(String, String)>;

    /// Structural errors of list elements, each deserialised on its own, so that a file with
    /// mistakes in several elements reports all of them (serde stops at the first).
    /// Implement with [`Lists::probe`] for every top-level list.
    fn list_errors(_lists: &Lists<'_>) -> Vec<ConfigError> {
        Vec::new()
    }

    /// Text that parses as the value at `path` (`upstreams[0].endpoints[1]`), put in place of
    /// a value that did not (a malformed endpoint), so that the rest of the file is still
    /// checked and an operator sees every problem at once; `n` makes it unique. `None`:
    /// nothing can stand in there, the error ends the reading.
    fn stand_in(_path: &str, _n: usize) -> Option<String> {
        None
    }
}

/// The parsed document, as seen by [`Schema::list_errors`].
#[derive(Debug)]
pub struct Lists<'a>(pub(crate) &'a marked_yaml::Node);

impl Lists<'_> {
    /// Errors of each element of the top-level list `key` deserialised as `E`.
    pub fn probe<E: DeserializeOwned>(&self, key: &str) -> Vec<ConfigError> {
        crate::yaml::element_errors::<E>(self.0, key)
    }
}

impl Schema for ProxyConfig {
    fn validate(&self) -> Vec<(String, String)> {
        validate::proxy(self)
    }
    fn list_errors(lists: &Lists<'_>) -> Vec<ConfigError> {
        let mut errors = lists.probe::<crate::ListenerConfig>("listeners");
        errors.extend(lists.probe::<crate::UpstreamConfig>("upstreams"));
        errors
    }
    fn stand_in(path: &str, n: usize) -> Option<String> {
        let field = path.rsplit('.').next().unwrap_or(path);
        let list = field.split('[').next().unwrap_or(field);
        match list {
            "sni" => Some(format!("stand-in-{n}.invalid")),
            "endpoints" if field.ends_with(']') => Some(format!("stand-in-{n}.invalid:1")),
            "allowed_sources" | "trusted_proxies" if field.ends_with(']') => {
                Some("192.0.2.0/24".into())
            }
            _ => None,
        }
    }
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

/// Every error of one file, in file order.
pub(crate) fn errors(file: &str, mut errors: Vec<ConfigError>) -> ConfigErrors {
    errors.sort_by_key(|e| (e.line, e.column));
    errors.dedup();
    ConfigErrors {
        file: file.to_owned(),
        errors,
    }
}
