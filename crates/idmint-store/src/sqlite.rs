//! The SQLite backend, idmint's embedded default: one file, WAL, `synchronous=FULL`, a STRICT
//! table with Leaf's `leaf_alloc` columns.
//!
//! Allocation is one `UPDATE … RETURNING`, and a compare-and-set of `max_id` one conditional
//! `UPDATE`, each atomic across threads and across processes sharing the file (the CLI and a
//! running server). A write answers only once it committed: every `… RETURNING` runs to its
//! end through [`write_returning`], so a commit that failed (`SQLITE_FULL` on a full disk)
//! is an error, never a row the database does not hold. Calls run on tokio's blocking pool and are
//! awaited in place; the connection sits behind a mutex, and SQLite's busy timeout bounds how
//! long a call waits for another process's write lock.
//!
//! Worker-id leases and assignments ([`WorkerStore`](crate::WorkerStore)) are in
//! `sqlite/workers.rs`; sequence definitions and ceilings
//! ([`SequenceStore`](crate::SequenceStore)) in `sqlite/sequences.rs`; tag metadata
//! ([`TagMetaStore`](crate::TagMetaStore)) in `sqlite/meta.rs`.

mod meta;
mod sequences;
mod workers;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};
use idmint_core::{Step, Tag};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Params, Row, params};

use crate::{
    Allocation, MaxIdChange, RangeStore, SegmentStore, StoreError, TABLE_NAME, TOMBSTONES_TABLE,
    TagRecord, TagSpec, allocated_range, check_new_max_id, effective_step, initial_max_id,
    servable_rows, stored_tag,
};

use crate::clock::{LocalClock, StoreClock};

/// How long a call waits for another connection's write lock before failing as unavailable.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 5_000;

/// After how many pages of write-ahead log (4 KiB each) SQLite copies the log into the
/// database, so that the next writes reuse the log from its start. SQLite's default, 1 000
/// pages (4 MiB), let the log alone fill a small volume, and a checkpoint then needs room to
/// grow the database.
pub const SQLITE_WAL_CHECKPOINT_PAGES: u32 = 64;

/// The size the write-ahead log file is cut back to whenever the log restarts, in bytes.
pub const SQLITE_WAL_BYTES_MAX: u64 = 512 * 1024;

/// A segment table in an SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    /// The store's clock: worker leases expire by it (`sqlite/workers.rs`). The file lives on
    /// this machine, so every process sharing it reads this machine's clock.
    clock: Arc<dyn StoreClock>,
    /// The last lease token this store drew: the next is above it even when the clock has
    /// not moved (a test clock, or one stepped back) since.
    last_token: Arc<AtomicU64>,
}

const COLUMNS: &str = "biz_tag, max_id, step, description, update_time";

impl SqliteStore {
    /// Opens (creating when absent) the database file and its directory, and the table when
    /// absent. An existing table is used as it is.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let path = path.to_path_buf();
        let opened = path.clone();
        let conn = run_blocking(move || open_connection(&opened)).await??;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            path,
            clock: Arc::new(LocalClock),
            last_token: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The store with its worker leases judged by `clock` rather than the machine's (a
    /// test's, to move the store's time apart from a node's).
    pub fn with_clock(self, clock: Arc<dyn StoreClock>) -> SqliteStore {
        SqliteStore { clock, ..self }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        run_blocking(move || {
            // SQLite keeps the database consistent whatever a panicking caller left
            // mid-statement, so a poisoned connection is still usable.
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            let result = f(&mut conn);
            if let Err(StoreError::Unavailable(_)) = &result {
                give_back_the_wal(&conn);
            }
            result
        })
        .await?
    }
}

/// After a call failed as unavailable: copies the WAL into the database and truncates it to
/// nothing, without waiting for any lock. The failure may be a full disk that the WAL itself
/// filled. SQLite checkpoints it only after a commit succeeds, so without this a WAL that
/// took the last free byte stays that size, every later commit fails, and freeing other
/// files does not help. A checkpoint that cannot run now (another connection holds the
/// database, or the disk is too full even for it) changes nothing and is tried again after
/// the next failure.
fn give_back_the_wal(conn: &Connection) {
    if !conn.is_autocommit() {
        // A transaction is still open (its rollback failed): no checkpoint can run.
        return;
    }
    let restore = Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS);
    let checkpoint = conn.busy_timeout(Duration::ZERO).and_then(|()| {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
        })
    });
    match checkpoint {
        // (busy, WAL frames, frames checkpointed): 0 means the WAL was copied and truncated.
        Ok((0, frames, _)) => tracing::info!(
            frames,
            "SQLite: a call failed; the write-ahead log was copied into the database and \
             truncated, giving its disk space back"
        ),
        Ok((_, frames, copied)) => tracing::debug!(
            frames,
            copied,
            "SQLite: the write-ahead log could not be truncated now (another connection is \
             using the database)"
        ),
        Err(e) => tracing::debug!(error = %e, "SQLite: the write-ahead log was not truncated"),
    }
    if let Err(e) = conn.busy_timeout(restore) {
        tracing::warn!(error = %e, "SQLite: the busy timeout could not be set back");
    }
}

#[async_trait]
impl RangeStore for SqliteStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        let tag = tag.clone();
        // 0 lets the row's step win in `max(step, ?2)`; rows with a step below 1 are refused
        // by the WHERE clause, so 0 is never the effective step.
        let requested = step.map_or(0, |s| s.get() as i64);
        self.call(move |conn| {
            // One statement: the row's step is read, the effective step chosen and the bound
            // in WHERE checked (refusing to pass i64::MAX) in the same atomic update. Both
            // operands of `?3 - max(step, ?2)` are at least 0, so it cannot overflow.
            let updated: Option<(i64, i64)> = write_returning(
                conn,
                &format!(
                    "UPDATE {TABLE_NAME} \
                     SET max_id = max_id + max(step, ?2), update_time = unixepoch() \
                     WHERE biz_tag = ?1 AND step >= 1 AND max_id >= 0 \
                     AND max_id <= ?3 - max(step, ?2) \
                     RETURNING max_id, step"
                ),
                params![tag.as_str(), requested, ID_MAX as i64],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(unavailable)?;
            match updated {
                Some((max_id, tag_step)) => allocated_range(&tag, max_id, tag_step, step),
                None => Err(refused_allocation(conn, &tag, step)?),
            }
        })
        .await
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        check_new_max_id(new)?;
        let tag = tag.clone();
        self.call(move |conn| {
            // A row holds an i64, so an `expected` beyond it matches no row: skip the update.
            let applied = match i64::try_from(expected) {
                Ok(expected) => conn
                    .execute(
                        &format!(
                            "UPDATE {TABLE_NAME} SET max_id = ?3, update_time = unixepoch() \
                             WHERE biz_tag = ?1 AND max_id = ?2"
                        ),
                        // In range: check_new_max_id bounds `new` by ID_MAX == i64::MAX.
                        params![tag.as_str(), expected, new as i64],
                    )
                    .map_err(unavailable)?,
                Err(_) => 0,
            };
            if applied > 0 {
                return Ok(true);
            }
            let exists = conn
                .query_row(
                    &format!("SELECT 1 FROM {TABLE_NAME} WHERE biz_tag = ?1"),
                    [tag.as_str()],
                    |_| Ok(()),
                )
                .optional()
                .map_err(unavailable)?
                .is_some();
            if exists { Ok(false) } else { Err(StoreError::TagNotFound(tag)) }
        })
        .await
    }

    async fn compare_and_set_max_ids(
        &self,
        changes: &[MaxIdChange],
    ) -> Result<Vec<bool>, StoreError> {
        for change in changes {
            check_new_max_id(change.new)?;
        }
        let changes = changes.to_vec();
        // One transaction: a batch costs one commit (one fsync), not one per row.
        self.call(move |conn| {
            let tx = immediate(conn)?;
            let mut applied = Vec::with_capacity(changes.len());
            {
                let mut update = tx
                    .prepare(&format!(
                        "UPDATE {TABLE_NAME} SET max_id = ?3, update_time = unixepoch() \
                         WHERE biz_tag = ?1 AND max_id = ?2"
                    ))
                    .map_err(unavailable)?;
                for change in &changes {
                    // A row holds an i64: an `expected` beyond it matches no row.
                    let rows = match i64::try_from(change.expected) {
                        Ok(expected) => update
                            .execute(params![change.tag.as_str(), expected, change.new as i64])
                            .map_err(unavailable)?,
                        Err(_) => 0,
                    };
                    applied.push(rows > 0);
                }
            }
            tx.commit().map_err(unavailable)?;
            Ok(applied)
        })
        .await
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        let tag = tag.clone();
        self.call(move |conn| select_row(conn, &tag)).await
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        self.call(|conn| {
            let mut statement = conn
                .prepare(&format!(
                    "SELECT {COLUMNS} FROM {TABLE_NAME} ORDER BY biz_tag LIMIT {TAG_COUNT_MAX}"
                ))
                .map_err(unavailable)?;
            let rows = statement.query_map([], read_row).map_err(unavailable)?;
            let rows = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(unavailable)?;
            Ok(servable_rows(rows, "row"))
        })
        .await
    }

    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        let tag = tag.clone();
        self.call(move |conn| select_tombstone(conn, &tag)).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.call(|conn| {
            conn.query_row(&format!("SELECT count(*) FROM {TABLE_NAME}"), [], |_| Ok(()))
                .map_err(unavailable)
        })
        .await
    }

    fn describe(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

#[async_trait]
impl SegmentStore for SqliteStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        let spec = spec.clone();
        self.call(move |conn| {
            let tx = immediate(conn)?;
            let count: i64 = tx
                .query_row(&format!("SELECT count(*) FROM {TABLE_NAME}"), [], |r| r.get(0))
                .map_err(unavailable)?;
            if count as usize >= TAG_COUNT_MAX {
                return Err(StoreError::TooManyTags);
            }
            // In the immediate transaction: no delete can write a tombstone in between.
            let max_id = initial_max_id(&spec, select_tombstone(&tx, &spec.tag)?)?;
            let inserted = tx.query_row(
                &format!(
                    "INSERT INTO {TABLE_NAME} ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, unixepoch()) \
                     ON CONFLICT (biz_tag) DO NOTHING RETURNING {COLUMNS}"
                ),
                params![
                    spec.tag.as_str(),
                    // At most ID_MAX == i64::MAX: a tombstone is a row's max_id.
                    max_id as i64,
                    spec.step.get() as i64,
                    spec.description.as_str()
                ],
                read_row,
            );
            let record = match inserted.optional().map_err(unavailable)? {
                Some(row) => row?,
                None => return Err(StoreError::TagExists(spec.tag.clone())),
            };
            tx.commit().map_err(unavailable)?;
            Ok(record)
        })
        .await
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        let tag = tag.clone();
        self.call(move |conn| {
            let updated = write_returning(
                conn,
                &format!(
                    "UPDATE {TABLE_NAME} SET step = ?2, update_time = unixepoch() \
                     WHERE biz_tag = ?1 RETURNING {COLUMNS}"
                ),
                params![tag.as_str(), step.get() as i64],
                read_row,
            )
            .map_err(unavailable)?;
            updated.ok_or(StoreError::TagNotFound(tag))?
        })
        .await
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        let tag = tag.clone();
        self.call(move |conn| {
            // The tombstone and the delete commit together, or neither does.
            let tx = immediate(conn)?;
            let tombs = tx
                .execute(
                    &format!(
                        "INSERT INTO {TOMBSTONES_TABLE} (segment_table, biz_tag, max_id, update_time) \
                         SELECT ?1, biz_tag, max_id, unixepoch() FROM {TABLE_NAME} WHERE biz_tag = ?2 \
                         ON CONFLICT (segment_table, biz_tag) DO UPDATE SET \
                         max_id = max(max_id, excluded.max_id), update_time = excluded.update_time"
                    ),
                    [TABLE_NAME, tag.as_str()],
                )
                .map_err(unavailable)?;
            let deleted = tx
                .execute(&format!("DELETE FROM {TABLE_NAME} WHERE biz_tag = ?1"), [tag.as_str()])
                .map_err(unavailable)?;
            if deleted == 0 || tombs == 0 {
                return Err(StoreError::TagNotFound(tag));
            }
            tx.commit().map_err(unavailable)?;
            Ok(())
        })
        .await
    }
}

/// Checks, creating and changing nothing, that `path` is an SQLite database holding the
/// segment table: a read-only connection to a file that must exist.
pub(crate) async fn check_exists(path: &Path) -> Result<(), StoreError> {
    let path = path.to_path_buf();
    run_blocking(move || {
        let absent = |reason: String| StoreError::Absent {
            store: format!("sqlite://{}", path.display()),
            reason,
        };
        if !path.is_file() {
            return Err(absent(format!("the file {} does not exist", path.display())));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags)
            .map_err(|e| absent(format!("it cannot be opened ({e})")))?;
        conn.busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS)).map_err(unavailable)?;
        let found: Option<i64> = conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [TABLE_NAME],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| absent(format!("it is not an SQLite database ({e})")))?;
        match found {
            Some(_) => Ok(()),
            None => Err(absent(format!("the file has no {TABLE_NAME} table"))),
        }
    })
    .await?
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let context = |e: &dyn std::fmt::Display| {
        StoreError::Unavailable(format!("cannot open SQLite database {}: {e}", path.display()))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| context(&e))?;
    }
    let conn = Connection::open(path).map_err(|e| context(&e))?;
    conn.busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS)).map_err(|e| context(&e))?;
    // WAL lets readers (`tag list`) run beside the server's writes; FULL makes every
    // committed allocation survive a power cut, which is what stops a restart from
    // re-issuing a range.
    conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| context(&e))?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(|e| context(&e))?;
    // A small log: checkpointed often and cut back when it restarts, so it never takes much
    // of the volume (a full disk then stops the marks and the log's growth, not a log that
    // already holds the free space).
    conn.pragma_update(None, "wal_autocheckpoint", SQLITE_WAL_CHECKPOINT_PAGES)
        .map_err(|e| context(&e))?;
    conn.pragma_update(None, "journal_size_limit", SQLITE_WAL_BYTES_MAX as i64)
        .map_err(|e| context(&e))?;
    // Created only when absent, never altered: an existing table is used as it is.
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE_NAME} (
            biz_tag     TEXT    NOT NULL PRIMARY KEY,
            max_id      INTEGER NOT NULL DEFAULT 1,
            step        INTEGER NOT NULL,
            description TEXT    NOT NULL DEFAULT '',
            update_time INTEGER NOT NULL DEFAULT (unixepoch())
        ) STRICT;
        CREATE TABLE IF NOT EXISTS {TOMBSTONES_TABLE} (
            segment_table TEXT    NOT NULL,
            biz_tag       TEXT    NOT NULL,
            max_id        INTEGER NOT NULL,
            update_time   INTEGER NOT NULL,
            PRIMARY KEY (segment_table, biz_tag)
        ) STRICT;"
    ))
    .map_err(|e| context(&e))?;
    Ok(conn)
}

/// Runs a writing statement with a `RETURNING` clause to its end and returns its first row
/// (`None`: it matched none). Run to the end, because that is where an autocommit statement
/// commits and reports a failed commit: `query_row` stops at the first row, and the commit
/// then done when the statement is reset reports its error (`SQLITE_FULL`, `SQLITE_IOERR`)
/// to no one, so a row of a write that was rolled back would be taken as written.
pub(crate) fn write_returning<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    read: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Option<T>> {
    let mut statement = conn.prepare(sql)?;
    let mut rows = statement.query(params)?;
    let first = match rows.next()? {
        Some(row) => Some(read(row)?),
        None => None,
    };
    // Bounded: every statement passed here matches at most one row (by primary key).
    while rows.next()?.is_some() {}
    Ok(first)
}

/// The tombstone of `tag`, if a tag of that name was deleted.
fn select_tombstone(conn: &Connection, tag: &Tag) -> Result<Option<u64>, StoreError> {
    let tomb: Option<i64> = conn
        .query_row(
            &format!(
                "SELECT max_id FROM {TOMBSTONES_TABLE} WHERE segment_table = ?1 AND biz_tag = ?2"
            ),
            [TABLE_NAME, tag.as_str()],
            |r| r.get(0),
        )
        .optional()
        .map_err(unavailable)?;
    tomb.map(|t| {
        u64::try_from(t).map_err(|_| StoreError::Corrupt {
            tag: tag.to_string(),
            reason: format!("its tombstone in {TOMBSTONES_TABLE} holds a negative max_id ({t})"),
        })
    })
    .transpose()
}

/// Explains why the allocating UPDATE, asked for `requested`, matched no row: no such tag, a
/// row idmint cannot serve (negative `max_id`, step below 1), or no room left.
fn refused_allocation(
    conn: &Connection,
    tag: &Tag,
    requested: Option<Step>,
) -> Result<StoreError, StoreError> {
    let row = conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM {TABLE_NAME} WHERE biz_tag = ?1"),
            [tag.as_str()],
            read_row,
        )
        .optional()
        .map_err(unavailable)?;
    Ok(match row {
        None => StoreError::TagNotFound(tag.clone()),
        Some(Err(corrupt)) => corrupt,
        Some(Ok(row)) if row.step < 1 => StoreError::Corrupt {
            tag: tag.to_string(),
            reason: format!("step is {}; it must be at least 1", row.step),
        },
        Some(Ok(row)) => StoreError::Exhausted {
            tag: tag.clone(),
            max_id: row.max_id,
            step: effective_step(row.step, requested),
        },
    })
}

fn select_row(conn: &Connection, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM {TABLE_NAME} WHERE biz_tag = ?1"),
        [tag.as_str()],
        read_row,
    )
    .optional()
    .map_err(unavailable)?
    .transpose()
}

/// Reads a row; the outer error is SQLite's, the inner one a row idmint cannot serve.
fn read_row(row: &Row<'_>) -> rusqlite::Result<Result<TagRecord, StoreError>> {
    let (biz_tag, max_id, step, description): (String, i64, i64, Option<String>) =
        (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
    // Leaf's MySQL column is a `timestamp`; a copied table may hold text there. The time is
    // for operators only, so anything but a number reads as 0 rather than failing the row.
    let update_time = match row.get_ref(4)? {
        rusqlite::types::ValueRef::Integer(seconds) => Some(seconds),
        _ => None,
    };
    Ok(stored_tag((biz_tag, Some(max_id), Some(step), description, update_time)))
}

/// Begins an immediate transaction on `conn`: the write lock is taken first, so no other
/// writer comes between its reads and its writes, and no write fails as busy halfway through.
pub(crate) fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, StoreError> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(unavailable)
}

fn unavailable(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("SQLite: {e}"))
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Unavailable(format!("SQLite call did not finish: {e}")))
}
