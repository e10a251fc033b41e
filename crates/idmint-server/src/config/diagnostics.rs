//! Diagnostics: a config file read leniently, so every problem is found in one run (syntax
//! errors with their line and column, and a bare value's "quote it"; unknown keys with the
//! nearest key and the keys allowed there; wrongly typed values), each as a [`ConfigError`] naming `FILE:LINE:COLUMN` or its origin and the fix;
//! [`ConfigErrors`] holds them all.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use super::errors::{ConfigError, ConfigErrors, FILE_PROBLEMS_MAX};
use super::keys::{FileConfig, plain_keys};
use super::nearest::{edit_distance, nearest};
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
                .map(|error| {
                    let hint = quote_hint(text, error.span().map_or(0, |s| s.start));
                    at(error.span(), format!("TOML syntax: {}{hint}", error.message()))
                })
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
                Some(key) => format!("{}: {}", key.join("."), plain_words(error.message(), key)),
                None => plain_words(error.message(), &[]),
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
/// `unknown key `x`; the keys allowed here are `a`, `b``), and for an unknown key at `path`
/// the nearest key, allowed there or in another section (`did you mean `segment.step`?`).
fn plain_words(message: &str, path: &[String]) -> String {
    let message = match message.strip_prefix("unknown field ") {
        Some(rest) => {
            let (key, allowed, the) = match rest.split_once(", expected one of ") {
                Some((key, allowed)) => (key, Some(allowed), "the keys allowed here are"),
                None => match rest.split_once(", expected ") {
                    Some((key, allowed)) => (key, Some(allowed), "the key allowed here is"),
                    None => (rest, None, ""),
                },
            };
            let names: Vec<&str> = allowed
                .map(|allowed| allowed.split(", ").map(|name| name.trim_matches('`')).collect())
                .unwrap_or_default();
            match (did_you_mean(path, &names), allowed) {
                (Some(near), Some(allowed)) => {
                    let the = the.replacen('t', "T", 1);
                    format!("unknown key {key}; did you mean `{near}`? {the} {allowed}")
                }
                (None, Some(allowed)) => format!("unknown key {key}; {the} {allowed}"),
                (Some(near), None) => format!("unknown key {key}; did you mean `{near}`?"),
                (None, None) => format!("unknown key {key}"),
            }
        }
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

/// The key nearest to the unknown key at `path` (dotted): one of `allowed` (the keys of its
/// table), or a plain key of another section, which costs one edit more, so a key written in
/// the wrong section is found (`[segment] batch_count_max` → `limits.batch_count_max`).
fn did_you_mean(path: &[String], allowed: &[&str]) -> Option<String> {
    let (typed, section) = path.split_last()?;
    let section = section.join(".");
    let here = allowed.iter().map(|name| (dotted(&section, name), section.clone()));
    let elsewhere = plain_keys().map(|key| {
        let section = key.rsplit_once('.').map_or("", |(section, _)| section);
        (key.to_string(), section.to_string())
    });
    let distance = |(key, key_section): &(String, String)| {
        let leaf = key.rsplit('.').next().unwrap_or(key);
        edit_distance(typed, leaf) + usize::from(*key_section != section)
    };
    nearest(typed, here.chain(elsewhere), distance).map(|(key, _)| key)
}

/// For a syntax error at byte `offset` on a line `key = value` whose value is bare text
/// that TOML reads once quoted (`worker_ids = 512-1023`): `; quote it: worker_ids =
/// "512-1023"`. Empty otherwise.
fn quote_hint(text: &str, offset: usize) -> String {
    let start = text.get(..offset).and_then(|before| before.rfind('\n')).map_or(0, |at| at + 1);
    let line = text.get(start..).and_then(|rest| rest.lines().next()).unwrap_or_default();
    let Some((key, value)) = line.split_once('=') else { return String::new() };
    let (key, value) = (key.trim(), value.split('#').next().unwrap_or_default().trim());
    let bare = !value.is_empty()
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/+@".contains(c));
    let quoted = format!("{key} = \"{value}\"");
    // A value that may be a secret (a token, a key, a URL with a password) is never repeated:
    // the hint goes to stderr and the logs.
    let secret = ["token", "key", "secret", "password", "store", "redis", "witness"]
        .iter()
        .any(|word| key.to_ascii_lowercase().contains(word))
        || value.contains('@')
        || value.contains("://");
    if bare
        && toml::from_str::<toml::Table>(line).is_err()
        && toml::from_str::<toml::Table>(&quoted).is_ok()
    {
        let shown = if secret { format!("{key} = \"…\"") } else { quoted };
        format!("; quote it: {shown}")
    } else {
        String::new()
    }
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
