//! Sequence counters: the fast, volatile side of sequences ([`CounterStore`]), kept in Redis
//! (`redis/counter.rs`, feature `redis`) below a ceiling that lives in the SQL store
//! ([`crate::SequenceStore`]).
//!
//! One counter per `(sequence, period)` ([`CounterKey`]) holds `cur` (the last id taken),
//! `max` (the ceiling Redis was told; no id passes it), the data set that seeded it (for
//! Redis, the server's `run_id` and replication history), and rate statistics. A counter is
//! only usable in the data set that seeded it: a restarted, replaced or failed-back server
//! (a new `run_id` or `master_replid`), or a lost counter, answers [`Take::NeedsSeed`], and
//! the caller reseeds it above everything the SQL ceiling allowed.
//! The counter never reads the caller's clock: the second a take counts in is the caller's.

use async_trait::async_trait;
use idmint_core::Tag;

use crate::StoreError;

/// Largest counter value: Redis scripts compute in doubles, exact up to 2^53.
pub const COUNTER_MAX: u64 = (1 << 53) - 1;

/// One counter: a sequence and its period (`""`, or the day of a daily sequence).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    /// The sequence.
    pub name: Tag,
    /// `""` for a plain sequence; `YYYYMMDD` for a daily one.
    pub period: String,
}

/// What a take got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The ids `last - n + 1 ..= last`.
    Taken {
        /// The last id taken.
        last: u64,
    },
    /// Fewer than `n` ids are left below the ceiling; nothing was taken.
    NoRoom {
        /// The last id taken so far.
        cur: u64,
        /// The ceiling.
        max: u64,
    },
    /// The counter is missing, or was seeded in another data set (another server run or
    /// replication history): reseed it first.
    NeedsSeed,
}

/// A counter's state, for the forecast and status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterState {
    /// The last id taken.
    pub cur: u64,
    /// The ceiling.
    pub max: u64,
    /// Ids taken in the last whole second (0 if that second saw none).
    pub recent_per_s: u64,
    /// Ids per second, averaged over the last five minutes (as the stats loop last wrote).
    pub long_term_per_s: u64,
    /// Whether the counter was seeded in the data set answering now (same server run and
    /// replication history).
    pub current_run: bool,
}

/// The volatile, shared counters of sequences.
#[async_trait]
pub trait CounterStore: Send + Sync + 'static {
    /// Takes `n` (≥ 1) ids atomically if they fit below the ceiling and the counter belongs
    /// to the current server run; counts them in second `now_s` for the rates.
    async fn take(&self, key: &CounterKey, n: u64, now_s: u64) -> Result<Take, StoreError>;

    /// Seeds the counter at `cur = floor`, `max = max` for the current server run. If it
    /// already belongs to this run, neither value is lowered (another node seeded or raised
    /// it meanwhile). The caller guarantees no id above `floor` was handed out: it raised the
    /// SQL ceiling from `floor` to `max` itself.
    async fn seed(&self, key: &CounterKey, floor: u64, max: u64) -> Result<(), StoreError>;

    /// Raises the ceiling to `max` (never lowers it). `false` when the counter needs a seed
    /// instead (missing, or another run's): the caller leaves it to the next take.
    async fn raise_max(&self, key: &CounterKey, max: u64) -> Result<bool, StoreError>;

    /// The counter's state; `None` when it does not exist.
    async fn state(&self, key: &CounterKey, now_s: u64)
    -> Result<Option<CounterState>, StoreError>;

    /// Records the five-minute average rate the stats loop computed.
    async fn set_long_term(&self, key: &CounterKey, per_s: u64) -> Result<(), StoreError>;

    /// Takes the raise lock of `key` for `ttl_ms` if nobody holds it: one node at a time
    /// raises a ceiling, so concurrent forecasts do not raise it twice.
    async fn try_lock(
        &self,
        key: &CounterKey,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Releases the raise lock if `holder` still holds it.
    async fn unlock(&self, key: &CounterKey, holder: &str) -> Result<(), StoreError>;

    /// Removes every counter of sequence `name` (after the sequence was deleted).
    async fn remove(&self, name: &Tag) -> Result<(), StoreError>;

    /// Checks that the counters answer.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Where the counters live, for logs (no password).
    fn describe(&self) -> String;
}
