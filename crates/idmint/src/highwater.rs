//! The local high-water file: per tag, the end of the highest range this node was given, so
//! a store that goes back (a restored backup, a failover to a lagging replica) is caught even
//! across restarts of the node.
//!
//! Format: UTF-8 text, one `TAG END` line per tag, `#` starts a comment. Every change
//! rewrites the whole file to `FILE.tmp`, fsyncs it, renames it over the file and fsyncs the
//! directory, so a crash leaves the old or the new file, never a torn one. A mark is written
//! *before* its range is served. A lock file held for the life of the process refuses a
//! second node on the same directory, whose writes would otherwise overwrite these marks.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::Tag;

use crate::Error;

/// Name of the high-water file inside the state directory.
pub const HIGH_WATER_FILE: &str = "segments.high-water";
/// Name of the lock file inside the state directory.
pub const LOCK_FILE: &str = "idmint.lock";

/// The per-tag marks and the file they persist to.
#[derive(Debug)]
pub(crate) struct HighWaterFile {
    path: PathBuf,
    marks: Mutex<BTreeMap<Tag, u64>>,
    /// Serialises rewrites; each rewrite copies the marks as they are when it starts, so a
    /// later mark is never overwritten by an earlier one.
    writer: tokio::sync::Mutex<()>,
    /// Held (locked) for the life of the node.
    _lock: File,
}

/// What one marks file holds: its name, its lock's name, and what a mark means (for the
/// message when the file is damaged).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarksFile {
    pub(crate) file: &'static str,
    pub(crate) lock: &'static str,
    pub(crate) meaning: &'static str,
}

/// The segment engine's marks.
pub(crate) const SEGMENT_MARKS: MarksFile = MarksFile {
    file: HIGH_WATER_FILE,
    lock: LOCK_FILE,
    meaning: "the highest id this node was given per tag",
};

impl HighWaterFile {
    /// Opens (creating the directory and an empty file when absent) and locks the segment
    /// marks of `dir`, reading every mark.
    pub(crate) fn open(dir: &Path) -> Result<HighWaterFile, Error> {
        HighWaterFile::open_as(dir, SEGMENT_MARKS)
    }

    /// Opens and locks the marks file `kind` of `dir`.
    pub(crate) fn open_as(dir: &Path, kind: MarksFile) -> Result<HighWaterFile, Error> {
        let fail = |what: String| Error::LocalState(what);
        std::fs::create_dir_all(dir).map_err(|e| {
            fail(format!("cannot create the state directory {}: {e}", dir.display()))
        })?;
        let lock_path = dir.join(kind.lock);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| fail(format!("cannot open {}: {e}", lock_path.display())))?;
        lock.try_lock().map_err(|_| {
            fail(format!(
                "the state directory {} is in use by another idmint process (it holds {}); \
                 give every node its own data directory",
                dir.display(),
                lock_path.display()
            ))
        })?;
        let path = dir.join(kind.file);
        let marks = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text).map_err(|reason| {
                fail(format!(
                    "{} is damaged: {reason}. It holds {}; restore it from a backup, or delete \
                     it to trust the store as it is",
                    path.display(),
                    kind.meaning
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(fail(format!("cannot read {}: {e}", path.display()))),
        };
        Ok(HighWaterFile {
            path,
            marks: Mutex::new(marks),
            writer: tokio::sync::Mutex::new(()),
            _lock: lock,
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The mark of `tag`, if one was recorded.
    pub(crate) fn get(&self, tag: &Tag) -> Option<u64> {
        self.marks().get(tag).copied()
    }

    /// Raises the mark of `tag` to `end` (if higher) and persists it before returning.
    pub(crate) async fn raise(self: &Arc<Self>, tag: &Tag, end: u64) -> Result<(), Error> {
        {
            let mut marks = self.marks();
            let mark = marks.entry(tag.clone()).or_insert(0);
            if *mark >= end {
                return Ok(());
            }
            *mark = end;
        }
        self.persist().await
    }

    /// Sets the mark of `tag` to `value` even if lower: after ids above it were given back to
    /// the store, so the store's next range for the tag starts at `value`.
    pub(crate) async fn lower(self: &Arc<Self>, tag: &Tag, value: u64) -> Result<(), Error> {
        self.marks().insert(tag.clone(), value);
        self.persist().await
    }

    async fn persist(self: &Arc<Self>) -> Result<(), Error> {
        let _writing = self.writer.lock().await;
        let text = render(&self.marks());
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.write(&text)).await.map_err(|e| {
            Error::LocalState(format!("writing {} did not finish: {e}", self.path.display()))
        })?
    }

    fn write(&self, text: &str) -> Result<(), Error> {
        let fail = |e: std::io::Error| {
            Error::LocalState(format!("cannot write {}: {e}", self.path.display()))
        };
        let tmp = self.path.with_extension("high-water.tmp");
        let mut file = File::create(&tmp).map_err(fail)?;
        file.write_all(text.as_bytes()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, &self.path).map_err(fail)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(fail)?;
        }
        Ok(())
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, BTreeMap<Tag, u64>> {
        // Every mutation is one map operation; a poisoned map is still consistent.
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn render(marks: &BTreeMap<Tag, u64>) -> String {
    let mut text = String::from(
        "# idmint: per tag, the end of the highest id range this node was given.\n\
         # A store returning ranges below these is refused (see ARCHITECTURE.md).\n",
    );
    for (tag, end) in marks {
        text.push_str(&format!("{tag} {end}\n"));
    }
    text
}

fn parse(text: &str) -> Result<BTreeMap<Tag, u64>, String> {
    let mut marks = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |what: String| format!("line {}: {what}", number + 1);
        let (tag, end) =
            line.split_once(' ').ok_or_else(|| at(format!("expected `TAG END`, got {line:?}")))?;
        let tag = Tag::parse(tag).map_err(|e| at(e.to_string()))?;
        let end =
            end.trim().parse::<u64>().map_err(|e| at(format!("{end:?} is not an id: {e}")))?;
        marks.insert(tag, end);
    }
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_damage_is_reported_with_its_line() {
        let mut marks = BTreeMap::new();
        marks.insert(Tag::parse("orders").expect("tag"), 42);
        marks.insert(Tag::parse("users").expect("tag"), u64::MAX >> 1);
        assert_eq!(parse(&render(&marks)), Ok(marks));
        assert!(parse("# ok\norders 1\nusers x\n").is_err_and(|e| e.starts_with("line 3:")));
        assert!(parse("orders\n").is_err_and(|e| e.contains("TAG END")));
        assert!(parse("bad/tag 1\n").is_err_and(|e| e.starts_with("line 1:")));
    }
}
