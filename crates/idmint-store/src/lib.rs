//! idmint-store: where segment rows live.
//!
//! This crate owns the [`SegmentStore`] trait (atomic range allocation, with a step the caller
//! may raise above the tag's; a compare-and-set of `max_id` that gives back an unissued tail
//! or jumps past a regression; tag create, list, get, set step, delete with a tombstone that
//! keeps a name's issued ids from being issued again), its typed errors,
//! store URLs, and the backends: [`MemoryStore`] (the reference every backend is checked
//! against) and [`SqliteStore`] (the embedded default, feature `sqlite`, on by default: without
//! it the crate builds no SQLite); with features, MySQL, PostgreSQL and
//! Redis (`redis/`: one server, Sentinel or Cluster; segments and worker ids, no sequence
//! ceilings). Every backend passes one conformance suite (`tests/it/conformance.rs`). [`InterleavedStore`] serves one tag from N stores by
//! residue: N segment databases, or N Flicker ticket databases (`flicker.rs`, feature
//! `mysql`).
//!
//! It also owns the [`LeaseStore`] and [`WorkerStore`] traits (`worker.rs`): worker ids for
//! snowflake-style layouts, leased with a fencing token and a mark the next holder inherits
//! (table `idmint_workers`) or assigned once per start (table `idmint_worker_node`), on the same backends (the
//! per-backend code in `memory/`, `sqlite/`, and `sql/` for MySQL and PostgreSQL), checked by the
//! worker suite (`tests/it/workers.rs`).
//!
//! And the [`TinyidStore`] trait (`tinyid.rs`): Didi Tinyid's `tiny_id_info` and
//! `tiny_id_token` served as they are, with Tinyid's version compare-and-set (MySQL/MariaDB,
//! feature `mysql`; other backends are refused by [`open_tinyid`]).
//!
//! And the [`SequenceStore`] trait (`sequence.rs`): sequence definitions and the ceilings that
//! keep Redis-served sequences from repeating (tables `idmint_sequences`,
//! `idmint_sequence_ceilings`), on the same four backends, checked by the sequence suite
//! (`tests/it/sequences.rs`).
//!
//! And the [`TagMetaStore`] trait (`meta.rs`): small values per tag and name (the key
//! guard's fingerprint), compared and set atomically, in idmint's own table `idmint_tag_meta`
//! (a hash per tag on Redis), never in the segment table; on every single-database backend
//! and Redis, checked by the metadata suite (`tests/it/meta.rs`).
//!
//! It must not spawn background tasks or read idmint's clock; it must not know HTTP. Its
//! timing is the database's own: the `update_time` column, and worker leases judged by the
//! store's clock (`clock.rs` for the stores on this machine), never the caller's.

mod clock;
mod counter;
mod error;
#[cfg(feature = "mysql")]
mod flicker;
mod interleave;
mod memory;
mod meta;
#[cfg(feature = "mysql")]
mod mysql;
mod names;
mod open;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
mod schema;
mod sequence;
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod tinyid;
mod url;
mod worker;

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, ID_MIN};
use idmint_core::{Description, IdRange, StartId, Step, Tag};

pub use clock::{LocalClock, StoreClock};
pub use counter::{COUNTER_MAX, CounterKey, CounterState, CounterStore, Take};
pub use error::StoreError;
#[cfg(feature = "mysql")]
pub use flicker::{FLICKER_PROBE_TIMEOUT_MS, open_flicker};
pub use interleave::{
    InterleavedStore, SOURCE_BACKOFF_MS_MAX, SOURCE_BACKOFF_MS_MIN, SOURCE_CALL_TIMEOUT_MS,
};
pub use memory::{MemoryStore, WorkerRowsSnapshot};
pub use meta::{
    META_NAME_LEN_MAX, META_VALUE_LEN_MAX, POLICY_FORMATTED, POLICY_NAME, POLICY_PLAIN,
    POLICY_STRICT, TAG_META_TABLE, TagMetaStore,
};
#[cfg(feature = "mysql")]
pub use mysql::MySqlStore;
pub use names::{WORKER_NODE_TABLE, WORKERS_TABLE, WorkerSpace};
pub use open::{
    Backend, check_exists, open, open_counters, open_sequences, open_tinyid, open_workers,
};
#[cfg(feature = "postgres")]
pub use postgres::PgStore;
pub use schema::{SchemaPart, render_schema, schema};
pub use sequence::{
    CEILING_MAX, CEILINGS_TABLE, PERIOD_LEN_MAX, SEQUENCE_COUNT_MAX, SEQUENCE_FORMAT_LEN_MAX,
    SEQUENCES_TABLE, SequenceRecord, SequenceSpec, SequenceStore, TIME_ZONE_LEN_MAX,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SQLITE_WAL_BYTES_MAX, SQLITE_WAL_CHECKPOINT_PAGES, SqliteStore};
#[cfg(feature = "mysql")]
pub use tinyid::TinyidMySqlStore;
pub use tinyid::{
    TINYID_CAS_ATTEMPTS_MAX, TINYID_INFO_TABLE, TINYID_TOKEN_LEN_MAX, TINYID_TOKEN_TABLE,
    TINYID_TOKENS_MAX, TinyidRow, TinyidStore, TinyidToken,
};
pub use url::{
    AUTO_INCREMENT_MAX, AllocMode, AutoIncrement, CreateTables, DEFAULT_STORE_URL,
    FLICKER_NODE_LEN_MAX, FLICKER_TABLE_DEFAULT, FlickerUrl, INTERLEAVE_SOURCES_MAX,
    POOL_MAX_DEFAULT, POOL_MAX_LIMIT, REDIS_DESCRIPTORS, SQLITE_DESCRIPTORS, SqlOptions, SqlUrl,
    StoreUrl, TABLE_NAME_LEN_MAX, TableName, host_name, redact_urls,
};
pub use worker::{
    ASSIGN_WORKER_ID_MAX, AssignRequest, HOLDER_ID_COLUMN, HOLDER_LEN_MAX, LEASE_MARGIN_MS_MAX,
    LEASE_TTL_MS_MAX, LEASE_TTL_MS_MIN, LEASE_WORKER_ID_MAX, Lease, LeaseRecord, LeaseRequest,
    LeaseStore, WORKER_SPACE_LEN_MAX, WORKER_TIME_MS_MAX, WorkerStore, next_token,
};

/// The name of the segment table: Meituan Leaf's, so an existing Leaf database works as is.
pub const TABLE_NAME: &str = "leaf_alloc";

/// What `tag create` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSpec {
    /// The tag (`biz_tag`).
    pub tag: Tag,
    /// Ids reserved per allocation.
    pub step: Step,
    /// The first id the tag hands out (the initial `max_id`). `None`: 1 for a name never
    /// used, or where the last tag of this name stopped (its tombstone, [`TOMBSTONES_TABLE`]).
    pub start: Option<StartId>,
    /// Free text for operators.
    pub description: Description,
    /// Accept a `start` below the tombstone of a deleted tag of the same name: the new tag
    /// may then hand out ids the old one did. Only for an operator who knows no id of the
    /// old tag survives anywhere.
    pub force: bool,
}

/// The table (SQL) or key prefix (Redis, `tomb:{TAG}`) where a deleted tag leaves its
/// tombstone: its name and the `max_id` it had reached, so a tag created again under that
/// name starts above every id the old one handed out. idmint's own table, never a Leaf table.
pub const TOMBSTONES_TABLE: &str = "idmint_tombstones";

/// One row of the segment table as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagRecord {
    /// The tag (`biz_tag`).
    pub tag: Tag,
    /// The first id not yet reserved by any node.
    pub max_id: u64,
    /// Ids reserved per allocation. Read as stored, so a Leaf row with an unusual step is
    /// still served.
    pub step: u64,
    /// Free text for operators, as stored.
    pub description: String,
    /// When the row last changed, in seconds since the Unix epoch.
    pub update_time_s: u64,
}

/// What one [`RangeStore::allocate`] reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The reserved ids, `[old max_id, new max_id)`: as long as the larger of the tag's step
    /// and the requested one.
    pub range: IdRange,
    /// The row's configured `step` as stored when the allocation was made, so a caller that
    /// asks for its own step learns an operator's `set_step` without another read.
    pub tag_step: u64,
}

/// One change of [`RangeStore::compare_and_set_max_ids`]: `max_id := new` if it is still
/// `expected`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxIdChange {
    /// The row.
    pub tag: Tag,
    /// The `max_id` the row must still hold.
    pub expected: u64,
    /// The `max_id` it gets.
    pub new: u64,
}

/// The range part of a segment store: what serving a tag needs (reserving ranges, giving a
/// tail back, reading rows and tombstones). Shared by every idmint node; the idmint client's
/// remote store is one, and holds no tag admin.
///
/// Implementations must make `allocate` atomic: concurrent callers, in this process or any
/// other node, always receive disjoint ranges, and `allocate` never decreases `max_id`. Only
/// [`compare_and_set_max_id`](RangeStore::compare_and_set_max_id) may lower it, and only
/// while no other allocation has happened since the caller's own.
#[async_trait]
pub trait RangeStore: Send + Sync + 'static {
    /// Reserves the next ids of `tag` in one atomic update and returns them as
    /// `[old max_id, new max_id)` with the row's step.
    ///
    /// `max_id` advances by the larger of the row's `step` and `step` (`None` asks for the
    /// row's `step`), read in the same update: a request never reserves fewer ids than the
    /// tag is configured for, and a changed step takes effect on the very next allocation.
    /// Refuses with [`StoreError::Exhausted`] (carrying that larger step) rather than pass
    /// `i64::MAX`, leaving the row unchanged, so a caller may retry with a smaller request;
    /// with [`StoreError::TagNotFound`] for an unknown tag; with [`StoreError::Corrupt`] for
    /// a row that cannot be served (negative `max_id`, step below 1).
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError>;

    /// Whether [`RangeStore::compare_and_set_max_id`] can lower `max_id`, so that a node
    /// gives its unissued ids back at shutdown. Stores whose ids are consumed when taken
    /// (Flicker tickets, several interleaved databases) cannot; the engine then skips the
    /// give-back and says why, rather than blame another node.
    fn gives_back(&self) -> bool {
        true
    }

    /// Sets `max_id := new` only if it is still `expected`, in one atomic update
    /// (`UPDATE … SET max_id = new WHERE biz_tag = tag AND max_id = expected`), stamping
    /// `update_time`.
    ///
    /// Returns `Ok(true)` when applied; `Ok(false)` when the row holds another `max_id`
    /// (another node allocated meanwhile), changing nothing; [`StoreError::TagNotFound`]
    /// when there is no row; [`StoreError::InvalidValue`] when `new` is outside
    /// `ID_MIN..=ID_MAX`, before the store is asked.
    ///
    /// The engine uses it two ways: at shutdown with `new < expected`, to give back the
    /// unissued tail `[new, expected)` of the range it allocated last; and with
    /// `new > expected`, to jump past ids it already served after the store went backwards.
    /// Lowering `max_id` is safe only because `expected` proves no allocation followed the
    /// caller's, and the caller vouches that no id in `[new, expected)` was handed out.
    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError>;

    /// [`RangeStore::compare_and_set_max_id`] of many rows, as a shutdown gives unissued
    /// ids back: one answer per change, in order, `true` when applied, `false` when the row
    /// holds another `max_id` or is gone. A store that can apply them in one transaction
    /// does (SQLite, MySQL, PostgreSQL), so a batch costs one commit; by default (Redis,
    /// Tinyid's table) they are applied one after another. On `Err` some may have been applied: a caller that counts none as applied
    /// (keeps its marks above them) only skips ids, never repeats one.
    async fn compare_and_set_max_ids(
        &self,
        changes: &[MaxIdChange],
    ) -> Result<Vec<bool>, StoreError> {
        let mut applied = Vec::with_capacity(changes.len());
        for change in changes {
            let cas = self.compare_and_set_max_id(&change.tag, change.expected, change.new);
            applied.push(match cas.await {
                Ok(done) => done,
                Err(StoreError::TagNotFound(_)) => false,
                Err(error) => return Err(error),
            });
        }
        Ok(applied)
    }

    /// The row of `tag`, if it exists.
    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError>;

    /// Every row, ordered by tag, at most `TAG_COUNT_MAX`. Rows whose `biz_tag` is not a
    /// valid tag name are skipped with a warning.
    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError>;

    /// The tombstone of `tag`: the `max_id` a deleted tag of this name had reached (every id
    /// it handed out is below it), if a tag of this name was ever deleted through idmint.
    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError>;

    /// Each row's `update_time` as the database itself writes it as text (MySQL:
    /// `2026-11-28 14:03:07`, in the session's time zone), by tag, at most `TAG_COUNT_MAX`:
    /// what Leaf's `/db` page shows. Empty for a store whose time has no text of its own
    /// (the caller then writes `update_time_s`).
    async fn update_times_text(&self) -> Result<Vec<(Tag, String)>, StoreError> {
        Ok(Vec::new())
    }

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Where the store lives, for logs: its URL with any password removed.
    fn describe(&self) -> String;
}

/// Durable storage of segment rows: the range part and the tag admin (create, change the
/// step, delete with a tombstone), what a node and the CLI run on.
#[async_trait]
pub trait SegmentStore: RangeStore {
    /// Creates a tag row; refuses an existing tag and more than `TAG_COUNT_MAX` tags.
    ///
    /// A name with a tombstone (a tag of that name was deleted) starts at the tombstone's
    /// `max_id` when `spec.start` is `None`; a lower `start` is refused with
    /// [`StoreError::StartBelowIssued`] unless `spec.force`. The tombstone is read in the same
    /// atomic step (transaction, lock or script) as the insert, and kept: a later delete only
    /// raises it.
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError>;

    /// Changes the step of `tag`; the next allocation uses it.
    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError>;

    /// Deletes the row of `tag`, leaving a tombstone with its `max_id` ([`TOMBSTONES_TABLE`])
    /// in the same atomic step (one transaction or script), so a crash can never leave the
    /// row gone without its tombstone. An existing tombstone is only raised, never lowered.
    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError>;
}

/// How far an allocation advances `max_id`: the row's step, or the requested one if larger.
pub(crate) fn effective_step(tag_step: u64, requested: Option<Step>) -> u64 {
    tag_step.max(requested.map_or(0, Step::get))
}

/// What an allocation that left `max_id` at `max_id_after` reserved, for a row whose step is
/// `tag_step` and a caller that asked for `requested`: the range
/// `[max_id_after - effective step, max_id_after)`. Refuses rows that would yield no valid id.
pub(crate) fn allocated_range(
    tag: &Tag,
    max_id_after: i64,
    tag_step: i64,
    requested: Option<Step>,
) -> Result<Allocation, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { tag: tag.to_string(), reason };
    let tag_step = u64::try_from(tag_step)
        .ok()
        .filter(|step| *step >= 1)
        .ok_or_else(|| corrupt(format!("step is {tag_step}; it must be at least 1")))?;
    let end = u64::try_from(max_id_after)
        .map_err(|_| corrupt(format!("max_id is negative ({max_id_after})")))?;
    let step = effective_step(tag_step, requested);
    // Ids start at 1: a Leaf row whose max_id is 0 loses only the id 0.
    let start = end.saturating_sub(step).max(ID_MIN);
    let range = IdRange::new(start, end)
        .ok_or_else(|| corrupt(format!("allocation ended at {end}: no valid id in range")))?;
    Ok(Allocation { range, tag_step })
}

/// A segment row as the SQL backends read it: `biz_tag`, `max_id`, `step`, `description` and
/// `update_time` in Unix seconds (any of the last four may be NULL in a Leaf table).
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) type TagColumns = (String, Option<i64>, Option<i64>, Option<String>, Option<i64>);

/// The [`TagRecord`] of a stored row, or why idmint cannot serve it. The time is for operators
/// only: NULL (a Leaf row never stamped) or before 1970 reads as 0 rather than failing the row.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn stored_tag(
    (biz_tag, max_id, step, description, update_time): TagColumns,
) -> Result<TagRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { tag: biz_tag.clone(), reason };
    let number = |name: &str, value: Option<i64>| {
        value.and_then(|v| u64::try_from(v).ok()).ok_or_else(|| {
            corrupt(format!("{name} is {}", value.map_or("NULL".into(), |v| v.to_string())))
        })
    };
    Ok(TagRecord {
        tag: Tag::from_stored(&biz_tag).map_err(|e| corrupt(e.to_string()))?,
        max_id: number("max_id", max_id)?,
        step: number("step", step)?,
        description: description.unwrap_or_default(),
        update_time_s: update_time.and_then(|t| u64::try_from(t).ok()).unwrap_or(0),
    })
}

/// The rows idmint can serve, in order; each other one is skipped with a warning naming
/// `what` it is (a row, a sequence).
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn servable_rows<T>(
    rows: impl IntoIterator<Item = Result<T, StoreError>>,
    what: &str,
) -> Vec<T> {
    let servable = |row: Result<T, StoreError>| {
        row.inspect_err(|skipped| tracing::warn!(%skipped, "skipping a {what} idmint cannot serve"))
            .ok()
    };
    rows.into_iter().filter_map(servable).collect()
}

/// The `max_id` a new row of `spec` starts at, given the tombstone of its name: above every
/// id a deleted tag of the same name handed out, unless the operator forces a lower start.
pub(crate) fn initial_max_id(spec: &TagSpec, tombstone: Option<u64>) -> Result<u64, StoreError> {
    match (spec.start, tombstone) {
        (None, None) => Ok(StartId::DEFAULT.get()),
        (None, Some(tomb)) => Ok(tomb.max(ID_MIN)),
        (Some(start), Some(tomb)) if start.get() < tomb && !spec.force => {
            Err(StoreError::StartBelowIssued { tag: spec.tag.clone(), start: start.get(), tomb })
        }
        (Some(start), _) => Ok(start.get()),
    }
}

/// What to tell the operator when `spec` was forced below the tombstone `tombstone` of its
/// name (read before the create): `None` when nothing was forced past a tombstone.
pub fn forced_below_tombstone(spec: &TagSpec, tombstone: Option<u64>) -> Option<String> {
    let (start, tomb) = (spec.start?.get(), tombstone?);
    (spec.force && start < tomb).then(|| {
        format!(
            "tag {} was created at {start}, below {tomb}, where a deleted tag of this name \
             stopped (forced): ids {start}..{tomb} the old tag may have handed out can be \
             handed out again; nodes that served them still skip their own",
            spec.tag
        )
    })
}

/// Checks every change of a batched give-back, then gives the order to apply them in: by
/// tag, so two nodes giving back batches of shared tags lock rows in one order and cannot
/// deadlock.
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) fn batch_order(changes: &[MaxIdChange]) -> Result<Vec<usize>, StoreError> {
    for change in changes {
        check_new_max_id(change.new)?;
    }
    let mut order: Vec<usize> = (0..changes.len()).collect();
    order.sort_by(|a, b| changes[*a].tag.cmp(&changes[*b].tag));
    Ok(order)
}

/// Refuses a `compare_and_set_max_id` target no row may hold.
pub(crate) fn check_new_max_id(new: u64) -> Result<(), StoreError> {
    if (ID_MIN..=ID_MAX).contains(&new) {
        Ok(())
    } else {
        Err(StoreError::InvalidValue(format!(
            "max_id {new} is outside {ID_MIN}..={ID_MAX}, the ids idmint hands out"
        )))
    }
}
