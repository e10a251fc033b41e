//! The MySQL / MariaDB backend's [`SequenceStore`](crate::SequenceStore), written in
//! `sql/sequences.rs` but for its steps here: the definitions and ceilings tables in the
//! store's database (InnoDB, `utf8mb4_bin`, so names compare byte for byte), created on first
//! use when absent and never altered.
//!
//! A raise is one text query, so one round trip: an insert of the `(name, period)` row at 0
//! when it is absent (0 is what a never-raised ceiling reads as, so this changes no ceiling),
//! then the raise itself, one
//! `UPDATE … SET max_value = LAST_INSERT_ID(max_value + by) WHERE … AND max_value <= MAX - by`,
//! then a `SELECT` of `ROW_COUNT()` and `LAST_INSERT_ID()`, which are per connection: 1 and
//! the new ceiling when this update raised it, 0 when the guard refused (nothing written).
//! MariaDB has no `UPDATE … RETURNING`. InnoDB's row lock makes concurrent raises queue, each
//! adding to the value the previous one committed. Creating takes a named lock
//! (`GET_LOCK`), so the count of sequences stays exact across nodes; deleting is one
//! statement.
//!
//! It must not show a password: errors come from queries, which carry none.

use idmint_core::Tag;
use idmint_core::limits::TAG_LEN_MAX;
use sqlx::{AssertSqlSafe, Row};

use super::{CREATE_LOCK_WAIT_S, MySqlStore, NamedLock, utf8mb4_literal};
use crate::sequence::{
    CEILING_MAX, PERIOD_LEN_MAX, SEQUENCE_FORMAT_LEN_MAX, TIME_ZONE_LEN_MAX, bigint,
    ceiling_overflow, check_sequence_count, sequence_exists, stored_ceiling,
};
use crate::sql::Attempt;
use crate::{CEILINGS_TABLE, SEQUENCES_TABLE, SequenceRecord, SequenceSpec, StoreError};

/// The named lock that serializes creators, per database (64 characters at most).
const CREATE_LOCK_NAME: &str = "CONCAT('idmint.sequences.', MD5(DATABASE()))";

crate::sql::sequence_store!(MySqlStore);

impl MySqlStore {
    /// The definition columns as idmint reads them (`DefinitionColumns`): numbers cast to
    /// signed 64-bit integers.
    const SEQUENCE_COLUMNS: &str =
        "name, CAST(daily AS SIGNED), format, time_zone, CAST(created_ms AS SIGNED)";

    /// One creation under the creators' named lock: count, then insert.
    async fn create_once(&self, spec: &SequenceSpec) -> Attempt<SequenceRecord> {
        let get = format!("SELECT GET_LOCK({CREATE_LOCK_NAME}, {CREATE_LOCK_WAIT_S})");
        let Some(mut lock) = NamedLock::acquire(&self.pool, &get).await? else {
            return Ok(Err(StoreError::Unavailable(format!(
                "MySQL: another node has been creating a sequence for {CREATE_LOCK_WAIT_S} s; \
                 retry"
            ))));
        };
        // A database error returns with the lock still held: dropping it closes the
        // connection, which releases the lock.
        let count: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {SEQUENCES_TABLE}")))
                .fetch_one(&mut *lock.conn)
                .await?;
        let outcome = if let Err(refusal) = check_sequence_count(count) {
            Err(refusal)
        } else {
            let inserted = sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {SEQUENCES_TABLE} (name, daily, format, time_zone, created_ms) \
                 VALUES (?, ?, ?, ?, ?)"
            )))
            .bind(spec.name.as_str())
            .bind(spec.daily)
            .bind(spec.format.as_deref())
            .bind(spec.time_zone.as_str())
            .bind(bigint(spec.created_ms))
            .execute(&mut *lock.conn)
            .await;
            match inserted {
                Ok(_) => Ok(spec.clone()),
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                    Err(sequence_exists(&spec.name))
                }
                Err(e) => return Err(e),
            }
        };
        lock.release(&format!("SELECT RELEASE_LOCK({CREATE_LOCK_NAME})")).await;
        Ok(outcome)
    }

    /// One raise, in one round trip (see the module's documentation).
    ///
    /// Writing values into the SQL is safe: the name is written in hex (by
    /// [`utf8mb4_literal`]), a period only digits (by [`period_literal`]), the rest are
    /// integers.
    async fn raise_once(&self, name: &Tag, period: &str, by: u64) -> Attempt<u64> {
        let (n, p) = (utf8mb4_literal(name), period_literal(period));
        // check_raise bounds `by` by CEILING_MAX, so the guard cannot underflow.
        let room = CEILING_MAX - by;
        let statement = format!(
            "INSERT INTO {CEILINGS_TABLE} (name, period, max_value) VALUES ({n}, '{p}', 0) \
             ON DUPLICATE KEY UPDATE max_value = max_value; \
             UPDATE {CEILINGS_TABLE} SET max_value = LAST_INSERT_ID(max_value + {by}) \
             WHERE name = {n} AND period = '{p}' AND max_value <= {room}; \
             SELECT ROW_COUNT(), CAST(LAST_INSERT_ID() AS SIGNED), \
             (SELECT CAST(max_value AS SIGNED) FROM {CEILINGS_TABLE} \
             WHERE name = {n} AND period = '{p}')"
        );
        let rows = sqlx::raw_sql(AssertSqlSafe(statement)).fetch_all(&self.pool).await?;
        let [row] = rows.as_slice() else {
            return Ok(Err(StoreError::Unavailable(format!(
                "MySQL: the ceiling raise of sequence {name} returned {} rows instead of 1",
                rows.len()
            ))));
        };
        let raised: i64 = row.try_get(0)?;
        let value: i64 = row.try_get(1)?;
        let current: Option<i64> = row.try_get(2)?;
        Ok(match raised {
            // ROW_COUNT() = 1: this update set LAST_INSERT_ID() on this connection, from the
            // one row it changed, so the value is not stale.
            1 => stored_ceiling(name, period, Some(value)),
            0 => Err(ceiling_overflow(name, period, stored_ceiling(name, period, current), by)),
            raised => Err(StoreError::Corrupt {
                tag: name.to_string(),
                reason: format!(
                    "{raised} rows of table {CEILINGS_TABLE} have period {period:?}; the table \
                     needs a primary key on (name, period)"
                ),
            }),
        })
    }
}

/// The definitions table.
pub(crate) fn sequences_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {SEQUENCES_TABLE} (\
         name varchar({TAG_LEN_MAX}) NOT NULL, \
         daily tinyint NOT NULL, \
         format varchar({SEQUENCE_FORMAT_LEN_MAX}) DEFAULT NULL, \
         time_zone varchar({TIME_ZONE_LEN_MAX}) NOT NULL, \
         created_ms bigint NOT NULL, \
         PRIMARY KEY (name)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// The ceilings table.
pub(crate) fn ceilings_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {CEILINGS_TABLE} (\
         name varchar({TAG_LEN_MAX}) NOT NULL, \
         period varchar({PERIOD_LEN_MAX}) NOT NULL, \
         max_value bigint NOT NULL, \
         PRIMARY KEY (name, period)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}

/// The period as it may appear between single quotes in SQL.
fn period_literal(period: &str) -> &str {
    // check_raise guarantees this; the SQL's safety rests on it, so it is checked where the
    // SQL is written.
    assert!(
        period.len() <= PERIOD_LEN_MAX && period.bytes().all(|b| b.is_ascii_digit()),
        "period {period:?} holds a character that is unsafe in SQL"
    );
    period
}
