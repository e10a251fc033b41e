//! The effective configuration ([`EffectiveConfig`]): every key a node runs with (defaults
//! included), printed as TOML with where each value came from as a comment, secrets masked.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::keys::FileConfig;
use super::origins::{Origin, dotted};

/// The configuration a node runs with, as a config file: every key set (defaults
/// included) and where each value came from. Secrets stay masked when it is printed.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    pub(super) file: FileConfig,
    pub(super) origins: BTreeMap<String, Origin>,
}

impl EffectiveConfig {
    /// The configuration as TOML: every key with its value (defaults included), a comment
    /// naming where it came from (`default`, `IDMINT_…`, `--flag`, `FILE:LINE`), secrets as
    /// `***`. Read back, it configures the same node, except for the masked secrets.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        match toml::Table::try_from(&self.file) {
            Ok(table) => write_table(&mut out, &table, &mut Vec::new(), &self.origins),
            // Every field is a string, a number, a boolean or a table: this cannot fail.
            Err(error) => {
                out.push_str(&format!("# the configuration cannot be printed: {error}\n"))
            }
        }
        out
    }

    /// Where key `key` (dotted) came from, as `config check` prints it: `default`, a flag
    /// (`--store`), a variable (`IDMINT_STORE`) or `FILE:LINE`; `None` for a key never
    /// resolved. The CLI says with it which store it acted on and why.
    pub fn origin(&self, key: &str) -> Option<String> {
        self.origins.get(key).map(Origin::comment)
    }

    /// Whether key `key` (dotted) is at its default: no flag, variable or file set it.
    pub fn is_default(&self, key: &str) -> bool {
        matches!(self.origins.get(key), Some(Origin::Default))
    }

    /// The dotted name of every key, `[format.TAG]` keys included (with the tag's name).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.origins.keys().map(String::as_str)
    }
}

/// Writes `table` as TOML: its plain values with their origins as comments, then its
/// tables, each under its `[header]`.
fn write_table(
    out: &mut String,
    table: &toml::Table,
    path: &mut Vec<String>,
    origins: &BTreeMap<String, Origin>,
) {
    let (mut tables, values): (Vec<_>, Vec<_>) = table.iter().partition(|(_, v)| v.is_table());
    // Sections of sections (`[format.TAG]`) last, as a config file is usually written.
    tables
        .sort_by_key(|(_, v)| v.as_table().is_some_and(|t| t.values().all(toml::Value::is_table)));
    if !path.is_empty() && !values.is_empty() {
        let header: Vec<String> = path.iter().map(|k| toml_key(k)).collect();
        let _ = writeln!(out, "\n[{}]", header.join("."));
    }
    for (key, value) in values {
        let line = format!("{} = {value}", toml_key(key));
        let full = dotted(&path.join("."), key);
        match origins.get(&full) {
            Some(origin) => {
                let _ = writeln!(out, "{line:<44} # {}", origin.comment());
            }
            None => {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    for (key, value) in tables {
        if let Some(inner) = value.as_table() {
            path.push(key.clone());
            write_table(out, inner, path, origins);
            path.pop();
        }
    }
}

/// A key as TOML writes it: bare when it can be, else quoted.
fn toml_key(key: &str) -> String {
    let bare =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { key.to_string() } else { toml::Value::String(key.to_string()).to_string() }
}
