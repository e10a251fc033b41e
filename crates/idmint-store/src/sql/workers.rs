//! The [`LeaseStore`](crate::LeaseStore) and [`WorkerStore`](crate::WorkerStore) of the
//! database backends, written once: [`lease_store!`] implements them, and the acquisition
//! walk's `LeaseTable`, over a [`Dialect`](super::Dialect). Each table is created on its first
//! use (the lease table by the first lease, the assignment table by the first assignment)
//! when absent and never altered: a lease table without the `holder_id` column, made by an
//! earlier idmint, is refused with the statement that adds it.
//!
//! Claiming a never-held id is an `INSERT` under the `(space, worker_id)` primary key, which
//! lets one of two racing inserts through. A takeover and a renewal are a conditional `UPDATE`
//! on the token and holder id (and the expiry); an `UPDATE` reads the latest committed row and
//! locks it, so of two racing writers the second sees the first's token and matches nothing.
//! Each of these writes hands back the row as written (`write_lease_row`): PostgreSQL by
//! `RETURNING`, MySQL by a `SELECT … FOR UPDATE` in the write's transaction, under the row lock
//! the write took, as MariaDB has no `UPDATE … RETURNING`. An assignment inserts into the
//! assignment table in a transaction rolled back when the id is past `max_worker` (the
//! counter stays past it).
//!
//! Lease expiry and tokens come from the server's clock, read inside each statement that
//! decides (`NOW_MS`, `NOW_US`: each backend says why its expression is one instant per
//! statement), never from the caller's.

/// Implements `LeaseStore`, `WorkerStore` and `LeaseTable` for `$store`, a `Dialect` invoked in
/// a module that has `NOW_MS` and `NOW_US` (the server's clock as SQL), `SQLSTATE_NO_COLUMN`,
/// `add_holder_id(workers)`, `workers_ddl(workers)` and `worker_node_ddl(worker_node)`, on a
/// store with a `pool`, `worker_tables()` (the lease and assignment tables' names),
/// `write_lease_row(write, space, worker_id, won)` and `inserted_id(insert, tx)`.
macro_rules! lease_store {
    ($store:ty) => {
        const _: () = {
            use async_trait::async_trait;

            use crate::sql::{Dialect, TxConn};
            use crate::worker::{
                FEATURE_ASSIGN, FEATURE_LEASES, LEASE_SCAN_PAGE, LeaseTable, RecordColumns,
                ScanRow, acquire_from, check_assign_request, check_renewal, check_time_ms,
                column, held_columns, holder_id_text, lease_lost, outdated_workers_table,
                renewed_lease, scan_row, server_now_ms, stored, stored_record, won_lease,
            };
            use crate::{
                AssignRequest, LEASE_WORKER_ID_MAX, Lease, LeaseRecord, LeaseRequest,
                LeaseStore, StoreError, WorkerSpace, WorkerStore,
            };

            /// The columns a winning write hands back: `(token, expires_ms, time_mark)`.
            const WRITTEN: &str = "token, expires_ms, time_mark";

            #[async_trait]
            impl LeaseStore for $store {
                async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
                    self.ensure_workers_table().await?;
                    acquire_from(self, req).await
                }

                async fn renew_lease(
                    &self,
                    lease: &Lease,
                    ttl_ms: u64,
                ) -> Result<Lease, StoreError> {
                    let (workers, _) = self.worker_tables();
                    check_renewal(ttl_ms)?;
                    let (id, token, holder_id) = held_columns(lease)?;
                    let renew = sqlx::query(Self::sql(format!(
                        "UPDATE {workers} SET expires_ms = GREATEST(expires_ms, {NOW_MS} + ?) \
                         WHERE space = ? AND worker_id = ? AND token = ? \
                         AND expires_ms >= {NOW_MS} AND holder_id = ?{}",
                        Self::returning(WRITTEN)
                    )))
                    .bind(column(ttl_ms))
                    .bind(lease.space.as_str())
                    .bind(id)
                    .bind(token)
                    .bind(holder_id);
                    let renewed = self
                        .write_lease_row(renew, &lease.space, lease.worker_id, |row| {
                            let (new_token, expires_ms, time_mark) = row;
                            let new_token = stored(&lease.space, id, "token", new_token)?;
                            Ok((new_token, renewed_lease(lease, id, (expires_ms, time_mark))?))
                        })
                        .await?;
                    match renewed {
                        Some((new_token, renewed)) if new_token == lease.token => Ok(renewed),
                        _ => Err(lease_lost(lease)),
                    }
                }

                async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
                    let set = format!("expires_ms = LEAST(expires_ms, {NOW_MS})");
                    self.update_held(lease, &set, None).await
                }

                async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
                    check_time_ms("mark_ms", mark_ms)?;
                    let set = "time_mark = GREATEST(time_mark, ?)";
                    self.update_held(lease, set, Some(column(mark_ms))).await
                }

                async fn list_leases(
                    &self,
                    space: &WorkerSpace,
                ) -> Result<Vec<LeaseRecord>, StoreError> {
                    let (workers, _) = self.worker_tables();
                    self.ensure_workers_table().await?;
                    let rows: Vec<RecordColumns> = sqlx::query_as(Self::sql(format!(
                        "SELECT worker_id, {}, token, expires_ms, time_mark FROM {workers} \
                         WHERE space = ? ORDER BY worker_id LIMIT {}",
                        Self::text("holder"),
                        LEASE_WORKER_ID_MAX + 1
                    )))
                    .bind(space.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| self.unavailable(e))?;
                    rows.into_iter().map(|row| stored_record(space, row)).collect()
                }

                async fn now_ms(&self) -> Result<u64, StoreError> {
                    let now = sqlx::query_scalar(Self::sql(format!("SELECT {NOW_MS}")))
                        .fetch_one(&self.pool)
                        .await
                        .map_err(|e| self.unavailable(e))?;
                    server_now_ms(now)
                }
            }

            #[async_trait]
            impl WorkerStore for $store {
                async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
                    let (_, worker_node) = self.worker_tables();
                    check_assign_request(req)?;
                    let tables = [(worker_node, worker_node_ddl(worker_node))];
                    self.create_tables(worker_node, &tables, FEATURE_ASSIGN).await?;
                    let mut conn =
                        TxConn::acquire(&self.pool).await.map_err(|e| self.unavailable(e))?;
                    let mut tx = conn.begin().await.map_err(|e| self.unavailable(e))?;
                    let insert = sqlx::query(Self::sql(format!(
                        "INSERT INTO {worker_node} (space, host, port, launch_ms) \
                         VALUES (?, ?, ?, ?){}",
                        Self::returning("id")
                    )))
                    .bind(req.space.as_str())
                    .bind(req.host.as_str())
                    .bind(i32::from(req.port))
                    .bind(column(req.launch_ms));
                    let id = self.inserted_id(insert, &mut tx).await?;
                    if id == 0 || id > req.max_worker {
                        // Dropping the transaction rolls the row back; the counter stays past.
                        return Err(StoreError::WorkersExhausted {
                            space: req.space.clone(),
                            max: req.max_worker,
                        });
                    }
                    tx.commit().await.map_err(|e| self.unavailable(e))?;
                    Ok(id)
                }
            }

            #[async_trait]
            impl LeaseTable for $store {
                async fn scan(
                    &self,
                    space: &WorkerSpace,
                    from: u64,
                    max: u64,
                    margin_ms: u64,
                ) -> Result<Vec<ScanRow>, StoreError> {
                    let (workers, _) = self.worker_tables();
                    // Free once the expiry plus the margin is past (MySQL casts the truth value).
                    let free = Self::int(&format!("expires_ms < {NOW_MS} - ?"));
                    let rows: Vec<(i64, i64, bool, i64)> = sqlx::query_as(Self::sql(format!(
                        "SELECT worker_id, token, {free}, time_mark FROM {workers} \
                         WHERE space = ? AND worker_id >= ? AND worker_id <= ? \
                         ORDER BY worker_id LIMIT {LEASE_SCAN_PAGE}"
                    )))
                    .bind(column(margin_ms))
                    .bind(space.as_str())
                    .bind(column(from))
                    .bind(column(max))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(|e| self.unavailable(e))?;
                    rows.into_iter().map(|row| scan_row(space, row)).collect()
                }

                async fn insert_lease(
                    &self,
                    req: &LeaseRequest,
                    worker_id: u64,
                    holder_id: u128,
                ) -> Result<Option<Lease>, StoreError> {
                    let (workers, _) = self.worker_tables();
                    let insert = sqlx::query(Self::sql(format!(
                        "INSERT INTO {workers} \
                         (space, worker_id, holder, token, expires_ms, time_mark, holder_id) \
                         VALUES (?, ?, ?, {NOW_US}, {NOW_MS} + ?, 0, ?){}{}",
                        Self::on_conflict_nothing("space, worker_id"),
                        Self::returning(WRITTEN)
                    )))
                    .bind(req.space.as_str())
                    .bind(column(worker_id))
                    .bind(req.holder.as_str())
                    .bind(column(req.ttl_ms))
                    .bind(holder_id_text(holder_id));
                    let won = |row| won_lease(req, worker_id, holder_id, row);
                    self.write_lease_row(insert, &req.space, worker_id, won).await
                }

                async fn take_over(
                    &self,
                    req: &LeaseRequest,
                    worker_id: u64,
                    token: u64,
                    holder_id: u128,
                ) -> Result<Option<Lease>, StoreError> {
                    let (workers, _) = self.worker_tables();
                    // The new token, and the time mark the previous owner left, come back.
                    let take = sqlx::query(Self::sql(format!(
                        "UPDATE {workers} SET holder = ?, token = GREATEST(token + 1, {NOW_US}), \
                         expires_ms = {NOW_MS} + ?, holder_id = ? \
                         WHERE space = ? AND worker_id = ? AND token = ? \
                         AND expires_ms < {NOW_MS} - ?{}",
                        Self::returning(WRITTEN)
                    )))
                    .bind(req.holder.as_str())
                    .bind(column(req.ttl_ms))
                    .bind(holder_id_text(holder_id))
                    .bind(req.space.as_str())
                    .bind(column(worker_id))
                    .bind(column(token))
                    .bind(column(req.margin_ms));
                    let won = |row| won_lease(req, worker_id, holder_id, row);
                    self.write_lease_row(take, &req.space, worker_id, won).await
                }
            }

            impl $store {
                /// Creates the lease table when absent (the assignment table only when an id
                /// is assigned). A lease table of an earlier idmint, without the holder id, is
                /// refused naming the statement that adds it: without it a deleted or
                /// restored row would let two nodes prove one lease.
                async fn ensure_workers_table(&self) -> Result<(), StoreError> {
                    let (workers, _) = self.worker_tables();
                    let tables = [(workers, workers_ddl(workers))];
                    self.create_tables(workers, &tables, FEATURE_LEASES).await?;
                    let probe = sqlx::query(Self::sql(format!(
                        "SELECT holder_id FROM {workers} LIMIT 0"
                    )))
                    .fetch_optional(&self.pool)
                    .await;
                    match probe {
                        Ok(_) => Ok(()),
                        Err(sqlx::Error::Database(e))
                            if e.code().as_deref() == Some(SQLSTATE_NO_COLUMN) =>
                        {
                            Err(outdated_workers_table(&add_holder_id(workers)))
                        }
                        Err(e) => Err(self.unavailable(e)),
                    }
                }

                /// Runs `UPDATE … SET {set}` (whose one `?`, if any, is `value`) on the row of
                /// `lease` if it still holds the lease's token and holder id;
                /// [`StoreError::LeaseLost`] otherwise.
                async fn update_held(
                    &self,
                    lease: &Lease,
                    set: &str,
                    value: Option<i64>,
                ) -> Result<(), StoreError> {
                    let (workers, _) = self.worker_tables();
                    let (id, token, holder_id) = held_columns(lease)?;
                    let mut query = sqlx::query(Self::sql(format!(
                        "UPDATE {workers} SET {set} \
                         WHERE space = ? AND worker_id = ? AND token = ? AND holder_id = ?"
                    )));
                    if let Some(value) = value {
                        query = query.bind(value);
                    }
                    let updated = query
                        .bind(lease.space.as_str())
                        .bind(id)
                        .bind(token)
                        .bind(holder_id)
                        .execute(&self.pool)
                        .await
                        .map_err(|e| self.unavailable(e))?
                        .rows_affected();
                    if updated == 1 { Ok(()) } else { Err(lease_lost(lease)) }
                }
            }
        };
    };
}

pub(crate) use lease_store;
