//! Reading a file into a validated configuration, or into every error it contains.

use crate::error::{ConfigError, ConfigErrors, LoadError};
use crate::{validate, ProxyConfig};
use marked_yaml::{Marker, Node};
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

    /// Fills the typed values derived from a valid file (parsed endpoints, normalised
    /// patterns), so that nothing downstream parses strings again.
    fn finish(&mut self) {}
}

/// The parsed document, as seen by [`Schema::list_errors`].
#[derive(Debug)]
pub struct Lists<'a>(&'a Node);

impl Lists<'_> {
    /// Errors of each element of the top-level list `key` deserialised as `E`.
    pub fn probe<E: DeserializeOwned>(&self, key: &str) -> Vec<ConfigError> {
        element_errors::<E>(self.0, key)
    }
}

impl Schema for ProxyConfig {
    fn validate(&self) -> Vec<(String, String)> {
        validate::proxy(self)
    }
    fn finish(&mut self) {
        validate::finish_proxy(self);
    }
    fn list_errors(lists: &Lists<'_>) -> Vec<ConfigError> {
        let mut errors = lists.probe::<crate::ListenerConfig>("listeners");
        errors.extend(lists.probe::<crate::UpstreamConfig>("upstreams"));
        errors
    }
}

/// Reads and validates a proxy configuration file.
pub fn load_proxy_file(path: &Path) -> Result<Loaded<ProxyConfig>, LoadError> {
    load_file(path)
}

/// Parses and validates proxy configuration text; `file` names it in errors.
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

/// Parses and validates configuration text of any [`Schema`]; `file` names it in errors.
///
/// A valid file takes the fast, position-free path only; an invalid one is parsed again with
/// positions so that every error names its line, column and field path.
pub fn parse<T: Schema>(file: &str, text: &str) -> Result<T, ConfigErrors> {
    let mut config = match crate::fast::parse::<T>(text) {
        Some(config) if config.validate().is_empty() => config,
        _ => parse_marked(file, text)?,
    };
    config.finish();
    Ok(config)
}

/// The slow path: a tree with a position on every node, for errors that point at them.
fn parse_marked<T: Schema>(file: &str, text: &str) -> Result<T, ConfigErrors> {
    let fail = |mut errors: Vec<ConfigError>| {
        errors.sort_by_key(|e| (e.line, e.column));
        ConfigErrors {
            file: file.to_owned(),
            errors,
        }
    };
    let root = parse_node(text).map_err(|e| fail(vec![e]))?;
    let config: T = match marked_yaml::from_node(&root) {
        Ok(c) => c,
        Err(first) => {
            let mut errors = T::list_errors(&Lists(&root));
            let first = serde_error(&root, "", first);
            if errors.is_empty() || !is_inside_list(&first.path) {
                errors.push(first);
            }
            errors.dedup();
            return Err(fail(errors));
        }
    };
    let problems = config.validate();
    if problems.is_empty() {
        return Ok(config);
    }
    Err(fail(
        problems
            .into_iter()
            .map(|(path, message)| locate(&root, path, message))
            .collect(),
    ))
}

fn is_inside_list(path: &str) -> bool {
    path.contains('[')
}

fn parse_node(text: &str) -> Result<Node, ConfigError> {
    if text.trim().is_empty() {
        // An empty file is a valid, empty configuration: every field has a default.
        return marked_yaml::parse_yaml(0, "{}").map_err(|e| load_error(&e));
    }
    marked_yaml::parse_yaml(0, text).map_err(|e| load_error(&e))
}

fn load_error(e: &marked_yaml::LoadError) -> ConfigError {
    // marked-yaml's Display is "line:col: message"; keep only the message.
    let shown = e.to_string();
    let message = shown
        .splitn(3, ':')
        .nth(2)
        .map_or(shown.as_str(), str::trim);
    let (line, column) = load_error_marker(e).map_or((0, 0), |m| (m.line(), m.column()));
    ConfigError {
        line,
        column,
        path: String::new(),
        message: message.to_owned(),
    }
}

fn load_error_marker(e: &marked_yaml::LoadError) -> Option<Marker> {
    use marked_yaml::LoadError as L;
    match e {
        L::TopLevelMustBeMapping(m)
        | L::TopLevelMustBeSequence(m)
        | L::UnexpectedAnchor(m)
        | L::MappingKeyMustBeScalar(m)
        | L::UnexpectedTag(m)
        | L::ScanError(m, _) => Some(*m),
        L::DuplicateKey(k) => k.key.span().start().copied(),
    }
}

/// Deserialises each element of the list under `key` on its own, so that a file with mistakes
/// in several listeners reports all of them rather than the first.
fn element_errors<T: DeserializeOwned>(root: &Node, key: &str) -> Vec<ConfigError> {
    let Some(Node::Sequence(items)) = root.as_mapping().and_then(|m| m.get(key)) else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            marked_yaml::from_node::<T>(item)
                .err()
                .map(|e| serde_error(root, &format!("{key}[{i}]"), e))
        })
        .collect()
}

fn serde_error(root: &Node, prefix: &str, e: marked_yaml::FromNodeError) -> ConfigError {
    let inner = e.path().unwrap_or("").to_owned();
    let path = match (prefix.is_empty(), inner.is_empty() || inner == ".") {
        (true, _) => inner,
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{inner}"),
    };
    let mark = e.start_mark();
    let shown = e.into_inner().to_string();
    // The inner error's Display may repeat the path; the ConfigError carries it separately.
    let message = shown
        .strip_prefix(&format!("{path}: "))
        .unwrap_or(&shown)
        .to_owned();
    match mark {
        Some(m) => ConfigError {
            line: m.line(),
            column: m.column(),
            path,
            message,
        },
        None => locate(root, path, message),
    }
}

/// Finds the node at `path` (`listeners[1].routes[0].upstream`) and reports its position; if
/// the exact node is missing (a required field), the nearest existing parent is used.
fn locate(root: &Node, path: String, message: String) -> ConfigError {
    let mut node = root;
    for segment in segments(&path) {
        let next = match segment {
            Segment::Field(name) => node.as_mapping().and_then(|m| m.get(name)),
            Segment::Index(i) => node.as_sequence().and_then(|s| s.get(i)),
        };
        match next {
            Some(n) => node = n,
            None => break,
        }
    }
    let (line, column) = node
        .span()
        .start()
        .map_or((0, 0), |m| (m.line(), m.column()));
    ConfigError {
        line,
        column,
        path,
        message,
    }
}

enum Segment<'a> {
    Field(&'a str),
    Index(usize),
}

fn segments(path: &str) -> impl Iterator<Item = Segment<'_>> {
    path.split('.').filter(|s| !s.is_empty()).flat_map(|part| {
        let (name, rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        let field = (!name.is_empty()).then_some(Segment::Field(name));
        let indices = rest
            .split(['[', ']'])
            .filter_map(|n| n.parse().ok())
            .map(Segment::Index);
        field.into_iter().chain(indices)
    })
}
