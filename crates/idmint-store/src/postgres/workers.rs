//! The PostgreSQL backend's [`WorkerStore`](crate::WorkerStore), written in
//! `sql/workers.rs` but for its steps here: the lease and assignment tables in the store's
//! schema (created under an advisory lock, so nodes starting together do not race), the
//! server's clock, and the writes that hand back a row.
//!
//! Every write is one statement that returns what it wrote (`RETURNING`). A claim is an
//! `INSERT … ON CONFLICT DO NOTHING`: a racing insert waits for the first to commit, then
//! inserts nothing. Under READ COMMITTED a second `UPDATE` of the same row waits for the first
//! and re-checks its `WHERE` against the row the first wrote. An assignment's id is the next
//! value of an identity column.
//!
//! Lease expiry and tokens come from `statement_timestamp()`: one instant for every row of a
//! statement (unlike `clock_timestamp()`, which moves while a scan runs) and the statement's
//! own (unlike `now()`, the start of a transaction that may have begun long before).
//!
//! It must not show a password: every error is scrubbed through the store's `unavailable`.

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{FromRow, Postgres, Row};

use super::PgStore;
use crate::StoreError;
use crate::WorkerSpace;
use crate::sql::Dialect;

/// The server's clock in milliseconds since the Unix epoch, as SQL: the time lease expiry is
/// judged by.
const NOW_MS: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint";
/// The server's clock in microseconds since the Unix epoch, as SQL: what a new lease token is
/// drawn from ([`next_token`](crate::next_token)).
const NOW_US: &str = "(floor(extract(epoch FROM statement_timestamp()) * 1000000))::bigint";

crate::sql::lease_store!(PgStore);

impl PgStore {
    /// The lease and assignment tables.
    fn worker_tables(&self) -> (&str, &str) {
        (self.options.workers_table.as_str(), self.options.worker_node_table.as_str())
    }

    /// Runs `write`, which returns `(token, expires_ms, time_mark)` as written, and hands
    /// that row to `won`; `None` when the write matched no row or inserted none.
    async fn write_lease_row<T>(
        &self,
        write: Query<'_, Postgres, PgArguments>,
        _space: &WorkerSpace,
        _worker_id: u64,
        won: impl FnOnce((i64, i64, i64)) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let Some(row) = write.fetch_optional(&self.pool).await.map_err(|e| self.unavailable(e))?
        else {
            return Ok(None);
        };
        won(FromRow::from_row(&row).map_err(|e| self.unavailable(e))?).map(Some)
    }

    /// The id `insert` returned for its row, run in `tx` (a negative one as 0, never valid).
    async fn inserted_id(
        &self,
        insert: Query<'_, Postgres, PgArguments>,
        tx: &mut sqlx::Transaction<'_, Postgres>,
    ) -> Result<u64, StoreError> {
        let row = insert.fetch_one(&mut **tx).await.map_err(|e| self.unavailable(e))?;
        let id: i64 = row.try_get(0).map_err(|e| self.unavailable(e))?;
        Ok(u64::try_from(id).unwrap_or(0))
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
