//! The SQLite backend: the conformance suite on a file in a temporary directory, and what
//! only a file can show: data survives reopening, two connections to one file (the CLI and a
//! server) never hand out the same range, a table made by Meituan Leaf is served as is, and
//! on a full disk (a tmpfs the test mounts) a write answered is a write committed.
//!
//! Rows a foreign tool may have written are inserted with plain SQL through rusqlite.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use idmint_core::IdRange;
use idmint_core::limits::TAG_COUNT_MAX;
use idmint_core::{Step, Tag};
use idmint_store::{
    RangeStore, SQLITE_WAL_BYTES_MAX, SegmentStore, SequenceStore, SqliteStore, StoreError,
    TABLE_NAME,
};
use rusqlite::{Connection, params};
use tempfile::TempDir;

use crate::conformance::{
    Subject, allocate_concurrently_with_steps, assert_tiles, conformance_suite, create, range,
    record, requested, spec, tag,
};
use crate::tmpfs::Tmpfs;

/// Meituan Leaf's table, as its documentation creates it (MySQL types SQLite accepts).
const LEAF_TABLE_SQL: &str = "CREATE TABLE leaf_alloc (biz_tag TEXT PRIMARY KEY, max_id INTEGER, \
                              step INTEGER, description TEXT, update_time INTEGER)";

async fn fresh() -> Option<Subject> {
    let (dir, path) = temp_db();
    let store = SqliteStore::open(&path).await.unwrap();
    Some(Subject::with_guard(Arc::new(store), dir))
}

conformance_suite!(fresh);

#[tokio::test]
async fn allocations_continue_above_max_id_after_reopen() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).await.unwrap();
    let durable = store.create_tag(&spec("durable", 1, 100, "kept")).await.unwrap().tag;
    for _ in 0..3 {
        store.allocate(&durable, None).await.unwrap();
    }
    let before = store.get_tag(&durable).await.unwrap();
    drop(store);

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.get_tag(&durable).await.unwrap(), before);
    assert_eq!(store.allocate(&durable, None).await.unwrap().range, range(301, 401));
    assert_eq!(store.list_tags().await.unwrap().len(), 1);
}

/// The database on a 1 MiB tmpfs, filled up: a write must either fail or be in the file.
/// SQLite commits an autocommit `… RETURNING` statement when it runs to its end; read only
/// to its first row, a commit that failed (`SQLITE_FULL`) was reported to no one, and the
/// same uncommitted range was answered again and again.
#[tokio::test]
async fn on_a_full_disk_a_write_answered_is_a_write_committed() {
    let Some(disk) = Tmpfs::mount(1024) else { return };
    let path = disk.path().join("ids.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let full = store.create_tag(&spec("full", 1, 10, "")).await.unwrap().tag;
    let counter = Tag::parse("counter").unwrap();
    let mut answered = vec![store.allocate(&full, None).await.unwrap().range];
    store.raise_ceiling(&counter, "", 100).await.unwrap();

    disk.fill();
    let mut failed = 0;
    for _ in 0..20 {
        match store.allocate(&full, None).await {
            Ok(allocation) => answered.push(allocation.range),
            Err(StoreError::Unavailable(reason)) => {
                assert!(reason.contains("full"), "{reason}");
                failed += 1;
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    let stepped = store.set_step(&full, Step::new(77).unwrap()).await;
    let raised = store.raise_ceiling(&counter, "", 100).await;
    assert!(failed > 0, "no allocation failed: the disk did not fill");
    drop(store);

    disk.free();
    let store = SqliteStore::open(&path).await.unwrap();
    if let Ok(record) = stepped {
        assert_eq!(store.get_tag(&full).await.unwrap().unwrap().step, record.step);
    }
    if let Ok(ceiling) = raised {
        assert_eq!(store.ceiling(&counter, "").await.unwrap(), ceiling, "ceiling not kept");
    }
    answered.push(store.allocate(&full, None).await.unwrap().range);
    // Each range answered follows the one before: none was answered twice.
    assert!(
        answered.windows(2).all(|w| w[0].end() <= w[1].start()),
        "ranges answered again: {answered:?}"
    );
}

/// Opens the database on `disk` with tag `wal` (step 10) and opens it again, as after any
/// restart: the tables' pages are then in the database file, the log holds only changes.
async fn reopened_with_a_tag(disk: &Tmpfs) -> (SqliteStore, Tag) {
    let path = disk.path().join("ids.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let tag = store.create_tag(&spec("wal", 1, 10, "")).await.unwrap().tag;
    drop(store);
    (SqliteStore::open(&path).await.unwrap(), tag)
}

/// The database alone on a 1 MiB tmpfs under 1 000 allocations: its write-ahead log stays
/// small (checkpointed every `SQLITE_WAL_CHECKPOINT_PAGES` pages, cut back to
/// `SQLITE_WAL_BYTES_MAX`), so it never fills the disk. With SQLite's defaults (a checkpoint
/// after 1 000 pages, 4 MiB) the log took the whole disk and 758 allocations failed.
#[tokio::test]
async fn the_write_ahead_log_stays_small() {
    let Some(disk) = Tmpfs::mount(1024) else { return };
    let (store, tag) = reopened_with_a_tag(&disk).await;
    let wal = disk.path().join("ids.db-wal");
    let mut largest = 0;
    let mut answered: Vec<IdRange> = Vec::new();
    for i in 0..1_000 {
        match store.allocate(&tag, None).await {
            Ok(allocation) => answered.push(allocation.range),
            Err(e) => panic!("allocation {i} failed: {e}"),
        }
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    assert!(
        largest <= SQLITE_WAL_BYTES_MAX,
        "the log grew to {largest} bytes, above {SQLITE_WAL_BYTES_MAX}"
    );
    assert!(answered.windows(2).all(|w| w[0].end() <= w[1].start()));
}

/// A write that fails on a full disk gives the log's room back: the store checkpoints the
/// log and truncates it (waiting for no lock), so the next write finds room, where before
/// every later write failed until something else freed space.
#[tokio::test]
async fn a_write_that_failed_on_a_full_disk_gives_the_logs_room_back() {
    let Some(disk) = Tmpfs::mount(1024) else { return };
    let (store, tag) = reopened_with_a_tag(&disk).await;
    let mut answered = Vec::new();
    // A log of about 40 pages, well below a checkpoint.
    for _ in 0..40 {
        answered.push(store.allocate(&tag, None).await.unwrap().range);
    }
    disk.fill();
    let mut results = Vec::new();
    for _ in 0..20 {
        match store.allocate(&tag, None).await {
            Ok(allocation) => {
                answered.push(allocation.range);
                results.push(true);
            }
            Err(StoreError::Unavailable(reason)) => {
                assert!(reason.contains("full"), "{reason}");
                results.push(false);
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    let first_failure = results.iter().position(|ok| !ok);
    let first_failure = first_failure.expect("no allocation failed: the disk did not fill");
    assert!(
        results.get(first_failure + 1) == Some(&true),
        "the allocation after the first failure failed too ({results:?}): the log kept its room"
    );
    assert!(
        answered.windows(2).all(|w| w[0].end() <= w[1].start()),
        "ranges answered again: {answered:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connections_to_one_file_never_overlap() {
    const TASKS_PER_CONNECTION: usize = 4;
    const ALLOCATIONS_PER_TASK: usize = 50;
    const RAISED_STEP: u64 = 25;
    let (_dir, path) = temp_db();
    let first: Arc<dyn SegmentStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let second: Arc<dyn SegmentStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let shared = create(&first, "shared", 1, 10).await;

    // The first connection takes the tag's step, the second asks for more: the step each
    // update reserves is chosen inside it, so the two still tile.
    let mut callers = vec![(Arc::clone(&first), None); TASKS_PER_CONNECTION];
    callers.extend(vec![(Arc::clone(&second), requested(RAISED_STEP)); TASKS_PER_CONNECTION]);
    let ranges: Vec<IdRange> =
        allocate_concurrently_with_steps(&callers, &shared, ALLOCATIONS_PER_TASK)
            .await
            .into_iter()
            .flatten()
            .map(|allocation| allocation.range)
            .collect();
    let count = TASKS_PER_CONNECTION * ALLOCATIONS_PER_TASK;
    assert_eq!(ranges.len(), 2 * count);
    let max_id = record(&second, &shared).await.max_id;
    assert_eq!(max_id, 1 + (10 + RAISED_STEP) * count as u64);
    assert_tiles(ranges, 1, max_id);
}

#[tokio::test]
async fn a_leaf_table_is_served_as_is() {
    let (_dir, path) = temp_db();
    let raw = Connection::open(&path).unwrap();
    raw.execute_batch(LEAF_TABLE_SQL).unwrap();
    let insert = "INSERT INTO leaf_alloc VALUES (?1, ?2, ?3, ?4, ?5)";
    raw.execute(insert, params!["leaf-segment-test", 1, 2000, "x", 0]).unwrap();
    // Leaf's columns are nullable; a row without description or time is still served.
    raw.execute(insert, params!["leaf-nulls", 5, 10, None::<String>, None::<i64>]).unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let leaf = tag("leaf-segment-test");
    assert_eq!(store.allocate(&leaf, None).await.unwrap().range, range(1, 2001));
    assert_eq!(store.allocate(&leaf, None).await.unwrap().range, range(2001, 4001));
    let row = store.get_tag(&leaf).await.unwrap().unwrap();
    assert_eq!((row.max_id, row.step, row.description.as_str()), (4001, 2000, "x"));
    assert!(row.update_time_s > 0, "an allocation must stamp update_time");

    let nulls = tag("leaf-nulls");
    let row = store.get_tag(&nulls).await.unwrap().unwrap();
    assert_eq!((row.max_id, row.step, row.description.as_str()), (5, 10, ""));
    assert_eq!(store.allocate(&nulls, None).await.unwrap().range, range(5, 15));
    let listed = store.list_tags().await.unwrap();
    assert_eq!(
        listed.iter().map(|r| r.tag.as_str()).collect::<Vec<_>>(),
        ["leaf-nulls", leaf.as_str()]
    );

    // Used as is: opening the store neither replaced nor altered Leaf's table.
    let layout: String = raw
        .query_row("SELECT sql FROM sqlite_master WHERE name = ?1", [TABLE_NAME], |r| r.get(0))
        .unwrap();
    assert_eq!(layout, LEAF_TABLE_SQL);
}

#[tokio::test]
async fn rows_with_an_invalid_tag_are_skipped_by_list() {
    let (_dir, path) = temp_db();
    let store: Arc<dyn SegmentStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    create(&store, "valid", 1, 10).await;
    insert_raw(&path, &[("has\ttab", 1, 10), ("", 1, 10), (" lead", 1, 10)]);

    let listed = store.list_tags().await.unwrap();
    assert_eq!(listed.iter().map(|r| r.tag.as_str()).collect::<Vec<_>>(), ["valid"]);
    assert_eq!(store.allocate(&tag("valid"), None).await.unwrap().range, range(1, 11));
}

#[tokio::test]
async fn a_row_with_a_zero_step_is_refused_as_corrupt_and_left_unchanged() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).await.unwrap();
    insert_raw(&path, &[("zero-step", 7, 0)]);
    let zero = tag("zero-step");
    let before = store.get_tag(&zero).await.unwrap();

    let refused = store.allocate(&zero, None).await;
    assert!(
        matches!(&refused, Err(StoreError::Corrupt { tag, .. }) if tag == "zero-step"),
        "{refused:?}"
    );
    assert_eq!(store.get_tag(&zero).await.unwrap(), before);
}

#[tokio::test]
async fn create_beyond_the_tag_count_limit_is_refused() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).await.unwrap();
    // Filled in one transaction: ten thousand durable creates would take seconds.
    let rows: Vec<(String, i64, i64)> =
        (0..TAG_COUNT_MAX).map(|i| (format!("t{i:05}"), 1, 1)).collect();
    insert_raw(&path, &rows);

    let refused = store.create_tag(&spec("one-too-many", 1, 1, "")).await;
    assert_eq!(refused, Err(StoreError::TooManyTags));
    assert_eq!(store.get_tag(&tag("one-too-many")).await, Ok(None));
    assert_eq!(store.list_tags().await.map(|rows| rows.len()), Ok(TAG_COUNT_MAX));
}

/// A temporary directory and the path of a database file inside it (not yet created).
fn temp_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idmint.db");
    (dir, path)
}

/// Inserts `(biz_tag, max_id, step)` rows behind the store's back, as another tool would.
fn insert_raw(path: &Path, rows: &[(impl AsRef<str>, i64, i64)]) {
    let mut raw = Connection::open(path).unwrap();
    let tx = raw.transaction().unwrap();
    for (biz_tag, max_id, step) in rows {
        tx.execute(
            &format!("INSERT INTO {TABLE_NAME} (biz_tag, max_id, step) VALUES (?1, ?2, ?3)"),
            params![biz_tag.as_ref(), max_id, step],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

#[tokio::test]
async fn a_row_with_a_negative_max_id_is_refused_as_corrupt_and_left_unchanged() {
    let (_dir, path) = temp_db();
    let store = SqliteStore::open(&path).await.unwrap();
    insert_raw(&path, &[("negative", -100, 10)]);
    let negative = tag("negative");
    let refused = store.allocate(&negative, None).await;
    assert!(matches!(&refused, Err(StoreError::Corrupt { .. })), "{refused:?}");
    let max_id: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            &format!("SELECT max_id FROM {TABLE_NAME} WHERE biz_tag = 'negative'"),
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(max_id, -100, "a refused allocation changed the row");
}

#[tokio::test]
async fn a_leaf_row_with_a_text_update_time_is_listed() {
    // Leaf's MySQL column is a `timestamp`; a table copied over keeps it as text, which a
    // non-STRICT table (as Leaf users make it) accepts.
    let leaf_dir = TempDir::new().unwrap();
    let leaf_path = leaf_dir.path().join("leaf.db");
    Connection::open(&leaf_path)
        .unwrap()
        .execute_batch(&format!(
            "CREATE TABLE {TABLE_NAME} (biz_tag TEXT PRIMARY KEY, max_id INTEGER, step INTEGER, \
             description TEXT, update_time TIMESTAMP);
             INSERT INTO {TABLE_NAME} VALUES ('copied', 5, 10, 'x', '2020-01-01 00:00:00');"
        ))
        .unwrap();
    let leaf = SqliteStore::open(&leaf_path).await.unwrap();
    let listed = leaf.list_tags().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(leaf.allocate(&tag("copied"), None).await.unwrap().range.start(), 5);
}
