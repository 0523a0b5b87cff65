//! YAML files (what people write): marked-yaml's tree, with a position on every node,
//! deserialised with the field path of an error; semantic problems are located on the same
//! tree.

use crate::error::ConfigErrors;
use crate::marked::{locate, replace, serde_error, tree};
use crate::schema::{errors, Lists, Schema};

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
