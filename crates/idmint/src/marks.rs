//! The local marks ([`LocalMarks`]), a file of the node's data directory: per tag, the end of
//! the highest range this node was given, so a store that goes back (a restored backup, a
//! failover to a lagging replica) is caught even across restarts of the node. The snowflake
//! time marks and the sequence marks are files of the same kind, keyed by their own
//! [`MarkKey`].
//!
//! Format: UTF-8 text, one `TAG END` line per tag, `#` starts a comment, and a last line
//! `# end: N marks` that counts them. Every change rewrites the whole file to `FILE.tmp`,
//! fsyncs it, renames it over the file and fsyncs the directory, so a crash leaves the old or
//! the new file, never a torn one: an empty file, or one without its end line, is damage
//! (or tampering) and refuses the start. A mark is written *before* its range is served.
//! A lock file held for the life of the process refuses a second node on the same
//! directory, whose writes would otherwise overwrite these marks.
//!
//! The marks in memory are always the marks on disk: a change is applied to a copy, the copy
//! written, and only a write that succeeded replaces the marks. So a write that failed (a
//! full disk, a vanished directory) leaves the old mark, and a retry writes again instead of
//! finding its mark "already there".
//!
//! Changes are written in groups: every change queues its edit, and whichever change's
//! blocking task takes the writer next applies all the edits queued at that moment, across
//! keys, in one rewrite and one fsync, and answers each of them with that write's result. A
//! write that failed fails every change it covered, so none of them is taken as durable. A
//! raise to a mark the file already holds returns at once, with no write and no task.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::Tag;

use crate::segment::Error;

/// Name of the high-water file inside the state directory.
pub const HIGH_WATER_FILE: &str = "segments.high-water";
/// Name of the lock file inside the state directory.
pub const LOCK_FILE: &str = "idmint.lock";

/// The first lines of every marks file idmint writes; such a file must end with its end line.
const HEADER: &str = "# idmint marks v2: per tag, the end of the highest id range this node \
                      was given.\n\
                      # A store returning ranges below these is refused (see ARCHITECTURE.md).\n\
                      # The last line counts the marks: without it the file was cut short.\n";
/// The first lines of a marks file from before the end line: such a file is read when it
/// ends with a newline (a cut at a line's end cannot be told from a whole file; the next
/// write replaces it with the current format).
const HEADER_V1: &str = "# idmint: per tag, the end of the highest id range this node was given.\n\
                         # A store returning ranges below these is refused (see ARCHITECTURE.md).\n";
/// The last line of a marks file starts with this, followed by the number of marks.
const END_LINE: &str = "# end: ";

/// A key of a marks file: one word of a `KEY MARK` line.
pub(crate) trait MarkKey: Ord + Clone + Send + Sync + 'static {
    /// The key as a word without spaces that never starts with `#`.
    fn encode(&self) -> String;
    /// The inverse of [`MarkKey::encode`]; the error says what is wrong.
    fn decode(word: &str) -> Result<Self, String>;
}

impl MarkKey for Tag {
    fn encode(&self) -> String {
        encode_tag(self)
    }

    fn decode(word: &str) -> Result<Tag, String> {
        decode_tag(word).and_then(|name| Tag::parse(&name).map_err(|e| e.to_string()))
    }
}

/// The per-key marks (per tag unless said otherwise) and the file they persist to.
#[derive(Debug)]
pub(crate) struct LocalMarks<K: MarkKey = Tag> {
    path: PathBuf,
    /// The marks the file holds: replaced only after a rewrite succeeded.
    durable: Mutex<BTreeMap<K, u64>>,
    /// Changes waiting for the next write, in the order they came. Bounded by the callers
    /// that can wait at once: one refill per tag, one raise per sequence or worker, and the
    /// shutdown's give-back.
    pending: Mutex<Vec<Pending<K>>>,
    /// Held for a whole group write (copy, edits, write, replace), on the blocking pool:
    /// writes are serialised, and a caller that stops waiting cannot let a second write
    /// start beside one still running.
    writer: Mutex<()>,
    /// Rewrites of the file that succeeded since it was opened.
    writes: AtomicU64,
    /// Held (locked) for the life of the node: until this is dropped, or until
    /// [`LocalMarks::release`] once nothing can write the marks any more.
    lock: Mutex<Option<File>>,
}

/// A change of the marks: edits a copy of them and says whether it changed anything.
type Edit<K> = Box<dyn FnOnce(&mut BTreeMap<K, u64>) -> bool + Send>;

/// One queued change: its edit and where its result goes.
struct Pending<K> {
    edit: Edit<K>,
    done: tokio::sync::oneshot::Sender<Result<(), Error>>,
}

impl<K> std::fmt::Debug for Pending<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending")
    }
}

/// What one marks file holds: its name, its lock's name, what a mark means and how to
/// recover a damaged file (for the message when it is).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarksFile {
    pub(crate) file: &'static str,
    pub(crate) lock: &'static str,
    pub(crate) meaning: &'static str,
    pub(crate) fix: &'static str,
}

/// The segment engine's marks.
pub(crate) const SEGMENT_MARKS: MarksFile = MarksFile {
    file: HIGH_WATER_FILE,
    lock: LOCK_FILE,
    meaning: "the highest id this node was given per tag",
    fix: "Restore it from a backup of this data directory. Or, knowing that the ids this node \
          served may then be served again, delete it after raising every tag's max_id in the \
          store above the highest id this node served",
};

impl LocalMarks {
    /// Opens (creating the directory and an empty file when absent) and locks the segment
    /// marks of `dir`, reading every mark.
    pub(crate) fn open(dir: &Path) -> Result<LocalMarks, Error> {
        LocalMarks::open_as(dir, SEGMENT_MARKS)
    }
}

impl<K: MarkKey> LocalMarks<K> {
    /// Opens and locks the marks file `kind` of `dir`. A file that is there but damaged
    /// (unparsable, empty, cut short) refuses the open with an error naming the file, what it
    /// holds and how to recover.
    pub(crate) fn open_as(dir: &Path, kind: MarksFile) -> Result<LocalMarks<K>, Error> {
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
            Ok(text) => parse_as::<K>(&text).map_err(|reason| {
                fail(format!(
                    "{} is damaged: {reason}. It holds {}, and idmint writes it whole (a \
                     temporary file, fsync, rename), so a damaged file means corruption or \
                     tampering. {}",
                    path.display(),
                    kind.meaning,
                    kind.fix
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(fail(format!("cannot read {}: {e}", path.display()))),
        };
        Ok(LocalMarks {
            path,
            durable: Mutex::new(marks),
            pending: Mutex::new(Vec::new()),
            writer: Mutex::new(()),
            writes: AtomicU64::new(0),
            lock: Mutex::new(Some(lock)),
        })
    }

    /// Gives the state directory's lock up (another node, or a restart in this process, may
    /// open it). Only for an owner that knows nothing writes these marks any more: a
    /// `Segments` dropped, once its tasks have ended (a thread may keep its last registry,
    /// and through it this file, a while longer; see `segment/engine.rs`).
    pub(crate) fn release(&self) {
        // After a write in progress (a give-back cut off by its bound may leave one on the
        // blocking pool), so the next holder reads a whole file; a write that starts later
        // finds the lock gone and writes nothing (`change`).
        let _writing = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.lock.lock().unwrap_or_else(PoisonError::into_inner).take());
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The mark of `tag` the file holds, if one was recorded.
    pub(crate) fn get(&self, tag: &K) -> Option<u64> {
        self.durable().get(tag).copied()
    }

    /// Rewrites of the file that succeeded since it was opened.
    #[cfg(test)]
    pub(crate) fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Raises the mark of `tag` to `end` (if higher) and persists it before returning. `Ok`
    /// means the file holds a mark of at least `end`.
    pub(crate) async fn raise(self: &Arc<Self>, tag: &K, end: u64) -> Result<(), Error> {
        self.raise_ahead(tag, end, end).await
    }

    /// Makes the file hold a mark of at least `end` for `tag` before returning: at once when
    /// it does already (no write), else by writing `ahead` (at least `end`), so the next
    /// ranges up to `ahead` need no write of their own. `Ok` means the file holds a mark of
    /// at least `end`.
    pub(crate) async fn raise_ahead(
        self: &Arc<Self>,
        tag: &K,
        end: u64,
        ahead: u64,
    ) -> Result<(), Error> {
        // The marks in memory are the marks on disk: one that covers `end` is durable.
        if self.get(tag).is_some_and(|mark| mark >= end) {
            return Ok(());
        }
        let ahead = ahead.max(end);
        let tag = tag.clone();
        self.change(move |marks| {
            let mark = marks.entry(tag).or_insert(0);
            if *mark >= end {
                return false;
            }
            *mark = ahead;
            true
        })
        .await
    }

    /// Sets the mark of each tag to its value even if lower, in one write of the file: after
    /// the ids above them were given back to the store, so the store's next range for the
    /// tag starts at that value. On failure the old, higher marks stay.
    pub(crate) async fn lower_many(self: &Arc<Self>, values: Vec<(K, u64)>) -> Result<(), Error> {
        self.change(move |marks| {
            let mut changed = false;
            for (tag, value) in values {
                changed |= marks.insert(tag, value) != Some(value);
            }
            changed
        })
        .await
    }

    /// Drops the marks whose key `keep` refuses, then raises the mark of each key of
    /// `raises` to its value (if higher), in one write (none if nothing changes). `Ok` means
    /// the file holds all of them.
    pub(crate) async fn raise_all(
        self: &Arc<Self>,
        raises: Vec<(K, u64)>,
        keep: impl Fn(&K) -> bool + Send + 'static,
    ) -> Result<(), Error> {
        self.change(move |marks| {
            let before = marks.clone();
            marks.retain(|key, _| keep(key));
            for (key, end) in raises {
                let mark = marks.entry(key).or_insert(0);
                *mark = (*mark).max(end);
            }
            *marks != before
        })
        .await
    }

    /// Queues `edit` (which says whether it changed anything) for the next group write and
    /// waits for that write's result: the group is applied to a copy of the marks, the copy
    /// written and, only once the write succeeded, made the marks. The write runs on the
    /// blocking pool under `writer`, so it completes (or fails) as one even if the caller
    /// stops waiting.
    async fn change(
        self: &Arc<Self>,
        edit: impl FnOnce(&mut BTreeMap<K, u64>) -> bool + Send + 'static,
    ) -> Result<(), Error> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.pending().push(Pending { edit: Box::new(edit), done });
        let this = Arc::clone(self);
        // Every queued edit has a task behind it, so the first task to take the writer after
        // the edit was queued writes it (this one, or one that came earlier and waited).
        let task = tokio::task::spawn_blocking(move || this.write_pending());
        drop(task);
        result.await.unwrap_or_else(|_| {
            Err(Error::LocalState(format!("writing {} did not finish", self.path.display())))
        })
    }

    /// One group write: every change queued now, in one rewrite, each answered with its
    /// result. Nothing to do when another task's write took them all.
    fn write_pending(&self) {
        // Poisoned only by a panic between two lines below, which leave the file and the
        // marks as they were: still consistent.
        let _writing = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let group = std::mem::take(&mut *self.pending());
        if group.is_empty() {
            return;
        }
        let (edits, waiters): (Vec<_>, Vec<_>) =
            group.into_iter().map(|pending| (pending.edit, pending.done)).unzip();
        let result = self.apply(edits);
        for waiter in waiters {
            // A waiter that stopped waiting needs no answer.
            let _ = waiter.send(result.clone());
        }
    }

    /// Applies `edits` in order to a copy of the marks and writes it (when any changed
    /// something); the copy becomes the marks only once written.
    fn apply(&self, edits: Vec<Edit<K>>) -> Result<(), Error> {
        if self.lock.lock().unwrap_or_else(PoisonError::into_inner).is_none() {
            return Err(Error::LocalState(format!(
                "{} was given up by this node (it stopped); nothing is written to it",
                self.path.display()
            )));
        }
        let mut next = self.durable().clone();
        let mut changed = false;
        for edit in edits {
            changed |= edit(&mut next);
        }
        if !changed {
            return Ok(());
        }
        self.write(&render(&next))?;
        *self.durable() = next;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write(&self, text: &str) -> Result<(), Error> {
        let fail = |e: std::io::Error| {
            Error::LocalState(format!(
                "cannot write {}: {e} (is the disk full?); nothing the new mark was to cover \
                 is served until it is written",
                self.path.display()
            ))
        };
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let written = File::create(&tmp).and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        });
        if let Err(e) = written {
            // Frees what a full disk let it take; the next attempt creates it afresh.
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        std::fs::rename(&tmp, &self.path).map_err(fail)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(fail)?;
        }
        Ok(())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Pending<K>>> {
        // Pushes and takes are single calls; a poisoned queue is still consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn durable(&self) -> std::sync::MutexGuard<'_, BTreeMap<K, u64>> {
        // Every mutation is one assignment; a poisoned map is still consistent.
        self.durable.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn render<K: MarkKey>(marks: &BTreeMap<K, u64>) -> String {
    let mut text = String::from(HEADER);
    for (key, end) in marks {
        text.push_str(&format!("{} {end}\n", key.encode()));
    }
    text.push_str(&format!("{END_LINE}{} marks\n", marks.len()));
    text
}

/// A tag as the marks file writes it: bytes outside `A-Z a-z 0-9 _ . : -` percent-encoded,
/// so a line is always `TAG END` with no space inside TAG, a tag never starts a line with
/// `#` (a comment) and the tags of earlier versions (only that alphabet) read unchanged.
fn encode_tag(tag: &Tag) -> String {
    let mut out = String::new();
    for b in tag.as_str().bytes() {
        if b.is_ascii_alphanumeric() || b"_.:-".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`encode_tag`].
fn decode_tag(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).unwrap_or_default();
            let byte = u8::from_str_radix(hex, 16)
                .map_err(|_| format!("{text:?} holds a bad escape at byte {i}"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
}

/// Reads the marks of a file's `text`, refusing one that is empty or cut short: its last
/// line must be the end line counting the marks above it (or, in a file from before the end
/// line, the text must begin with that format's header and end with a newline).
fn parse_as<K: MarkKey>(text: &str) -> Result<BTreeMap<K, u64>, String> {
    if text.trim().is_empty() {
        return Err("the file is empty (idmint never writes an empty marks file)".into());
    }
    if !text.ends_with('\n') {
        return Err("its last line is cut short (no newline at the end): the file was \
                    truncated"
            .into());
    }
    let mut marks = BTreeMap::new();
    let mut lines = 0;
    let mut end = None;
    for (number, line) in text.lines().enumerate() {
        let at = |what: String| format!("line {}: {what}", number + 1);
        if end.is_some() {
            return Err(at("a line after the end line".into()));
        }
        let line = line.trim();
        if let Some(count) = line.strip_prefix(END_LINE) {
            let count = count.strip_suffix(" marks").and_then(|c| c.parse::<usize>().ok());
            end = Some(count.ok_or_else(|| at(format!("{line:?} is not an end line")))?);
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (tag, mark) =
            line.split_once(' ').ok_or_else(|| at(format!("expected `TAG END`, got {line:?}")))?;
        let tag = K::decode(tag).map_err(at)?;
        let mark =
            mark.trim().parse::<u64>().map_err(|e| at(format!("{mark:?} is not an id: {e}")))?;
        marks.insert(tag, mark);
        lines += 1;
    }
    match end {
        Some(count) if count == lines => Ok(marks),
        Some(count) => Err(format!(
            "the end line counts {count} marks but the file holds {lines}: lines were lost"
        )),
        None if text.starts_with(HEADER_V1) => Ok(marks),
        None => {
            Err(format!("its end line (`{END_LINE}N marks`) is missing: the file was truncated"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BTreeMap<Tag, u64>, String> {
        parse_as(text)
    }

    #[test]
    fn marks_round_trip_and_damage_is_reported_with_its_line() {
        let mut marks = BTreeMap::new();
        marks.insert(Tag::parse("orders").expect("tag"), 42);
        marks.insert(Tag::parse("users").expect("tag"), u64::MAX >> 1);
        assert_eq!(parse(&render(&marks)), Ok(marks.clone()));
        assert_eq!(parse(&render(&BTreeMap::<Tag, u64>::new())), Ok(BTreeMap::new()));
        let end = "# end: 2 marks\n";
        assert!(
            parse(&format!("# ok\norders 1\nusers x\n{end}"))
                .is_err_and(|e| e.starts_with("line 3:"))
        );
        assert!(parse(&format!("orders\n{end}")).is_err_and(|e| e.contains("TAG END")));
        assert!(parse(&format!("bad%ZZ 1\n{end}")).is_err_and(|e| e.starts_with("line 1:")));
        assert!(parse(&format!("bad%09tab 1\n{end}")).is_err_and(|e| e.contains("control")));
        // A file written before the end line existed is read when it is whole.
        assert_eq!(parse(&format!("{HEADER_V1}orders 42\nusers {}\n", u64::MAX >> 1)), Ok(marks));
    }

    #[test]
    fn tags_in_any_characters_round_trip() {
        let mut marks = BTreeMap::new();
        for (i, name) in ["a b", "# not a comment", "# end: 0 marks", "100%", "订单", "🚀", "x%41"]
            .into_iter()
            .enumerate()
        {
            marks.insert(Tag::parse(name).expect("tag"), i as u64 + 1);
        }
        let text = render(&marks);
        assert_eq!(parse(&text), Ok(marks));
        assert!(text.contains("%23 not a comment") || text.contains("%23%20not%20a%20comment"));
    }

    #[test]
    fn an_empty_or_truncated_file_is_refused() {
        let mut marks = BTreeMap::new();
        marks.insert(Tag::parse("orders").expect("tag"), 1_234_000);
        marks.insert(Tag::parse("users").expect("tag"), 99_000);
        let whole = render(&marks);
        assert!(parse("").is_err_and(|e| e.contains("empty")));
        assert!(parse("\n \n").is_err_and(|e| e.contains("empty")));
        // Every cut, at any byte: a mark cut to fewer digits would lower the guard silently.
        for cut in 1..whole.len() {
            assert!(parse(&whole[..cut]).is_err(), "cut at {cut} accepted: {:?}", &whole[..cut]);
        }
        // Lines lost from the middle, or an end line that does not end the file.
        let lost = whole.replace("orders 1234000\n", "");
        assert!(parse(&lost).is_err_and(|e| e.contains("counts 2 marks")));
        assert!(parse(&format!("{whole}users 5\n")).is_err_and(|e| e.contains("after the end")));
    }

    fn tags(n: usize) -> Vec<Tag> {
        (0..n).map(|i| Tag::parse(&format!("t{i}")).expect("tag")).collect()
    }

    fn on_disk(dir: &Path) -> BTreeMap<Tag, u64> {
        parse(&std::fs::read_to_string(dir.join(HIGH_WATER_FILE)).expect("read")).expect("parse")
    }

    /// Raises of `tags` (tag i to `100 + i`), each from its own task, all queued behind the
    /// writer (held here as a write in progress would hold it) before it is let go.
    async fn raise_queued(file: &Arc<LocalMarks>, tags: &[Tag]) -> Vec<Result<(), Error>> {
        let writing = file.writer.lock().expect("writer");
        let raises: Vec<_> = tags
            .iter()
            .enumerate()
            .map(|(i, tag)| {
                let (file, tag) = (Arc::clone(file), tag.clone());
                tokio::spawn(async move { file.raise(&tag, 100 + i as u64).await })
            })
            .collect();
        while file.pending().len() < tags.len() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(writing);
        let mut results = Vec::new();
        for raise in raises {
            results.push(raise.await.expect("task"));
        }
        results
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_raises_share_one_write() {
        let dir = tempfile::tempdir().expect("dir");
        let file = Arc::new(LocalMarks::open(dir.path()).expect("open"));
        let tags = tags(32);
        let results = raise_queued(&file, &tags).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_eq!(file.writes(), 1, "32 queued raises took more than one write");
        let marks = on_disk(dir.path());
        for (i, tag) in tags.iter().enumerate() {
            assert_eq!(marks.get(tag), Some(&(100 + i as u64)));
            assert_eq!(file.get(tag), Some(100 + i as u64));
        }
        // Not queued behind anything: each waits for its own write or shares one.
        let raises: Vec<_> = tags
            .iter()
            .map(|tag| {
                let (file, tag) = (Arc::clone(&file), tag.clone());
                tokio::spawn(async move { file.raise(&tag, 1_000).await })
            })
            .collect();
        for raise in raises {
            raise.await.expect("task").expect("raise");
        }
        assert!(file.writes() <= 1 + 32);
        assert!(on_disk(dir.path()).values().all(|&mark| mark == 1_000));
    }

    /// A write that fails answers every raise it covered with the failure: none may serve
    /// the range its raise was to cover, and no mark in memory moves.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_group_write_fails_every_raise_it_covered() {
        let dir = tempfile::tempdir().expect("dir");
        let file = Arc::new(LocalMarks::open(dir.path()).expect("open"));
        let tags = tags(16);
        // A directory where the temporary file goes: every rewrite fails, as on a full disk.
        let blocker = dir.path().join(format!("{HIGH_WATER_FILE}.tmp"));
        std::fs::create_dir(&blocker).expect("blocker");
        let results = raise_queued(&file, &tags).await;
        for result in &results {
            assert!(
                matches!(result, Err(Error::LocalState(reason)) if reason.contains(HIGH_WATER_FILE)),
                "a raise covered by a failed write answered {result:?}"
            );
        }
        assert_eq!(file.writes(), 0);
        assert!(tags.iter().all(|tag| file.get(tag).is_none()), "a mark moved in memory");
        assert!(!dir.path().join(HIGH_WATER_FILE).exists());

        std::fs::remove_dir(&blocker).expect("unblock");
        let results = raise_queued(&file, &tags).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_eq!(on_disk(dir.path()).len(), tags.len());
    }

    /// A raise the mark on disk covers writes nothing; one it does not writes the mark ahead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_covered_raise_writes_nothing_and_a_new_mark_is_written_ahead() {
        let dir = tempfile::tempdir().expect("dir");
        let file = Arc::new(LocalMarks::open(dir.path()).expect("open"));
        let tag = Tag::parse("orders").expect("tag");
        file.raise_ahead(&tag, 10, 100).await.expect("raise");
        assert_eq!((file.writes(), on_disk(dir.path()).get(&tag)), (1, Some(&100)));
        for end in [11, 50, 100] {
            file.raise_ahead(&tag, end, end + 90).await.expect("raise");
        }
        assert_eq!(file.writes(), 1, "raises under the mark on disk wrote it");
        file.raise_ahead(&tag, 101, 191).await.expect("raise");
        assert_eq!((file.writes(), on_disk(dir.path()).get(&tag)), (2, Some(&191)));
        // `ahead` below `end` still covers `end`.
        file.raise_ahead(&tag, 300, 200).await.expect("raise");
        assert_eq!(on_disk(dir.path()).get(&tag), Some(&300));
    }
}
