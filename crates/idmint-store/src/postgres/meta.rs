//! The PostgreSQL backend's [`TagMetaStore`]: the metadata table in the store's schema,
//! created on first use when absent (under an advisory lock, so nodes starting together do
//! not race) and never altered.
//!
//! A compare-and-set is one statement: from no value, an `INSERT … ON CONFLICT DO NOTHING`;
//! from a value, an `UPDATE … WHERE value = $4`. Of two racing calls the second waits for the
//! first's row and then matches none. `varchar` compares exactly under PostgreSQL's
//! deterministic collations (equal only when the bytes are).
//!
//! It must not show a password: every error is scrubbed through the store's `unavailable`.

use std::future::Future;

use async_trait::async_trait;
use idmint_core::Tag;
use idmint_core::limits::TAG_LEN_MAX;
use sqlx::AssertSqlSafe;

use super::{ADVISORY_LOCK_CLASS, PgStore, SQLSTATE_UNDEFINED_TABLE};
use crate::meta::{META_NAME_LEN_MAX, META_VALUE_LEN_MAX, check_cas, check_name, stored_values};
use crate::sql::Dialect;
use crate::sql::TxConn;
use crate::{StoreError, TAG_META_TABLE, TagMetaStore};

/// What one attempt yields: a database error (perhaps a missing table, retried once the
/// table exists), or the call's outcome.
type Attempt<T> = Result<T, sqlx::Error>;

#[async_trait]
impl TagMetaStore for PgStore {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        check_name(name)?;
        // A read: an absent table holds no value, and is not created for it.
        let value = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT value::text FROM {TAG_META_TABLE} WHERE tag = $1 AND name = $2"
        )))
        .bind(tag.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await;
        match value {
            Ok(value) => Ok(value),
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some(SQLSTATE_UNDEFINED_TABLE) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.unavailable(e)),
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
            let statement = match expected {
                None => format!(
                    "INSERT INTO {TAG_META_TABLE} (tag, name, value) VALUES ($1, $2, $3) \
                     ON CONFLICT (tag, name) DO NOTHING"
                ),
                Some(_) => format!(
                    "UPDATE {TAG_META_TABLE} SET value = $3 \
                     WHERE tag = $1 AND name = $2 AND value = $4"
                ),
            };
            let mut query =
                sqlx::query(AssertSqlSafe(statement)).bind(tag.as_str()).bind(name).bind(new);
            if let Some(expected) = expected {
                query = query.bind(expected);
            }
            Ok(query.execute(&self.pool).await?.rows_affected() == 1)
        })
        .await
    }

    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError> {
        check_name(name)?;
        // A read: an absent table holds no value, and is not created for it (a Leaf account
        // may not be allowed to).
        let rows: Result<Vec<(String, String)>, _> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT tag::text, value::text FROM {TAG_META_TABLE} WHERE name = $1"
        )))
        .bind(name)
        .fetch_all(&self.pool)
        .await;
        match rows {
            Ok(rows) => stored_values(rows),
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some(SQLSTATE_UNDEFINED_TABLE) =>
            {
                Ok(Vec::new())
            }
            Err(e) => Err(self.unavailable(e)),
        }
    }
}

impl PgStore {
    /// Runs `attempt`; when it fails because the metadata table does not exist yet, creates
    /// it and runs it once more.
    async fn with_meta_table<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        self.with_tables(|| self.ensure_meta_table(), attempt).await
    }

    /// Creates the metadata table when absent, under its advisory lock; checked first, as
    /// the other tables are: PostgreSQL checks the right to create even for
    /// `CREATE TABLE IF NOT EXISTS` of an existing table.
    async fn ensure_meta_table(&self) -> Result<(), StoreError> {
        let mut conn = TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
        let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(ADVISORY_LOCK_CLASS)
            .bind(TAG_META_TABLE)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.unavailable(e))?;
        self.create_missing_tables(&mut tx, &[(TAG_META_TABLE, meta_ddl())], "tag metadata")
            .await?;
        tx.commit().await.map_err(|e| self.unavailable(e))
    }
}

/// The metadata table.
pub(crate) fn meta_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TAG_META_TABLE} (
            tag   varchar({TAG_LEN_MAX}) NOT NULL,
            name  varchar({META_NAME_LEN_MAX}) NOT NULL,
            value varchar({META_VALUE_LEN_MAX}) NOT NULL,
            PRIMARY KEY (tag, name)
        )"
    )
}
