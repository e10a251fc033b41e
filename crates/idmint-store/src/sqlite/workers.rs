//! The SQLite backend's [`WorkerStore`]: the lease and assignment tables in the same file as
//! the segments, STRICT, created on first use and never altered (a lease table without the
//! `holder_id` column, made by an earlier idmint, is refused with the statement that adds it).
//!
//! Every step is one statement, atomic across threads and across processes sharing the file:
//! claiming a never-held id is an `INSERT … ON CONFLICT DO NOTHING` under the
//! `(space, worker_id)` primary key, a takeover and a renewal are conditional
//! `UPDATE … RETURNING`s on the token and holder id (and the expiry), run to their end so a
//! failed commit is an error (see `write_returning`), and an assignment an insert
//! into an `AUTOINCREMENT` table (its ids are never reused, even after a delete) in an
//! immediate transaction that is rolled back when the id is past `max_worker`.
//!
//! Lease expiry is judged by the store's clock (`SqliteStore::with_clock`, by default this
//! machine's, which every process sharing the file reads), read under the connection's lock
//! just before the statement that decides, and bound into it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use rusqlite::{Connection, Row, params};

use super::{SqliteStore, immediate, unavailable, write_returning};
use crate::worker::{
    LEASE_SCAN_PAGE, LeaseTable, RecordColumns, ScanRow, acquire_from, check_assign_request,
    check_renewal, check_time_ms, column, held_columns, holder_id_text, lease_lost, next_token,
    outdated_workers_table, renewed_lease, scan_row, stored_record, won_lease,
};
use crate::{
    AssignRequest, LEASE_WORKER_ID_MAX, Lease, LeaseRecord, LeaseRequest, LeaseStore, StoreError,
    WORKER_NODE_TABLE, WORKERS_TABLE, WorkerSpace, WorkerStore,
};

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        let found = self.call(ensure_tables).await?;
        let store = self.path().display();
        for table in [WORKERS_TABLE, WORKER_NODE_TABLE] {
            if found {
                tracing::info!(table, %store, "found the worker table; using it as it is");
            } else {
                tracing::info!(table, %store, "created a worker table");
            }
        }
        acquire_from(self, req).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease, StoreError> {
        check_renewal(ttl_ms)?;
        let (id, token, holder_id) = held_columns(lease)?;
        let space = lease.space.clone();
        let clock = Arc::clone(&self.clock);
        let renewed = self
            .call(move |conn| {
                let now_ms = clock.now_ms();
                // Run to its end: a renewal is answered only once it committed.
                write_returning(
                    conn,
                    &format!(
                        "UPDATE {WORKERS_TABLE} SET expires_ms = max(expires_ms, ?4) \
                         WHERE space = ?1 AND worker_id = ?2 AND token = ?3 \
                         AND expires_ms >= ?5 AND holder_id = ?6 \
                         RETURNING expires_ms, time_mark"
                    ),
                    params![
                        space.as_str(),
                        id,
                        token,
                        column(now_ms + ttl_ms),
                        column(now_ms),
                        holder_id
                    ],
                    |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
                )
                .map_err(unavailable)
            })
            .await?;
        renewed_lease(lease, id, renewed.ok_or_else(|| lease_lost(lease))?)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let set = "expires_ms = min(expires_ms, ?4)";
        self.update_held(lease, set, None).await
    }

    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        check_time_ms("mark_ms", mark_ms)?;
        let set = "time_mark = max(time_mark, ?4)";
        self.update_held(lease, set, Some(column(mark_ms))).await
    }

    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        let space = space.clone();
        self.call(move |conn| {
            ensure_tables(conn)?;
            let mut statement = conn
                .prepare(&format!(
                    "SELECT worker_id, holder, token, expires_ms, time_mark FROM {WORKERS_TABLE} \
                     WHERE space = ?1 ORDER BY worker_id LIMIT {}",
                    LEASE_WORKER_ID_MAX + 1
                ))
                .map_err(unavailable)?;
            let rows = statement.query_map([space.as_str()], read_record).map_err(unavailable)?;
            rows.map(|row| stored_record(&space, row.map_err(unavailable)?)).collect()
        })
        .await
    }

    async fn now_ms(&self) -> Result<u64, StoreError> {
        Ok(self.clock.now_ms())
    }
}

#[async_trait]
impl WorkerStore for SqliteStore {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        check_assign_request(req)?;
        let req = req.clone();
        self.call(move |conn| {
            ensure_tables(conn)?;
            // Immediate: the write lock is taken first, so the insert cannot fail as busy
            // halfway through.
            let tx = immediate(conn)?;
            tx.execute(
                &format!(
                    "INSERT INTO {WORKER_NODE_TABLE} (space, host, port, launch_ms) \
                     VALUES (?1, ?2, ?3, ?4)"
                ),
                params![req.space.as_str(), req.host, req.port, column(req.launch_ms)],
            )
            .map_err(unavailable)?;
            let id = tx.last_insert_rowid();
            match u64::try_from(id) {
                Ok(id) if id >= 1 && id <= req.max_worker => {
                    tx.commit().map_err(unavailable)?;
                    Ok(id)
                }
                // Dropping the transaction rolls the row (and the sequence) back.
                _ => Err(StoreError::WorkersExhausted { space: req.space, max: req.max_worker }),
            }
        })
        .await
    }
}

#[async_trait]
impl LeaseTable for SqliteStore {
    async fn scan(
        &self,
        space: &WorkerSpace,
        from: u64,
        max: u64,
        margin_ms: u64,
    ) -> Result<Vec<ScanRow>, StoreError> {
        let space = space.clone();
        let clock = Arc::clone(&self.clock);
        self.call(move |conn| {
            let mut statement = conn
                .prepare(&format!(
                    "SELECT worker_id, token, expires_ms < ?4 - ?5, time_mark \
                     FROM {WORKERS_TABLE} \
                     WHERE space = ?1 AND worker_id >= ?2 AND worker_id <= ?3 \
                     ORDER BY worker_id LIMIT {LEASE_SCAN_PAGE}"
                ))
                .map_err(unavailable)?;
            let now_ms = column(clock.now_ms());
            let bound =
                params![space.as_str(), column(from), column(max), now_ms, column(margin_ms)];
            let rows = statement
                .query_map(bound, |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
                .map_err(unavailable)?;
            rows.map(|row| scan_row(&space, row.map_err(unavailable)?)).collect()
        })
        .await
    }

    async fn insert_lease(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError> {
        let (space, holder) = (req.space.clone(), req.holder.clone());
        let ttl_ms = req.ttl_ms;
        let id_text = holder_id_text(holder_id);
        let (clock, last_token) = (Arc::clone(&self.clock), Arc::clone(&self.last_token));
        let (inserted, token, expires_ms) = self
            .call(move |conn| {
                let expires_ms = clock.now_ms() + ttl_ms;
                let token = column(draw_token(&last_token, None, clock.now_us()));
                let inserted = conn
                    .execute(
                        &format!(
                            "INSERT INTO {WORKERS_TABLE} \
                             (space, worker_id, holder, token, expires_ms, time_mark, \
                             holder_id) \
                             VALUES (?1, ?2, ?3, ?6, ?4, 0, ?5) ON CONFLICT DO NOTHING"
                        ),
                        params![
                            space.as_str(),
                            column(worker_id),
                            holder,
                            column(expires_ms),
                            id_text,
                            token
                        ],
                    )
                    .map_err(unavailable)?;
                Ok((inserted, token, column(expires_ms)))
            })
            .await?;
        let won =
            (inserted == 1).then(|| won_lease(req, worker_id, holder_id, (token, expires_ms, 0)));
        won.transpose()
    }

    async fn take_over(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        token: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError> {
        let (space, holder) = (req.space.clone(), req.holder.clone());
        let (ttl_ms, margin_ms) = (req.ttl_ms, req.margin_ms);
        let id_text = holder_id_text(holder_id);
        let (clock, last_token) = (Arc::clone(&self.clock), Arc::clone(&self.last_token));
        let taken = self
            .call(move |conn| {
                let now_ms = clock.now_ms();
                let below = column(now_ms) - column(margin_ms);
                let new_token = column(draw_token(&last_token, Some(token), clock.now_us()));
                // Run to its end: a takeover is answered only once it committed.
                write_returning(
                    conn,
                    &format!(
                        "UPDATE {WORKERS_TABLE} \
                         SET holder = ?3, token = ?8, expires_ms = ?4, holder_id = ?7 \
                         WHERE space = ?1 AND worker_id = ?2 AND token = ?5 \
                         AND expires_ms < ?6 RETURNING token, expires_ms, time_mark"
                    ),
                    params![
                        space.as_str(),
                        column(worker_id),
                        holder,
                        column(now_ms + ttl_ms),
                        column(token),
                        below,
                        id_text,
                        new_token
                    ],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .map_err(unavailable)
            })
            .await?;
        taken.map(|row| won_lease(req, worker_id, holder_id, row)).transpose()
    }
}

impl SqliteStore {
    /// Runs `UPDATE … SET {set}` (which reads `?4` as `value`, or as the store's clock when
    /// there is none) on the row of `lease` if it still holds the lease's token and holder
    /// id; [`StoreError::LeaseLost`] otherwise.
    async fn update_held(
        &self,
        lease: &Lease,
        set: &str,
        value: Option<i64>,
    ) -> Result<(), StoreError> {
        let (id, token, holder_id) = held_columns(lease)?;
        let space = lease.space.clone();
        let sql = format!(
            "UPDATE {WORKERS_TABLE} SET {set} \
             WHERE space = ?1 AND worker_id = ?2 AND token = ?3 AND holder_id = ?5"
        );
        let clock = Arc::clone(&self.clock);
        let updated = self
            .call(move |conn| {
                let value = value.unwrap_or_else(|| column(clock.now_ms()));
                conn.execute(&sql, params![space.as_str(), id, token, value, holder_id])
                    .map_err(unavailable)
            })
            .await?;
        if updated == 1 { Ok(()) } else { Err(lease_lost(lease)) }
    }
}

/// The statement that brings a lease table of an earlier idmint up to date.
const ADD_HOLDER_ID: &str =
    "ALTER TABLE idmint_workers ADD COLUMN holder_id TEXT NOT NULL DEFAULT ''";

/// Creates both worker tables when absent; an existing table is used as it is, unless its
/// lease table lacks the holder id (an earlier idmint's): that is refused, naming the fix,
/// since without it a deleted or restored row would let two nodes prove one lease.
/// Whether the lease table was there already.
fn ensure_tables(conn: &mut Connection) -> Result<bool, StoreError> {
    let found: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [WORKERS_TABLE],
            |row| row.get(0),
        )
        .map_err(unavailable)?;
    create_tables(conn)?;
    match conn.prepare(&format!("SELECT holder_id FROM {WORKERS_TABLE} LIMIT 0")) {
        Ok(_) => Ok(found),
        Err(e) if e.to_string().contains("no such column") => {
            Err(outdated_workers_table(ADD_HOLDER_ID))
        }
        Err(e) => Err(unavailable(e)),
    }
}

fn create_tables(conn: &mut Connection) -> Result<(), StoreError> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {WORKERS_TABLE} (
            space      TEXT    NOT NULL,
            worker_id  INTEGER NOT NULL,
            holder     TEXT    NOT NULL DEFAULT '',
            token      INTEGER NOT NULL,
            expires_ms INTEGER NOT NULL,
            time_mark  INTEGER NOT NULL DEFAULT 0,
            holder_id  TEXT    NOT NULL DEFAULT '',
            PRIMARY KEY (space, worker_id)
        ) STRICT;
        CREATE TABLE IF NOT EXISTS {WORKER_NODE_TABLE} (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            space      TEXT    NOT NULL,
            host       TEXT    NOT NULL,
            port       INTEGER NOT NULL,
            launch_ms  INTEGER NOT NULL
        ) STRICT;"
    ))
    .map_err(unavailable)
}

fn read_record(row: &Row<'_>) -> rusqlite::Result<RecordColumns> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
}

/// A new lease token ([`next_token`]) above every one this store drew before; called with the
/// connection held, so no other draw runs between the read and the write of `last`.
fn draw_token(last: &AtomicU64, previous: Option<u64>, now_us: u64) -> u64 {
    let token = next_token(previous.max(Some(last.load(Ordering::Relaxed))), now_us);
    last.fetch_max(token, Ordering::Relaxed);
    token
}
