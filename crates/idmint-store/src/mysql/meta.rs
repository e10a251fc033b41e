//! The MySQL / MariaDB backend's [`TagMetaStore`]: the metadata table in the store's database
//! (InnoDB, `utf8mb4_bin`, so tags and names compare byte for byte), created on first use
//! when absent and never altered.
//!
//! A compare-and-set is one statement: from no value, a plain `INSERT`, which the primary key
//! refuses when a row is there (`false`); from a value, an `UPDATE … WHERE` the value's bytes
//! are the expected ones (`CAST(… AS BINARY)`: `utf8mb4_bin` pads with spaces, so `'a'` would
//! equal `'a '`). InnoDB's row lock queues racing calls, and the second finds the row changed.
//! A compare-and-set to the value already there is a read: MySQL counts an `UPDATE` that
//! changes nothing as no row.
//!
//! It must not show a password: errors come from queries, which carry none.

use std::future::Future;

use async_trait::async_trait;
use idmint_core::Tag;
use idmint_core::limits::TAG_LEN_MAX;
use sqlx::AssertSqlSafe;

use super::MySqlStore;
use crate::meta::{META_NAME_LEN_MAX, META_VALUE_LEN_MAX, check_cas, check_name, stored_values};
use crate::sql::Dialect;
use crate::{StoreError, TAG_META_TABLE, TagMetaStore};

/// What one attempt yields: a database error (perhaps a missing table, retried once the
/// table exists), or the call's outcome.
type Attempt<T> = Result<T, sqlx::Error>;

#[async_trait]
impl TagMetaStore for MySqlStore {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        check_name(name)?;
        // A read: an absent table holds no value, and is not created for it.
        match self.select_meta(tag, name).await {
            Ok(value) => Ok(value),
            Err(e) if super::is_no_table(&e) => Ok(None),
            Err(e) => Err(super::unavailable(e)),
        }
    }

    async fn compare_and_set_meta(
        &self,
        tag: &Tag,
        name: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError> {
        check_cas(name, expected, new)?;
        self.with_meta_table(|| async {
            match expected {
                None => {
                    let inserted = sqlx::query(AssertSqlSafe(format!(
                        "INSERT INTO {TAG_META_TABLE} (tag, name, value) VALUES (?, ?, ?)"
                    )))
                    .bind(tag.as_str())
                    .bind(name)
                    .bind(new)
                    .execute(&self.pool)
                    .await;
                    match inserted {
                        Ok(_) => Ok(true),
                        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
                        Err(e) => Err(e),
                    }
                }
                Some(expected) if expected == new => {
                    Ok(self.select_meta(tag, name).await?.as_deref() == Some(new))
                }
                Some(expected) => {
                    let updated = sqlx::query(AssertSqlSafe(format!(
                        "UPDATE {TAG_META_TABLE} SET value = ? WHERE tag = ? AND name = ? \
                         AND CAST(value AS BINARY) = CAST(? AS BINARY)"
                    )))
                    .bind(new)
                    .bind(tag.as_str())
                    .bind(name)
                    .bind(expected)
                    .execute(&self.pool)
                    .await?;
                    Ok(updated.rows_affected() == 1)
                }
            }
        })
        .await
    }

    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError> {
        check_name(name)?;
        // A read: an absent table holds no value, and is not created for it (a Leaf or Tinyid
        // account may not be allowed to).
        let rows: Result<Vec<(String, String)>, _> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tag, value FROM {TAG_META_TABLE} WHERE name = ?"
        )))
        .bind(name)
        .fetch_all(&self.pool)
        .await;
        match rows {
            Ok(rows) => stored_values(rows),
            Err(e) if super::is_no_table(&e) => Ok(Vec::new()),
            Err(e) => Err(super::unavailable(e)),
        }
    }
}

impl MySqlStore {
    /// Runs `attempt`, creating the metadata table first when it is missing.
    async fn with_meta_table<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let tables = [(TAG_META_TABLE, meta_ddl())];
        self.with_tables(|| self.create_missing_tables(&tables, "tag metadata"), attempt).await
    }

    /// The value of `(tag, name)`, read as it is stored.
    async fn select_meta(&self, tag: &Tag, name: &str) -> Attempt<Option<String>> {
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT value FROM {TAG_META_TABLE} WHERE tag = ? AND name = ?"
        )))
        .bind(tag.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await
    }
}

/// The metadata table.
pub(crate) fn meta_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TAG_META_TABLE} (\
         tag varchar({TAG_LEN_MAX}) NOT NULL, \
         name varchar({META_NAME_LEN_MAX}) NOT NULL, \
         value varchar({META_VALUE_LEN_MAX}) NOT NULL, \
         PRIMARY KEY (tag, name)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}
