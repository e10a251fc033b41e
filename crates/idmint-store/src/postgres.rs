//! The PostgreSQL backend (feature `postgres`): Leaf's segment table in PostgreSQL types,
//! reached through a bounded sqlx pool.
//!
//! Allocation follows the URL's `alloc` option. `update` (the default) is one
//! `UPDATE … SET max_id = max_id + GREATEST(step, $2) … RETURNING`: the row's step is read, the
//! bound checked and `max_id` advanced in one atomic statement. `cas` reads the row and then
//! writes the new `max_id` as a constant under `WHERE max_id = <read> AND step = <read>`,
//! retried a bounded number of times, for proxies that forbid expression updates. Callers in
//! one process queue on a lock per tag (striped) rather than race each other's rounds, so
//! only other nodes can make a round lose; beside an `alloc=update` node allocating without
//! pause, a CAS node may still give up as contended.
//!
//! The table is created (Leaf's columns, `CREATE TABLE IF NOT EXISTS`) only when absent, as
//! `create_tables=` allows ([`CreateTables`]: not beside another Leaf-shaped table, which a
//! mistyped `table=` would hide), and is never altered: an existing Leaf table is served as
//! it is. The tombstone table is created by the first tag deletion. An account with Leaf's
//! own grants (`SELECT, UPDATE` on the segment table) serves segments; a feature that needs
//! more is refused naming the privilege ([`StoreError::Denied`]). Rows are read tolerantly: NULL
//! description reads as empty; `update_time` may be a `timestamp` (written in UTC), a
//! `timestamptz`, or an integer column of Unix seconds; of any other type, or absent, it is
//! neither read (0) nor stamped.
//!
//! It must not spawn tasks or show a password: every error text is scrubbed of the URL's
//! password, and URLs are shown redacted.
//!
//! Worker-id leases and assignments ([`WorkerStore`](crate::WorkerStore)), sequence
//! definitions and ceilings ([`SequenceStore`](crate::SequenceStore)) and tag metadata
//! ([`TagMetaStore`](crate::TagMetaStore)) are written once for both database backends, in
//! `sql/`, over this backend's [`Dialect`]; what is this backend's own (its tables' DDL, its
//! clock, the steps whose flow differs) is in `postgres/workers.rs`, `postgres/sequences.rs` and
//! `postgres/meta.rs`.

mod meta;
mod sequences;
mod workers;

pub(crate) use meta::meta_ddl;
pub(crate) use sequences::{ceilings_ddl, sequences_ddl};
pub(crate) use workers::{worker_node_ddl, workers_ddl};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, STORE_CALL_TIMEOUT_MS_DEFAULT, TAG_COUNT_MAX};
use idmint_core::{Step, Tag};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

use crate::sql::{
    ANY_FEATURE, CAS_ATTEMPTS_MAX, CasLocks, Dialect, FEATURE_CREATE, FEATURE_DELETE,
    FEATURE_SEGMENTS, LEAF_TABLES_SHOWN_MAX, TxConn, cas_backoff, denied, leaf_table_beside,
    password, pool_options, scrub,
};
use crate::{
    AllocMode, Allocation, CreateTables, MaxIdChange, RangeStore, SegmentStore, SqlOptions, SqlUrl,
    StoreError, TOMBSTONES_TABLE, TagColumns, TagRecord, TagSpec, allocated_range,
    check_new_max_id, effective_step, initial_max_id, servable_rows, stored_tag,
};

/// How long a call waits for a pooled connection (or for a new one to open) before failing
/// as unavailable.
const PG_ACQUIRE_TIMEOUT_MS: u64 = 3_000;
/// A pooled connection idle for longer than this is pinged before use, so a connection the
/// server or a proxy dropped meanwhile is replaced rather than failing a call. Busier
/// connections are not: that ping would be a second round trip on every allocation's path.
const PG_IDLE_PING_AFTER_MS: u64 = 10_000;
/// Times an `alloc=update` allocation is retried when its update matched no row but the row,
/// read just after, had room: another writer changed it in between.
const UPDATE_ATTEMPTS_MAX: u32 = 4;
/// First key of the advisory lock that serializes table setup and tag creation (the second
/// is the table's name hashed): "idmt" in ASCII, apart from other applications' locks.
const ADVISORY_LOCK_CLASS: i32 = 0x6964_6d74;

// Waiting for a connection must end before the engine's own call timeout gives up on us, and
// so must a fully contended CAS allocation's pauses.
/// PostgreSQL's SQLSTATE for "relation does not exist" (`undefined_table`).
const SQLSTATE_UNDEFINED_TABLE: &str = "42P01";

const _: () = assert!(PG_ACQUIRE_TIMEOUT_MS <= STORE_CALL_TIMEOUT_MS_DEFAULT);

/// A segment table in a PostgreSQL database.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    options: SqlOptions,
    sql: Arc<Statements>,
    /// `alloc=cas` only: a CAS round lost to a caller in this process is a round wasted.
    cas_locks: Arc<CasLocks>,
    /// Where the store lives, without a password, for `describe`.
    location: String,
    /// The URL's password, scrubbed from every error text; `None` for an embedder's pool.
    secret: Option<Arc<str>>,
}

/// Whether the database `url` names holds table `table` (`to_regclass`: the search path
/// applies), creating nothing: one connection, closed after the question.
pub(crate) async fn table_exists(url: &SqlUrl, table: &str) -> Result<bool, StoreError> {
    let secret = password(url.driver_url());
    let fail = |e: sqlx::Error| {
        StoreError::Unavailable(scrub(&format!("PostgreSQL: {}: {e}", url.redacted()), secret))
    };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(PG_ACQUIRE_TIMEOUT_MS))
        .connect(url.driver_url())
        .await
        .map_err(fail)?;
    let exists: Result<bool, _> =
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL").bind(table).fetch_one(&pool).await;
    pool.close().await;
    exists.map_err(fail)
}

impl PgStore {
    /// Connects with a pool of at most `pool_max` connections and opens the segment table,
    /// creating it when absent as `create_tables=` allows ([`CreateTables`]).
    pub async fn connect(url: &SqlUrl) -> Result<PgStore, StoreError> {
        PgStore::connect_for(url, true).await
    }

    /// Connects without looking at the segment table: for worker ids and sequences, whose
    /// own tables are opened when first used.
    pub(crate) async fn connect_without_segments(url: &SqlUrl) -> Result<PgStore, StoreError> {
        PgStore::connect_for(url, false).await
    }

    async fn connect_for(url: &SqlUrl, segments: bool) -> Result<PgStore, StoreError> {
        let secret = password(url.driver_url()).filter(|p| !p.is_empty()).map(Arc::from);
        let pool_max = url.options.pool_max;
        let pool = pool_options(pool_max, PG_ACQUIRE_TIMEOUT_MS, PG_IDLE_PING_AFTER_MS)
            .connect(url.driver_url())
            .await
            .map_err(|e| {
                let reason = format!("PostgreSQL: cannot connect to {}: {e}", url.redacted());
                StoreError::Unavailable(scrub(&reason, secret.as_deref()))
            })?;
        PgStore::open(pool, url.options.clone(), url.redacted(), secret, segments).await
    }

    /// Serves the table of `options` through an application's existing pool, creating it when
    /// absent. The pool's own bound applies; `options.pool_max` is not used.
    pub async fn from_pool(pool: PgPool, options: SqlOptions) -> Result<PgStore, StoreError> {
        let connect = pool.connect_options();
        let location = format!(
            "postgres://{}@{}:{}/{}",
            connect.get_username(),
            connect.get_host(),
            connect.get_port(),
            connect.get_database().unwrap_or("")
        );
        PgStore::open(pool, options, location, None, true).await
    }

    async fn open(
        pool: PgPool,
        options: SqlOptions,
        location: String,
        secret: Option<Arc<str>>,
        segments: bool,
    ) -> Result<PgStore, StoreError> {
        let mut store = PgStore {
            pool,
            sql: Arc::new(Statements::new(&options, TimeColumn::Absent)),
            cas_locks: Arc::new(CasLocks::new()),
            options,
            location,
            secret,
        };
        if segments {
            let time_column = store.ensure_table().await?;
            store.sql = Arc::new(Statements::new(&store.options, time_column));
        }
        Ok(store)
    }

    /// Creates the table when absent (never altering one that exists) and learns the type of
    /// its `update_time` column. Serialized with other nodes by an advisory lock, so two nodes
    /// starting on an empty database do not race to create it.
    async fn ensure_table(&self) -> Result<TimeColumn, StoreError> {
        let table = self.options.table.as_str();
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        self.lock(&mut tx).await?;
        // Checked first: a Leaf user may lack the right to create tables, and PostgreSQL
        // checks that right even for `CREATE TABLE IF NOT EXISTS` of an existing table.
        if !self.has_table(&mut tx, table).await? {
            self.create_segment_table(&mut tx).await?;
        }
        let time_type: Option<String> = sqlx::query_scalar(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute \
             WHERE attrelid = to_regclass($1) AND attname = 'update_time' \
             AND attnum > 0 AND NOT attisdropped",
        )
        .bind(table)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.unavailable(e))?;
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(TimeColumn::of(time_type.as_deref()))
    }

    /// Creates the absent segment table in `tx` (which holds the table's lock), unless the
    /// database holds another Leaf-shaped table (a mistyped `table=`) and creating was not
    /// asked for, or `create_tables=false`.
    async fn create_segment_table(
        &self,
        tx: &mut sqlx::PgTransaction<'_>,
    ) -> Result<(), StoreError> {
        let table = self.options.table.as_str();
        if self.options.create_tables != CreateTables::Always {
            let leaf: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT table_name::text FROM information_schema.columns \
                 WHERE table_schema = ANY (current_schemas(false)) \
                 AND column_name IN ('biz_tag', 'max_id', 'step') \
                 GROUP BY table_schema, table_name HAVING count(DISTINCT column_name) = 3 \
                 ORDER BY table_name LIMIT {LEAF_TABLES_SHOWN_MAX}"
            )))
            .fetch_all(&mut **tx)
            .await
            .map_err(|e| self.refused(FEATURE_SEGMENTS, None, e))?;
            if !leaf.is_empty() {
                let store = format!("{} (table {table})", self.location);
                return Err(leaf_table_beside(store, table, &leaf));
            }
        }
        if !self.options.create_tables.allowed() {
            return Err(StoreError::MissingTable {
                feature: FEATURE_SEGMENTS.to_string(),
                table: table.to_string(),
            });
        }
        sqlx::query(AssertSqlSafe(segment_ddl(table)))
            .execute(&mut **tx)
            .await
            .map_err(|e| self.refused(FEATURE_SEGMENTS, Some("CREATE on the schema"), e))?;
        tracing::info!(table, store = %self.location, "created the segment table");
        Ok(())
    }

    /// Creates the tombstone table when absent, as the first tag deletion needs it.
    async fn ensure_tombstones(&self) -> Result<(), StoreError> {
        let tables = [(TOMBSTONES_TABLE, tombstones_ddl())];
        self.create_tables(TOMBSTONES_TABLE, &tables, FEATURE_DELETE).await
    }

    /// Whether `table` exists (`to_regclass`: the search path applies), asked in `tx`.
    async fn has_table(
        &self,
        tx: &mut sqlx::PgTransaction<'_>,
        table: &str,
    ) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(table)
            .fetch_one(&mut **tx)
            .await
            .map_err(|e| self.unavailable(e))
    }

    /// The tombstone of `tag` in this table, read in `tx`; none while the tombstone table
    /// does not exist (no tag was ever deleted).
    async fn select_tombstone(
        &self,
        tx: &mut sqlx::PgTransaction<'_>,
        tag: &Tag,
        feature: &str,
    ) -> Result<Option<u64>, StoreError> {
        if !self.has_table(tx, TOMBSTONES_TABLE).await? {
            return Ok(None);
        }
        let tomb: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT max_id FROM {TOMBSTONES_TABLE} WHERE segment_table = $1 AND biz_tag = $2"
        )))
        .bind(self.options.table.as_str())
        .bind(tag.as_str())
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| self.refused(feature, Some(&format!("SELECT on {TOMBSTONES_TABLE}")), e))?;
        Ok(tomb.map(|t| u64::try_from(t).unwrap_or(0)))
    }

    /// Takes the table's advisory lock until the end of the transaction.
    async fn lock(&self, tx: &mut sqlx::PgTransaction<'_>) -> Result<(), StoreError> {
        // PostgreSQL folds unquoted names to lower case; so does the key.
        let key = self.options.table.as_str().to_ascii_lowercase();
        advisory_lock(tx, &key).await.map_err(|e| self.unavailable(e))
    }

    /// `alloc=update`: one atomic statement, which also returns the row as it was when it
    /// refused it, or nothing when there is no row: one statement, one transaction, for an
    /// unknown tag too.
    async fn allocate_by_update(
        &self,
        tag: &Tag,
        step: Option<Step>,
    ) -> Result<Allocation, StoreError> {
        // 0 lets the row's step win in GREATEST; rows with a step below 1 are refused by the
        // WHERE clause, so 0 is never the effective step.
        let requested = step.map_or(0, |s| s.get() as i64);
        for _ in 0..UPDATE_ATTEMPTS_MAX {
            let answer: Option<(bool, Option<i64>, Option<i64>)> =
                sqlx::query_as(AssertSqlSafe(Arc::clone(&self.sql.allocate)))
                    .bind(tag.as_str())
                    .bind(requested)
                    .bind(ID_MAX as i64)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(|e| self.unavailable(e))?;
            let Some((moved, max_id, tag_step)) = answer else {
                return Err(StoreError::TagNotFound(tag.clone()));
            };
            if moved && let (Some(max_id), Some(tag_step)) = (max_id, tag_step) {
                return allocated_range(tag, max_id, tag_step, step);
            }
            // Refused: the row as the statement saw it says why. If it has room, another
            // writer changed it in between (the update waited for it, then skipped it).
            plan(tag, max_id, tag_step, step)?;
        }
        Err(contended(tag, UPDATE_ATTEMPTS_MAX))
    }

    /// `alloc=cas`: read the row, then write the new `max_id` as a constant if neither
    /// `max_id` nor `step` moved meanwhile; a lost round pauses a random while and retries.
    async fn allocate_by_cas(
        &self,
        tag: &Tag,
        step: Option<Step>,
    ) -> Result<Allocation, StoreError> {
        let _queued = self.cas_locks.queue(tag).await;
        for attempt in 0..CAS_ATTEMPTS_MAX {
            let Some((max_id, tag_step)) = self.read_counters(tag).await? else {
                return Err(StoreError::TagNotFound(tag.clone()));
            };
            let (old, new, tag_step) = plan(tag, max_id, tag_step, step)?;
            let applied = sqlx::query(AssertSqlSafe(Arc::clone(&self.sql.cas_allocate)))
                .bind(new)
                .bind(tag.as_str())
                .bind(old)
                .bind(tag_step)
                .execute(&self.pool)
                .await
                .map_err(|e| self.unavailable(e))?
                .rows_affected();
            if applied == 1 {
                return allocated_range(tag, new, tag_step, step);
            }
            tokio::time::sleep(cas_backoff(attempt)).await;
        }
        Err(contended(tag, CAS_ATTEMPTS_MAX))
    }

    /// `max_id := new` on the row of `tag` if it still holds `expected`, on `executor`:
    /// whether a row matched. A row holds an i64, so an `expected` beyond it matches none.
    async fn set_max_id<'c>(
        &self,
        executor: impl sqlx::PgExecutor<'c>,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        let Ok(expected) = i64::try_from(expected) else { return Ok(false) };
        let applied = sqlx::query(AssertSqlSafe(Arc::clone(&self.sql.compare_and_set)))
            .bind(tag.as_str())
            .bind(expected)
            // In range: check_new_max_id bounds `new` by ID_MAX == i64::MAX.
            .bind(new as i64)
            .execute(executor)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(applied.rows_affected() > 0)
    }

    /// The row's `max_id` and `step` as stored (either may be NULL in a Leaf table).
    async fn read_counters(
        &self,
        tag: &Tag,
    ) -> Result<Option<(Option<i64>, Option<i64>)>, StoreError> {
        sqlx::query_as(AssertSqlSafe(Arc::clone(&self.sql.select_counters)))
            .bind(tag.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))
    }

    async fn select_row(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        let row: Option<TagColumns> =
            sqlx::query_as(AssertSqlSafe(Arc::clone(&self.sql.select_row)))
                .bind(tag.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.unavailable(e))?;
        row.map(stored_tag).transpose()
    }

    /// One transaction under the creators' lock: the row goes and its tombstone comes, or
    /// neither; a create of this name waits for it. `Ok(false)`, nothing changed, when the
    /// tombstone table does not exist yet.
    async fn delete_once(&self, tag: &Tag) -> Result<bool, StoreError> {
        let t = self.options.table.as_str();
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        self.lock(&mut tx).await?;
        if !self.has_table(&mut tx, TOMBSTONES_TABLE).await? {
            let row = sqlx::query(AssertSqlSafe(Arc::clone(&self.sql.select_counters)))
                .bind(tag.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| self.refused(FEATURE_DELETE, None, e))?;
            // Dropping the transaction rolls it back: nothing changed.
            return match row {
                None => Err(StoreError::TagNotFound(tag.clone())),
                Some(_) => Ok(false),
            };
        }
        let max_id: Option<i64> = sqlx::query_scalar(AssertSqlSafe(Arc::clone(&self.sql.delete)))
            .bind(tag.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.refused(FEATURE_DELETE, Some(&format!("DELETE on {t}")), e))?;
        // Dropping the transaction rolls it back.
        let Some(max_id) = max_id else { return Err(StoreError::TagNotFound(tag.clone())) };
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {TOMBSTONES_TABLE} (segment_table, biz_tag, max_id, update_time) \
             VALUES ($1, $2, $3, now()) ON CONFLICT (segment_table, biz_tag) DO UPDATE SET \
             max_id = GREATEST({TOMBSTONES_TABLE}.max_id, EXCLUDED.max_id), update_time = now()"
        )))
        .bind(t)
        .bind(tag.as_str())
        .bind(max_id.max(0))
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            let needs = format!("SELECT, INSERT, UPDATE on {TOMBSTONES_TABLE}");
            self.refused(FEATURE_DELETE, Some(&needs), e)
        })?;
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(true)
    }

    /// `e` as the refusal of the privilege `needs` (`INSERT on leaf_alloc`) that `feature`
    /// needs, or as unavailable, its text scrubbed of the password. PostgreSQL names the
    /// table, not the privilege.
    fn refused(&self, feature: &str, needs: Option<&str>, e: sqlx::Error) -> StoreError {
        let secret = self.secret.as_deref();
        denied(&e, feature, needs, secret)
            .unwrap_or_else(|| StoreError::Unavailable(scrub(&format!("PostgreSQL: {e}"), secret)))
    }
}

#[async_trait]
impl RangeStore for PgStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        match self.options.alloc {
            AllocMode::Update => self.allocate_by_update(tag, step).await,
            AllocMode::Cas => self.allocate_by_cas(tag, step).await,
        }
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        check_new_max_id(new)?;
        if self.set_max_id(&self.pool, tag, expected, new).await? {
            return Ok(true);
        }
        match self.read_counters(tag).await? {
            Some(_) => Ok(false),
            None => Err(StoreError::TagNotFound(tag.clone())),
        }
    }

    async fn compare_and_set_max_ids(
        &self,
        changes: &[MaxIdChange],
    ) -> Result<Vec<bool>, StoreError> {
        // One transaction: a batch costs one commit, not one per row.
        let order = crate::batch_order(changes)?;
        let mut applied = vec![false; changes.len()];
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        for index in order {
            let MaxIdChange { tag, expected, new } = &changes[index];
            applied[index] = self.set_max_id(&mut *tx, tag, *expected, *new).await?;
        }
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(applied)
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.select_row(tag).await
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        let rows: Vec<TagColumns> = sqlx::query_as(AssertSqlSafe(Arc::clone(&self.sql.list)))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(servable_rows(rows.into_iter().map(stored_tag), "row"))
    }

    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        let tomb = self.select_tombstone(&mut tx, tag, FEATURE_CREATE).await?;
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(tomb)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Through the table, so a dropped table or a revoked grant shows here too.
        sqlx::query(AssertSqlSafe(Arc::clone(&self.sql.ping)))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(())
    }

    fn describe(&self) -> String {
        format!("{} (table {})", self.location, self.options.table)
    }
}

#[async_trait]
impl SegmentStore for PgStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        // Without the lock, two creates could both count TAG_COUNT_MAX - 1 rows and insert.
        self.lock(&mut tx).await?;
        let count: i64 = sqlx::query_scalar(AssertSqlSafe(Arc::clone(&self.sql.count)))
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| self.unavailable(e))?;
        if count >= TAG_COUNT_MAX as i64 {
            return Err(StoreError::TooManyTags);
        }
        // Under the advisory lock, which deletes take too: no tombstone is written meanwhile.
        let tomb = self.select_tombstone(&mut tx, &spec.tag, FEATURE_CREATE).await?;
        let max_id = initial_max_id(spec, tomb)?;
        let inserted: Option<TagColumns> =
            sqlx::query_as(AssertSqlSafe(Arc::clone(&self.sql.insert)))
                .bind(spec.tag.as_str())
                // At most ID_MAX == i64::MAX: a tombstone is a row's max_id.
                .bind(max_id as i64)
                .bind(spec.step.get() as i64)
                .bind(spec.description.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| {
                    let needs = format!("INSERT on {}", self.options.table);
                    self.refused(FEATURE_CREATE, Some(&needs), e)
                })?;
        let record = match inserted {
            Some(row) => stored_tag(row)?,
            None => return Err(StoreError::TagExists(spec.tag.clone())),
        };
        tx.commit().await.map_err(|e| self.unavailable(e))?;
        Ok(record)
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        let updated: Option<TagColumns> =
            sqlx::query_as(AssertSqlSafe(Arc::clone(&self.sql.set_step)))
                .bind(tag.as_str())
                .bind(step.get() as i64)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| self.unavailable(e))?;
        updated.map_or_else(|| Err(StoreError::TagNotFound(tag.clone())), stored_tag)
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        if self.delete_once(tag).await? {
            return Ok(());
        }
        // The first deletion: the tombstone table is made, then the delete runs again.
        self.ensure_tombstones().await?;
        if self.delete_once(tag).await? {
            return Ok(());
        }
        Err(StoreError::Unavailable(format!(
            "PostgreSQL: table {TOMBSTONES_TABLE} vanished while tag {tag} was deleted; retry"
        )))
    }
}

impl Dialect for PgStore {
    const NUMBERED: bool = true;

    fn int(expr: &str) -> String {
        expr.to_string()
    }

    fn text(expr: &str) -> String {
        format!("{expr}::text")
    }

    fn byte_order(expr: &str) -> String {
        format!("{expr} COLLATE \"C\"")
    }

    fn equal_bytes(expr: &str) -> String {
        format!("{expr} = ?")
    }

    fn on_conflict_nothing(columns: &str) -> String {
        format!(" ON CONFLICT ({columns}) DO NOTHING")
    }

    fn returning(columns: &str) -> String {
        format!(" RETURNING {columns}")
    }

    fn is_no_table(e: &sqlx::Error) -> bool {
        let sqlx::Error::Database(db) = e else { return false };
        db.code().as_deref() == Some(SQLSTATE_UNDEFINED_TABLE)
    }

    fn unavailable(&self, e: sqlx::Error) -> StoreError {
        self.refused(ANY_FEATURE, None, e)
    }

    /// In a transaction of its own under the advisory lock of `key` (`IF NOT EXISTS` alone
    /// races), each table checked first, as the segment table is: PostgreSQL checks the right
    /// to create even for `CREATE TABLE IF NOT EXISTS` of an existing table.
    async fn create_tables(
        &self,
        key: &str,
        tables: &[(&str, String)],
        feature: &str,
    ) -> Result<(), StoreError> {
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        advisory_lock(&mut tx, key).await.map_err(|e| self.unavailable(e))?;
        for (table, ddl) in tables {
            if self.has_table(&mut tx, table).await? {
                continue;
            }
            if !self.options.create_tables.allowed() {
                return Err(StoreError::MissingTable {
                    feature: feature.to_string(),
                    table: table.to_string(),
                });
            }
            sqlx::query(AssertSqlSafe(ddl.clone()))
                .execute(&mut *tx)
                .await
                .map_err(|e| self.refused(feature, Some("CREATE on the schema"), e))?;
            tracing::info!(table, store = %self.location, "created a table for {feature}");
        }
        tx.commit().await.map_err(|e| self.unavailable(e))
    }
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not derived: the pool's connect options hold the password.
        f.debug_struct("PgStore")
            .field("location", &self.location)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The type of the table's `update_time` column, which decides how it is read and stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimeColumn {
    /// `timestamp` (idmint's and Leaf's): stamped with UTC wall time.
    Timestamp,
    /// `timestamptz`.
    TimestampTz,
    /// An integer column holding Unix seconds.
    Seconds,
    /// Absent or of another type: read as 0, never stamped.
    Absent,
}

impl TimeColumn {
    fn of(format_type: Option<&str>) -> TimeColumn {
        match format_type {
            Some("timestamp without time zone") => TimeColumn::Timestamp,
            Some("timestamp with time zone") => TimeColumn::TimestampTz,
            Some("bigint" | "integer") => TimeColumn::Seconds,
            _ => TimeColumn::Absent,
        }
    }

    /// The expression reading it as Unix seconds (`int8`).
    fn read(self) -> &'static str {
        match self {
            TimeColumn::Timestamp | TimeColumn::TimestampTz => {
                "extract(epoch FROM update_time)::int8"
            }
            TimeColumn::Seconds => "update_time::int8",
            TimeColumn::Absent => "NULL::int8",
        }
    }

    /// The value stamped on a write, if any.
    fn stamp(self) -> Option<&'static str> {
        match self {
            TimeColumn::Timestamp => Some("(now() AT TIME ZONE 'UTC')"),
            TimeColumn::TimestampTz => Some("now()"),
            TimeColumn::Seconds => Some("extract(epoch FROM now())::int8"),
            TimeColumn::Absent => None,
        }
    }
}

/// Every statement the store runs, written once per store. The table name is a validated
/// identifier (`TableName`), the only text inlined; every value is a bind parameter.
struct Statements {
    allocate: Arc<str>,
    select_counters: Arc<str>,
    cas_allocate: Arc<str>,
    compare_and_set: Arc<str>,
    count: Arc<str>,
    insert: Arc<str>,
    select_row: Arc<str>,
    list: Arc<str>,
    set_step: Arc<str>,
    delete: Arc<str>,
    ping: Arc<str>,
}

impl Statements {
    fn new(options: &SqlOptions, time: TimeColumn) -> Statements {
        let t = options.table.as_str();
        // Cast on read, so a foreign table with other integer or text types still decodes.
        let columns =
            format!("biz_tag::text, max_id::int8, step::int8, description::text, {}", time.read());
        let stamp = time.stamp().map_or(String::new(), |now| format!(", update_time = {now}"));
        let (time_column, time_value) =
            time.stamp().map_or((String::new(), String::new()), |now| {
                (", update_time".to_string(), format!(", {now}"))
            });
        let sql = |s: String| Arc::<str>::from(s);
        Statements {
            // Both operands of `$3 - GREATEST(…)` are at least 0 ($2 is), so it cannot
            // overflow, and `max_id + GREATEST(…)` is computed only for rows it bounds.
            // `(moved, max_id, step)`: the updated row, or the row it refused (read in the
            // statement's snapshot), or no row when there is none.
            allocate: sql(format!(
                "WITH moved AS (UPDATE {t} \
                 SET max_id = max_id + GREATEST(step::int8, $2::int8){stamp} \
                 WHERE biz_tag = $1 AND step >= 1 AND max_id >= 0 \
                 AND max_id <= $3::int8 - GREATEST(step::int8, $2::int8) \
                 RETURNING max_id::int8 AS max_id, step::int8 AS step) \
                 SELECT true, max_id, step FROM moved \
                 UNION ALL SELECT false, max_id::int8, step::int8 FROM {t} \
                 WHERE biz_tag = $1 AND NOT EXISTS (SELECT 1 FROM moved)"
            )),
            select_counters: sql(format!(
                "SELECT max_id::int8, step::int8 FROM {t} WHERE biz_tag = $1"
            )),
            cas_allocate: sql(format!(
                "UPDATE {t} SET max_id = $1{stamp} \
                 WHERE biz_tag = $2 AND max_id = $3 AND step = $4"
            )),
            compare_and_set: sql(format!(
                "UPDATE {t} SET max_id = $3{stamp} WHERE biz_tag = $1 AND max_id = $2"
            )),
            count: sql(format!("SELECT count(*) FROM {t}")),
            insert: sql(format!(
                "INSERT INTO {t} (biz_tag, max_id, step, description{time_column}) \
                 VALUES ($1, $2, $3, $4{time_value}) \
                 ON CONFLICT (biz_tag) DO NOTHING RETURNING {columns}"
            )),
            select_row: sql(format!("SELECT {columns} FROM {t} WHERE biz_tag = $1")),
            // Byte order, as `Tag` orders, whatever the database's collation.
            list: sql(format!(
                "SELECT {columns} FROM {t} ORDER BY biz_tag COLLATE \"C\" LIMIT {TAG_COUNT_MAX}"
            )),
            set_step: sql(format!(
                "UPDATE {t} SET step = $2{stamp} WHERE biz_tag = $1 RETURNING {columns}"
            )),
            delete: sql(format!("DELETE FROM {t} WHERE biz_tag = $1 RETURNING max_id::bigint")),
            ping: sql(format!("SELECT 1 FROM {t} LIMIT 1")),
        }
    }
}

/// What an allocation of a row holding `max_id` and `step` advances it to:
/// `(old max_id, new max_id, row step)`; refuses a row idmint cannot serve and an allocation
/// that would pass `ID_MAX`.
fn plan(
    tag: &Tag,
    max_id: Option<i64>,
    step: Option<i64>,
    requested: Option<Step>,
) -> Result<(i64, i64, i64), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { tag: tag.to_string(), reason };
    let old = match max_id {
        Some(max_id) if max_id >= 0 => max_id,
        Some(max_id) => return Err(corrupt(format!("max_id is negative ({max_id})"))),
        None => return Err(corrupt("max_id is NULL".to_string())),
    };
    let tag_step = match step {
        Some(step) if step >= 1 => step,
        Some(step) => return Err(corrupt(format!("step is {step}; it must be at least 1"))),
        None => return Err(corrupt("step is NULL".to_string())),
    };
    // Both non-negative i64, so neither the conversions nor the sum can overflow a u64.
    let effective = effective_step(tag_step as u64, requested);
    let new = old as u64 + effective;
    if new > ID_MAX {
        return Err(StoreError::Exhausted {
            tag: tag.clone(),
            max_id: old as u64,
            step: effective,
        });
    }
    Ok((old, new as i64, tag_step))
}

fn contended(tag: &Tag, attempts: u32) -> StoreError {
    StoreError::Unavailable(format!(
        "PostgreSQL: allocation of tag {tag} contended: {attempts} attempts lost to other \
         writers of the row; retry"
    ))
}

/// The segment table's DDL: Leaf's columns in PostgreSQL types.
pub(crate) fn segment_ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (
    biz_tag     varchar(128) NOT NULL PRIMARY KEY,
    max_id      bigint       NOT NULL DEFAULT 1,
    step        integer      NOT NULL,
    description varchar(256),
    update_time timestamp    NOT NULL DEFAULT now()
)"
    )
}

/// The tombstone table's DDL, shared by every segment table of the database.
pub(crate) fn tombstones_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TOMBSTONES_TABLE} (
    segment_table varchar(64)  NOT NULL,
    biz_tag       varchar(128) NOT NULL,
    max_id        bigint       NOT NULL,
    update_time   timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (segment_table, biz_tag)
)"
    )
}

/// Takes the advisory lock of `key` (a table's name) until the end of `tx`: table setup and
/// tag or sequence creation, one node at a time.
pub(crate) async fn advisory_lock(
    tx: &mut sqlx::PgTransaction<'_>,
    key: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(ADVISORY_LOCK_CLASS)
        .bind(key)
        .execute(&mut **tx)
        .await
        .map(drop)
}
