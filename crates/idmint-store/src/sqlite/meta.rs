//! The SQLite backend's [`TagMetaStore`]: the metadata table in the same file as the
//! segments, STRICT, created on first use when absent and never altered.
//!
//! A compare-and-set is one statement: from no value, an `INSERT … ON CONFLICT DO NOTHING`;
//! from a value, an `UPDATE … WHERE value = ?`. Either changes one row or none, and SQLite
//! runs one writer at a time per file, so of two racing calls from one value one changes it.
//! Text compares byte for byte (SQLite's `BINARY` collation).

use async_trait::async_trait;
use idmint_core::Tag;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, unavailable};
use crate::meta::{check_cas, check_name, stored_values};
use crate::{StoreError, TAG_META_TABLE, TagMetaStore};

#[async_trait]
impl TagMetaStore for SqliteStore {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        check_name(name)?;
        let (tag, name) = (tag.clone(), name.to_string());
        self.call(move |conn| {
            ensure_table(conn)?;
            conn.query_row(
                &format!("SELECT value FROM {TAG_META_TABLE} WHERE tag = ?1 AND name = ?2"),
                params![tag.as_str(), name],
                |row| row.get(0),
            )
            .optional()
            .map_err(unavailable)
        })
        .await
    }

    async fn compare_and_set_meta(
        &self,
        tag: &Tag,
        name: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError> {
        check_cas(name, expected, new)?;
        let (tag, name) = (tag.clone(), name.to_string());
        let (expected, new) = (expected.map(str::to_string), new.to_string());
        self.call(move |conn| {
            ensure_table(conn)?;
            let changed = match expected {
                None => conn.execute(
                    &format!(
                        "INSERT INTO {TAG_META_TABLE} (tag, name, value) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (tag, name) DO NOTHING"
                    ),
                    params![tag.as_str(), name, new],
                ),
                Some(expected) => conn.execute(
                    &format!(
                        "UPDATE {TAG_META_TABLE} SET value = ?3 \
                         WHERE tag = ?1 AND name = ?2 AND value = ?4"
                    ),
                    params![tag.as_str(), name, new, expected],
                ),
            }
            .map_err(unavailable)?;
            Ok(changed == 1)
        })
        .await
    }

    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError> {
        check_name(name)?;
        let name = name.to_string();
        let rows: Vec<(String, String)> = self
            .call(move |conn| {
                ensure_table(conn)?;
                let sql = format!("SELECT tag, value FROM {TAG_META_TABLE} WHERE name = ?1");
                let mut statement = conn.prepare(&sql).map_err(unavailable)?;
                let rows = statement.query_map(params![name], |row| Ok((row.get(0)?, row.get(1)?)));
                rows.and_then(Iterator::collect).map_err(unavailable)
            })
            .await?;
        stored_values(rows)
    }
}

/// Creates the metadata table when absent; an existing table is used as it is.
fn ensure_table(conn: &mut Connection) -> Result<(), StoreError> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {TAG_META_TABLE} (
            tag   TEXT NOT NULL,
            name  TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (tag, name)
        ) STRICT;"
    ))
    .map_err(unavailable)
}
