//! The MySQL / MariaDB backend's [`WorkerStore`]: the lease and assignment tables in the
//! store's database (InnoDB, `utf8mb4_bin`), each created on its first use (the lease table
//! by the first lease, the assignment table by the first assignment) when absent and never
//! altered (a lease table without the `holder_id` column, made by an earlier idmint, is
//! refused with the statement that adds it).
//!
//! Claiming a never-held id is a plain `INSERT` under the `(space, worker_id)` primary key: of
//! two racing inserts InnoDB commits one and fails the other with a duplicate key. A takeover
//! and a renewal are a conditional `UPDATE` on the token and holder id (and the expiry) followed, in
//! the same transaction and under the row lock that update took, by a `SELECT … FOR UPDATE`
//! of what it wrote: MariaDB has no `UPDATE … RETURNING`. An `UPDATE` reads the latest
//! committed row and locks it, so of two racing writers the second re-reads the first's
//! token and matches nothing. The driver asks for `CLIENT_FOUND_ROWS`, so a matched row
//! counts even when a `GREATEST` leaves it unchanged. An assignment inserts into an
//! `AUTO_INCREMENT` table in a transaction rolled back when the id is past `max_worker`.
//!
//! Lease expiry is judged by the server's clock, read inside each statement that decides
//! ([`NOW_MS`]): `UTC_TIMESTAMP(6)` is fixed at the start of the statement, so every row of
//! a scan is judged at one instant, and it is UTC, so no session time zone or daylight-saving
//! change moves it.
//!
//! It must not show a password: errors come from queries, which carry none.

use async_trait::async_trait;
use sqlx::AssertSqlSafe;

use super::{MySqlStore, refused, unavailable};
use crate::sql::TxConn;
use crate::worker::{
    FEATURE_ASSIGN, FEATURE_LEASES, LEASE_SCAN_PAGE, LeaseTable, RecordColumns, ScanRow,
    acquire_from, check_assign_request, check_renewal, check_time_ms, column, held_columns,
    holder_id_text, lease_lost, outdated_workers_table, renewed_lease, scan_row, server_now_ms,
    stored, stored_record, won_lease,
};
use crate::{
    AssignRequest, LEASE_WORKER_ID_MAX, Lease, LeaseRecord, LeaseRequest, LeaseStore, StoreError,
    WorkerSpace, WorkerStore,
};

/// The server's clock in milliseconds since the Unix epoch, as SQL: the time lease expiry is
/// judged by. Arithmetic on a UTC datetime, so the session's time zone plays no part.
const NOW_MS: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
/// The server's clock in microseconds since the Unix epoch, as SQL: what a new lease token is
/// drawn from ([`next_token`](crate::next_token)).
const NOW_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

#[async_trait]
impl LeaseStore for MySqlStore {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        self.ensure_workers_table().await?;
        acquire_from(self, req).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease, StoreError> {
        let workers = self.workers_table.as_str();
        check_renewal(ttl_ms)?;
        let (id, token, holder_id) = held_columns(lease)?;
        let mut conn = TxConn::acquire(&self.pool).await.map_err(unavailable)?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let renewed = sqlx::query(AssertSqlSafe(format!(
            "UPDATE {workers} SET expires_ms = GREATEST(expires_ms, {NOW_MS} + ?) \
             WHERE space = ? AND worker_id = ? AND token = ? AND expires_ms >= {NOW_MS} \
             AND holder_id = ?"
        )))
        .bind(column(ttl_ms))
        .bind(lease.space.as_str())
        .bind(id)
        .bind(token)
        .bind(holder_id)
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if renewed != 1 {
            // Dropping the transaction rolls it back.
            return Err(lease_lost(lease));
        }
        let (new_token, expires_ms, time_mark) =
            select_own_row(&mut tx, workers, &lease.space, lease.worker_id).await?;
        let new_token = stored(&lease.space, id, "token", new_token)?;
        let lease_renewed = renewed_lease(lease, id, (expires_ms, time_mark))?;
        tx.commit().await.map_err(unavailable)?;
        if new_token != lease.token {
            return Err(lease_lost(lease));
        }
        Ok(lease_renewed)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.update_held(lease, &format!("expires_ms = LEAST(expires_ms, {NOW_MS})"), None).await
    }

    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        check_time_ms("mark_ms", mark_ms)?;
        let set = "time_mark = GREATEST(time_mark, ?)";
        self.update_held(lease, set, Some(column(mark_ms))).await
    }

    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        let workers = self.workers_table.as_str();
        self.ensure_workers_table().await?;
        let rows: Vec<RecordColumns> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT worker_id, holder, token, expires_ms, time_mark FROM {workers} \
             WHERE space = ? ORDER BY worker_id LIMIT {}",
            LEASE_WORKER_ID_MAX + 1
        )))
        .bind(space.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.into_iter().map(|row| stored_record(space, row)).collect()
    }

    async fn now_ms(&self) -> Result<u64, StoreError> {
        let now = sqlx::query_scalar(AssertSqlSafe(format!("SELECT {NOW_MS}")))
            .fetch_one(&self.pool)
            .await
            .map_err(unavailable)?;
        server_now_ms(now)
    }
}

#[async_trait]
impl WorkerStore for MySqlStore {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        let worker_node = self.worker_node_table.as_str();
        check_assign_request(req)?;
        let ddl = worker_node_ddl(worker_node);
        self.create_missing_tables(&[(worker_node, ddl)], FEATURE_ASSIGN).await?;
        let mut conn = TxConn::acquire(&self.pool).await.map_err(unavailable)?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let id = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {worker_node} (space, host, port, launch_ms) VALUES (?, ?, ?, ?)"
        )))
        .bind(req.space.as_str())
        .bind(req.host.as_str())
        .bind(i32::from(req.port))
        .bind(column(req.launch_ms))
        .execute(&mut *tx)
        .await
        .map_err(|e| refused(FEATURE_ASSIGN, e))?
        .last_insert_id();
        if id == 0 || id > req.max_worker {
            // Dropping the transaction rolls the row back; the counter stays past it.
            return Err(StoreError::WorkersExhausted {
                space: req.space.clone(),
                max: req.max_worker,
            });
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(id)
    }
}

#[async_trait]
impl LeaseTable for MySqlStore {
    async fn scan(
        &self,
        space: &WorkerSpace,
        from: u64,
        max: u64,
        margin_ms: u64,
    ) -> Result<Vec<ScanRow>, StoreError> {
        let workers = self.workers_table.as_str();
        let rows: Vec<(i64, i64, bool, i64)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT worker_id, token, CAST(expires_ms < {NOW_MS} - ? AS SIGNED), time_mark \
             FROM {workers} WHERE space = ? AND worker_id >= ? AND worker_id <= ? \
             ORDER BY worker_id LIMIT {LEASE_SCAN_PAGE}"
        )))
        .bind(column(margin_ms))
        .bind(space.as_str())
        .bind(column(from))
        .bind(column(max))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.into_iter().map(|row| scan_row(space, row)).collect()
    }

    async fn insert_lease(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError> {
        let workers = self.workers_table.as_str();
        let mut conn = TxConn::acquire(&self.pool).await.map_err(unavailable)?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let inserted = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {workers} \
             (space, worker_id, holder, token, expires_ms, time_mark, holder_id) \
             VALUES (?, ?, ?, {NOW_US}, {NOW_MS} + ?, 0, ?)"
        )))
        .bind(req.space.as_str())
        .bind(column(worker_id))
        .bind(req.holder.as_str())
        .bind(column(req.ttl_ms))
        .bind(holder_id_text(holder_id))
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            // Dropping the transaction rolls it back.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(unavailable(e)),
        }
        // The expiry the server gave it, read under the row lock the insert took.
        let row = select_own_row(&mut tx, workers, &req.space, worker_id).await?;
        let lease = won_lease(req, worker_id, holder_id, row)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(Some(lease))
    }

    async fn take_over(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        token: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError> {
        let workers = self.workers_table.as_str();
        let mut conn = TxConn::acquire(&self.pool).await.map_err(unavailable)?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let taken = sqlx::query(AssertSqlSafe(format!(
            "UPDATE {workers} \
             SET holder = ?, token = GREATEST(token + 1, {NOW_US}), expires_ms = {NOW_MS} + ?, \
             holder_id = ? \
             WHERE space = ? AND worker_id = ? AND token = ? AND expires_ms < {NOW_MS} - ?"
        )))
        .bind(req.holder.as_str())
        .bind(column(req.ttl_ms))
        .bind(holder_id_text(holder_id))
        .bind(req.space.as_str())
        .bind(column(worker_id))
        .bind(column(token))
        .bind(column(req.margin_ms))
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if taken != 1 {
            return Ok(None);
        }
        // Read under the row lock the update took: the new token, the time mark the previous
        // owner's last.
        let row = select_own_row(&mut tx, workers, &req.space, worker_id).await?;
        let lease = won_lease(req, worker_id, holder_id, row)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(Some(lease))
    }
}

impl MySqlStore {
    /// Creates the lease table when absent (the assignment table only when an id is
    /// assigned); never alters one that exists. Probing first lets an account without the
    /// CREATE privilege use a table an operator made.
    /// A lease table of an earlier idmint, without the holder id, is refused naming the
    /// statement that adds it: without it a deleted or restored row would let two nodes
    /// prove one lease.
    async fn ensure_workers_table(&self) -> Result<(), StoreError> {
        let workers = self.workers_table.as_str();
        self.create_missing_tables(&[(workers, workers_ddl(workers))], FEATURE_LEASES).await?;
        let probe = sqlx::query(AssertSqlSafe(format!("SELECT holder_id FROM {workers} LIMIT 0")))
            .fetch_optional(&self.pool)
            .await;
        match probe {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(SQLSTATE_NO_COLUMN) => {
                Err(outdated_workers_table(&add_holder_id(workers)))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Runs `UPDATE … SET {set}` (whose one `?`, if any, is `value`) on the row of `lease` if
    /// it still holds the lease's token and holder id; [`StoreError::LeaseLost`] otherwise.
    async fn update_held(
        &self,
        lease: &Lease,
        set: &str,
        value: Option<i64>,
    ) -> Result<(), StoreError> {
        let workers = self.workers_table.as_str();
        let (id, token, holder_id) = held_columns(lease)?;
        let sql = format!(
            "UPDATE {workers} SET {set} \
             WHERE space = ? AND worker_id = ? AND token = ? AND holder_id = ?"
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        if let Some(value) = value {
            query = query.bind(value);
        }
        let updated = query
            .bind(lease.space.as_str())
            .bind(id)
            .bind(token)
            .bind(holder_id)
            .execute(&self.pool)
            .await
            .map_err(unavailable)?
            .rows_affected();
        if updated == 1 { Ok(()) } else { Err(lease_lost(lease)) }
    }
}

/// SQLSTATE of an unknown column (MySQL's and MariaDB's error 1054).
const SQLSTATE_NO_COLUMN: &str = "42S22";

/// The statement that brings the lease table `workers` of an earlier idmint up to date.
fn add_holder_id(workers: &str) -> String {
    format!("ALTER TABLE {workers} ADD COLUMN holder_id char(32) NOT NULL DEFAULT ''")
}

/// The lease table: the key and holder in `utf8mb4_bin`, as the segment table's tags, so
/// spaces compare byte for byte.
pub(crate) fn workers_ddl(workers: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {workers} (\
         space varchar(64) NOT NULL, \
         worker_id bigint NOT NULL, \
         holder varchar(255) NOT NULL DEFAULT '', \
         token bigint NOT NULL, \
         expires_ms bigint NOT NULL, \
         time_mark bigint NOT NULL DEFAULT 0, \
         holder_id char(32) NOT NULL DEFAULT '', \
         PRIMARY KEY (space, worker_id)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// The assignment table, uid-generator's `WORKER_NODE` reduced to what idmint records.
pub(crate) fn worker_node_ddl(worker_node: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {worker_node} (\
         id bigint NOT NULL AUTO_INCREMENT, \
         space varchar(64) NOT NULL, \
         host varchar(255) NOT NULL, \
         port int NOT NULL, \
         launch_ms bigint NOT NULL, \
         PRIMARY KEY (id)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// `(token, expires_ms, time_mark)` of a row this transaction has just updated, as stored,
/// read under its row lock.
async fn select_own_row(
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
    workers: &str,
    space: &WorkerSpace,
    worker_id: u64,
) -> Result<(i64, i64, i64), StoreError> {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT token, expires_ms, time_mark FROM {workers} \
         WHERE space = ? AND worker_id = ? FOR UPDATE"
    )))
    .bind(space.as_str())
    .bind(column(worker_id))
    .fetch_one(&mut **tx)
    .await
    .map_err(unavailable)
}
