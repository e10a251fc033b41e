//! Layering and origins: each key resolved flag > `IDMINT_*` variable > file > default
//! ([`Layers`]), and the origin of every value (a flag, a variable, `FILE:LINE`, the
//! default). The effective configuration printed with those origins is `effective.rs`.

use std::collections::BTreeMap;
use std::fmt::{self, Display};
use std::str::FromStr;

use super::errors::ConfigError;
use super::secret::SecretUrl;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    /// Nobody set it.
    Default,
    /// A command-line flag, e.g. `--listen`.
    Flag(&'static str),
    /// An environment variable.
    Env(String),
    /// A key of the config file; `at` is `FILE:LINE` (or `FILE`) when known.
    File { key: String, at: Option<String> },
}

/// The config file's name and the line of each key, for origins.
#[derive(Debug, Clone, Default)]
pub(super) struct FileSource {
    pub(super) path: Option<String>,
    pub(super) lines: BTreeMap<String, usize>,
}

/// The name of the environment variable that overrides file key `key`: `IDMINT_` and the
/// key in upper case with `.` as `_` (`segment.refill_wait_ms` → `IDMINT_SEGMENT_REFILL_WAIT_MS`).
pub fn env_var(key: &str) -> String {
    format!("IDMINT_{}", key.to_ascii_uppercase().replace('.', "_"))
}

impl Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Flag(name) => f.write_str(name),
            Origin::Env(name) => f.write_str(name),
            Origin::File { key, at: Some(at) } => write!(f, "config key {key} ({at})"),
            Origin::File { key, at: None } => write!(f, "config key {key}"),
        }
    }
}

impl Origin {
    /// The origin as a short comment for a printed configuration.
    pub(super) fn comment(&self) -> String {
        match self {
            Origin::File { at: Some(at), .. } => at.clone(),
            Origin::File { at: None, .. } => "config file".to_string(),
            other => other.to_string(),
        }
    }
}

impl FileSource {
    /// The origin of file key `key`.
    pub(super) fn origin(&self, key: &str) -> Origin {
        let at = self.path.as_ref().map(|path| match self.lines.get(key) {
            Some(line) => format!("{path}:{line}"),
            None => path.clone(),
        });
        Origin::File { key: key.to_string(), at }
    }
}

/// A value and where it came from, for error messages.
pub(super) struct Sourced<T> {
    pub(super) value: T,
    pub(super) origin: Origin,
}

/// A type a key can hold, and how its environment variable's text is described when it
/// does not parse.
pub(super) trait ConfigValue: FromStr + Clone {
    /// What the text should be, e.g. "a whole number".
    const EXPECTED: &'static str;
}

/// Declares each type a key can hold with what its text should be.
macro_rules! config_values {
    ($($ty:ty: $expected:literal,)+) => {$(
        impl ConfigValue for $ty {
            const EXPECTED: &'static str = $expected;
        }
    )+};
}

config_values! {
    u64: "a whole number (0 or more)",
    f64: "a number",
    bool: "true or false",
    String: "text",
    SecretUrl: "a URL",
}

/// Resolution in progress: the origin of every key so far, and every problem so far.
pub(super) struct Layers<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    pub(super) source: &'a FileSource,
    pub(super) origins: BTreeMap<String, Origin>,
    pub(super) problems: Vec<ConfigError>,
}

impl<'a> Layers<'a> {
    /// Nothing resolved yet: variables looked up through `env`, file keys from `source`.
    pub(super) fn new(env: &'a dyn Fn(&str) -> Option<String>, source: &'a FileSource) -> Self {
        Layers { env, source, origins: BTreeMap::new(), problems: Vec::new() }
    }

    /// `key` resolved flag > env ([`env_var`]) > file (what `slot` holds) > `default`.
    /// `slot` is set to the result, so the effective file holds every key. A variable that
    /// does not parse is a problem, and the file's value or the default stands in for it so
    /// the other checks still run.
    pub(super) fn layer<T: ConfigValue>(
        &mut self,
        key: &str,
        flag: Option<(&str, &'static str)>,
        slot: &mut Option<T>,
        default: T,
    ) -> Sourced<T> {
        let given = match flag {
            Some((text, name)) => Some((text.to_string(), Origin::Flag(name))),
            None => {
                let name = env_var(key);
                (self.env)(&name).map(|text| (text, Origin::Env(name)))
            }
        };
        let parsed = given.and_then(|(text, origin)| match text.parse::<T>() {
            Ok(value) => Some(Sourced { value, origin }),
            Err(_) => {
                self.refuse(&origin, format!("{text:?} is not {}", T::EXPECTED));
                None
            }
        });
        let chosen = parsed.unwrap_or_else(|| self.file_or(key, slot.take(), default));
        *slot = Some(chosen.value.clone());
        self.origins.insert(key.to_string(), chosen.origin.clone());
        chosen
    }

    /// `key` of the file (no flag, no variable: `[format.TAG]` keys) or `default`; `slot`
    /// is set to the result.
    pub(super) fn file_only<T: Clone>(
        &mut self,
        key: &str,
        slot: &mut Option<T>,
        default: T,
    ) -> Sourced<T> {
        let chosen = self.file_or(key, slot.take(), default);
        *slot = Some(chosen.value.clone());
        self.origins.insert(key.to_string(), chosen.origin.clone());
        chosen
    }

    /// An optional file key without a default: its origin is recorded when it is set.
    pub(super) fn optional<T>(&mut self, key: &str, slot: &Option<T>) -> Origin {
        let origin = self.source.origin(key);
        if slot.is_some() {
            self.origins.insert(key.to_string(), origin.clone());
        }
        origin
    }

    /// The file's value of `key` (`file`), or `default`, with its origin.
    fn file_or<T>(&self, key: &str, file: Option<T>, default: T) -> Sourced<T> {
        match file {
            Some(value) => Sourced { value, origin: self.source.origin(key) },
            None => Sourced { value: default, origin: Origin::Default },
        }
    }

    /// The value, or `None` with the error recorded as a problem of `origin`.
    pub(super) fn check<T, E: Display>(
        &mut self,
        origin: &Origin,
        result: Result<T, E>,
    ) -> Option<T> {
        result.map_err(|error| self.refuse(origin, error.to_string())).ok()
    }

    /// Records a problem with the value from `origin`.
    pub(super) fn refuse(&mut self, origin: &Origin, reason: impl Into<String>) {
        self.problems
            .push(ConfigError::Invalid { origin: origin.to_string(), reason: reason.into() });
    }
}

/// A flag's text and name, when the flag was given.
pub(super) fn flag<'a>(
    value: &'a Option<String>,
    name: &'static str,
) -> Option<(&'a str, &'static str)> {
    value.as_deref().map(|text| (text, name))
}

/// `name` under `prefix`, dotted.
pub(super) fn dotted(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}
