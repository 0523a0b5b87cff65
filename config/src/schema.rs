//! What a kind of configuration file is beyond its serde types: semantic checks, the lists
//! whose elements are checked one by one, stand-ins for values that did not parse; and how one
//! file's errors are gathered. Below both readers (`yaml.rs`, `json.rs`) and the loader.

use crate::error::{ConfigError, ConfigErrors};
use crate::{validate, ProxyConfig};
use serde::de::DeserializeOwned;

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
        crate::marked::element_errors::<E>(self.0, key)
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

/// Every error of one file, in file order.
pub(crate) fn errors(file: &str, mut errors: Vec<ConfigError>) -> ConfigErrors {
    errors.sort_by_key(|e| (e.line, e.column));
    errors.dedup();
    ConfigErrors {
        file: file.to_owned(),
        errors,
    }
}
