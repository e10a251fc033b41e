//! [`RedisStore`]'s [`SegmentStore`]: one hash per tag, allocated by a server-side script.
//!
//! Keys (after the URL's prefix): `tag:{TAG}` is a hash with the fields `max_id`, `step`,
//! `description` and `update_time` (ms, the server's `TIME`); the braces make the tag a Redis
//! Cluster hash tag (`tag:%{HEX}` for a tag holding a brace, see `hash_tag`). `tags` is a set of the tag names, at most `TAG_COUNT_MAX`, for listing.
//!
//! Every call on one tag is one atomic script or command on its hash. `allocate` is one
//! round trip: the script reads `step`, takes the larger of it and the requested step, and
//! `HINCRBY`s `max_id` by it; `HINCRBY` refuses to pass `i64::MAX` (== `ID_MAX`), which the
//! script reports as exhaustion, the row unchanged. Numbers cross the script as decimal text,
//! never as Lua's doubles, so ids near `i64::MAX` stay exact.
//!
//! The name set and a tag's hash lie in different cluster slots, so `create_tag` and
//! `delete_tag` touch them in atomic steps, one after the other: create reserves the name
//! (bounded), creates the hash, adds the name again; delete removes the name, then the hash.
//! A create racing a delete of the same tag then leaves at most a name without a hash
//! (ignored by list and get, removed by a delete of that name), never a hash without a name,
//! though its second add may pass the bound by one. A delete interrupted between its steps
//! (its error is reported) leaves the tag allocating but unlisted until it is repeated.
//! `tomb:{TAG}` holds the `max_id` a deleted tag had reached (its tombstone): the delete
//! script raises it and removes the hash in one step; the create script reads it.
//! This module must not read idmint's clock.

use std::pin::Pin;
use std::sync::LazyLock;
use std::task::Poll;

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};
use idmint_core::{Step, Tag};
use redis::Script;

use super::{RedisConn, RedisUrl, hash_tag, script, unavailable};
use crate::{
    Allocation, RangeStore, SegmentStore, StoreError, TagRecord, TagSpec, allocated_range,
    check_new_max_id, effective_step,
};

// The allocation script's bound is HINCRBY's: a signed 64-bit integer.
const _: () = assert!(ID_MAX == i64::MAX as u64);

/// Segment rows (and, in `workers.rs`, worker ids) kept in Redis; clones share one
/// connection.
#[derive(Debug, Clone)]
pub struct RedisStore {
    conn: RedisConn,
}

impl RedisStore {
    /// Connects to the server `url` names. Nothing needs creating: keys appear on first
    /// write.
    pub async fn connect(url: &RedisUrl) -> Result<RedisStore, StoreError> {
        Ok(RedisStore::new(url.connect().await?))
    }

    /// A store on an open connection (its URL's prefix starts every key).
    pub fn new(conn: RedisConn) -> RedisStore {
        RedisStore { conn }
    }

    /// A handle on the shared connection, for one call.
    pub(super) fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// A driver error as [`StoreError::Unavailable`], naming the server.
    pub(super) fn fail(&self, error: &redis::RedisError) -> StoreError {
        unavailable(self.conn.url(), error)
    }

    fn tag_key(&self, tag: &Tag) -> String {
        self.conn.key(&format!("tag:{}", hash_tag(tag.as_str())))
    }

    /// The tombstone of a deleted tag: in the tag's hash slot, so one script reads or writes
    /// both.
    fn tomb_key(&self, tag: &Tag) -> String {
        self.conn.key(&format!("tomb:{}", hash_tag(tag.as_str())))
    }

    fn tags_key(&self) -> String {
        self.conn.key("tags")
    }

    /// Runs `invocation` (a script with its keys and arguments) on the connection.
    pub(super) async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        invocation.invoke_async(&mut self.conn()).await.map_err(|e| self.fail(&e))
    }

    async fn read_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        let fields: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.tag_key(tag))
            .arg(&FIELDS)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        record(tag.as_str(), &fields)
    }
}

/// Tag hashes `list_tags` reads at once.
const LIST_READS_IN_FLIGHT: usize = 256;

/// The fields of a tag's hash, in the order [`record`] reads them.
const FIELDS: [&str; 4] = ["max_id", "step", "description", "update_time"];

/// KEYS: the tag's hash. ARGV: the requested step (`0`: the row's). Returns
/// `{'ok', old max_id, row step}`, `{'exhausted', max_id, effective step}`, `{'missing'}` or
/// `{'corrupt', reason}`.
static ALLOCATE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
        local row = redis.call('HMGET', KEYS[1], 'max_id', 'step')
        local max_id, step = row[1], row[2]
        if not uint(max_id) then return {'corrupt', 'max_id is ' .. shown(max_id)} end
        if not uint(step) or step == '0' then
            return {'corrupt', 'step is ' .. shown(step) .. '; it must be at least 1'}
        end
        local effective = step
        if lt(step, ARGV[1]) then effective = ARGV[1] end
        local added = redis.pcall('HINCRBY', KEYS[1], 'max_id', effective)
        if type(added) == 'table' and added.err then return {'exhausted', max_id, effective} end
        redis.call('HSET', KEYS[1], 'update_time', now_ms())
        return {'ok', max_id, step}
        ",
    )
});

/// KEYS: the tag's hash. ARGV: expected and new `max_id`. Returns 1 (set), 0 (another
/// value) or -1 (no such tag).
static COMPARE_AND_SET: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
        if redis.call('HGET', KEYS[1], 'max_id') ~= ARGV[1] then return 0 end
        redis.call('HSET', KEYS[1], 'max_id', ARGV[2], 'update_time', now_ms())
        return 1
        ",
    )
});

/// KEYS: the name set. ARGV: the tag, the most names the set may hold. Adds the tag unless
/// the set is full; returns 1 when the tag is (now) a member, 0 when the set is full.
static RESERVE_NAME: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
        if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
        redis.call('SADD', KEYS[1], ARGV[1])
        return 1
        ",
    )
});

/// KEYS: the tag's hash, its tombstone. ARGV: the start (empty: the default, 1 or the
/// tombstone), step, description, force (`1`). Creates the hash unless it exists; returns
/// `{'ok', max_id, update_time}`, `{'exists'}`, or `{'below', tombstone}` for a start below
/// the tombstone that is not forced.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
        local tomb = redis.call('GET', KEYS[2])
        local start = ARGV[1]
        if start == '' then
            start = tomb or '1'
        elseif tomb and lt(start, tomb) and ARGV[4] ~= '1' then
            return {'below', tomb}
        end
        local now = now_ms()
        redis.call('HSET', KEYS[1], 'max_id', start, 'step', ARGV[2],
            'description', ARGV[3], 'update_time', now)
        return {'ok', start, now}
        ",
    )
});

/// KEYS: the tag's hash, its tombstone. Deletes the hash and raises the tombstone to its
/// `max_id`, in one step; returns 1, or 0 when there is no such tag.
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
        local max_id = redis.call('HGET', KEYS[1], 'max_id')
        local tomb = redis.call('GET', KEYS[2])
        if uint(max_id) and (not tomb or lt(tomb, max_id)) then
            redis.call('SET', KEYS[2], max_id)
        end
        redis.call('DEL', KEYS[1])
        return 1
        ",
    )
});

/// KEYS: the tag's hash. ARGV: the step. Returns the row's fields after the change, or nil
/// when there is no such tag.
static SET_STEP: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        if redis.call('EXISTS', KEYS[1]) == 0 then return false end
        redis.call('HSET', KEYS[1], 'step', ARGV[1], 'update_time', now_ms())
        return redis.call('HMGET', KEYS[1], 'max_id', 'step', 'description', 'update_time')
        ",
    )
});

#[async_trait]
impl RangeStore for RedisStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        let requested = step.map_or(0, Step::get);
        let reply: Vec<String> =
            self.run(ALLOCATE.key(self.tag_key(tag)).arg(requested.to_string())).await?;
        let corrupt = |reason: String| StoreError::Corrupt { tag: tag.to_string(), reason };
        let number = |text: &str| {
            text.parse::<u64>()
                .map_err(|_| corrupt(format!("the allocation script answered {reply:?}")))
        };
        match reply.as_slice() {
            [status, max_id, tag_step] if status == "ok" => {
                let (max_id, tag_step) = (number(max_id)?, number(tag_step)?);
                // HINCRBY succeeded, so max_id + effective step fits an i64.
                let end = max_id
                    .checked_add(effective_step(tag_step, step))
                    .and_then(|end| i64::try_from(end).ok())
                    .ok_or_else(|| corrupt(format!("max_id {max_id} passed i64::MAX")))?;
                let tag_step = i64::try_from(tag_step)
                    .map_err(|_| corrupt(format!("step {tag_step} passed i64::MAX")))?;
                allocated_range(tag, end, tag_step, step)
            }
            [status, max_id, effective] if status == "exhausted" => Err(StoreError::Exhausted {
                tag: tag.clone(),
                max_id: number(max_id)?,
                step: number(effective)?,
            }),
            [status] if status == "missing" => Err(StoreError::TagNotFound(tag.clone())),
            [status, reason] if status == "corrupt" => Err(corrupt(reason.clone())),
            _ => Err(corrupt(format!("the allocation script answered {reply:?}"))),
        }
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        check_new_max_id(new)?;
        let mut invocation = COMPARE_AND_SET.key(self.tag_key(tag));
        invocation.arg(expected.to_string()).arg(new.to_string());
        match self.run::<i64>(&invocation).await? {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(StoreError::TagNotFound(tag.clone())),
        }
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.read_tag(tag).await
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.tags_key())
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        let mut tags: Vec<Tag> = names
            .iter()
            .filter_map(|name| match Tag::from_stored(name) {
                Ok(tag) => Some(tag),
                Err(e) => {
                    tracing::warn!(name, error = ?e, "skipping a tag name idmint cannot serve");
                    None
                }
            })
            .collect();
        tags.sort_unstable();
        tags.truncate(TAG_COUNT_MAX);
        if tags.is_empty() {
            return Ok(Vec::new());
        }
        // One request per tag, a bounded number in flight: in a cluster the hashes live on
        // different nodes, and a pipeline may not span slots.
        let mut rows: Vec<Vec<Option<String>>> = Vec::with_capacity(tags.len());
        for chunk in tags.chunks(LIST_READS_IN_FLIGHT) {
            let reads = chunk.iter().map(|tag| {
                let (mut conn, key) = (self.conn(), self.tag_key(tag));
                async move { redis::cmd("HMGET").arg(key).arg(&FIELDS).query_async(&mut conn).await }
            });
            for row in join_all(reads.collect()).await {
                rows.push(row.map_err(|e| self.fail(&e))?);
            }
        }
        let mut records = Vec::with_capacity(rows.len());
        for (tag, fields) in tags.iter().zip(&rows) {
            match record(tag.as_str(), fields) {
                Ok(Some(record)) => records.push(record),
                // A name whose hash is gone: a delete or create was interrupted.
                Ok(None) => {}
                Err(skipped) => tracing::warn!(%skipped, "skipping a row idmint cannot serve"),
            }
        }
        Ok(records)
    }

    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        let tomb: Option<String> = redis::cmd("GET")
            .arg(self.tomb_key(tag))
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        tomb.map(|t| {
            t.parse::<u64>().map_err(|_| StoreError::Corrupt {
                tag: tag.to_string(),
                reason: format!("its tombstone is {t:?}"),
            })
        })
        .transpose()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.conn().ping().await
    }

    fn describe(&self) -> String {
        self.conn.url().to_string()
    }
}

#[async_trait]
impl SegmentStore for RedisStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        let name = spec.tag.as_str();
        let reserved: i64 =
            self.run(RESERVE_NAME.key(self.tags_key()).arg(name).arg(TAG_COUNT_MAX)).await?;
        if reserved == 0 {
            return Err(StoreError::TooManyTags);
        }
        let mut invocation = CREATE.key(self.tag_key(&spec.tag));
        invocation
            .key(self.tomb_key(&spec.tag))
            .arg(spec.start.map_or(String::new(), |s| s.get().to_string()))
            .arg(spec.step.get().to_string())
            .arg(spec.description.as_str())
            .arg(if spec.force { "1" } else { "0" });
        let reply: Vec<String> = self.run(&invocation).await?;
        let corrupt = |reason: String| StoreError::Corrupt { tag: spec.tag.to_string(), reason };
        let (max_id, update_time_ms) = match reply.as_slice() {
            [status, max_id, now] if status == "ok" => (
                max_id
                    .parse::<u64>()
                    .map_err(|_| corrupt(format!("its tombstone is {max_id:?}")))?,
                now.clone(),
            ),
            [status] if status == "exists" => return Err(StoreError::TagExists(spec.tag.clone())),
            [status, tomb] if status == "below" => {
                return Err(StoreError::StartBelowIssued {
                    tag: spec.tag.clone(),
                    start: spec.start.map_or(1, |s| s.get()),
                    tomb: tomb
                        .parse()
                        .map_err(|_| corrupt(format!("its tombstone is {tomb:?}")))?,
                });
            }
            _ => return Err(corrupt(format!("the create script answered {reply:?}"))),
        };
        // Again, unbounded: a delete of this tag may have removed the name since it was
        // reserved, and a tag must never allocate without being listed.
        let _: i64 = redis::cmd("SADD")
            .arg(self.tags_key())
            .arg(name)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        Ok(TagRecord {
            tag: spec.tag.clone(),
            max_id,
            step: spec.step.get(),
            description: spec.description.as_str().to_string(),
            update_time_s: update_time_ms.parse::<u64>().map_or(0, |ms| ms / 1000),
        })
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        let mut invocation = SET_STEP.key(self.tag_key(tag));
        invocation.arg(step.get().to_string());
        let fields: Option<Vec<Option<String>>> = self.run(&invocation).await?;
        let fields = fields.ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        record(tag.as_str(), &fields)?.ok_or_else(|| StoreError::TagNotFound(tag.clone()))
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        // The name first, then the hash, in two round trips (a cluster pipeline would not
        // keep their order): see the module docs.
        let _: i64 = redis::cmd("SREM")
            .arg(self.tags_key())
            .arg(tag.as_str())
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        let deleted: i64 = self.run(DELETE.key(self.tag_key(tag)).key(self.tomb_key(tag))).await?;
        if deleted == 0 { Err(StoreError::TagNotFound(tag.clone())) } else { Ok(()) }
    }
}

/// A tag's hash as read by `HMGET` of [`FIELDS`]: `None` when it has none of them (no such
/// tag), an error when it cannot be served. Numbers are read as strictly as the scripts read
/// them (canonical decimals, `HINCRBY`'s rule).
fn record(name: &str, fields: &[Option<String>]) -> Result<Option<TagRecord>, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { tag: name.to_string(), reason };
    let [max_id, step, description, update_time] = fields else {
        return Err(corrupt(format!("HMGET answered {} fields, not 4", fields.len())));
    };
    if fields.iter().all(Option::is_none) {
        return Ok(None);
    }
    let number = |field: &str, value: &Option<String>| {
        value
            .as_deref()
            .and_then(|text| text.parse::<u64>().ok().filter(|n| n.to_string() == text))
            .filter(|n| *n <= ID_MAX)
            .ok_or_else(|| corrupt(format!("{field} is {value:?}, not a number up to {ID_MAX}")))
    };
    let tag = Tag::from_stored(name).map_err(|e| corrupt(e.to_string()))?;
    Ok(Some(TagRecord {
        tag,
        max_id: number("max_id", max_id)?,
        step: number("step", step)?,
        description: description.clone().unwrap_or_default(),
        // For operators only: an unreadable time reads as 0 rather than failing the row.
        update_time_s: update_time.as_deref().and_then(|t| t.parse::<u64>().ok()).unwrap_or(0)
            / 1000,
    }))
}

/// Runs `futures` concurrently on the calling task (nothing is spawned) and returns their
/// outputs in order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
