//! The [`TagMetaStore`](crate::TagMetaStore) of the database backends, written once:
//! [`tag_meta_store!`] implements it over a [`Dialect`](super::Dialect). The table is made on
//! the first compare-and-set, never for a read: an absent table holds no value (and a Leaf or
//! Tinyid account may not be allowed to create it).
//!
//! A compare-and-set is one statement: from no value, an `INSERT` that the primary key stops
//! when a row is there (MySQL fails it with a duplicate key, PostgreSQL's
//! `ON CONFLICT DO NOTHING` inserts nothing); from a value, an `UPDATE … WHERE` the value's
//! bytes are the expected ones. The row lock queues racing calls, and the second finds the row
//! changed. A compare-and-set to the value already there matches its row on both: MySQL's
//! driver asks for `CLIENT_FOUND_ROWS`, so a row matched but unchanged counts.

/// Implements `TagMetaStore` for `$store`, a `Dialect` with a `pool`, invoked in a module that
/// has `meta_ddl()`.
macro_rules! tag_meta_store {
    ($store:ty) => {
        const _: () = {
            use async_trait::async_trait;
            use idmint_core::Tag;

            use crate::meta::{check_cas, check_name, stored_values};
            use crate::sql::Dialect;
            use crate::{StoreError, TAG_META_TABLE, TagMetaStore};

            #[async_trait]
            impl TagMetaStore for $store {
                async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
                    check_name(name)?;
                    let value = sqlx::query_scalar(Self::sql(format!(
                        "SELECT {} FROM {TAG_META_TABLE} WHERE tag = ? AND name = ?",
                        Self::text("value")
                    )))
                    .bind(tag.as_str())
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await;
                    match value {
                        Ok(value) => Ok(value),
                        Err(e) if Self::is_no_table(&e) => Ok(None),
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
                    let tables = [(TAG_META_TABLE, meta_ddl())];
                    let ensure = || self.create_tables(TAG_META_TABLE, &tables, "tag metadata");
                    self.with_tables(ensure, || async {
                        let Some(expected) = expected else {
                            let inserted = sqlx::query(Self::sql(format!(
                                "INSERT INTO {TAG_META_TABLE} (tag, name, value) \
                                 VALUES (?, ?, ?){}",
                                Self::on_conflict_nothing("tag, name")
                            )))
                            .bind(tag.as_str())
                            .bind(name)
                            .bind(new)
                            .execute(&self.pool)
                            .await;
                            return match inserted {
                                Ok(done) => Ok(done.rows_affected() == 1),
                                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                                    Ok(false)
                                }
                                Err(e) => Err(e),
                            };
                        };
                        let updated = sqlx::query(Self::sql(format!(
                            "UPDATE {TAG_META_TABLE} SET value = ? WHERE tag = ? AND name = ? \
                             AND {}",
                            Self::equal_bytes("value")
                        )))
                        .bind(new)
                        .bind(tag.as_str())
                        .bind(name)
                        .bind(expected)
                        .execute(&self.pool)
                        .await?;
                        Ok(updated.rows_affected() == 1)
                    })
                    .await
                }

                async fn meta_of_every_tag(
                    &self,
                    name: &str,
                ) -> Result<Vec<(Tag, String)>, StoreError> {
                    check_name(name)?;
                    let rows: Result<Vec<(String, String)>, _> =
                        sqlx::query_as(Self::sql(format!(
                            "SELECT {}, {} FROM {TAG_META_TABLE} WHERE name = ?",
                            Self::text("tag"),
                            Self::text("value")
                        )))
                        .bind(name)
                        .fetch_all(&self.pool)
                        .await;
                    match rows {
                        Ok(rows) => stored_values(rows),
                        Err(e) if Self::is_no_table(&e) => Ok(Vec::new()),
                        Err(e) => Err(self.unavailable(e)),
                    }
                }
            }
        };
    };
}

pub(crate) use tag_meta_store;
