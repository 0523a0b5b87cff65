//! Errors that point at the exact place in the operator's file.

use std::fmt;
use std::path::PathBuf;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line, 0 when the position is unknown (e.g. an empty file).
    pub line: usize,
    /// 1-based column, 0 when unknown.
    pub column: usize,
    /// Field path such as `listeners[1].routes[0].upstream`; empty for the document itself.
    pub path: String,
    /// What is wrong, and where useful, what would be right.
    pub message: String,
}

/// Every problem found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file as the operator named it.
    pub file: String,
    /// At least one error.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}:{}: ", self.file, e.line, e.column)?;
            if !e.path.is_empty() {
                write!(f, "{}: ", e.path)?;
            }
            write!(f, "{}", e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read at all.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration.
    #[error("{0}")]
    Invalid(ConfigErrors),
}
