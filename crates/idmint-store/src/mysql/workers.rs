//! The MySQL / MariaDB backend's [`WorkerStore`](crate::WorkerStore), written in
//! `sql/workers.rs` but for its steps here: the lease and assignment tables in the store's
//! database (InnoDB, `utf8mb4_bin`), the server's clock, and the writes that hand back a row.
//!
//! MariaDB has no `UPDATE … RETURNING`, so a winning write is followed, in the same
//! transaction and under the row lock it took, by a `SELECT … FOR UPDATE` of what it wrote; a
//! claim that loses to a racing insert fails with a duplicate key. The driver asks for
//! `CLIENT_FOUND_ROWS`, so a matched row counts even when a `GREATEST` leaves it unchanged. An
//! assignment's id is the `AUTO_INCREMENT` value of its insert.
//!
//! Lease expiry and tokens come from `UTC_TIMESTAMP(6)`, fixed at the start of the statement,
//! so every row of a scan is judged at one instant, and UTC, so no session time zone or
//! daylight-saving change moves it.
//!
//! It must not show a password: errors come from queries, which carry none.

use sqlx::mysql::MySqlArguments;
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, MySql};

use super::{MySqlStore, refused, unavailable};
use crate::sql::TxConn;
use crate::worker::{FEATURE_ASSIGN, column};
use crate::{StoreError, WorkerSpace};

/// The server's clock in milliseconds since the Unix epoch, as SQL: the time lease expiry is
/// judged by. Arithmetic on a UTC datetime, so the session's time zone plays no part.
const NOW_MS: &str =
    "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
/// The server's clock in microseconds since the Unix epoch, as SQL: what a new lease token is
/// drawn from ([`next_token`](crate::next_token)).
const NOW_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

crate::sql::lease_store!(MySqlStore);

impl MySqlStore {
    /// The lease and assignment tables.
    fn worker_tables(&self) -> (&str, &str) {
        (&self.workers_table, &self.worker_node_table)
    }

    /// Runs `write` on the row of `(space, worker_id)` in a transaction and hands the row as
    /// written, `(token, expires_ms, time_mark)` read under the row lock the write took, to
    /// `won`, committing only when `won` accepts it. `None`, changing nothing, when the write
    /// matched no row or hit a duplicate key.
    async fn write_lease_row<T>(
        &self,
        write: Query<'_, MySql, MySqlArguments>,
        space: &WorkerSpace,
        worker_id: u64,
        won: impl FnOnce((i64, i64, i64)) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let mut conn = TxConn::acquire(&self.pool).await.map_err(unavailable)?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        match write.execute(&mut *tx).await {
            Ok(done) if done.rows_affected() == 1 => {}
            // Dropping the transaction rolls it back.
            Ok(_) => return Ok(None),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(unavailable(e)),
        }
        let row = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT token, expires_ms, time_mark FROM {} \
             WHERE space = ? AND worker_id = ? FOR UPDATE",
            self.workers_table
        )))
        .bind(space.as_str())
        .bind(column(worker_id))
        .fetch_one(&mut *tx)
        .await
        .map_err(unavailable)?;
        let won = won(row)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(Some(won))
    }

    /// The id `insert` gave its row, run in `tx`: the `AUTO_INCREMENT` value.
    async fn inserted_id(
        &self,
        insert: Query<'_, MySql, MySqlArguments>,
        tx: &mut sqlx::Transaction<'_, MySql>,
    ) -> Result<u64, StoreError> {
        let done = insert.execute(&mut **tx).await.map_err(|e| refused(FEATURE_ASSIGN, e))?;
        Ok(done.last_insert_id())
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
