//! The configuration's errors: [`ConfigError`], one problem naming its origin (`FILE:LINE`,
//! a flag or a variable) and the fix, and [`ConfigErrors`], every problem found in one run. A
//! leaf: it imports no other configuration module.

use std::fmt::{self, Display};

/// Most problems one config file reports (each found problem is removed and the file read
/// again, so this also bounds the re-reads).
pub const FILE_PROBLEMS_MAX: usize = 100;

/// A configuration that cannot be used; the message names its origin and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The config file is not valid TOML, or has an unknown key or a wrongly typed value.
    #[error("{path}:{line}:{column}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Line of the problem, from 1.
        line: usize,
        /// Column of the problem, from 1 (in characters).
        column: usize,
        /// What is wrong: the parser's message, or the key and the keys allowed there.
        reason: String,
    },
    /// A value is out of range or malformed.
    #[error("{origin}: {reason}")]
    Invalid {
        /// Where the value came from: a flag, an environment variable or a file key.
        origin: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// An `IDMINT_*` variable is set that idmint does not read (most likely misspelled: its
    /// value would be ignored).
    #[error(
        "{name}: idmint reads no variable of that name, so its value is ignored; {}",
        unknown_variable_fix(.nearest.as_deref(), .key.as_deref())
    )]
    UnknownVariable {
        /// The variable.
        name: String,
        /// The nearest variable idmint reads, when one is near.
        nearest: Option<String>,
        /// The key that variable sets, if it sets one.
        key: Option<String>,
    },
}

/// How to fix an unknown variable: the nearest variable idmint reads (and its key), or
/// where the variables are listed.
fn unknown_variable_fix(nearest: Option<&str>, key: Option<&str>) -> String {
    match (nearest, key) {
        (Some(nearest), Some(key)) => format!("did you mean {nearest} (key `{key}`)?"),
        (Some(nearest), None) => format!("did you mean {nearest}?"),
        _ => "unset it; docs/configuration.md lists the variables idmint reads".to_string(),
    }
}

/// Every problem found in a configuration, in the order found (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub(super) Vec<ConfigError>);

impl ConfigErrors {
    /// The problems, in the order found.
    pub fn problems(&self) -> &[ConfigError] {
        &self.0
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> ConfigErrors {
        ConfigErrors(vec![error])
    }
}

impl Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                write!(f, "{} problems:", all.len())?;
                all.iter().try_for_each(|problem| write!(f, "\n  {problem}"))
            }
        }
    }
}

impl std::error::Error for ConfigErrors {}
