//! The PostgreSQL backend's [`WorkerStore`]: the lease and assignment tables in the store's
//! schema, each created on its first use (the lease table by the first lease, the assignment
//! table by the first assignment) when absent (under an advisory lock, so nodes starting
//! together do not race) and never altered (a lease table without the `holder_id` column,
//! made by an earlier idmint, is refused with the statement that adds it).
//!
//! Every step is one statement: claiming a never-held id is an
//! `INSERT … ON CONFLICT DO NOTHING` under the `(space, worker_id)` primary key (a racing
//! insert waits for the first to commit, then inserts nothing); a takeover and a renewal are
//! a conditional `UPDATE … RETURNING` on the token, the holder id and the expiry. Under READ
//! COMMITTED a second `UPDATE` of the same row waits for the first and re-checks its `WHERE`
//! against the row the first wrote, so it sees the new token and matches nothing. An
//! assignment takes the next value of an identity column in a transaction rolled back when
//! it is past `max_worker` (the sequence stays past it).
//!
//! Lease expiry is judged by the server's clock, read inside each statement that decides
//! ([`NOW_MS`]): `statement_timestamp()`, one instant for every row of a statement (unlike
//! `clock_timestamp()`, which moves while a scan runs) and the statement's own (unlike
//! `now()`, the start of a transaction that may have begun long before).
//!
//! It must not show a password: every error is scrubbed through the store's `unavailable`.

use async_trait::async_trait;
use sqlx::AssertSqlSafe;

use super::PgStore;
use crate::sql::TxConn;
use crate::worker::{
    FEATURE_ASSIGN, FEATURE_LEASES, LEASE_SCAN_PAGE, LeaseTable, RecordColumns, ScanRow,
    acquire_from, check_assign_request, check_renewal, check_time_ms, column, held_columns,
    holder_id_text, lease_lost, outdated_workers_table, renewed_lease, scan_row, server_now_ms,
    stored_record, won_lease,
};
use crate::{
    AssignRequest, LEASE_WORKER_ID_MAX, Lease, LeaseRecord, LeaseRequest, LeaseStore, StoreError,
    WorkerSpace, WorkerStore,
};

/// The server's clock in milliseconds since the Unix epoch, as SQL: the time lease expiry is
/// judged by.
const NOW_MS: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";
/// The server's clock in microseconds since the Unix epoch, as SQL: what a new lease token is
/// drawn from ([`next_token`](crate::next_token)).
const NOW_US: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000000))::bigint";

#[async_trait]
impl LeaseStore for PgStore {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        self.ensure_workers_table().await?;
        acquire_from(self, req).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease, StoreError> {
        let workers = self.options.workers_table.as_str();
        check_renewal(ttl_ms)?;
        let (id, token, holder_id) = held_columns(lease)?;
        let row = sqlx::query_as(AssertSqlSafe(format!(
            "UPDATE {workers} SET expires_ms = GREATEST(expires_ms, {NOW_MS} + $4) \
             WHERE space = $1 AND worker_id = $2 AND token = $3 AND expires_ms >= {NOW_MS} \
             AND holder_id = $5 RETURNING expires_ms, time_mark"
        )))
        .bind(lease.space.as_str())
        .bind(id)
        .bind(token)
        .bind(column(ttl_ms))
        .bind(holder_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.unavailable(e))?;
        renewed_lease(lease, id, row.ok_or_else(|| lease_lost(lease))?)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        // `update_held` binds `$4` for every use; here it adds nothing to the server's now.
        let set = format!("expires_ms = LEAST(expires_ms, {NOW_MS} + $4)");
        self.update_held(lease, &set, 0).await
    }

    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        check_time_ms("mark_ms", mark_ms)?;
        self.update_held(lease, "time_mark = GREATEST(time_mark, $4)", column(mark_ms)).await
    }

    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        let workers = self.options.workers_table.as_str();
        self.ensure_workers_table().await?;
        let rows: Vec<RecordColumns> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT worker_id, holder::text, token, expires_ms, time_mark FROM {workers} \
             WHERE space = $1 ORDER BY worker_id LIMIT {}",
            LEASE_WORKER_ID_MAX + 1
        )))
        .bind(space.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.unavailable(e))?;
        rows.into_iter().map(|row| stored_record(space, row)).collect()
    }

    async fn now_ms(&self) -> Result<u64, StoreError> {
        let now = sqlx::query_scalar(AssertSqlSafe(format!("SELECT {NOW_MS}")))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        server_now_ms(now)
    }
}

#[async_trait]
impl WorkerStore for PgStore {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        let worker_node = self.options.worker_node_table.as_str();
        check_assign_request(req)?;
        let tables = [(worker_node, worker_node_ddl(worker_node))];
        self.create_missing_tables_locked(worker_node, &tables, FEATURE_ASSIGN).await?;
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        let id: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "INSERT INTO {worker_node} (space, host, port, launch_ms) \
             VALUES ($1, $2, $3, $4) RETURNING id"
        )))
        .bind(req.space.as_str())
        .bind(req.host.as_str())
        .bind(i32::from(req.port))
        .bind(column(req.launch_ms))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| self.unavailable(e))?;
        match u64::try_from(id) {
            Ok(id) if id >= 1 && id <= req.max_worker => {
                tx.commit().await.map_err(|e| self.unavailable(e))?;
                Ok(id)
            }
            // Dropping the transaction rolls the row back; the sequence stays past it.
            _ => {
                Err(StoreError::WorkersExhausted { space: req.space.clone(), max: req.max_worker })
            }
        }
    }
}

#[async_trait]
impl LeaseTable for PgStore {
    async fn scan(
        &self,
        space: &WorkerSpace,
        from: u64,
        max: u64,
        margin_ms: u64,
    ) -> Result<Vec<ScanRow>, StoreError> {
        let workers = self.options.workers_table.as_str();
        let rows: Vec<(i64, i64, bool, i64)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT worker_id, token, expires_ms < {NOW_MS} - $4, time_mark FROM {workers} \
             WHERE space = $1 AND worker_id >= $2 AND worker_id <= $3 \
             ORDER BY worker_id LIMIT {LEASE_SCAN_PAGE}"
        )))
        .bind(space.as_str())
        .bind(column(from))
        .bind(column(max))
        .bind(column(margin_ms))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.unavailable(e))?;
        rows.into_iter().map(|row| scan_row(space, row)).collect()
    }

    async fn insert_lease(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError> {
        let workers = self.options.workers_table.as_str();
        let inserted: Option<(i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
            "INSERT INTO {workers} \
             (space, worker_id, holder, token, expires_ms, time_mark, holder_id) \
             VALUES ($1, $2, $3, {NOW_US}, {NOW_MS} + $4, 0, $5) \
             ON CONFLICT (space, worker_id) DO NOTHING RETURNING token, expires_ms"
        )))
        .bind(req.space.as_str())
        .bind(column(worker_id))
        .bind(req.holder.as_str())
        .bind(column(req.ttl_ms))
        .bind(holder_id_text(holder_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.unavailable(e))?;
        let Some((token, expires_ms)) = inserted else { return Ok(None) };
        won_lease(req, worker_id, holder_id, (token, expires_ms, 0)).map(Some)
    }

    async fn take_over(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        token: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError> {
        let workers = self.options.workers_table.as_str();
        let taken = sqlx::query_as(AssertSqlSafe(format!(
            "UPDATE {workers} \
             SET holder = $3, token = GREATEST(token + 1, {NOW_US}), expires_ms = {NOW_MS} + $4, \
             holder_id = $7 \
             WHERE space = $1 AND worker_id = $2 AND token = $5 \
             AND expires_ms < {NOW_MS} - $6 RETURNING token, expires_ms, time_mark"
        )))
        .bind(req.space.as_str())
        .bind(column(worker_id))
        .bind(req.holder.as_str())
        .bind(column(req.ttl_ms))
        .bind(column(token))
        .bind(column(req.margin_ms))
        .bind(holder_id_text(holder_id))
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.unavailable(e))?;
        taken.map(|row| won_lease(req, worker_id, holder_id, row)).transpose()
    }
}

impl PgStore {
    /// Creates the lease table when absent (the assignment table is made only when an id is
    /// first assigned).
    async fn ensure_workers_table(&self) -> Result<(), StoreError> {
        let workers = self.options.workers_table.as_str();
        let tables = [(workers, workers_ddl(workers))];
        self.create_missing_tables_locked(workers, &tables, FEATURE_LEASES).await?;
        // A lease table of an earlier idmint lacks the holder id; without it a deleted or
        // restored row would let two nodes prove one lease, so it is refused, naming the fix.
        let probe = sqlx::query(AssertSqlSafe(format!("SELECT holder_id FROM {workers} LIMIT 0")))
            .fetch_optional(&self.pool)
            .await;
        match probe {
            Ok(_) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(SQLSTATE_NO_COLUMN) => {
                Err(outdated_workers_table(&add_holder_id(workers)))
            }
            Err(e) => Err(self.unavailable(e)),
        }
    }

    /// Runs `UPDATE … SET {set}` (which reads `$4` as `value`) on the row of `lease` if it
    /// still holds the lease's token and holder id; [`StoreError::LeaseLost`] otherwise.
    async fn update_held(&self, lease: &Lease, set: &str, value: i64) -> Result<(), StoreError> {
        let workers = self.options.workers_table.as_str();
        let (id, token, holder_id) = held_columns(lease)?;
        let updated = sqlx::query(AssertSqlSafe(format!(
            "UPDATE {workers} SET {set} \
             WHERE space = $1 AND worker_id = $2 AND token = $3 AND holder_id = $5"
        )))
        .bind(lease.space.as_str())
        .bind(id)
        .bind(token)
        .bind(value)
        .bind(holder_id)
        .execute(&self.pool)
        .await
        .map_err(|e| self.unavailable(e))?
        .rows_affected();
        if updated == 1 { Ok(()) } else { Err(lease_lost(lease)) }
    }
}

/// SQLSTATE `undefined_column`.
const SQLSTATE_NO_COLUMN: &str = "42703";

/// The statement that brings the lease table `workers` of an earlier idmint up to date.
fn add_holder_id(workers: &str) -> String {
    format!("ALTER TABLE {workers} ADD COLUMN holder_id varchar(32) NOT NULL DEFAULT ''")
}

/// The lease table.
pub(crate) fn workers_ddl(workers: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {workers} (
            space      varchar(64)  NOT NULL,
            worker_id  bigint       NOT NULL,
            holder     varchar(255) NOT NULL DEFAULT '',
            token      bigint       NOT NULL,
            expires_ms bigint       NOT NULL,
            time_mark  bigint       NOT NULL DEFAULT 0,
            holder_id  varchar(32)  NOT NULL DEFAULT '',
            PRIMARY KEY (space, worker_id)
        )"
    )
}

/// The assignment table, uid-generator's `WORKER_NODE` reduced to what idmint records.
pub(crate) fn worker_node_ddl(worker_node: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {worker_node} (
            id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            space     varchar(64)  NOT NULL,
            host      varchar(255) NOT NULL,
            port      integer      NOT NULL,
            launch_ms bigint       NOT NULL
        )"
    )
}
