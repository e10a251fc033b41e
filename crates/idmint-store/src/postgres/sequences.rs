//! The PostgreSQL backend's [`SequenceStore`]: the definitions and ceilings tables in the
//! store's schema, created on first use when absent (under an advisory lock, so nodes starting
//! together do not race) and never altered.
//!
//! A raise is one `INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING`: a missing row is
//! inserted at `by`, an existing one grows by `by` unless that would pass
//! [`CEILING_MAX`](crate::CEILING_MAX), in which case nothing is written and no row returned.
//! PostgreSQL makes the insert-or-update atomic: of two racing raises the second waits for
//! the first's row and adds to the value it committed. Creating counts and inserts under an
//! advisory lock, so the count of sequences stays exact across nodes; deleting is one
//! statement.
//!
//! It must not show a password: every error is scrubbed through the store's `unavailable`.

use std::future::Future;

use async_trait::async_trait;
use idmint_core::Tag;
use idmint_core::limits::TAG_LEN_MAX;
use sqlx::AssertSqlSafe;

use super::{PgStore, advisory_lock};
use crate::sequence::{
    CEILING_MAX, PERIOD_LEN_MAX, SEQUENCE_COUNT_MAX, SEQUENCE_FORMAT_LEN_MAX, TIME_ZONE_LEN_MAX,
    bigint, ceiling_overflow, check_period, check_raise, check_sequence_count, check_spec,
    sequence_exists, stored_ceiling, stored_sequence,
};
use crate::sql::{Attempt, TxConn};
use crate::{
    CEILINGS_TABLE, SEQUENCES_TABLE, SequenceRecord, SequenceSpec, SequenceStore, StoreError,
    servable_rows,
};

const COLUMNS: &str = "name::text, daily, format::text, time_zone::text, created_ms";

/// A definition row of [`COLUMNS`]: `daily` is a `boolean`.
type Definition = (String, bool, Option<String>, String, i64);

/// The record of a definition row, or why idmint cannot serve it.
fn definition(
    (name, daily, format, zone, created_ms): Definition,
) -> Result<SequenceRecord, StoreError> {
    stored_sequence((name, i64::from(daily), format, zone, created_ms))
}

#[async_trait]
impl SequenceStore for PgStore {
    async fn create_sequence(&self, spec: &SequenceSpec) -> Result<SequenceRecord, StoreError> {
        check_spec(spec)?;
        self.with_sequence_tables(|| self.create_once(spec)).await
    }

    async fn get_sequence(&self, name: &Tag) -> Result<Option<SequenceRecord>, StoreError> {
        self.with_sequence_tables(|| async {
            let row: Option<Definition> = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM {SEQUENCES_TABLE} WHERE name = $1"
            )))
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await?;
            Ok(row.map(definition).transpose())
        })
        .await
    }

    async fn list_sequences(&self) -> Result<Vec<SequenceRecord>, StoreError> {
        let rows: Vec<Definition> = self
            .with_sequence_tables(|| async {
                // COLLATE "C": byte order, which is how names order in every backend.
                let rows = sqlx::query_as(AssertSqlSafe(format!(
                    "SELECT {COLUMNS} FROM {SEQUENCES_TABLE} \
                     ORDER BY name COLLATE \"C\" LIMIT {SEQUENCE_COUNT_MAX}"
                )))
                .fetch_all(&self.pool)
                .await?;
                Ok(Ok(rows))
            })
            .await?;
        Ok(servable_rows(rows.into_iter().map(definition), "sequence"))
    }

    async fn delete_sequence(&self, name: &Tag) -> Result<(), StoreError> {
        // One statement, so no transaction of its own.
        self.with_sequence_tables(|| async {
            let deleted = sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {SEQUENCES_TABLE} WHERE name = $1"
            )))
            .bind(name.as_str())
            .execute(&self.pool)
            .await?
            .rows_affected();
            Ok(if deleted == 0 { Err(StoreError::TagNotFound(name.clone())) } else { Ok(()) })
        })
        .await
    }

    async fn ceiling(&self, name: &Tag, period: &str) -> Result<u64, StoreError> {
        check_period(period)?;
        self.with_sequence_tables(|| async {
            let value: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT max_value FROM {CEILINGS_TABLE} WHERE name = $1 AND period = $2"
            )))
            .bind(name.as_str())
            .bind(period)
            .fetch_optional(&self.pool)
            .await?;
            Ok(stored_ceiling(name, period, value))
        })
        .await
    }

    async fn raise_ceiling(&self, name: &Tag, period: &str, by: u64) -> Result<u64, StoreError> {
        check_raise(period, by)?;
        let c = CEILINGS_TABLE;
        self.with_sequence_tables(|| async {
            // One statement. `$4 - $3` cannot overflow: both are in 0..=i64::MAX. A missing
            // row starts at `by`, which check_raise bounds by CEILING_MAX.
            let raised: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
                "INSERT INTO {c} (name, period, max_value) VALUES ($1, $2, $3) \
                 ON CONFLICT (name, period) DO UPDATE SET max_value = {c}.max_value + $3 \
                 WHERE {c}.max_value <= $4 - $3 \
                 RETURNING {c}.max_value"
            )))
            .bind(name.as_str())
            .bind(period)
            .bind(bigint(by))
            .bind(bigint(CEILING_MAX))
            .fetch_optional(&self.pool)
            .await?;
            if let Some(value) = raised {
                return Ok(stored_ceiling(name, period, Some(value)));
            }
            let current: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT max_value FROM {c} WHERE name = $1 AND period = $2"
            )))
            .bind(name.as_str())
            .bind(period)
            .fetch_optional(&self.pool)
            .await?;
            Ok(Err(ceiling_overflow(name, period, stored_ceiling(name, period, current), by)))
        })
        .await
    }
}

impl PgStore {
    /// [`PgStore::with_tables`] for the sequence tables, made on first use.
    async fn with_sequence_tables<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        self.with_tables(|| self.ensure_sequence_tables(), attempt).await?
    }

    /// Creates each sequence table when absent, never altering one that exists, under the
    /// sequences' advisory lock.
    async fn ensure_sequence_tables(&self) -> Result<(), StoreError> {
        let tables = [(SEQUENCES_TABLE, sequences_ddl()), (CEILINGS_TABLE, ceilings_ddl())];
        self.create_missing_tables_locked(SEQUENCES_TABLE, &tables, "sequences").await
    }

    /// One creation: count, then insert, under the sequences' advisory lock.
    async fn create_once(&self, spec: &SequenceSpec) -> Attempt<SequenceRecord> {
        let mut conn = TxConn::acquire(&self.pool).await?;
        let mut tx = conn.begin().await?;
        advisory_lock(&mut tx, SEQUENCES_TABLE).await?;
        let count: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {SEQUENCES_TABLE}")))
                .fetch_one(&mut *tx)
                .await?;
        if let Err(refusal) = check_sequence_count(count) {
            return Ok(Err(refusal));
        }
        let inserted = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {SEQUENCES_TABLE} (name, daily, format, time_zone, created_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING"
        )))
        .bind(spec.name.as_str())
        .bind(spec.daily)
        .bind(spec.format.as_deref())
        .bind(spec.time_zone.as_str())
        .bind(bigint(spec.created_ms))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            return Ok(Err(sequence_exists(&spec.name)));
        }
        tx.commit().await?;
        Ok(Ok(spec.clone()))
    }
}

/// The definitions table.
pub(crate) fn sequences_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {SEQUENCES_TABLE} (
            name       varchar({TAG_LEN_MAX}) NOT NULL PRIMARY KEY,
            daily      boolean NOT NULL,
            format     varchar({SEQUENCE_FORMAT_LEN_MAX}),
            time_zone  varchar({TIME_ZONE_LEN_MAX}) NOT NULL,
            created_ms bigint  NOT NULL
        )"
    )
}

/// The ceilings table.
pub(crate) fn ceilings_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {CEILINGS_TABLE} (
            name      varchar({TAG_LEN_MAX}) NOT NULL,
            period    varchar({PERIOD_LEN_MAX}) NOT NULL,
            max_value bigint NOT NULL,
            PRIMARY KEY (name, period)
        )"
    )
}
