//! Sequence counters in Redis ([`RedisCounters`], a [`CounterStore`]): one hash per
//! `(sequence, period)` with `cur`, `max`, `run`, `seqs_recently` and `seqs_long_term`, and
//! every step one Lua script, so each is atomic on the server.
//!
//! Keys: `{prefix}seq:{NAME}:PERIOD` (the hash; a daily one expires after
//! [`DAILY_COUNTER_TTL_S`]), `{prefix}seq:{NAME}:PERIOD:lock` (the raise lock) and
//! `{prefix}seq:{NAME}:periods` (the periods seen, for removal). The braces are a Redis
//! Cluster hash tag: all keys of one sequence share a slot (`seq:%{HEX}:…` for a name holding
//! a brace, see `hash_tag`).
//!
//! **Why every script reads `INFO server` and `INFO replication`**: a counter is trusted
//! only in the data set that seeded it, named by the server's `run_id` and its replication
//! history, `master_replid`; the hash records both (`run`, `repl`). A restart from an older
//! snapshot (RDB or a lagging AOF) or a failover to a replica that was behind brings a new
//! `run_id`. A primary that resynced in full from a lagging replica and was promoted again
//! (a fail-back) keeps its `run_id` but holds the replica's older data; its `master_replid`
//! is new, as after every promotion and every full resync. Either way the script sees the
//! hash name another data set and answers "reseed" instead of ids. A `FLUSHALL` removes the
//! hash, with the same answer. The check is inside the script, so no connection,
//! reconnection or second node can slip a take in between. It costs one `INFO` of two
//! sections per take (Redis 7 and later; older servers, which take one section per call,
//! are asked twice).
//!
//! A primary that kept no replica for `repl-backlog-ttl` (an hour by default) frees its
//! backlog and takes a new `master_replid`, and so does a primary that never had a replica
//! when the first one attaches (the backlog is made then): its counters are then reseeded
//! once, a gap and no repeat. What this cannot see: data put back with neither name
//! changing (keys restored into the running server, `DEBUG RELOAD NOSAVE`); each node's own
//! marks catch those below what that node handed out (the `idmint` crate's `sequences.rs`).
//!
//! **Why every script first switches to effects replication** ([`EFFECTS`]): a script
//! replicated verbatim (Redis before 5, or 5 and 6 with `lua-replicate-commands no`) runs
//! again on each replica and at AOF replay, where `INFO` names *that* server: the hash would
//! record the replica's `run_id` and history, and after a failover to it a counter that went
//! back would be trusted. Switched, replicas and the AOF get the writes themselves. On Redis
//! 7, which replicates only so, the call does nothing and answers true. A server that cannot
//! switch (before 3.2) is refused rather than trusted, as is one whose `INFO` is refused to
//! idmint's user (an ACL of `-@dangerous`) or lacks the two names (a proxy): the scripts
//! answer [`UNSUPPORTED`], a final [`StoreError::Unsupported`] naming the fix, never a
//! retryable error, since nothing but a change of the server or of idmint's access to it
//! helps.

use async_trait::async_trait;
use idmint_core::Tag;
use redis::Script;

use super::{RedisConn, RedisUrl, hash_tag, unavailable};
use crate::StoreError;
use crate::counter::{COUNTER_MAX, CounterKey, CounterState, CounterStore, Take};

/// A daily counter expires this long after it was last seeded (its ceiling stays in SQL;
/// a node that still serves an old day after that reseeds from it).
pub const DAILY_COUNTER_TTL_S: u64 = 3 * 86_400;

/// The error code of a script's refusal of a server idmint cannot use, followed by what is
/// missing: [`NO_EFFECTS`], [`INFO_REFUSED`] (and the server's error) or [`INFO_INCOMPLETE`].
const UNSUPPORTED: &str = "IDMINT_UNSUPPORTED";
/// The server cannot replicate a script by its effects (`redis.replicate_commands`).
const NO_EFFECTS: &str = "no_effects";
/// `INFO` is refused to the script (an ACL, a renamed command).
const INFO_REFUSED: &str = "info_refused";
/// `INFO` lacks `run_id` or `master_replid` (a proxy).
const INFO_INCOMPLETE: &str = "info_incomplete";

/// The start of every counter script, before anything it writes: replicas and the AOF get
/// the script's writes, not the script (see the module's comment). `pcall`: a server whose
/// call raises is refused like one without it.
const EFFECTS: &str = r"
if not redis.replicate_commands then
  return redis.error_reply('IDMINT_UNSUPPORTED no_effects')
end
local switched, effects = pcall(redis.replicate_commands)
if not switched or not effects then
  return redis.error_reply('IDMINT_UNSUPPORTED no_effects')
end
";

/// The identity of the data set the script runs on, in the scripts that seed, take or trust
/// a counter: `run` (the server's `run_id`) and `repl` (its `master_replid`). `INFO`
/// refused or without them: the script refuses ([`UNSUPPORTED`]), never trusting a counter
/// blindly.
const IDENTITY: &str = r"
local function info(...)
  local reply = redis.pcall('INFO', ...)
  if type(reply) == 'string' then return reply, nil end
  if type(reply) == 'table' and reply.err then return nil, reply.err end
  return nil, 'INFO answered no text'
end
local text, refused = info('server', 'replication')
if not text then
  -- Before Redis 7, INFO takes one section.
  local server, refused_server = info('server')
  local replication, refused_replication = info('replication')
  if server and replication then
    text = server .. replication
  else
    refused = refused_server or refused_replication
  end
end
if not text then
  return redis.error_reply('IDMINT_UNSUPPORTED info_refused ' .. tostring(refused))
end
local run = string.match(text, 'run_id:(%w+)')
local repl = string.match(text, 'master_replid:(%w+)')
if not run or not repl then
  return redis.error_reply('IDMINT_UNSUPPORTED info_incomplete')
end
";

/// Why a take answers "reseed" (the second value of [`TAKE`]'s reply): no hash.
const SEED_MISSING: i64 = 0;
/// The hash was seeded by another server run (`run_id`).
const SEED_OTHER_RUN: i64 = 1;
/// The hash was seeded under another replication history (`master_replid`).
const SEED_OTHER_HISTORY: i64 = 2;

/// KEYS[1] hash; ARGV n, now_s → {0, last, max} taken, {1, cur, max} no room, {2, why, 0}
/// seed (`why`: [`SEED_MISSING`], [`SEED_OTHER_RUN`], [`SEED_OTHER_HISTORY`], in that
/// order of checks).
const TAKE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'cur', 'max', 'run', 'tick', 'tick_ids', 'repl')
if h[2] == false then return {2, 0, 0} end
if h[3] ~= run then return {2, 1, 0} end
if h[6] ~= repl then return {2, 2, 0} end
local n = tonumber(ARGV[1])
local cur = tonumber(h[1])
local max = tonumber(h[2])
if cur + n > max then return {1, cur, max} end
local now = tonumber(ARGV[2])
local tick = tonumber(h[4]) or 0
if now > tick then
  local last = 0
  if now == tick + 1 then last = tonumber(h[5]) or 0 end
  redis.call('HSET', KEYS[1], 'tick', now, 'tick_ids', n, 'seqs_recently', last)
else
  redis.call('HINCRBY', KEYS[1], 'tick_ids', n)
end
return {0, redis.call('HINCRBY', KEYS[1], 'cur', n), max}
";

/// KEYS[1] hash, KEYS[2] periods set; ARGV floor, max, period, ttl_s (0: none).
const SEED: &str = r"
local h = redis.call('HMGET', KEYS[1], 'cur', 'max', 'run', 'repl')
local floor = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
if h[2] ~= false and h[3] == run and h[4] == repl then
  floor = math.max(floor, tonumber(h[1]))
  max = math.max(max, tonumber(h[2]))
end
redis.call('HSET', KEYS[1], 'cur', floor, 'max', max, 'run', run, 'repl', repl)
redis.call('SADD', KEYS[2], ARGV[3])
if tonumber(ARGV[4]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
return 1
";

/// KEYS[1] hash; ARGV max → 1 raised (or already higher), 0 needs a seed.
const RAISE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'max', 'run', 'repl')
if h[1] == false or h[2] ~= run or h[3] ~= repl then return 0 end
if tonumber(ARGV[1]) > tonumber(h[1]) then redis.call('HSET', KEYS[1], 'max', ARGV[1]) end
return 1
";

/// KEYS[1] hash; ARGV now_s → {} or {cur, max, recent, long_term, current_run}.
const STATE: &str = r"
local h = redis.call('HMGET', KEYS[1], 'cur', 'max', 'run', 'tick', 'tick_ids',
  'seqs_recently', 'seqs_long_term', 'repl')
if h[2] == false then return {} end
local now = tonumber(ARGV[1])
local tick = tonumber(h[4]) or 0
local recent = 0
if tick == now - 1 then recent = tonumber(h[5]) or 0 end
if tick == now then recent = tonumber(h[6]) or 0 end
local current = 0
if h[3] == run and h[8] == repl then current = 1 end
return {tonumber(h[1]), tonumber(h[2]), recent, tonumber(h[7]) or 0, current}
";

/// KEYS[1] hash; ARGV per_s: recorded only on an existing counter.
const LONG_TERM: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'seqs_long_term', ARGV[1])
end
return 1
";

/// KEYS[1] lock; ARGV holder.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
";

/// Sequence counters on one Redis server.
#[derive(Debug, Clone)]
pub struct RedisCounters {
    conn: RedisConn,
    take: Script,
    seed: Script,
    raise: Script,
    state: Script,
    long_term: Script,
    unlock: Script,
}

impl RedisCounters {
    /// Connects to the server of `url`.
    pub async fn connect(url: &RedisUrl) -> Result<RedisCounters, StoreError> {
        let with_run = |body: &str| Script::new(&counter_script(body, true));
        let plain = |body: &str| Script::new(&counter_script(body, false));
        Ok(RedisCounters {
            conn: url.connect().await?,
            take: with_run(TAKE),
            seed: with_run(SEED),
            raise: with_run(RAISE),
            state: with_run(STATE),
            long_term: plain(LONG_TERM),
            unlock: plain(UNLOCK),
        })
    }

    /// The hash of `key`.
    fn hash(&self, key: &CounterKey) -> String {
        self.conn.key(&format!("seq:{}:{}", hash_tag(key.name.as_str()), key.period))
    }

    /// The periods set of sequence `name`.
    fn periods(&self, name: &Tag) -> String {
        self.conn.key(&format!("seq:{}:periods", hash_tag(name.as_str())))
    }

    /// A failed call: final when a script refused the server ([`UNSUPPORTED`]), else
    /// unavailable (retried).
    fn fail(&self, error: &redis::RedisError) -> StoreError {
        if error.code() == Some(UNSUPPORTED) {
            return unsupported(self.conn.url(), error.detail().unwrap_or_default());
        }
        unavailable(self.conn.url(), error)
    }

    /// Runs a script invocation on a clone of the connection.
    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        invocation.invoke_async(&mut self.conn.clone()).await.map_err(|e| self.fail(&e))
    }
}

/// A counter script as sent: [`EFFECTS`], then [`IDENTITY`] if `identity`, then `body`.
fn counter_script(body: &str, identity: bool) -> String {
    let identity = if identity { IDENTITY } else { "" };
    format!("{EFFECTS}{identity}{body}")
}

/// A script's refusal of the server (`detail`: what is missing, as [`UNSUPPORTED`] lists),
/// as the final error that names the fix.
fn unsupported(url: &RedisUrl, detail: &str) -> StoreError {
    let (what, server_said) = detail.split_once(' ').unwrap_or((detail, ""));
    let reason = match what {
        NO_EFFECTS => "cannot replicate a script by its effects (`redis.replicate_commands`, \
                       Redis 3.2 and later): its replicas and AOF would run the counter \
                       scripts again where INFO names another server, so a counter that went \
                       back could be trusted. Use Redis 5 or later"
            .to_string(),
        INFO_REFUSED => format!(
            "refuses INFO to idmint's user ({server_said}): a counter is trusted only in the \
             data set INFO names (run_id, master_replid). Allow it for that user, e.g. `ACL \
             SETUSER <user> +info` (a `-@dangerous` rule removes it), or point idmint at the \
             Redis server itself rather than a proxy"
        ),
        INFO_INCOMPLETE => {
            "answers INFO without run_id or master_replid, as a proxy does: a counter is \
             trusted only in the data set they name. Point idmint at the Redis server \
             itself (or its Sentinels, or the Cluster's nodes)"
                .to_string()
        }
        _ => format!("refused the counter script: {detail}"),
    };
    StoreError::Unsupported {
        store: format!("redis {url}"),
        reason: format!("cannot serve sequences: it {reason}. No number is taken until then"),
    }
}

/// Why [`TAKE`] distrusted a counter, for the log; `None` for a missing one (a new sequence
/// or day, or a flush: the engine says which when it seeds).
fn distrusted(why: i64) -> Option<&'static str> {
    match why {
        SEED_MISSING => None,
        SEED_OTHER_RUN => Some(
            "it was seeded by another Redis run (run_id): the server restarted or another took \
             over",
        ),
        SEED_OTHER_HISTORY => Some(
            "it was seeded under another replication history (master_replid): a promotion or a \
             full resync since, e.g. a fail-back to a copy that was behind",
        ),
        _ => Some("the take script gave an unknown reason"),
    }
}

/// A counter value read back from Redis, refused if negative or past [`COUNTER_MAX`].
fn counter_value(key: &CounterKey, field: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).ok().filter(|v| *v <= COUNTER_MAX).ok_or_else(|| {
        StoreError::Unavailable(format!(
            "sequence {} (period {:?}): Redis holds {field} = {value}, outside 0..={COUNTER_MAX}",
            key.name, key.period
        ))
    })
}

#[async_trait]
impl CounterStore for RedisCounters {
    async fn take(&self, key: &CounterKey, n: u64, now_s: u64) -> Result<Take, StoreError> {
        if n == 0 || n > COUNTER_MAX {
            return Err(StoreError::InvalidValue(format!("take of {n} ids")));
        }
        let (kind, a, b): (i64, i64, i64) =
            self.run(self.take.key(self.hash(key)).arg(n).arg(now_s)).await?;
        Ok(match kind {
            0 => Take::Taken { last: counter_value(key, "cur", a)? },
            1 => Take::NoRoom {
                cur: counter_value(key, "cur", a)?,
                max: counter_value(key, "max", b)?,
            },
            _ => {
                if let Some(why) = distrusted(a) {
                    tracing::warn!(sequence = %key.name, period = %key.period, redis = %self.conn.url(), "sequence counter distrusted: {why}; it is reseeded above the ceiling");
                }
                Take::NeedsSeed
            }
        })
    }

    async fn seed(&self, key: &CounterKey, floor: u64, max: u64) -> Result<(), StoreError> {
        if floor > max || max > COUNTER_MAX {
            return Err(StoreError::InvalidValue(format!(
                "seed at {floor} below {max}: the ceiling must be at least the floor and at \
                 most {COUNTER_MAX}"
            )));
        }
        let ttl = if key.period.is_empty() { 0 } else { DAILY_COUNTER_TTL_S };
        let mut seed = self.seed.key(self.hash(key));
        seed.key(self.periods(&key.name)).arg(floor).arg(max).arg(&key.period).arg(ttl);
        self.run::<i64>(&seed).await.map(drop)
    }

    async fn raise_max(&self, key: &CounterKey, max: u64) -> Result<bool, StoreError> {
        if max > COUNTER_MAX {
            return Err(StoreError::InvalidValue(format!("a ceiling above {COUNTER_MAX}")));
        }
        let raised: i64 = self.run(self.raise.key(self.hash(key)).arg(max)).await?;
        Ok(raised == 1)
    }

    async fn state(
        &self,
        key: &CounterKey,
        now_s: u64,
    ) -> Result<Option<CounterState>, StoreError> {
        let values: Vec<i64> = self.run(self.state.key(self.hash(key)).arg(now_s)).await?;
        let [cur, max, recent, long_term, current] = values[..] else { return Ok(None) };
        Ok(Some(CounterState {
            cur: counter_value(key, "cur", cur)?,
            max: counter_value(key, "max", max)?,
            recent_per_s: counter_value(key, "seqs_recently", recent)?,
            long_term_per_s: counter_value(key, "seqs_long_term", long_term)?,
            current_run: current == 1,
        }))
    }

    async fn set_long_term(&self, key: &CounterKey, per_s: u64) -> Result<(), StoreError> {
        let per_s = per_s.min(COUNTER_MAX);
        self.run::<i64>(self.long_term.key(self.hash(key)).arg(per_s)).await.map(drop)
    }

    async fn try_lock(
        &self,
        key: &CounterKey,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("{}:lock", self.hash(key)))
            .arg(holder)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms.max(1))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(&e))?;
        Ok(set.is_some())
    }

    async fn unlock(&self, key: &CounterKey, holder: &str) -> Result<(), StoreError> {
        let lock = format!("{}:lock", self.hash(key));
        self.run::<i64>(self.unlock.key(lock).arg(holder)).await.map(drop)
    }

    async fn remove(&self, name: &Tag) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let periods: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.periods(name))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.fail(&e))?;
        let mut del = redis::cmd("DEL");
        del.arg(self.periods(name));
        for period in periods {
            let key = CounterKey { name: name.clone(), period };
            del.arg(self.hash(&key)).arg(format!("{}:lock", self.hash(&key)));
        }
        let _: i64 = del.query_async(&mut conn).await.map_err(|e| self.fail(&e))?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.conn.clone().ping().await
    }

    fn describe(&self) -> String {
        self.conn.url().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter script, as sent, switches to effects replication before any other
    /// command (a write before it would make the switch fail; a verbatim copy of the script
    /// would rerun `INFO` on each replica). No server here can show the difference: Redis 7
    /// replicates only by effects, and its `redis` table is read-only, so a server without
    /// `replicate_commands` cannot be played.
    #[test]
    fn every_counter_script_switches_to_effects_replication_first() {
        let sent = [
            counter_script(TAKE, true),
            counter_script(SEED, true),
            counter_script(RAISE, true),
            counter_script(STATE, true),
            counter_script(LONG_TERM, false),
            counter_script(UNLOCK, false),
        ];
        for script in sent {
            let switch = script.find("pcall(redis.replicate_commands)").expect(&script);
            let first_call = ["redis.call(", "redis.pcall("]
                .iter()
                .filter_map(|call| script.find(call))
                .min()
                .expect(&script);
            assert!(switch < first_call, "a command before the switch:\n{script}");
            assert!(script.trim_start().starts_with("if not redis.replicate_commands"), "{script}");
        }
    }

    /// A script's refusal names the fix, never the password, and is final.
    #[test]
    fn a_refused_server_is_final_and_named_with_the_fix() {
        let url = RedisUrl::parse("redis://idmint:secret@127.0.0.1:6379").unwrap();
        for (detail, fix) in [
            ("info_refused ERR The user executing the script can't run this command", "+info"),
            ("info_incomplete", "Redis server itself"),
            ("no_effects", "Redis 5 or later"),
        ] {
            let StoreError::Unsupported { store, reason } = unsupported(&url, detail) else {
                panic!("{detail}: not Unsupported");
            };
            assert!(reason.contains(fix), "{detail}: {reason}");
            assert!(!store.contains("secret") && !reason.contains("secret"), "{store} {reason}");
        }
    }
}
