//! Diagnostics: a config file read leniently, so every problem is found in one run (syntax
//! errors with their line and column, unknown keys with the keys allowed there, wrongly typed
//! values), each as a [`ConfigError`] naming `FILE:LINE:COLUMN` or its origin and the fix;
//! [`ConfigErrors`] holds them all.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use super::errors::{ConfigError, ConfigErrors, FILE_PROBLEMS_MAX};
use super::keys::FileConfig;
use super::origins::{FileSource, dotted};

impl FileConfig {
    /// Reads and parses a config file; every problem in it is reported.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigErrors> {
        let text = read(path)?;
        FileConfig::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `path` names it in errors. Every problem is reported.
    pub fn parse(text: &str, path: &str) -> Result<FileConfig, ConfigErrors> {
        let (file, problems) = FileConfig::parse_lenient(text, path);
        if problems.is_empty() { Ok(file) } else { Err(ConfigErrors(problems)) }
    }

    /// Parses what can be parsed: the keys that read correctly, and one problem for each
    /// that did not, so that a later check of the values can report its problems in the
    /// same run. A syntax error stops the reading (every syntax error is reported, no key
    /// is kept); an unknown key or a wrongly typed value is reported and left out.
    pub fn parse_lenient(text: &str, path: &str) -> (FileConfig, Vec<ConfigError>) {
        let at = |span: Option<Range<usize>>, reason: String| {
            let (line, column) = line_column(text, span.map_or(0, |s| s.start));
            ConfigError::Parse { path: path.to_string(), line, column, reason }
        };
        let empty = FileConfig {
            source: FileSource { path: Some(path.to_string()), lines: BTreeMap::new() },
            ..FileConfig::default()
        };
        let (mut table, syntax) = DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            let problems = syntax
                .iter()
                .take(FILE_PROBLEMS_MAX)
                .map(|error| at(error.span(), format!("TOML syntax: {}", error.message())))
                .collect();
            return (empty, problems);
        }
        let mut lines = BTreeMap::new();
        key_lines(text, table.get_ref(), "", &mut lines);
        let source = FileSource { path: Some(path.to_string()), lines };
        let mut problems = Vec::new();
        while problems.len() < FILE_PROBLEMS_MAX {
            let parsed = FileConfig::deserialize(toml::de::Deserializer::from(table.clone()));
            let error = match parsed {
                Ok(file) => return (FileConfig { source, ..file }, problems),
                Err(error) => error,
            };
            // Leave the faulty entry out and read again, so every problem is found.
            let found = error.span().and_then(|span| entry_at(table.get_ref(), span.start));
            let reason = match &found {
                Some(key) => format!("{}: {}", key.join("."), plain_words(error.message())),
                None => plain_words(error.message()),
            };
            problems.push(at(error.span(), reason));
            match found {
                Some(key) => remove_entry(table.get_mut(), &key),
                None => break,
            }
        }
        (FileConfig { source, ..FileConfig::default() }, problems)
    }
}

/// A deserializer message in the words of a config file: keys rather than fields, kinds of
/// value rather than Rust types (`unknown field `x`, expected one of `a`, `b`` becomes
/// `unknown key `x`; the keys allowed here are `a`, `b``).
fn plain_words(message: &str) -> String {
    let message = match message.strip_prefix("unknown field ") {
        Some(rest) => match rest.split_once(", expected one of ") {
            Some((key, allowed)) => {
                format!("unknown key {key}; the keys allowed here are {allowed}")
            }
            None => match rest.split_once(", expected ") {
                Some((key, allowed)) => {
                    format!("unknown key {key}; the key allowed here is {allowed}")
                }
                None => format!("unknown key {rest}"),
            },
        },
        None => message.to_string(),
    };
    const TYPES: [(&str, &str); 6] = [
        ("expected u64", "expected a whole number (0 or more)"),
        ("expected u32", "expected a whole number (0 or more)"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
        ("expected a map", "expected a table"),
        ("expected struct ", "expected the table "),
    ];
    TYPES.iter().fold(message, |text, (rust, toml)| text.replace(rust, toml))
}

/// Reads a config file.
pub(super) fn read(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors::from(ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    })
}

/// Line and column (from 1, the column in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Records the line of every key of `table` (dotted names under `prefix`).
fn key_lines(text: &str, table: &DeTable<'_>, prefix: &str, lines: &mut BTreeMap<String, usize>) {
    for (key, value) in table.iter() {
        let name = dotted(prefix, key.get_ref());
        lines.insert(name.clone(), line_column(text, key.span().start).0);
        if let DeValue::Table(inner) = value.get_ref() {
            key_lines(text, inner, &name, lines);
        }
    }
}

/// The path of the innermost entry of `table` whose key or value holds byte `offset`.
fn entry_at(table: &DeTable<'_>, offset: usize) -> Option<Vec<String>> {
    for (key, value) in table.iter() {
        if let DeValue::Table(inner) = value.get_ref()
            && let Some(mut path) = entry_at(inner, offset)
        {
            path.insert(0, key.get_ref().to_string());
            return Some(path);
        }
    }
    table
        .iter()
        .find(|(key, value)| key.span().contains(&offset) || value.span().contains(&offset))
        .map(|(key, _)| vec![key.get_ref().to_string()])
}

/// Removes the entry at `path` from `table`.
fn remove_entry(table: &mut DeTable<'_>, path: &[String]) {
    match path {
        [] => {}
        [last] => {
            table.remove(last.as_str());
        }
        [first, rest @ ..] => {
            if let Some(DeValue::Table(inner)) = table.get_mut(first.as_str()).map(|v| v.get_mut())
            {
                remove_entry(inner, rest);
            }
        }
    }
}
