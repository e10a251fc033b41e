//! Tinyid's tables on MySQL or MariaDB (feature `mysql`), where Tinyid runs: its own SELECT
//! and version compare-and-set, bound parameters throughout.
//!
//! Every statement matches `biz_type` exactly (`exact!`): Tinyid's table is `utf8` with the
//! server's case- and accent-insensitive collation, where `TEST` and `tést` find the row
//! `test`, while tokens, like every idmint name, compare byte for byte.
//!
//! It must not create or alter a table, spawn tasks, or show a password.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};
use idmint_core::{Step, Stride, Tag};
use sqlx::{MySqlPool, Row};

use super::{
    TINYID_CAS_ATTEMPTS_MAX, TINYID_INFO_TABLE, TINYID_TOKEN_LEN_MAX, TINYID_TOKEN_TABLE,
    TINYID_TOKENS_MAX, TinyidRow, TinyidStore, TinyidToken,
};
use crate::mysql::{MYSQL_ACQUIRE_TIMEOUT_MS, connect_options, pool_options, unavailable};
use crate::sql::{cas_backoff, password, scrub};
use crate::{Allocation, RangeStore, SqlUrl, StoreError, TagRecord};

/// The row of one `biz_type`, exactly: the comparison in the column's collation, which its
/// unique index serves, then the bytes. Binds the name twice.
macro_rules! exact {
    () => {
        "biz_type = ? AND CAST(biz_type AS BINARY) = CAST(? AS BINARY)"
    };
}

/// Tinyid's `queryByBizType`, every number cast to a signed 64-bit integer; a NULL `delta`
/// reads as 1 and a NULL `remainder` as 0, as Tinyid's `convert` reads them.
const SELECT_ROW: &str = concat!(
    "SELECT CAST(id AS SIGNED), CAST(max_id AS SIGNED), \
     CAST(COALESCE(step, 0) AS SIGNED), CAST(COALESCE(delta, 1) AS SIGNED), \
     CAST(COALESCE(remainder, 0) AS SIGNED), CAST(version AS SIGNED), \
     CAST(UNIX_TIMESTAMP(update_time) AS SIGNED) FROM tiny_id_info WHERE ",
    exact!()
);

/// Tinyid's `updateMaxId`, its name compared exactly.
const CAS_UPDATE: &str = concat!(
    "UPDATE tiny_id_info SET max_id = ?, update_time = now(), \
     version = version + 1 WHERE id = ? AND max_id = ? AND version = ? AND ",
    exact!()
);

/// The give-back and the regression guard's jump: `max_id` set only while it still leaves
/// the same first free index (no allocation since), bumping `version` so that a Tinyid server
/// holding an older read loses its compare-and-set.
const CAS_WINDOW: &str = concat!(
    "UPDATE tiny_id_info SET max_id = ?, update_time = now(), \
     version = version + 1 WHERE max_id BETWEEN ? AND ? AND ",
    exact!()
);

const SELECT_ALL: &str = "SELECT biz_type, CAST(max_id AS SIGNED), \
     CAST(COALESCE(step, 0) AS SIGNED), CAST(COALESCE(delta, 1) AS SIGNED), \
     CAST(COALESCE(remainder, 0) AS SIGNED), CAST(UNIX_TIMESTAMP(update_time) AS SIGNED) \
     FROM tiny_id_info ORDER BY biz_type LIMIT ?";

const SELECT_TOKENS: &str = "SELECT token, biz_type FROM tiny_id_token LIMIT ?";

/// A Tinyid database on MySQL or MariaDB.
#[derive(Debug, Clone)]
pub struct TinyidMySqlStore {
    pool: MySqlPool,
    strides: Arc<PinnedStrides>,
    /// Where the store lives, for logs: no password.
    location: String,
}

/// One `tiny_id_info` row as read for an allocation.
struct InfoRow {
    id: i64,
    max_id: i64,
    step: i64,
    delta: i64,
    remainder: i64,
    version: i64,
    update_time_s: i64,
}

impl TinyidMySqlStore {
    /// Opens a bounded pool to the database `url` names and checks that Tinyid's tables are
    /// there (they are never created: a Tinyid database is Tinyid's).
    pub async fn connect(url: &SqlUrl) -> Result<TinyidMySqlStore, StoreError> {
        let redacted = url.redacted();
        let options = connect_options(url)?;
        let pool = pool_options(url.options.pool_max).connect_with(options).await.map_err(|e| {
            let reason = match e {
                sqlx::Error::PoolTimedOut => {
                    format!("no connection within {MYSQL_ACQUIRE_TIMEOUT_MS} ms")
                }
                e => e.to_string(),
            };
            StoreError::Unavailable(scrub(
                &format!("MySQL: cannot connect to {redacted}: {reason}"),
                password(url.driver_url()),
            ))
        })?;
        TinyidMySqlStore::from_pool(pool, redacted).await
    }

    /// Serves the Tinyid tables of an existing pool; `location` names it in logs (no
    /// password). Refuses a database without `tiny_id_info` and `tiny_id_token`.
    pub async fn from_pool(
        pool: MySqlPool,
        location: String,
    ) -> Result<TinyidMySqlStore, StoreError> {
        for table in [TINYID_INFO_TABLE, TINYID_TOKEN_TABLE] {
            let probe = format!("SELECT 1 FROM {table} LIMIT 1");
            if let Err(error) = sqlx::query(sqlx::AssertSqlSafe(probe)).fetch_optional(&pool).await
            {
                return Err(match error {
                    sqlx::Error::Database(e) if e.code().as_deref() == Some("42S02") => {
                        StoreError::InvalidValue(format!(
                            "{location} has no table {table}: point tinyid.store at the \
                             database Tinyid runs on (idmint never creates Tinyid's tables; \
                             Tinyid's db.sql does)"
                        ))
                    }
                    e => unavailable(e),
                });
            }
        }
        Ok(TinyidMySqlStore { pool, strides: Arc::default(), location })
    }

    async fn read_row(&self, tag: &Tag) -> Result<InfoRow, StoreError> {
        let row = sqlx::query(SELECT_ROW)
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .fetch_optional(&self.pool)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        let number = |i: usize| row.try_get::<Option<i64>, _>(i).map_err(unavailable);
        let null = |what: &str| corrupt(tag, format!("{what} is NULL"));
        Ok(InfoRow {
            id: number(0)?.ok_or_else(|| null("id"))?,
            max_id: number(1)?.ok_or_else(|| null("max_id"))?,
            step: number(2)?.unwrap_or(0),
            delta: number(3)?.unwrap_or(1),
            remainder: number(4)?.unwrap_or(0),
            version: number(5)?.ok_or_else(|| null("version"))?,
            update_time_s: number(6)?.unwrap_or(0),
        })
    }

    /// One round of Tinyid's allocation: `Ok(None)` when the compare-and-set lost.
    async fn try_allocate(
        &self,
        tag: &Tag,
        step: Option<Step>,
    ) -> Result<Option<Allocation>, StoreError> {
        let row = self.read_row(tag).await?;
        let (stride, max_id) = servable(tag, &row)?;
        self.strides.pin(tag, stride)?;
        // The engine asks in indices; the row's step is in ids (at least delta: `servable`).
        let asked = step.map_or(0, |s| s.get().saturating_mul(stride.delta()));
        let raw_step = (row.step as u64).max(asked);
        // Below its remainder, a row's next `step` ids may hold only the id `remainder`
        // itself (index 0), which idmint never serves: the segment then reaches on to the
        // first id idmint serves, so the compare-and-set moves the row past it.
        let first_served = stride.id(stride.first_free_index(max_id));
        let new_max = max_id
            .checked_add(raw_step)
            .zip(first_served)
            .map(|(stepped, first)| stepped.max(first))
            .filter(|m| *m <= ID_MAX)
            .ok_or(StoreError::Exhausted { tag: tag.clone(), max_id, step: raw_step })?;
        let range = stride.indices(max_id, new_max).ok_or_else(|| {
            corrupt(tag, format!("({max_id}, {new_max}] holds no id of {stride}"))
        })?;
        let done = sqlx::query(CAS_UPDATE)
            .bind(new_max as i64)
            .bind(row.id)
            .bind(row.max_id)
            .bind(row.version)
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        let tag_step = (row.step as u64 / stride.delta()).max(1);
        Ok(Some(Allocation { range, tag_step }))
    }
}

#[async_trait]
impl RangeStore for TinyidMySqlStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        for attempt in 0..TINYID_CAS_ATTEMPTS_MAX {
            if let Some(allocation) = self.try_allocate(tag, step).await? {
                return Ok(allocation);
            }
            tracing::debug!(biz_type = %tag, attempt, "tinyid version compare-and-set lost; retrying");
            tokio::time::sleep(cas_backoff(attempt)).await;
        }
        Err(StoreError::Unavailable(format!(
            "biz_type {tag}: lost Tinyid's version compare-and-set {TINYID_CAS_ATTEMPTS_MAX} times \
             in a row (other servers allocate from the row without pause); retry"
        )))
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        // Without a pinned stride this store allocated nothing of the tag: nothing to give
        // back or jump past from here.
        let Some(stride) = self.strides.get(tag) else { return Ok(false) };
        let invalid = || StoreError::InvalidValue(format!("index {new} of {tag} is past {ID_MAX}"));
        let new_max = stride.max_id_before(new).filter(|m| *m <= ID_MAX).ok_or_else(invalid)?;
        // The (inclusive) max_ids that leave exactly the indices from `expected` on free.
        let Some(high) = stride.max_id_before(expected) else { return Ok(false) };
        let low = match expected.checked_sub(1).and_then(|k| stride.max_id_before(k)) {
            Some(below) if expected > 1 => below + 1,
            _ => 0,
        };
        let done = sqlx::query(CAS_WINDOW)
            .bind(new_max as i64)
            .bind(low as i64)
            .bind(high as i64)
            .bind(tag.as_str())
            .bind(tag.as_str()) // the exact (binary) comparison
            .execute(&self.pool)
            .await
            .map_err(unavailable)?;
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        // Tell a missing row from a moved one.
        self.read_row(tag).await.map(|_| false)
    }

    /// The row itself, read exactly; a row idmint cannot serve is [`StoreError::Corrupt`]
    /// with the reason, never "not found".
    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        Ok(self.row(tag).await?.map(record))
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        Ok(self.rows().await?.into_iter().map(record).collect())
    }

    async fn tombstone(&self, _tag: &Tag) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ()).map_err(unavailable)
    }

    fn describe(&self) -> String {
        format!("tinyid {}", self.location)
    }
}

#[async_trait]
impl TinyidStore for TinyidMySqlStore {
    async fn row(&self, biz_type: &Tag) -> Result<Option<TinyidRow>, StoreError> {
        let row = match self.read_row(biz_type).await {
            Ok(row) => row,
            Err(StoreError::TagNotFound(_)) => return Ok(None),
            Err(error) => return Err(error),
        };
        let (stride, max_id) = servable(biz_type, &row)?;
        Ok(Some(TinyidRow {
            biz_type: biz_type.clone(),
            max_id,
            step: row.step.max(0) as u64,
            stride,
            update_time_s: row.update_time_s.max(0) as u64,
        }))
    }

    async fn rows(&self) -> Result<Vec<TinyidRow>, StoreError> {
        let rows = sqlx::query(SELECT_ALL)
            .bind(TAG_COUNT_MAX as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            let name: String = row.try_get(0).map_err(unavailable)?;
            let Ok(tag) = Tag::parse(&name) else {
                tracing::warn!(biz_type = %name.escape_debug(), "skipping a tiny_id_info row whose biz_type idmint cannot serve");
                continue;
            };
            let number = |i: usize| row.try_get::<Option<i64>, _>(i).map_err(unavailable);
            let (max_id, step, delta, remainder) = (number(1)?, number(2)?, number(3)?, number(4)?);
            let stride = Stride::new(delta.unwrap_or(1), remainder.unwrap_or(0)).ok();
            // A row idmint cannot serve is left out of the list; a request for it reads the
            // row (`get_tag`, `allocate`) and answers why.
            let (Some(max_id), Some(stride)) = (max_id.and_then(|m| u64::try_from(m).ok()), stride)
            else {
                continue;
            };
            let update_time_s = number(5)?.unwrap_or(0);
            records.push(TinyidRow {
                biz_type: tag,
                max_id,
                step: step.unwrap_or(0).max(0) as u64,
                stride,
                update_time_s: update_time_s.max(0) as u64,
            });
        }
        Ok(records)
    }

    async fn tokens(&self) -> Result<Vec<TinyidToken>, StoreError> {
        let rows = sqlx::query(SELECT_TOKENS)
            .bind(TINYID_TOKENS_MAX as i64 + 1)
            .fetch_all(&self.pool)
            .await
            .map_err(unavailable)?;
        if rows.len() > TINYID_TOKENS_MAX {
            return Err(StoreError::InvalidValue(format!(
                "{TINYID_TOKEN_TABLE} holds more than {TINYID_TOKENS_MAX} rows, the most idmint \
                 reads; delete unused tokens"
            )));
        }
        let mut tokens = Vec::with_capacity(rows.len());
        for row in rows {
            let token: Option<String> = row.try_get(0).map_err(unavailable)?;
            let name: Option<String> = row.try_get(1).map_err(unavailable)?;
            let (Some(token), Some(name)) = (token, name) else { continue };
            if token.is_empty() || token.len() > TINYID_TOKEN_LEN_MAX {
                continue;
            }
            match Tag::parse(&name) {
                Ok(biz_type) => tokens.push(TinyidToken { token, biz_type }),
                Err(_) => {
                    tracing::warn!(biz_type = %name.escape_debug(), "skipping a tiny_id_token row whose biz_type idmint cannot serve")
                }
            }
        }
        Ok(tokens)
    }

    fn stride(&self, biz_type: &Tag) -> Option<Stride> {
        self.strides.get(biz_type)
    }
}

/// The strides pinned by first allocations, per `biz_type`.
#[derive(Debug, Default)]
pub(crate) struct PinnedStrides(Mutex<HashMap<Tag, Stride>>);

impl PinnedStrides {
    /// `stride` pinned for `tag` (the first time), or refused when another one was pinned.
    pub(crate) fn pin(&self, tag: &Tag, stride: Stride) -> Result<(), StoreError> {
        let mut pinned = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let first = *pinned.entry(tag.clone()).or_insert(stride);
        if first == stride {
            return Ok(());
        }
        Err(corrupt(
            tag,
            format!(
                "its {stride} differs from the {first} this node has served it with since it \
                 started (ids already in memory follow the old values); restart the idmint \
                 nodes to serve the new values"
            ),
        ))
    }

    pub(crate) fn get(&self, tag: &Tag) -> Option<Stride> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(tag).copied()
    }
}

/// The stride and `max_id` of a row idmint can serve: `delta` from 1 to `DELTA_MAX`,
/// `remainder` in `[0, delta)`, `step` at least `delta`, `max_id` not negative. Any other row
/// is [`StoreError::Corrupt`], naming what is wrong: final until someone fixes the row.
fn servable(tag: &Tag, row: &InfoRow) -> Result<(Stride, u64), StoreError> {
    let stride = Stride::new(row.delta, row.remainder).map_err(|e| corrupt(tag, e.to_string()))?;
    stride.check_step(row.step).map_err(|e| corrupt(tag, e.to_string()))?;
    let max_id = u64::try_from(row.max_id)
        .map_err(|_| corrupt(tag, format!("max_id is negative ({})", row.max_id)))?;
    Ok((stride, max_id))
}

/// A row as the engine sees it, in index space.
fn record(row: TinyidRow) -> TagRecord {
    let TinyidRow { biz_type, max_id, step, stride, update_time_s } = row;
    TagRecord {
        tag: biz_type,
        max_id: stride.first_free_index(max_id),
        step: (step / stride.delta()).max(1),
        description: format!("tinyid {stride}, max_id {max_id}"),
        update_time_s,
    }
}

/// A `tiny_id_info` row idmint cannot serve, named with its table.
fn corrupt(tag: &Tag, reason: String) -> StoreError {
    StoreError::Corrupt { tag: format!("{tag} in {TINYID_INFO_TABLE}"), reason }
}
