//! YAML files: marked-yaml's tree, with a position on every node, deserialised with the field
//! path of an error; semantic problems are located on the same tree.

use crate::depth;
use crate::error::{ConfigError, ConfigErrors};
use crate::load::{errors, Lists, Schema};
use marked_yaml::{Marker, Node};
use serde::de::DeserializeOwned;

/// Values that failed their own parsing are replaced at most this often per file: each
/// replacement reads the whole tree again.
const MAX_STAND_INS: usize = 16;

/// Parses and validates YAML text: the value, or every error with its position.
pub(crate) fn parse<T: Schema>(file: &str, text: &str) -> Result<T, ConfigErrors> {
    let mut root = tree(text).map_err(|e| errors(file, vec![e]))?;
    let mut found = Vec::new();
    let config = loop {
        let first = match marked_yaml::from_node::<T>(&root) {
            Ok(config) => break config,
            Err(e) => serde_error(&root, "", e),
        };
        // A value that did not parse (an endpoint, an SNI) is reported and replaced, so that
        // the rest of the file is still checked.
        let n = found.len();
        let stand_in = T::stand_in(&first.path, n).filter(|_| n < MAX_STAND_INS);
        if let Some(stand_in) = stand_in {
            if replace(&mut root, &first.path, &stand_in) {
                found.push(first);
                continue;
            }
        }
        let mut structural = T::list_errors(&Lists(&root));
        if structural.is_empty() || !first.path.contains('[') {
            structural.push(first);
        }
        found.extend(structural);
        return Err(errors(file, found));
    };
    found.extend(
        config
            .validate()
            .into_iter()
            .map(|(path, message)| locate(&root, path, message)),
    );
    if found.is_empty() {
        Ok(config)
    } else {
        Err(errors(file, found))
    }
}

/// The marked tree of `text`, once its nesting is known to be bounded ([`depth`]). An empty
/// file is an empty mapping: every field has a default.
pub(crate) fn tree(text: &str) -> Result<Node, ConfigError> {
    depth::check(text).map_err(|d| ConfigError {
        line: d.line,
        column: d.column,
        path: String::new(),
        message: format!(
            "nested too deeply: more than {} levels of collections",
            depth::MAX_DEPTH
        ),
    })?;
    let text = if text.trim().is_empty() { "{}" } else { text };
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
pub(crate) fn element_errors<T: DeserializeOwned>(root: &Node, key: &str) -> Vec<ConfigError> {
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

/// Puts a scalar `text` in place of the node at `path`, keeping its position; false when there
/// is no such node.
fn replace(root: &mut Node, path: &str, text: &str) -> bool {
    let mut node = root;
    for segment in segments(path) {
        let next = match segment {
            Segment::Field(name) => node.as_mapping_mut().and_then(|m| m.get_mut(name)),
            Segment::Index(i) => node.as_sequence_mut().and_then(|s| s.get_mut(i)),
        };
        match next {
            Some(n) => node = n,
            None => return false,
        }
    }
    let span = *node.span();
    *node = Node::from(marked_yaml::types::MarkedScalarNode::new(span, text));
    true
}

/// Finds the node at `path` (`listeners[1].routes[0].upstream`) and reports its position; if
/// the exact node is missing (a required field), the nearest existing parent is used.
pub(crate) fn locate(root: &Node, path: String, message: String) -> ConfigError {
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
