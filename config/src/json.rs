//! JSON files (what the controller writes): serde_json straight into the typed
//! configuration, no tree in between. An invalid file is read again with
//! `serde_path_to_error` for the field path of its first error; semantic problems are
//! located on marked-yaml's tree of the same text (JSON is YAML), when it has one.
//!
//! Nesting is bounded by serde_json itself: it refuses more than 128 levels as it reads, and
//! no schema nests more than six, so a deeper file fails long before.

use crate::error::{ConfigError, ConfigErrors};
use crate::load::{errors, Schema};

/// Parses and validates JSON text: the value, or its errors with their field paths.
pub(crate) fn parse<T: Schema>(file: &str, text: &str) -> Result<T, ConfigErrors> {
    let config = match serde_json::from_str::<T>(text) {
        Ok(config) => config,
        Err(_) => return Err(errors(file, vec![first_error::<T>(text)])),
    };
    let problems = config.validate();
    if problems.is_empty() {
        return Ok(config);
    }
    let root = crate::yaml::tree(text).ok();
    let located = problems
        .into_iter()
        .map(|(path, message)| match &root {
            Some(root) => crate::yaml::locate(root, path, message),
            None => ConfigError {
                line: 0,
                column: 0,
                path,
                message,
            },
        })
        .collect();
    Err(errors(file, located))
}

/// The first error of text serde_json refused, with its field path.
fn first_error<T: Schema>(text: &str) -> ConfigError {
    let mut de = serde_json::Deserializer::from_str(text);
    let (path, e) = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(e) => {
            let path = e.path().to_string();
            (path, e.into_inner())
        }
        // Read a second time, the same text gives the same answer; a trailing-characters
        // error is the only one found after the value.
        Ok(_) => match de.end() {
            Err(e) => (String::new(), e),
            Ok(()) => {
                return ConfigError {
                    line: 0,
                    column: 0,
                    path: String::new(),
                    message: "refused by serde_json".into(),
                }
            }
        },
    };
    let path = if path == "." { String::new() } else { path };
    let (line, column) = (e.line(), e.column());
    let shown = e.to_string();
    let message = shown
        .strip_suffix(&format!(" at line {line} column {column}"))
        .unwrap_or(&shown)
        .to_owned();
    ConfigError {
        line,
        column,
        path,
        message,
    }
}
