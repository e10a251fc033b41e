//! [`RedisStore`]'s [`WorkerStore`]: worker-id leases and assigned ids, each call one atomic
//! server-side script on one key.
//!
//! Keys (after the URL's prefix): `workers:{SPACE}` is a hash per space (the braces make the
//! space a Redis Cluster hash tag) whose field `ID` holds the lease of worker id `ID` as
//! `TOKEN EXPIRES_MS TIME_MARK HOLDER_ID HOLDER` (the holder id is 32 hex digits; a value an
//! earlier idmint wrote, `TOKEN EXPIRES_MS TIME_MARK HOLDER`, reads as holding no holder id,
//! which no lease matches, and is taken over once expired). `worker_node` is a hash whose field `last` is the
//! last assigned id (one sequence shared by all spaces, from 1) and whose field `ID` records
//! that start as `SPACE PORT LAUNCH_MS HOST`.
//!
//! Acquiring runs the memory backend's walk inside one script (every id of the range up, the first
//! never-held or expired-past-the-margin one wins), so no other call interleaves with it; it
//! reads at most `LEASE_WORKER_ID_MAX + 1` fields. Times and tokens cross the scripts as
//! decimal text and are compared digit by digit. Lease expiry is judged by the server's clock,
//! `TIME` read inside the script that decides (`now_ms()`); the sums with it (`now + ttl`,
//! `now - margin`) are made there, in Lua numbers, exact below 2^53 as every time here is.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;

use super::{RedisStore, script};
use crate::worker::{
    check_assign_request, check_lease_request, check_renewal, check_time_ms, exhausted,
    holder_id_text, lease_lost, new_holder_id,
};
use crate::{
    AssignRequest, Lease, LeaseRecord, LeaseRequest, LeaseStore, StoreError, WorkerSpace,
    WorkerStore,
};

/// Lua helpers for lease values: `lease(v)` splits one into token, expiry, mark, holder id
/// (`''` in a value of an earlier idmint) and holder (nil when it is not one); `joined(...)`
/// makes one.
const LUA_LEASE: &str = r"
local holder_id_pattern = '^(%d+) (%d+) (%d+) (' .. string.rep('%x', 32) .. ') (.*)$'
local function lease(v)
    if not v then return nil end
    local t, e, m, k, h = string.match(v, holder_id_pattern)
    if not t then
        k = ''
        t, e, m, h = string.match(v, '^(%d+) (%d+) (%d+) (.*)$')
    end
    if not (uint(t) and uint(e) and uint(m)) then return nil end
    return t, e, m, k, h
end
local function joined(t, e, m, k, h)
    return t .. ' ' .. e .. ' ' .. m .. ' ' .. k .. ' ' .. h
end
";

/// KEYS: the space's hash. ARGV: max_worker, holder, ttl_ms, margin_ms, holder id, the
/// latest time mark a claimed id may carry, min_worker (no id below it is read or claimed).
/// Returns `{id, token, time_mark, expires_ms}`, `{'corrupt', id, value}`,
/// `{'ahead', earliest_mark}` when the only free ids were passed over for their marks, or nil
/// when every id is held.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        "{LUA_LEASE}{}",
        r"
        local now = tonumber(now_ms())
        local fresh = now_us()
        local expires = string.format('%d', now + tonumber(ARGV[3]))
        local below = ''
        if now > tonumber(ARGV[4]) then below = string.format('%d', now - tonumber(ARGV[4])) end
        local earliest
        for id = tonumber(ARGV[7]), tonumber(ARGV[1]) do
            local field = tostring(id)
            local row = redis.call('HGET', KEYS[1], field)
            local token, mark
            if not row then
                token, mark = fresh, '0'
            else
                local t, e, m = lease(row)
                if not t or lt('9007199254740990', t) then return {'corrupt', field, row} end
                if below ~= '' and lt(e, below) then
                    if lt(ARGV[6], m) then
                        if not earliest or lt(m, earliest) then earliest = m end
                    else
                        token, mark = string.format('%d', tonumber(t) + 1), m
                        if lt(token, fresh) then token = fresh end
                    end
                end
            end
            if token then
                redis.call('HSET', KEYS[1], field, joined(token, expires, mark, ARGV[5], ARGV[2]))
                return {field, token, mark, expires}
            end
        end
        if earliest then return {'ahead', earliest} end
        return false
        "
    ))
});

/// KEYS: the space's hash. ARGV: worker id, token, operation, value, holder id. If the lease
/// is still held with that token and holder id, applies `renew` (only while the expiry is not
/// before the server's now: expiry := max(expiry, now + value)), `release`
/// (expiry := min(expiry, now)) or `raise` (mark := max(mark, value)). Returns
/// `{'ok', expires_ms, time_mark}`, `{'lost'}` or `{'corrupt', value}`.
static HELD: LazyLock<Script> = LazyLock::new(|| {
    script(&format!(
        "{LUA_LEASE}{}",
        r"
        local row = redis.call('HGET', KEYS[1], ARGV[1])
        if not row then return {'lost'} end
        local t, e, m, k, h = lease(row)
        if not t then return {'corrupt', row} end
        if t ~= ARGV[2] or k ~= ARGV[5] then return {'lost'} end
        local op, value = ARGV[3], ARGV[4]
        if op == 'renew' then
            local now = now_ms()
            if lt(e, now) then return {'lost'} end
            local until_ms = string.format('%d', tonumber(now) + tonumber(value))
            if lt(e, until_ms) then e = until_ms end
        elseif op == 'release' then
            local now = now_ms()
            if lt(now, e) then e = now end
        elseif op == 'raise' then
            if lt(m, value) then m = value end
        else
            return redis.error_reply('unknown lease operation ' .. op)
        end
        redis.call('HSET', KEYS[1], ARGV[1], joined(t, e, m, k, h))
        return {'ok', e, m}
        "
    ))
});

/// KEYS: the assignment hash. ARGV: max_worker, the record of the start. Returns the
/// assigned id, or nil when it would pass max_worker (nothing written).
static ASSIGN: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        local last = redis.call('HGET', KEYS[1], 'last') or '0'
        if not uint(last) or #last > 15 then
            return redis.error_reply('the assignment sequence ' .. KEYS[1] ..
                ' last=' .. last .. ' is not a number; fix or delete the field')
        end
        local id = tonumber(last) + 1
        if id > tonumber(ARGV[1]) then return false end
        local field = string.format('%d', id)
        redis.call('HSET', KEYS[1], 'last', field, field, ARGV[2])
        return field
        ",
    )
});

impl RedisStore {
    fn space_key(&self, space: &WorkerSpace) -> String {
        self.conn().key(&format!("workers:{{{space}}}"))
    }

    /// Runs [`HELD`] for `lease`.
    async fn update_held(&self, lease: &Lease, op: &str, value: u64) -> Result<Lease, StoreError> {
        let mut invocation = HELD.key(self.space_key(&lease.space));
        invocation
            .arg(lease.worker_id.to_string())
            .arg(lease.token.to_string())
            .arg(op)
            .arg(value.to_string())
            .arg(holder_id_text(lease.holder_id));
        let reply: Vec<String> = self.run(&invocation).await?;
        match reply.as_slice() {
            [status, expires_ms, time_mark] if status == "ok" => Ok(Lease {
                expires_ms: stored_number(&lease.space, lease.worker_id, expires_ms)?,
                mark: stored_number(&lease.space, lease.worker_id, time_mark)?,
                ..lease.clone()
            }),
            [status] if status == "lost" => Err(lease_lost(lease)),
            _ => Err(corrupt(&lease.space, lease.worker_id, &format!("{reply:?}"))),
        }
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        check_lease_request(req)?;
        let holder_id = new_holder_id();
        let mut invocation = ACQUIRE.key(self.space_key(&req.space));
        invocation
            .arg(req.max_worker.to_string())
            .arg(&req.holder)
            .arg(req.ttl_ms.to_string())
            .arg(req.margin_ms.to_string())
            .arg(holder_id_text(holder_id))
            .arg(req.mark_max.to_string())
            .arg(req.min_worker.to_string());
        let reply: Option<Vec<String>> = self.run(&invocation).await?;
        let Some(reply) = reply else {
            return Err(exhausted(req));
        };
        match reply.as_slice() {
            [status, earliest] if status == "ahead" => Err(StoreError::WorkerMarksAhead {
                space: req.space.clone(),
                earliest_mark_ms: stored_number(&req.space, u64::MAX, earliest)?,
                mark_max: req.mark_max,
            }),
            [status, id, value] if status == "corrupt" => {
                Err(corrupt(&req.space, id.parse().unwrap_or(u64::MAX), value))
            }
            [id, token, time_mark, expires_ms] => {
                let worker_id = stored_number(&req.space, u64::MAX, id)?;
                Ok(Lease {
                    space: req.space.clone(),
                    worker_id,
                    token: stored_number(&req.space, worker_id, token)?,
                    holder_id,
                    expires_ms: stored_number(&req.space, worker_id, expires_ms)?,
                    mark: stored_number(&req.space, worker_id, time_mark)?,
                })
            }
            _ => Err(corrupt(&req.space, u64::MAX, &format!("{reply:?}"))),
        }
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease, StoreError> {
        check_renewal(ttl_ms)?;
        self.update_held(lease, "renew", ttl_ms).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.update_held(lease, "release", 0).await.map(drop)
    }

    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        check_time_ms("mark_ms", mark_ms)?;
        self.update_held(lease, "raise", mark_ms).await.map(drop)
    }

    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        let rows: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.space_key(space))
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        let mut records = rows
            .iter()
            .map(|(field, value)| {
                let worker_id = stored_number(space, u64::MAX, field)?;
                let parts: Vec<&str> = value.splitn(4, ' ').collect();
                let [token, expires_ms, time_mark, rest] = parts[..] else {
                    return Err(corrupt(space, worker_id, &format!("{value:?}")));
                };
                let holder = without_holder_id(rest);
                let number = |text| stored_number(space, worker_id, text);
                Ok(LeaseRecord {
                    worker_id,
                    holder: holder.to_string(),
                    token: number(token)?,
                    expires_ms: number(expires_ms)?,
                    mark: number(time_mark)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        records.sort_unstable_by_key(|record| record.worker_id);
        Ok(records)
    }

    async fn now_ms(&self) -> Result<u64, StoreError> {
        let (seconds, micros): (u64, u64) =
            redis::cmd("TIME").query_async(&mut self.conn()).await.map_err(|e| self.fail(&e))?;
        Ok(seconds * 1_000 + micros / 1_000)
    }
}

#[async_trait]
impl WorkerStore for RedisStore {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        check_assign_request(req)?;
        let mut invocation = ASSIGN.key(self.conn().key("worker_node"));
        invocation
            .arg(req.max_worker.to_string())
            .arg(format!("{} {} {} {}", req.space, req.port, req.launch_ms, req.host));
        let assigned: Option<String> = self.run(&invocation).await?;
        match assigned {
            Some(id) => id.parse().map_err(|_| {
                StoreError::Unavailable(format!("redis answered {id:?} for an assigned id"))
            }),
            None => {
                Err(StoreError::WorkersExhausted { space: req.space.clone(), max: req.max_worker })
            }
        }
    }
}

/// The holder of a lease value's tail `HOLDER_ID HOLDER`, or all of it when it holds no
/// holder id (a value an earlier idmint wrote).
fn without_holder_id(rest: &str) -> &str {
    match rest.split_once(' ') {
        Some((id, holder)) if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) => holder,
        _ => rest,
    }
}

/// A number of a lease value, or why the lease of `worker_id` is corrupt.
fn stored_number(space: &WorkerSpace, worker_id: u64, text: &str) -> Result<u64, StoreError> {
    text.parse().map_err(|_| corrupt(space, worker_id, &format!("{text:?} is not a number")))
}

/// [`StoreError::CorruptWorker`] for a lease value (`worker_id` `u64::MAX`: not known).
fn corrupt(space: &WorkerSpace, worker_id: u64, reason: &str) -> StoreError {
    StoreError::CorruptWorker {
        space: space.clone(),
        worker_id: i64::try_from(worker_id).unwrap_or(-1),
        reason: format!("the lease value is {reason}; fix or delete the field"),
    }
}
