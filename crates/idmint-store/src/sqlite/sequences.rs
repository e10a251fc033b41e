//! The SQLite backend's [`SequenceStore`]: the definitions and ceilings tables in the same
//! file as the segments, STRICT, created on first use when absent and never altered.
//!
//! A raise is one `INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING`: a missing row is
//! inserted at `by`, an existing one grows by `by` unless that would pass
//! [`CEILING_MAX`](crate::CEILING_MAX), in which case nothing is written and nothing
//! returned. SQLite runs one writer at a time per file, so raises from several connections
//! and processes each see the previous one's result. Creating (count, then insert) and
//! deleting (definition and ceilings) run in immediate transactions.

use async_trait::async_trait;
use idmint_core::Tag;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{SqliteStore, immediate, unavailable, write_returning};
use crate::sequence::{
    CEILING_MAX, DefinitionColumns, SEQUENCE_COUNT_MAX, bigint, ceiling_overflow, check_period,
    check_raise, check_sequence_count, check_spec, sequence_exists, stored_ceiling,
    stored_sequence,
};
use crate::servable_rows;
use crate::{
    CEILINGS_TABLE, SEQUENCES_TABLE, SequenceRecord, SequenceSpec, SequenceStore, StoreError,
};

const COLUMNS: &str = "name, daily, format, time_zone, created_ms";

#[async_trait]
impl SequenceStore for SqliteStore {
    async fn create_sequence(&self, spec: &SequenceSpec) -> Result<SequenceRecord, StoreError> {
        check_spec(spec)?;
        let spec = spec.clone();
        self.call(move |conn| {
            ensure_tables(conn)?;
            // Immediate: the write lock is taken before counting, so the count holds until
            // the insert commits.
            let tx = immediate(conn)?;
            let count: i64 = tx
                .query_row(&format!("SELECT count(*) FROM {SEQUENCES_TABLE}"), [], |r| r.get(0))
                .map_err(unavailable)?;
            check_sequence_count(count)?;
            let inserted = tx
                .execute(
                    &format!(
                        "INSERT INTO {SEQUENCES_TABLE} ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5) \
                         ON CONFLICT (name) DO NOTHING"
                    ),
                    params![
                        spec.name.as_str(),
                        spec.daily,
                        spec.format,
                        spec.time_zone,
                        bigint(spec.created_ms)
                    ],
                )
                .map_err(unavailable)?;
            if inserted == 0 {
                return Err(sequence_exists(&spec.name));
            }
            tx.commit().map_err(unavailable)?;
            Ok(spec)
        })
        .await
    }

    async fn get_sequence(&self, name: &Tag) -> Result<Option<SequenceRecord>, StoreError> {
        let name = name.clone();
        self.call(move |conn| {
            ensure_tables(conn)?;
            let row = conn
                .query_row(
                    &format!("SELECT {COLUMNS} FROM {SEQUENCES_TABLE} WHERE name = ?1"),
                    [name.as_str()],
                    read_columns,
                )
                .optional()
                .map_err(unavailable)?;
            row.map(stored_sequence).transpose()
        })
        .await
    }

    async fn list_sequences(&self) -> Result<Vec<SequenceRecord>, StoreError> {
        self.call(|conn| {
            ensure_tables(conn)?;
            let mut statement = conn
                .prepare(&format!(
                    "SELECT {COLUMNS} FROM {SEQUENCES_TABLE} ORDER BY name \
                     LIMIT {SEQUENCE_COUNT_MAX}"
                ))
                .map_err(unavailable)?;
            let rows = statement.query_map([], read_columns).map_err(unavailable)?;
            let rows = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(unavailable)?;
            Ok(servable_rows(rows.into_iter().map(stored_sequence), "sequence"))
        })
        .await
    }

    async fn delete_sequence(&self, name: &Tag) -> Result<(), StoreError> {
        let name = name.clone();
        self.call(move |conn| {
            ensure_tables(conn)?;
            let tx = immediate(conn)?;
            let deleted = tx
                .execute(&format!("DELETE FROM {SEQUENCES_TABLE} WHERE name = ?1"), [name.as_str()])
                .map_err(unavailable)?;
            if deleted == 0 {
                // Dropping the transaction rolls it back (it changed nothing anyway).
                return Err(StoreError::TagNotFound(name));
            }
            tx.commit().map_err(unavailable)
        })
        .await
    }

    async fn ceiling(&self, name: &Tag, period: &str) -> Result<u64, StoreError> {
        check_period(period)?;
        let (name, period) = (name.clone(), period.to_string());
        self.call(move |conn| {
            ensure_tables(conn)?;
            select_ceiling(conn, &name, &period)
        })
        .await
    }

    async fn raise_ceiling(&self, name: &Tag, period: &str, by: u64) -> Result<u64, StoreError> {
        check_raise(period, by)?;
        let (name, period) = (name.clone(), period.to_string());
        self.call(move |conn| {
            ensure_tables(conn)?;
            // One statement. `?4 - ?3` cannot overflow: both are in 0..=i64::MAX. A missing
            // row starts at `by`, which check_raise bounds by CEILING_MAX.
            // Run to its end: the ceiling is answered only once it committed.
            let raised: Option<i64> = write_returning(
                conn,
                &format!(
                    "INSERT INTO {CEILINGS_TABLE} (name, period, max_value) \
                     VALUES (?1, ?2, ?3) \
                     ON CONFLICT (name, period) DO UPDATE SET max_value = max_value + ?3 \
                     WHERE max_value <= ?4 - ?3 \
                     RETURNING max_value"
                ),
                params![name.as_str(), period, bigint(by), bigint(CEILING_MAX)],
                |row| row.get(0),
            )
            .map_err(unavailable)?;
            match raised {
                Some(value) => stored_ceiling(&name, &period, Some(value)),
                None => {
                    Err(ceiling_overflow(&name, &period, select_ceiling(conn, &name, &period), by))
                }
            }
        })
        .await
    }
}

/// Creates both sequence tables when absent; an existing table is used as it is.
fn ensure_tables(conn: &mut Connection) -> Result<(), StoreError> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {SEQUENCES_TABLE} (
            name       TEXT    NOT NULL PRIMARY KEY,
            daily      INTEGER NOT NULL,
            format     TEXT,
            time_zone  TEXT    NOT NULL,
            created_ms INTEGER NOT NULL
        ) STRICT;
        CREATE TABLE IF NOT EXISTS {CEILINGS_TABLE} (
            name       TEXT    NOT NULL,
            period     TEXT    NOT NULL,
            max_value  INTEGER NOT NULL,
            PRIMARY KEY (name, period)
        ) STRICT;"
    ))
    .map_err(unavailable)
}

fn select_ceiling(conn: &Connection, name: &Tag, period: &str) -> Result<u64, StoreError> {
    let value: Option<i64> = conn
        .query_row(
            &format!("SELECT max_value FROM {CEILINGS_TABLE} WHERE name = ?1 AND period = ?2"),
            params![name.as_str(), period],
            |row| row.get(0),
        )
        .optional()
        .map_err(unavailable)?;
    stored_ceiling(name, period, value)
}

fn read_columns(row: &Row<'_>) -> rusqlite::Result<DefinitionColumns> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
}
