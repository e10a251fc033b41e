//! The PostgreSQL backend's [`SequenceStore`](crate::SequenceStore), written in
//! `sql/sequences.rs` but for its steps here: the definitions and ceilings tables in the
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

use idmint_core::Tag;
use idmint_core::limits::TAG_LEN_MAX;
use sqlx::AssertSqlSafe;

use super::{PgStore, advisory_lock};
use crate::sequence::{
    CEILING_MAX, PERIOD_LEN_MAX, SEQUENCE_FORMAT_LEN_MAX, TIME_ZONE_LEN_MAX, bigint,
    ceiling_overflow, check_sequence_count, sequence_exists, stored_ceiling,
};
use crate::sql::{Attempt, TxConn};
use crate::{CEILINGS_TABLE, SEQUENCES_TABLE, SequenceRecord, SequenceSpec};

crate::sql::sequence_store!(PgStore);

impl PgStore {
    /// The definition columns as idmint reads them (`DefinitionColumns`): `daily`, a
    /// `boolean`, as 0 or 1.
    const SEQUENCE_COLUMNS: &str =
        "name::text, daily::int::int8, format::text, time_zone::text, created_ms";

    /// One raise: one statement, and a read of the ceiling when it refused.
    async fn raise_once(&self, name: &Tag, period: &str, by: u64) -> Attempt<u64> {
        let c = CEILINGS_TABLE;
        // `$4 - $3` cannot overflow: both are in 0..=i64::MAX. A missing row starts at `by`,
        // which check_raise bounds by CEILING_MAX.
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
