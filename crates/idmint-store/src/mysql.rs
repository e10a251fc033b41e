//! The MySQL / MariaDB backend (feature `mysql`): Meituan Leaf's `leaf_alloc` table, under a
//! configurable name, reached through a bounded sqlx pool.
//!
//! Allocation has two modes ([`AllocMode`]). `update`, the default, is Leaf's own
//! `UPDATE … SET max_id = LAST_INSERT_ID(max_id + step)`. Once the store has seen a tag's
//! step, that `UPDATE` is sent alone, matching the row only while its step is still the one
//! seen: the server's OK packet carries the new `max_id` and the rows matched, so the
//! allocation is one statement, as Leaf's is, with no `SELECT` for the server to run. A
//! tag's first allocation, and one whose `UPDATE` matched no row (the step changed, or the
//! row is refused), send it with the `SELECT` that reads its result and the row as one
//! multi-statement text query, which explains a refusal; a refusal of a tag whose step was
//! seen therefore costs one more round trip. sqlx pings every connection as it goes back to
//! its pool (the driver's, and not configurable), so the single statement's connection is
//! kept checked out for the next one instead ([`Parked`]), once its answer was read. `cas`
//! reads the row, then writes `max_id` with a plain compare-and-set, retried a bounded number
//! of times: for proxies and databases that forbid expressions in updates.
//!
//! The table idmint creates compares tags byte for byte, as every other backend does. A Leaf
//! table with the server's usual case-insensitive collation is served as it is: there, tags
//! that differ only in case share one row, as they do for Leaf.
//!
//! Tables are created when a feature first needs them, as `create_tables=` allows
//! ([`CreateTables`]): the segment table at start (not beside another Leaf-shaped table,
//! which a mistyped `table=` would hide, and in a Tinyid database only when a tag is first
//! created; until then it serves as if empty), the tombstone table at the first tag deletion.
//! An account with Leaf's own grants (`SELECT, UPDATE` on the segment table) serves segments;
//! a feature that needs more is refused naming the privilege ([`StoreError::Denied`]).
//!
//! It must not alter an existing table (only create one when absent), spawn tasks of its own
//! (the driver's pool keeps its own), close a pool it did not open, or show a password in an
//! error or a log line.
//!
//! Worker-id leases and assignments ([`WorkerStore`](crate::WorkerStore)), sequence
//! definitions and ceilings ([`SequenceStore`](crate::SequenceStore)) and tag metadata
//! ([`TagMetaStore`](crate::TagMetaStore)) are written once for both database backends, in
//! `sql/`, over this backend's [`Dialect`]; what is this backend's own (its tables' DDL, its
//! clock, the steps whose flow differs) is in `mysql/workers.rs`, `mysql/sequences.rs` and
//! `mysql/meta.rs`.

mod meta;
mod sequences;
mod workers;

pub(crate) use meta::meta_ddl;
pub(crate) use sequences::{ceilings_ddl, sequences_ddl};
pub(crate) use workers::{worker_node_ddl, workers_ddl};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};
use idmint_core::{Step, Tag};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, MySql, MySqlPool, Row};

use crate::sql::{
    ANY_FEATURE, CAS_ATTEMPTS_MAX, CasLocks, Dialect, FEATURE_CREATE, FEATURE_DELETE,
    FEATURE_SEGMENTS, LEAF_TABLES_SHOWN_MAX, TxConn, cas_backoff, denied, leaf_table_beside,
    password, scrub,
};
use crate::{
    AllocMode, Allocation, CreateTables, MaxIdChange, RangeStore, SegmentStore, SqlOptions, SqlUrl,
    StoreError, TOMBSTONES_TABLE, TagColumns, TagRecord, TagSpec, allocated_range,
    check_new_max_id, effective_step, initial_max_id, servable_rows, stored_tag,
};

/// How long a call waits for a pooled connection (or for a new one to open) before failing as
/// unavailable. Also bounds [`MySqlStore::connect`].
pub const MYSQL_ACQUIRE_TIMEOUT_MS: u64 = 3_000;
/// A pooled connection idle for longer than this is pinged before use, so a connection the
/// server or a proxy dropped meanwhile is replaced rather than failing a call. Busier
/// connections are not: that ping would be a second round trip on every allocation's path.
pub const MYSQL_IDLE_PING_AFTER_MS: u64 = 10_000;
/// Connections at most kept checked out between single-statement allocations
/// ([`Parked`]); never more than half the pool, so other calls always find connections.
pub const MYSQL_PARKED_CONNECTIONS_MAX: usize = 4;
/// A parked connection unused for longer goes back to the pool (through sqlx's release
/// ping) when next seen, rather than serve an allocation.
pub const MYSQL_PARKED_MS_MAX: u64 = 1_000;
/// How long `create_tag` waits for another node's `create_tag` on the same table.
pub const CREATE_LOCK_WAIT_S: u64 = 5;

const _: () = assert!(CREATE_LOCK_WAIT_S * 1_000 < 60_000);
// A parked connection is never old enough to need the pool's idle ping.
const _: () = assert!(MYSQL_PARKED_MS_MAX < MYSQL_IDLE_PING_AFTER_MS);

/// A segment table in a MySQL or MariaDB database.
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    alloc: AllocMode,
    table: String,
    /// The worker-id lease table (`workers_table=`).
    pub(crate) workers_table: String,
    /// The worker-id assignment table (`worker_node_table=`).
    pub(crate) worker_node_table: String,
    sql: Arc<Statements>,
    /// The character set of the table's `biz_tag` (a Leaf table may be `utf8`).
    tag_charset: TagCharset,
    /// Queues this store's `cas` allocations per tag.
    cas_locks: Arc<CasLocks>,
    /// Where the store lives, for logs: no password.
    location: String,
    /// Whether this node may create tables (`create_tables=`).
    pub(crate) create_tables: CreateTables,
    /// Set while the segment table is absent from a Tinyid database: the store then serves
    /// as if empty, checking again on each call, until a tag is created (here or elsewhere).
    absent: Arc<AtomicBool>,
    /// The step each tag's last allocation found, for the single-statement allocation.
    known_steps: Arc<KnownSteps>,
    /// Connections kept for the next single-statement allocation.
    parked: Arc<Parked>,
}

/// Connections kept checked out between single-statement allocations, so the next one
/// skips the pool: sqlx pings every connection that goes back to its pool, a second round
/// trip and as much server work again per allocation. Only a connection whose statement ran
/// to completion, its answer read, is parked; one whose call failed, or whose future was
/// dropped mid-call, is dropped as any pooled connection is, and sqlx's release ping checks
/// or closes it. Bounded by [`MYSQL_PARKED_CONNECTIONS_MAX`] and half the pool; a connection
/// parked past [`MYSQL_PARKED_MS_MAX`] goes back to the pool when next seen. Not used with an
/// application's pool ([`MySqlStore::from_pool`]), whose `close` waits for every connection
/// checked out.
#[derive(Debug)]
struct Parked {
    /// Oldest first.
    connections: Mutex<Vec<(PoolConnection<MySql>, std::time::Instant)>>,
    max: usize,
}

impl Parked {
    /// Keeps at most `max` connections (0: none).
    fn new(max: usize) -> Parked {
        Parked { connections: Mutex::new(Vec::with_capacity(max)), max }
    }

    /// The most recently parked connection, unless it waited past [`MYSQL_PARKED_MS_MAX`]:
    /// then it and every older one go back to the pool.
    fn take(&self) -> Option<PoolConnection<MySql>> {
        let stale = {
            let mut connections = self.lock();
            let (conn, parked_at) = connections.pop()?;
            if parked_at.elapsed() < Duration::from_millis(MYSQL_PARKED_MS_MAX) {
                return Some(conn);
            }
            let mut stale = std::mem::take(&mut *connections);
            stale.push((conn, parked_at));
            stale
        };
        // Dropped outside the lock: each goes back to the pool through sqlx's release.
        drop(stale);
        None
    }

    /// Parks `conn`, whose last statement ran to completion; back to the pool when full.
    fn park(&self, conn: PoolConnection<MySql>) {
        let mut connections = self.lock();
        if connections.len() < self.max {
            connections.push((conn, std::time::Instant::now()));
            return;
        }
        drop(connections);
        drop(conn);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(PoolConnection<MySql>, std::time::Instant)>> {
        // Each connection parked is whole whatever panicked elsewhere.
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // A pooled connection's release needs a Tokio runtime; a store dropped outside one
        // closes its parked connections instead (the pool opens others when it needs them).
        if tokio::runtime::Handle::try_current().is_err() {
            let connections = self.connections.get_mut().unwrap_or_else(PoisonError::into_inner);
            for (conn, _) in connections.drain(..) {
                drop(conn.detach());
            }
        }
    }
}

/// The step each tag had at its last allocation through this store. Only a hint: the
/// allocation that uses it matches the row only while its step is still this one.
#[derive(Debug, Default)]
struct KnownSteps(Mutex<HashMap<Tag, u64>>);

impl KnownSteps {
    fn get(&self, tag: &Tag) -> Option<u64> {
        self.lock().get(tag).copied()
    }

    fn insert(&self, tag: &Tag, step: u64) {
        let mut steps = self.lock();
        // Bounded by the tags a table may hold; past that (names deleted and created
        // again), start over: a forgotten step costs one full allocation.
        if steps.len() >= TAG_COUNT_MAX && !steps.contains_key(tag) {
            steps.clear();
        }
        steps.insert(tag.clone(), step);
    }

    fn remove(&self, tag: &Tag) {
        self.lock().remove(tag);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Tag, u64>> {
        // A map of hints: one poisoned by a panic elsewhere is still a map of hints.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Tinyid's own table, by which a Tinyid database is known.
const TINYID_INFO: &str = "tiny_id_info";

/// The row of one tag, exactly: the indexed comparison in the column's collation, then the
/// bytes (a Leaf table's case-insensitive collation would match `Order` to the row `order`,
/// and a PAD SPACE one `order ` too). Binds the tag twice.
const EXACT: &str = "biz_tag = ? AND CAST(biz_tag AS BINARY) = CAST(? AS BINARY)";

/// The row as idmint reads it ([`TagColumns`]): every number cast to a signed 64-bit integer
/// (whatever the column's integer type) and the time as Unix seconds, so a Leaf table with
/// other column types or NULLs still reads.
const COLUMNS: &str = "biz_tag, CAST(max_id AS SIGNED), CAST(step AS SIGNED), description, \
                       CAST(UNIX_TIMESTAMP(update_time) AS SIGNED)";

impl MySqlStore {
    /// Opens a bounded pool (`pool_max` connections) to the database `url` names and opens
    /// the segment table: an existing table is used as it is, an absent one created as
    /// `create_tables=` allows ([`CreateTables`]).
    pub async fn connect(url: &SqlUrl) -> Result<MySqlStore, StoreError> {
        MySqlStore::connect_for(url, true).await
    }

    /// Opens the pool without looking at the segment table: for worker ids and sequences,
    /// whose own tables are opened when first used.
    pub(crate) async fn connect_without_segments(url: &SqlUrl) -> Result<MySqlStore, StoreError> {
        MySqlStore::connect_for(url, false).await
    }

    async fn connect_for(url: &SqlUrl, segments: bool) -> Result<MySqlStore, StoreError> {
        let redacted = url.redacted();
        let options = connect_options(url)?;
        let pool_max = url.options.pool_max;
        let pool = pool_options(pool_max).connect_with(options).await.map_err(|e| {
            let reason = match e {
                sqlx::Error::PoolTimedOut => format!(
                    "no connection within {MYSQL_ACQUIRE_TIMEOUT_MS} ms (is the server up \
                         and listening there?)"
                ),
                e => e.to_string(),
            };
            StoreError::Unavailable(scrub(
                &format!("MySQL: cannot connect to {redacted}: {reason}"),
                password(url.driver_url()),
            ))
        })?;
        let location = with_table(&redacted, url.options.table.as_str());
        let parked = MYSQL_PARKED_CONNECTIONS_MAX.min(pool_max as usize / 2);
        MySqlStore::with_pool(pool, &url.options, location, segments, parked).await
    }

    /// Serves the table named in `options` through an application's existing pool, creating
    /// the table when absent. `options.pool_max` is ignored: the pool keeps its own bound and
    /// settings (with sqlx's default `test_before_acquire`, each allocation waits for a ping
    /// first). The pool is never closed by the store.
    pub async fn from_pool(pool: MySqlPool, options: SqlOptions) -> Result<MySqlStore, StoreError> {
        let connect = pool.connect_options();
        let host = match connect.get_socket() {
            Some(socket) => format!("localhost?socket={}", socket.display()),
            None => format!("{}:{}", connect.get_host(), connect.get_port()),
        };
        let location = format!(
            "mysql://{}@{host}/{}",
            connect.get_username(),
            connect.get_database().unwrap_or_default()
        );
        let location = with_table(&location, options.table.as_str());
        MySqlStore::with_pool(pool, &options, location, true, 0).await
    }

    async fn with_pool(
        pool: MySqlPool,
        options: &SqlOptions,
        location: String,
        segments: bool,
        parked: usize,
    ) -> Result<MySqlStore, StoreError> {
        let table = options.table.as_str().to_string();
        let mut store = MySqlStore {
            sql: Arc::new(Statements::new(&table)),
            tag_charset: TagCharset::utf8mb4(&table),
            cas_locks: Arc::new(CasLocks::new()),
            pool,
            alloc: options.alloc,
            table,
            workers_table: options.workers_table.as_str().to_string(),
            worker_node_table: options.worker_node_table.as_str().to_string(),
            location,
            create_tables: options.create_tables,
            absent: Arc::new(AtomicBool::new(false)),
            known_steps: Arc::new(KnownSteps::default()),
            parked: Arc::new(Parked::new(parked)),
        };
        if segments {
            let absent = store.open_segment_table().await?;
            store.absent.store(absent, Ordering::Release);
            store.tag_charset = TagCharset::of_column(&store.pool, &store.table, "biz_tag").await?;
        }
        Ok(store)
    }

    /// Opens the segment table: `Ok(true)` when it is absent from a Tinyid database and
    /// reads as empty until a tag is created. An absent table is created (never altered when
    /// present) unless the database holds another Leaf-shaped table (a mistyped `table=`
    /// would otherwise serve `unknown tag` to every Leaf client) or `create_tables=false`.
    async fn open_segment_table(&self) -> Result<bool, StoreError> {
        // Probing first lets an account without the CREATE privilege serve an existing table.
        if self.segment_table_exists().await? {
            return Ok(false);
        }
        let t = &self.table;
        if self.create_tables != CreateTables::Always {
            let leaf = leaf_tables(&self.pool).await?;
            if !leaf.is_empty() {
                return Err(leaf_table_beside(self.location.clone(), t, &leaf));
            }
            if table_in_database(&self.pool, TINYID_INFO).await? {
                tracing::info!(table = %t, store = %self.location, "a Tinyid database without the segment table: it is created when a tag is first created");
                return Ok(true);
            }
        }
        self.create_segment_table(FEATURE_SEGMENTS).await?;
        Ok(false)
    }

    /// Whether the segment table exists (a probe that reads it, so a missing grant shows).
    async fn segment_table_exists(&self) -> Result<bool, StoreError> {
        let probe = sqlx::query(sql(&self.sql.probe)).fetch_optional(&self.pool).await;
        match probe {
            Ok(_) => Ok(true),
            Err(e) if Self::is_no_table(&e) => Ok(false),
            Err(e) => Err(refused(FEATURE_SEGMENTS, e)),
        }
    }

    /// Creates the segment table for `feature`, or says why it may not.
    async fn create_segment_table(&self, feature: &str) -> Result<(), StoreError> {
        if !self.create_tables.allowed() {
            return Err(StoreError::MissingTable {
                feature: feature.to_string(),
                table: self.table.clone(),
            });
        }
        sqlx::raw_sql(sql(&self.sql.create_table))
            .execute(&self.pool)
            .await
            .map_err(|e| refused(feature, e))?;
        tracing::info!(table = %self.table, store = %self.location, "created the segment table");
        Ok(())
    }

    /// Whether the segment table is still absent from a Tinyid database: the call then
    /// answers as an empty table would. Checked again on each call until it is there.
    async fn absent(&self) -> Result<bool, StoreError> {
        if !self.absent.load(Ordering::Acquire) {
            return Ok(false);
        }
        let absent = !self.segment_table_exists().await?;
        if !absent {
            self.absent.store(false, Ordering::Release);
        }
        Ok(absent)
    }

    /// Creates idmint's tombstone table when absent, as the first tag deletion needs it
    /// (beside a Leaf table too); never alters one that exists.
    async fn ensure_tombstones(&self) -> Result<(), StoreError> {
        let tables = [(TOMBSTONES_TABLE, tombstones_ddl())];
        self.create_tables(TOMBSTONES_TABLE, &tables, FEATURE_DELETE).await
    }

    /// The tombstone of `tag` in this table, read on `conn`; none while the tombstone table
    /// does not exist (no tag was ever deleted).
    async fn select_tombstone(
        &self,
        conn: &mut sqlx::MySqlConnection,
        tag: &Tag,
        feature: &str,
    ) -> Result<Option<u64>, StoreError> {
        let tomb: Result<Option<i64>, _> = sqlx::query_scalar(sql(&self.sql.tomb_select))
            .bind(&self.sql.table)
            .bind(tag.as_str())
            .fetch_optional(conn)
            .await;
        match tomb {
            Ok(tomb) => Ok(tomb.map(|t| u64::try_from(t).unwrap_or(0))),
            Err(e) if Self::is_no_table(&e) => Ok(None),
            Err(e) => Err(refused(feature, e)),
        }
    }

    /// Under the creators' lock: deletes with a tombstone, creating the tombstone table
    /// first when the delete finds it absent (then tries once more).
    async fn delete_locked(
        &self,
        conn: &mut PoolConnection<MySql>,
        tag: &Tag,
    ) -> Result<(), StoreError> {
        if self.delete_once(conn, tag).await? {
            return Ok(());
        }
        self.ensure_tombstones().await?;
        if self.delete_once(conn, tag).await? {
            return Ok(());
        }
        Err(StoreError::Unavailable(format!(
            "MySQL: table {TOMBSTONES_TABLE} vanished while tag {tag} was deleted; retry"
        )))
    }

    /// The row's `max_id` (read with a row lock, so no allocation slips in), its tombstone
    /// and the delete, in one transaction; `Ok(false)` (nothing changed) when the tombstone
    /// table is absent.
    async fn delete_once(
        &self,
        conn: &mut PoolConnection<MySql>,
        tag: &Tag,
    ) -> Result<bool, StoreError> {
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let max_id: Option<i64> = sqlx::query_scalar(sql(&self.sql.lock_row))
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| refused(FEATURE_DELETE, e))?;
        // Dropping the transaction rolls it back.
        let Some(max_id) = max_id else { return Err(StoreError::TagNotFound(tag.clone())) };
        let written = sqlx::query(sql(&self.sql.tomb_write))
            .bind(&self.sql.table)
            .bind(tag.as_str())
            .bind(max_id.max(0))
            .execute(&mut *tx)
            .await;
        match written {
            Ok(_) => {}
            // Dropping the transaction rolls it back: nothing changed.
            Err(e) if Self::is_no_table(&e) => return Ok(false),
            Err(e) => return Err(refused(FEATURE_DELETE, e)),
        }
        sqlx::query(sql(&self.sql.delete))
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .execute(&mut *tx)
            .await
            .map_err(|e| refused(FEATURE_DELETE, e))?;
        tx.commit().await.map_err(unavailable)?;
        Ok(true)
    }

    /// `update` mode: the tag's last known step's single `UPDATE` when it applies, else the
    /// full allocation.
    async fn allocate_update(
        &self,
        tag: &Tag,
        requested: Option<Step>,
    ) -> Result<Allocation, StoreError> {
        if let Some(tag_step) = self.known_steps.get(tag)
            && let Some(allocation) = self.allocate_known_step(tag, tag_step, requested).await?
        {
            return Ok(allocation);
        }
        let allocation = self.allocate_full(tag, requested).await;
        match &allocation {
            Ok(allocation) => self.known_steps.insert(tag, allocation.tag_step),
            Err(_) => self.known_steps.remove(tag),
        }
        allocation
    }

    /// The allocation for a tag whose step is believed to be `tag_step`: one statement whose
    /// answer is the server's OK packet (see [`Statements::allocate_known_step`]). `None` when
    /// it matched no row: the step changed, or the row is refused, which the full allocation
    /// then explains.
    async fn allocate_known_step(
        &self,
        tag: &Tag,
        tag_step: u64,
        requested: Option<Step>,
    ) -> Result<Option<Allocation>, StoreError> {
        let statement =
            self.sql.allocate_known_step(tag, &self.tag_charset, tag_step, requested)?;
        let mut conn = match self.parked.take() {
            Some(conn) => conn,
            None => self.pool.acquire().await.map_err(unavailable)?,
        };
        // On an error, or if this future is dropped meanwhile, `conn` is dropped unparked.
        let done = sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        // The whole answer was read: the connection is ready for the next statement.
        self.parked.park(conn);
        match done.rows_affected() {
            0 => Ok(None),
            // The row had exactly `tag_step` as the update moved it, and LAST_INSERT_ID(expr)
            // puts the new max_id into this statement's own OK packet.
            1 => {
                let max_id_after = i64::try_from(done.last_insert_id()).map_err(|_| {
                    StoreError::Unavailable(format!(
                        "MySQL: the allocation of tag {tag} reported max_id {}",
                        done.last_insert_id()
                    ))
                })?;
                // The step is at most STEP_MAX, far below i64::MAX.
                allocated_range(tag, max_id_after, tag_step as i64, requested).map(Some)
            }
            updated => Err(duplicate_rows(tag, updated)),
        }
    }

    /// The full allocation, one round trip (see [`Statements::allocate`]).
    async fn allocate_full(
        &self,
        tag: &Tag,
        requested: Option<Step>,
    ) -> Result<Allocation, StoreError> {
        let statement = self.sql.allocate(tag, &self.tag_charset, requested)?;
        let rows = sqlx::raw_sql(AssertSqlSafe(statement))
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        let [row] = rows.as_slice() else {
            return Err(StoreError::Unavailable(format!(
                "MySQL: the allocation of tag {tag} returned {} rows instead of 1",
                rows.len()
            )));
        };
        let updated: i64 = row.try_get(0).map_err(unavailable)?;
        let max_id_after: i64 = row.try_get(1).map_err(unavailable)?;
        let tag_step: Option<i64> = row.try_get(2).map_err(unavailable)?;
        match (updated, tag_step) {
            // ROW_COUNT() = 1: the UPDATE just set LAST_INSERT_ID() and @idmint_tag_step on
            // this connection, from the one row it changed, so neither value is stale.
            (1, Some(tag_step)) => allocated_range(tag, max_id_after, tag_step, requested),
            (0, _) => {
                let exists: i64 = row.try_get(3).map_err(unavailable)?;
                let current =
                    (exists != 0).then(|| Ok((row.try_get(4)?, row.try_get(5)?))).transpose();
                let current = current.map_err(unavailable)?;
                match servable(tag, current, requested) {
                    Err(refusal) => Err(refusal),
                    // The row was refused by the update yet looks servable now: it changed in
                    // between (an operator's set_step or a compare-and-set).
                    Ok(_) => Err(StoreError::Unavailable(format!(
                        "MySQL: the row of tag {tag} changed while it was being allocated; retry"
                    ))),
                }
            }
            (1, None) => Err(StoreError::Unavailable(format!(
                "MySQL: the allocation of tag {tag} did not report the row's step"
            ))),
            (updated, _) if updated > 1 => Err(duplicate_rows(tag, updated as u64)),
            (updated, _) => Err(StoreError::Unavailable(format!(
                "MySQL: the allocation of tag {tag} reported {updated} updated rows"
            ))),
        }
    }

    /// `cas` mode: read, then compare-and-set, retried while other allocations win.
    async fn allocate_cas(
        &self,
        tag: &Tag,
        requested: Option<Step>,
    ) -> Result<Allocation, StoreError> {
        let _queued = self.cas_locks.queue(tag).await;
        let mut conn = self.pool.acquire().await.map_err(unavailable)?;
        for attempt in 0..CAS_ATTEMPTS_MAX {
            let current = sqlx::query(sql(&self.sql.cas_read))
                .bind(tag.as_str())
                .bind(tag.as_str()) // the exact (binary) comparison
                .fetch_optional(&mut *conn)
                .await
                .map_err(unavailable)?
                .map(|row| Ok::<_, sqlx::Error>((row.try_get(0)?, row.try_get(1)?)))
                .transpose()
                .map_err(unavailable)?;
            let (max_id, tag_step, step) = servable(tag, current, requested)?;
            // servable checked max_id + step <= ID_MAX == i64::MAX, so every value fits i64.
            let max_id_after = (max_id + step) as i64;
            let applied = sqlx::query(sql(&self.sql.cas_write))
                .bind(max_id_after)
                .bind(tag.as_str())
                .bind(tag.as_str()) // the exact (binary) comparison
                .bind(max_id as i64)
                .bind(tag_step as i64)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?
                .rows_affected();
            if applied > 0 {
                return allocated_range(tag, max_id_after, tag_step as i64, requested);
            }
            tokio::time::sleep(cas_backoff(attempt)).await;
        }
        Err(StoreError::Unavailable(format!(
            "MySQL: tag {tag} is contended: {CAS_ATTEMPTS_MAX} compare-and-set attempts in a row \
             lost to other allocations; retry, or use alloc=update"
        )))
    }

    /// Whether this account may insert `spec`'s row: the insert, rolled back.
    async fn check_insert(
        &self,
        conn: &mut PoolConnection<MySql>,
        spec: &TagSpec,
    ) -> Result<(), StoreError> {
        let mut tx = conn.begin().await.map_err(unavailable)?;
        // Dropping the transaction rolls the row back.
        self.insert_row(&mut tx, spec, 1).await
    }

    /// Inserts the row of `spec` at `max_id` on `conn`; [`StoreError::TagExists`] when the
    /// tag has one.
    async fn insert_row(
        &self,
        conn: &mut sqlx::MySqlConnection,
        spec: &TagSpec,
        max_id: i64,
    ) -> Result<(), StoreError> {
        let inserted = sqlx::query(sql(&self.sql.insert))
            .bind(spec.tag.as_str())
            .bind(max_id)
            .bind(spec.step.get() as i64)
            .bind(spec.description.as_str())
            .execute(conn)
            .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(StoreError::TagExists(spec.tag.clone()))
            }
            Err(e) => Err(refused(FEATURE_CREATE, e)),
        }
    }

    /// `max_id := new` on the row of `tag` if it still holds `expected`, on `executor`:
    /// whether a row matched. A row holds an i64, so an `expected` beyond it matches none.
    async fn set_max_id<'c>(
        &self,
        executor: impl sqlx::MySqlExecutor<'c>,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        let Ok(expected) = i64::try_from(expected) else { return Ok(false) };
        // The driver asks for CLIENT_FOUND_ROWS, so a matched row counts even when `new`
        // equals `expected` and nothing changes.
        let applied = sqlx::query(sql(&self.sql.compare_and_set))
            // In range: check_new_max_id bounds `new` by ID_MAX == i64::MAX.
            .bind(new as i64)
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .bind(expected)
            .execute(executor)
            .await
            .map_err(unavailable)?;
        Ok(applied.rows_affected() > 0)
    }

    /// `create_tag` with the creators' lock held on `conn`.
    async fn create_locked(
        &self,
        conn: &mut PoolConnection<MySql>,
        spec: &TagSpec,
    ) -> Result<TagRecord, StoreError> {
        let count: i64 = sqlx::query(sql(&self.sql.count))
            .fetch_one(&mut **conn)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(unavailable)?;
        if usize::try_from(count).is_ok_and(|count| count >= TAG_COUNT_MAX) {
            return Err(StoreError::TooManyTags);
        }
        // Under the creators' lock, which deletes take too: no tombstone is written meanwhile.
        let tomb = match self.select_tombstone(conn, &spec.tag, FEATURE_CREATE).await {
            // MySQL answers "denied" for a table the account has no grant on, whether it
            // exists or not: name the segment table's INSERT first when that is missing too.
            Err(denial @ StoreError::Denied { .. }) => {
                self.check_insert(conn, spec).await?;
                return Err(denial);
            }
            tomb => tomb?,
        };
        let max_id = initial_max_id(spec, tomb)?;
        // At most ID_MAX == i64::MAX (a tombstone is a row's max_id); Step is bounded.
        self.insert_row(conn, spec, max_id as i64).await?;
        select_row(&mut **conn, &self.sql, &spec.tag).await?.ok_or_else(|| {
            StoreError::Unavailable(format!("MySQL: tag {} vanished as it was created", spec.tag))
        })
    }
}

#[async_trait]
impl RangeStore for MySqlStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        // A tag the column cannot hold has no row: say why, in both modes.
        self.tag_charset.check(tag)?;
        if self.absent().await? {
            return Err(StoreError::TagNotFound(tag.clone()));
        }
        match self.alloc {
            AllocMode::Update => self.allocate_update(tag, step).await,
            AllocMode::Cas => self.allocate_cas(tag, step).await,
        }
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        check_new_max_id(new)?;
        self.tag_charset.check(tag)?;
        if self.absent().await? {
            return Err(StoreError::TagNotFound(tag.clone()));
        }
        if self.set_max_id(&self.pool, tag, expected, new).await? {
            return Ok(true);
        }
        let exists = sqlx::query(sql(&self.sql.exists))
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?
            .is_some();
        if exists { Ok(false) } else { Err(StoreError::TagNotFound(tag.clone())) }
    }

    async fn compare_and_set_max_ids(
        &self,
        changes: &[MaxIdChange],
    ) -> Result<Vec<bool>, StoreError> {
        // One transaction: a batch costs one commit, not one per row.
        let order = crate::batch_order(changes)?;
        let mut applied = vec![false; changes.len()];
        if self.absent().await? {
            return Ok(applied);
        }
        let mut conn = TxConn::acquire(&self.pool).await.map_err(unavailable)?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        for index in order {
            let MaxIdChange { tag, expected, new } = &changes[index];
            applied[index] = self.set_max_id(&mut *tx, tag, *expected, *new).await?;
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(applied)
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.tag_charset.check(tag)?;
        if self.absent().await? {
            return Ok(None);
        }
        select_row(&self.pool, &self.sql, tag).await
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        if self.absent().await? {
            return Ok(Vec::new());
        }
        let rows: Vec<TagColumns> =
            sqlx::query_as(sql(&self.sql.list)).fetch_all(&self.pool).await.map_err(unavailable)?;
        Ok(servable_rows(rows.into_iter().map(stored_tag), "row"))
    }

    async fn update_times_text(&self) -> Result<Vec<(Tag, String)>, StoreError> {
        if self.absent().await? {
            return Ok(Vec::new());
        }
        // The server's own text of the column, in the server's time zone, as a Leaf node's
        // JDBC session (which sets none) reads it for `/db`; idmint's sessions read UTC, so
        // the value is converted in the statement (no session state to put back). A zone
        // CONVERT_TZ does not know gives NULL: the session's text then.
        let statement = format!(
            "SELECT biz_tag, COALESCE(\
             CAST(CONVERT_TZ(update_time, @@session.time_zone, @@global.time_zone) AS CHAR), \
             CAST(update_time AS CHAR)) FROM {} ORDER BY CAST(biz_tag AS BINARY) \
             LIMIT {TAG_COUNT_MAX}",
            self.sql.table
        );
        let rows = sqlx::query(AssertSqlSafe(statement)).fetch_all(&self.pool).await;
        let rows = rows.map_err(unavailable)?;
        let mut times = Vec::with_capacity(rows.len());
        for row in &rows {
            let name: String = row.try_get(0).map_err(unavailable)?;
            let text: Option<String> = row.try_get(1).map_err(unavailable)?;
            if let (Ok(tag), Some(text)) = (Tag::from_stored(&name), text) {
                times.push((tag, text));
            }
        }
        Ok(times)
    }

    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(unavailable)?;
        self.select_tombstone(&mut conn, tag, FEATURE_CREATE).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if self.absent().await? {
            return Ok(());
        }
        // Reads the table, so a dropped table or a revoked grant fails the ping too.
        sqlx::query(sql(&self.sql.probe))
            .fetch_optional(&self.pool)
            .await
            .map(drop)
            .map_err(unavailable)
    }

    fn describe(&self) -> String {
        self.location.clone()
    }
}

#[async_trait]
impl SegmentStore for MySqlStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        self.tag_charset.check(&spec.tag)?;
        // Counting and inserting in one InnoDB transaction does not keep the count exact:
        // the count's gap locks make concurrent creators deadlock, and a plain read lets two
        // of them pass the limit together. A named lock per table serializes idmint's
        // creators instead; creating a tag is rare and fast.
        let mut locked = create_lock(&self.pool, &self.sql).await?;
        let outcome = match self.absent().await {
            // A Tinyid database gets the segment table with its first tag.
            Ok(true) => match self.create_segment_table(FEATURE_CREATE).await {
                Ok(()) => {
                    self.absent.store(false, Ordering::Release);
                    self.create_locked(&mut locked.conn, spec).await
                }
                Err(error) => Err(error),
            },
            Ok(false) => self.create_locked(&mut locked.conn, spec).await,
            Err(error) => Err(error),
        };
        // After a database error the connection is suspect: drop it, which ends its session
        // and so releases the lock. Otherwise release the lock and keep the connection.
        if !matches!(outcome, Err(StoreError::Unavailable(_))) {
            locked.release(&self.sql.create_unlock).await;
        }
        outcome
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        self.tag_charset.check(tag)?;
        if self.absent().await? {
            return Err(StoreError::TagNotFound(tag.clone()));
        }
        let updated = sqlx::query(sql(&self.sql.set_step))
            // Step is bounded by STEP_MAX, far below i64::MAX.
            .bind(step.get() as i64)
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .execute(&self.pool)
            .await
            .map_err(unavailable)?
            .rows_affected();
        if updated == 0 {
            return Err(StoreError::TagNotFound(tag.clone()));
        }
        // Read back as stored; a concurrent delete makes it not found, as if it came first.
        select_row(&self.pool, &self.sql, tag)
            .await?
            .ok_or_else(|| StoreError::TagNotFound(tag.clone()))
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        self.tag_charset.check(tag)?;
        if self.absent().await? {
            return Err(StoreError::TagNotFound(tag.clone()));
        }
        // The creators' lock: a create of this name cannot read the tombstone before this
        // delete writes it.
        let mut locked = create_lock(&self.pool, &self.sql).await?;
        let outcome = self.delete_locked(&mut locked.conn, tag).await;
        if !matches!(outcome, Err(StoreError::Unavailable(_))) {
            locked.release(&self.sql.create_unlock).await;
        }
        outcome
    }
}

/// The SQL of one table, written once. The table name is a validated identifier
/// ([`crate::TableName`]), so it is written into the SQL as is.
#[derive(Debug)]
struct Statements {
    table: String,
    probe: Arc<str>,
    create_table: Arc<str>,
    select_row: Arc<str>,
    exists: Arc<str>,
    list: Arc<str>,
    cas_read: Arc<str>,
    cas_write: Arc<str>,
    compare_and_set: Arc<str>,
    count: Arc<str>,
    insert: Arc<str>,
    set_step: Arc<str>,
    delete: Arc<str>,
    create_lock: Arc<str>,
    create_unlock: Arc<str>,
    lock_row: Arc<str>,
    tomb_select: Arc<str>,
    tomb_write: Arc<str>,
}

impl Statements {
    fn new(t: &str) -> Statements {
        // The lock name must fit MySQL's 64 characters whatever the database and table names.
        let lock_name = format!("CONCAT('idmint.create.', MD5(CONCAT(DATABASE(), '.', '{t}')))");
        let s = |sql: String| Arc::<str>::from(sql);
        Statements {
            table: t.to_string(),
            probe: s(format!("SELECT 1 FROM {t} LIMIT 1")),
            create_table: s(segment_ddl(t)),
            select_row: s(format!("SELECT {COLUMNS} FROM {t} WHERE {EXACT}")),
            exists: s(format!("SELECT 1 FROM {t} WHERE {EXACT}")),
            // Sorted by bytes, which is how tags order, whatever the column's collation.
            list: s(format!(
                "SELECT {COLUMNS} FROM {t} ORDER BY CAST(biz_tag AS BINARY) LIMIT {TAG_COUNT_MAX}"
            )),
            cas_read: s(format!(
                "SELECT CAST(max_id AS SIGNED), CAST(step AS SIGNED) FROM {t} WHERE {EXACT}"
            )),
            // The step read must still hold too, so the range reported is the one reserved
            // with the step the row had when max_id moved.
            cas_write: s(format!(
                "UPDATE {t} SET max_id = ?, update_time = CURRENT_TIMESTAMP \
                 WHERE {EXACT} AND max_id = ? AND step = ?"
            )),
            compare_and_set: s(format!(
                "UPDATE {t} SET max_id = ?, update_time = CURRENT_TIMESTAMP \
                 WHERE {EXACT} AND max_id = ?"
            )),
            count: s(format!("SELECT COUNT(*) FROM {t}")),
            insert: s(format!(
                "INSERT INTO {t} (biz_tag, max_id, step, description, update_time) \
                 VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP)"
            )),
            set_step: s(format!(
                "UPDATE {t} SET step = ?, update_time = CURRENT_TIMESTAMP WHERE {EXACT}"
            )),
            delete: s(format!("DELETE FROM {t} WHERE {EXACT}")),
            create_lock: s(format!("SELECT GET_LOCK({lock_name}, {CREATE_LOCK_WAIT_S})")),
            create_unlock: s(format!("SELECT RELEASE_LOCK({lock_name})")),
            lock_row: s(format!("SELECT CAST(max_id AS SIGNED) FROM {t} WHERE {EXACT} FOR UPDATE")),
            tomb_select: s(format!(
                "SELECT CAST(max_id AS SIGNED) FROM {TOMBSTONES_TABLE} \
                 WHERE segment_table = ? AND biz_tag = ?"
            )),
            // Only ever raised: a tombstone keeps the highest max_id any life of the name had.
            tomb_write: s(format!(
                "INSERT INTO {TOMBSTONES_TABLE} (segment_table, biz_tag, max_id, update_time) \
                 VALUES (?, ?, ?, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE \
                 max_id = GREATEST(max_id, VALUES(max_id)), update_time = CURRENT_TIMESTAMP"
            )),
        }
    }

    /// The allocating statement for a tag whose step is believed to be `tag_step`: Leaf's
    /// `UPDATE` alone, which moves the row only while its step is still `tag_step` and leaves
    /// the new `max_id` in `LAST_INSERT_ID()`. The server reports that value and the rows
    /// matched in the statement's OK packet, so nothing else is sent or read: one matched
    /// row reserved exactly `[max_id - step, max_id)` with the step named here. A row it does
    /// not match (another step now, no row, a row it would refuse) is left unchanged.
    ///
    /// Written as [`Statements::allocate`] is: the tag in hex, the numbers as integers.
    fn allocate_known_step(
        &self,
        tag: &Tag,
        charset: &TagCharset,
        tag_step: u64,
        requested: Option<Step>,
    ) -> Result<String, StoreError> {
        let t = &self.table;
        let bytes = bytes_literal(tag);
        let tag = tag_literal(tag, charset)?;
        let step = effective_step(tag_step, requested);
        // Both steps are at most STEP_MAX, far below ID_MAX: the bound cannot underflow.
        let max_id_max = ID_MAX - step;
        Ok(format!(
            "UPDATE {t} SET max_id = LAST_INSERT_ID(max_id + {step}), \
             update_time = CURRENT_TIMESTAMP \
             WHERE biz_tag = {tag} AND CAST(biz_tag AS BINARY) = {bytes} \
             AND step = {tag_step} AND max_id >= 0 AND max_id <= {max_id_max}"
        ))
    }

    /// The allocating statements for `update` mode, as one text query: one round trip.
    ///
    /// The `UPDATE` chooses the step (the larger of the row's and the request), refuses to
    /// pass `ID_MAX` and rows idmint cannot serve, and leaves the new `max_id` in
    /// `LAST_INSERT_ID()` and the row's step in `@idmint_tag_step`, both per connection. The
    /// `SELECT` returns them with `ROW_COUNT()`, which says whether they are this update's
    /// (1) or stale (0), and the row as it is now, to explain a refusal. MariaDB has no
    /// `UPDATE … RETURNING`, and binding parameters would need a prepared statement, which
    /// holds one statement only. (MySQL 8 deprecates assigning a variable inside an
    /// expression, with a warning, but still does it.)
    ///
    /// Writing values into the SQL is safe here: the tag is written in hex
    /// ([`tag_literal`], [`bytes_literal`]) and the steps are integers. The row is matched
    /// exactly, as by [`EXACT`].
    fn allocate(
        &self,
        tag: &Tag,
        charset: &TagCharset,
        requested: Option<Step>,
    ) -> Result<String, StoreError> {
        let t = &self.table;
        let bytes = bytes_literal(tag);
        let tag = tag_literal(tag, charset)?;
        // 0 lets the row's step win in GREATEST; rows with a step below 1 are refused by the
        // WHERE clause, so 0 is never the step reserved. GREATEST(step, r) is at least 0,
        // so `ID_MAX - GREATEST(step, r)` cannot overflow.
        let r = requested.map_or(0, Step::get);
        Ok(format!(
            "UPDATE {t} \
             SET max_id = LAST_INSERT_ID(max_id + GREATEST(@idmint_tag_step := step, {r})), \
             update_time = CURRENT_TIMESTAMP \
             WHERE biz_tag = {tag} AND CAST(biz_tag AS BINARY) = {bytes} \
             AND step >= 1 AND max_id >= 0 \
             AND max_id <= {ID_MAX} - GREATEST(step, {r}); \
             SELECT ROW_COUNT(), CAST(LAST_INSERT_ID() AS SIGNED), \
             CAST(@idmint_tag_step AS SIGNED), COUNT(a.biz_tag), \
             CAST(MAX(a.max_id) AS SIGNED), CAST(MAX(a.step) AS SIGNED) \
             FROM {t} AS a WHERE a.biz_tag = {tag} AND CAST(a.biz_tag AS BINARY) = {bytes}"
        ))
    }
}

/// The segment table's DDL: Leaf's, so Leaf can share the table. The binary collation makes
/// `biz_tag` case-sensitive, as tags are in every other backend; Leaf never depended on the
/// server's default, case-insensitive one.
pub(crate) fn segment_ddl(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\
         biz_tag varchar(128) NOT NULL DEFAULT '', \
         max_id bigint(20) NOT NULL DEFAULT '1', \
         step int(11) NOT NULL, \
         description varchar(256) DEFAULT NULL, \
         update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP \
         ON UPDATE CURRENT_TIMESTAMP, \
         PRIMARY KEY (biz_tag)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// The tombstone table's DDL, shared by every segment table of the database.
pub(crate) fn tombstones_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TOMBSTONES_TABLE} (\
         segment_table varchar(64) NOT NULL, \
         biz_tag varchar(128) NOT NULL, \
         max_id bigint NOT NULL, \
         update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, \
         PRIMARY KEY (segment_table, biz_tag)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// The character set of a table's tag column, as `information_schema` names it; it decides
/// how a tag is written into SQL text ([`tag_literal`]) and which tags the table can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TagCharset {
    name: String,
    /// The table, named in refusals.
    table: String,
}

impl TagCharset {
    /// idmint's own tables: `utf8mb4`, any tag.
    pub(crate) fn utf8mb4(table: &str) -> TagCharset {
        TagCharset { name: "utf8mb4".to_string(), table: table.to_string() }
    }

    /// Reads the charset of `column` in `table` (`db.table` or a table of the current
    /// database); `utf8mb4` when the server does not say (a view, no privilege).
    pub(crate) async fn of_column(
        pool: &MySqlPool,
        table: &str,
        column: &str,
    ) -> Result<TagCharset, StoreError> {
        let (schema, name) = match table.rsplit_once('.') {
            Some((schema, name)) => (Some(schema), name),
            None => (None, table),
        };
        let found: Option<Option<String>> = sqlx::query_scalar(
            "SELECT CAST(CHARACTER_SET_NAME AS CHAR) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?",
        )
        .bind(schema)
        .bind(name)
        .bind(column)
        .fetch_optional(pool)
        .await
        .map_err(unavailable)?;
        let name = found.flatten().unwrap_or_default().to_ascii_lowercase();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Ok(TagCharset::utf8mb4(table));
        }
        Ok(TagCharset { name, table: table.to_string() })
    }

    /// Refuses a tag the column cannot hold: a 4-byte character in `utf8mb3`, anything
    /// beyond ASCII in another set. Comparing such a tag with the column fails on MariaDB
    /// ("Illegal mix of collations") or converts the column and scans the table, and no row
    /// could hold it anyway.
    pub(crate) fn check(&self, tag: &Tag) -> Result<(), StoreError> {
        let name = tag.as_str();
        let fits = match self.name.as_str() {
            "utf8mb4" => true,
            "utf8" | "utf8mb3" => name.chars().all(|c| c.len_utf8() <= 3),
            _ => name.is_ascii(),
        };
        if fits {
            return Ok(());
        }
        Err(StoreError::TagNotStorable {
            tag: tag.clone(),
            table: self.table.clone(),
            charset: self.name.clone(),
        })
    }
}

/// The tag as a literal that cannot inject, whatever it holds: its UTF-8 bytes in hex with
/// the column's character set as introducer (`_utf8mb4 X'6f72646572'`), so the comparison
/// runs in the column's collation and its index serves it. Refused, with the fix, when the
/// column's character set cannot hold the tag ([`TagCharset::check`]).
pub(crate) fn tag_literal(tag: &Tag, charset: &TagCharset) -> Result<String, StoreError> {
    charset.check(tag)?;
    // `_utf8` is understood by MySQL 5.7, 8 and MariaDB alike (utf8mb3).
    let introducer = if charset.name == "utf8mb3" { "utf8" } else { charset.name.as_str() };
    // The charset name is `[a-z0-9_]` (checked when read) and the rest is hex.
    Ok(format!("_{introducer} {}", bytes_literal(tag)))
}

/// The tag as a literal for idmint's own `utf8mb4` tables: cannot fail, cannot inject.
pub(crate) fn utf8mb4_literal(tag: &Tag) -> String {
    format!("_utf8mb4 {}", bytes_literal(tag))
}

/// The tag's UTF-8 bytes as a binary literal, for an exact comparison with
/// `CAST(column AS BINARY)`.
pub(crate) fn bytes_literal(tag: &Tag) -> String {
    let hex: String = tag.as_str().bytes().map(|b| format!("{b:02X}")).collect();
    format!("X'{hex}'")
}

/// Holds a named lock (`GET_LOCK`, the creators' of tags or of sequences) on a pooled
/// connection. Dropped while held (an error, a cancelled call), it closes the connection, so
/// the server releases the lock with the session instead of leaving it on a connection back
/// in the pool.
pub(crate) struct NamedLock {
    pub(crate) conn: PoolConnection<MySql>,
    held: bool,
}

impl NamedLock {
    /// Runs `get` (a `SELECT GET_LOCK(name, wait)`); `None` when another session kept the
    /// lock past the wait.
    pub(crate) async fn acquire(
        pool: &MySqlPool,
        get: &str,
    ) -> Result<Option<NamedLock>, sqlx::Error> {
        let conn = pool.acquire().await?;
        // Armed before asking, so a call cancelled while waiting cannot leak the lock.
        let mut lock = NamedLock { conn, held: true };
        let got: Option<i64> =
            sqlx::query_scalar(AssertSqlSafe(get.to_string())).fetch_one(&mut *lock.conn).await?;
        if got == Some(1) {
            return Ok(Some(lock));
        }
        // 0: timed out; NULL: an error. Either way this session does not hold the lock.
        lock.held = false;
        Ok(None)
    }

    /// Runs `release` (a `SELECT RELEASE_LOCK(name)`); on failure the lock stays held and
    /// the drop closes the connection, which releases it.
    pub(crate) async fn release(&mut self, release: &str) {
        match sqlx::query(AssertSqlSafe(release.to_string())).execute(&mut *self.conn).await {
            Ok(_) => self.held = false,
            Err(error) => tracing::warn!(%error, "could not release a creators' lock"),
        }
    }
}

impl Drop for NamedLock {
    fn drop(&mut self) {
        if self.held {
            self.conn.close_on_drop();
        }
    }
}

/// The tag creators' lock of `statements`' table, or why not.
async fn create_lock(pool: &MySqlPool, statements: &Statements) -> Result<NamedLock, StoreError> {
    match NamedLock::acquire(pool, &statements.create_lock).await.map_err(unavailable)? {
        Some(lock) => Ok(lock),
        None => Err(StoreError::Unavailable(format!(
            "MySQL: another node has been creating a tag in table {} for {CREATE_LOCK_WAIT_S} s; \
             retry",
            statements.table
        ))),
    }
}

/// The refusal of an allocation that moved `updated` (more than one) rows of one tag.
fn duplicate_rows(tag: &Tag, updated: u64) -> StoreError {
    StoreError::Corrupt {
        tag: tag.to_string(),
        reason: format!(
            "{updated} rows have this biz_tag (their ids were skipped); the table needs a \
             primary key on biz_tag"
        ),
    }
}

/// Checks a row (`None`: no row) before reserving `requested` ids from it: the row's
/// `max_id`, its step and the step to reserve, or why it cannot be served.
fn servable(
    tag: &Tag,
    row: Option<(Option<i64>, Option<i64>)>,
    requested: Option<Step>,
) -> Result<(u64, u64, u64), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { tag: tag.to_string(), reason };
    let (max_id, tag_step) = row.ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
    let max_id = match max_id {
        Some(max_id) => {
            u64::try_from(max_id).map_err(|_| corrupt(format!("max_id is negative ({max_id})")))?
        }
        None => return Err(corrupt("max_id is NULL".to_string())),
    };
    let tag_step = match tag_step {
        Some(step) => u64::try_from(step)
            .ok()
            .filter(|step| *step >= 1)
            .ok_or_else(|| corrupt(format!("step is {step}; it must be at least 1")))?,
        None => return Err(corrupt("step is NULL; it must be at least 1".to_string())),
    };
    let step = effective_step(tag_step, requested);
    match max_id.checked_add(step) {
        Some(end) if end <= ID_MAX => Ok((max_id, tag_step, step)),
        _ => Err(StoreError::Exhausted { tag: tag.clone(), max_id, step }),
    }
}

async fn select_row<'c>(
    executor: impl sqlx::MySqlExecutor<'c>,
    sql: &Statements,
    tag: &Tag,
) -> Result<Option<TagRecord>, StoreError> {
    let row: Option<TagColumns> = sqlx::query_as(self::sql(&sql.select_row))
        .bind(tag.as_str())
        .bind(tag.as_str()) // the exact (binary) comparison
        .fetch_optional(executor)
        .await
        .map_err(unavailable)?;
    row.map(stored_tag).transpose()
}

/// Whether the database `url` names holds table `table`, creating nothing: one connection,
/// closed after the question.
pub(crate) async fn table_exists(url: &SqlUrl, table: &str) -> Result<bool, StoreError> {
    let (redacted, secret) = (url.redacted(), password(url.driver_url()));
    let options = connect_options(url)?;
    let fail =
        |e: sqlx::Error| StoreError::Unavailable(scrub(&format!("MySQL: {redacted}: {e}"), secret));
    let pool = pool_options(1).connect_with(options).await.map_err(fail)?;
    let count: Result<i64, _> = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(table)
    .fetch_one(&pool)
    .await;
    pool.close().await;
    Ok(count.map_err(fail)? > 0)
}

/// The connection options `url` names, or why it names none (scrubbed of its password).
pub(crate) fn connect_options(url: &SqlUrl) -> Result<MySqlConnectOptions, StoreError> {
    url.driver_url().parse().map_err(|e: sqlx::Error| StoreError::BadUrl {
        url: url.redacted(),
        reason: scrub(&e.to_string(), password(url.driver_url())),
    })
}

/// The bounded pool idmint opens: `pool_max` connections, [`MYSQL_ACQUIRE_TIMEOUT_MS`] to
/// get one, and a ping only for connections idle past [`MYSQL_IDLE_PING_AFTER_MS`].
pub(crate) fn pool_options(pool_max: u32) -> MySqlPoolOptions {
    crate::sql::pool_options(pool_max, MYSQL_ACQUIRE_TIMEOUT_MS, MYSQL_IDLE_PING_AFTER_MS)
}

/// `url` (a URL without password) with the table named as its `table` parameter.
pub(crate) fn with_table(url: &str, table: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}table={table}")
}

/// MySQL's SQLSTATE for "table doesn't exist" (error 1146).
pub(crate) const SQLSTATE_NO_TABLE: &str = "42S02";

pub(crate) fn sql(statement: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(statement))
}

/// `e` as the refusal of a privilege `feature` needs (MySQL's message names the privilege
/// and the table), or as [`unavailable`].
pub(crate) fn refused(feature: &str, e: sqlx::Error) -> StoreError {
    denied(&e, feature, None, None).unwrap_or_else(|| unavailable(e))
}

/// The Leaf-shaped tables of the current database (columns `biz_tag`, `max_id`, `step`),
/// at most [`LEAF_TABLES_SHOWN_MAX`], by name.
async fn leaf_tables(pool: &MySqlPool) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_NAME IN ('biz_tag', 'max_id', 'step') \
         GROUP BY TABLE_NAME HAVING COUNT(DISTINCT COLUMN_NAME) = 3 \
         ORDER BY TABLE_NAME LIMIT {LEAF_TABLES_SHOWN_MAX}"
    )))
    .fetch_all(pool)
    .await
    .map_err(|e| refused(FEATURE_SEGMENTS, e))
}

/// Whether the current database holds `table`.
async fn table_in_database(pool: &MySqlPool, table: &str) -> Result<bool, StoreError> {
    let count: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_one(pool)
    .await
    .map_err(|e| refused(FEATURE_SEGMENTS, e))?;
    Ok(count > 0)
}

/// A driver error as [`StoreError::Unavailable`], or as [`StoreError::Denied`] when the
/// server refused a privilege (final: retrying does not grant it).
pub(crate) fn unavailable(e: sqlx::Error) -> StoreError {
    if let Some(refusal) = denied(&e, ANY_FEATURE, None, None) {
        return refusal;
    }
    match e {
        sqlx::Error::PoolTimedOut => StoreError::Unavailable(format!(
            "MySQL: no connection free within {MYSQL_ACQUIRE_TIMEOUT_MS} ms (all in use, or the \
             server is unreachable)"
        )),
        e => StoreError::Unavailable(format!("MySQL: {e}")),
    }
}

impl Dialect for MySqlStore {
    const NUMBERED: bool = false;

    fn int(expr: &str) -> String {
        format!("CAST({expr} AS SIGNED)")
    }

    fn text(expr: &str) -> String {
        expr.to_string()
    }

    fn byte_order(expr: &str) -> String {
        format!("CAST({expr} AS BINARY)")
    }

    fn equal_bytes(expr: &str) -> String {
        format!("CAST({expr} AS BINARY) = CAST(? AS BINARY)")
    }

    fn on_conflict_nothing(_columns: &str) -> String {
        String::new()
    }

    fn returning(_columns: &str) -> String {
        String::new()
    }

    fn is_no_table(e: &sqlx::Error) -> bool {
        matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some(SQLSTATE_NO_TABLE))
    }

    fn unavailable(&self, e: sqlx::Error) -> StoreError {
        unavailable(e)
    }

    /// A probe first, so an existing table is used as it is and an account without the
    /// CREATE privilege uses tables an operator made; no lock (`key` is for PostgreSQL).
    async fn create_tables(
        &self,
        _key: &str,
        tables: &[(&str, String)],
        feature: &str,
    ) -> Result<(), StoreError> {
        for (table, ddl) in tables {
            let probe = sqlx::query(AssertSqlSafe(format!("SELECT 1 FROM {table} LIMIT 1")))
                .fetch_optional(&self.pool)
                .await;
            match probe {
                Ok(_) => continue,
                Err(e) if Self::is_no_table(&e) => {}
                Err(e) => return Err(refused(feature, e)),
            }
            if !self.create_tables.allowed() {
                return Err(StoreError::MissingTable {
                    feature: feature.to_string(),
                    table: table.to_string(),
                });
            }
            sqlx::raw_sql(AssertSqlSafe(ddl.clone()))
                .execute(&self.pool)
                .await
                .map_err(|e| refused(feature, e))?;
            tracing::info!(table, store = %self.location, "created a table for {feature}");
        }
        Ok(())
    }
}
