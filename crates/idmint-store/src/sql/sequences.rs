//! The [`SequenceStore`](crate::SequenceStore) of the database backends, written once:
//! [`sequence_store!`] implements it over a [`Dialect`](super::Dialect) from the shared reads,
//! list and delete. The two steps whose flow differs stay with each backend
//! (`mysql/sequences.rs`, `postgres/sequences.rs`, which also own the tables' DDL): creating a
//! sequence under the creators' lock, and raising a ceiling.

/// Implements `SequenceStore` for `$store`, a `Dialect` invoked in a module that has
/// `sequences_ddl()` and `ceilings_ddl()`, on a store with a `pool`, `SEQUENCE_COLUMNS` (the
/// definition columns as `DefinitionColumns` reads them), `create_once(spec)` (count, then
/// insert, under the creators' lock) and `raise_once(name, period, by)`. The tables are made
/// on a call's first use of them.
macro_rules! sequence_store {
    ($store:ty) => {
        const _: () = {
            use async_trait::async_trait;
            use idmint_core::Tag;

            use crate::sequence::{
                DefinitionColumns, SEQUENCE_COUNT_MAX, check_period, check_raise, check_spec,
                stored_ceiling, stored_sequence,
            };
            use crate::sql::{Attempt, Dialect};
            use crate::{
                CEILINGS_TABLE, SEQUENCES_TABLE, SequenceRecord, SequenceSpec, SequenceStore,
                StoreError, servable_rows,
            };

            #[async_trait]
            impl SequenceStore for $store {
                async fn create_sequence(
                    &self,
                    spec: &SequenceSpec,
                ) -> Result<SequenceRecord, StoreError> {
                    check_spec(spec)?;
                    self.with_sequence_tables(|| self.create_once(spec)).await
                }

                async fn get_sequence(
                    &self,
                    name: &Tag,
                ) -> Result<Option<SequenceRecord>, StoreError> {
                    self.with_sequence_tables(|| async {
                        let row: Option<DefinitionColumns> = sqlx::query_as(Self::sql(format!(
                            "SELECT {} FROM {SEQUENCES_TABLE} WHERE name = ?",
                            Self::SEQUENCE_COLUMNS
                        )))
                        .bind(name.as_str())
                        .fetch_optional(&self.pool)
                        .await?;
                        Ok(row.map(stored_sequence).transpose())
                    })
                    .await
                }

                async fn list_sequences(&self) -> Result<Vec<SequenceRecord>, StoreError> {
                    let rows: Vec<DefinitionColumns> = self
                        .with_sequence_tables(|| async {
                            // Byte order, which is how names order in every backend.
                            let rows = sqlx::query_as(Self::sql(format!(
                                "SELECT {} FROM {SEQUENCES_TABLE} ORDER BY {} \
                                 LIMIT {SEQUENCE_COUNT_MAX}",
                                Self::SEQUENCE_COLUMNS,
                                Self::byte_order("name")
                            )))
                            .fetch_all(&self.pool)
                            .await?;
                            Ok(Ok(rows))
                        })
                        .await?;
                    Ok(servable_rows(rows.into_iter().map(stored_sequence), "sequence"))
                }

                async fn delete_sequence(&self, name: &Tag) -> Result<(), StoreError> {
                    // One statement, so no transaction of its own.
                    self.with_sequence_tables(|| async {
                        let deleted = sqlx::query(Self::sql(format!(
                            "DELETE FROM {SEQUENCES_TABLE} WHERE name = ?"
                        )))
                        .bind(name.as_str())
                        .execute(&self.pool)
                        .await?
                        .rows_affected();
                        Ok(if deleted == 0 {
                            Err(StoreError::TagNotFound(name.clone()))
                        } else {
                            Ok(())
                        })
                    })
                    .await
                }

                async fn ceiling(&self, name: &Tag, period: &str) -> Result<u64, StoreError> {
                    check_period(period)?;
                    self.with_sequence_tables(|| async {
                        let value: Option<i64> = sqlx::query_scalar(Self::sql(format!(
                            "SELECT {} FROM {CEILINGS_TABLE} WHERE name = ? AND period = ?",
                            Self::int("max_value")
                        )))
                        .bind(name.as_str())
                        .bind(period)
                        .fetch_optional(&self.pool)
                        .await?;
                        Ok(stored_ceiling(name, period, value))
                    })
                    .await
                }

                async fn raise_ceiling(
                    &self,
                    name: &Tag,
                    period: &str,
                    by: u64,
                ) -> Result<u64, StoreError> {
                    check_raise(period, by)?;
                    self.with_sequence_tables(|| self.raise_once(name, period, by)).await
                }
            }

            impl $store {
                /// Runs `attempt`, creating the sequence tables first when one is missing.
                async fn with_sequence_tables<T, F, Fut>(&self, attempt: F) -> Result<T, StoreError>
                where
                    F: Fn() -> Fut,
                    Fut: std::future::Future<Output = Attempt<T>>,
                {
                    let tables =
                        [(SEQUENCES_TABLE, sequences_ddl()), (CEILINGS_TABLE, ceilings_ddl())];
                    let ensure = || self.create_tables(SEQUENCES_TABLE, &tables, "sequences");
                    self.with_tables(ensure, attempt).await?
                }
            }
        };
    };
}

pub(crate) use sequence_store;
