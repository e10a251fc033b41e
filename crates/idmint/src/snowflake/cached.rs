//! The cached snowflake generator (Baidu uid-generator's CachedUidGenerator): a fixed ring of
//! pre-made ids, filled a whole unit of borrowed time at a time, so a take is one atomic step
//! on the ring and never reads the clock.
//!
//! Borrowed time is the [`Snowflake`]'s own state: a unit is reserved under its lock (the
//! first unit above the last one issued, or the clock), only within the persisted time mark
//! and at most `max_lead_ms` ahead of the wall clock, so cached and uncached ids of one
//! generator never collide and a restart never reuses borrowed time. A background task
//! refills the ring when it falls below half full (a take checks that every 1 024th take,
//! see `Ring::take_checked`; a unit goes in as one run, `Ring::put_run`); a take that finds
//! the ring empty fills one unit itself instead of being rejected. A take is refused only
//! when the lead bound or the mark stops borrowing, i.e. when demand outruns the layout's
//! limit for longer than the lead.
//!
//! **Age bound.** Pre-made ids carry the time they were made at, not the time they are
//! handed out: at a low rate a full ring would hand out ids minutes old. So no take hands out
//! an id whose time lies more than `max_age_ms` before the clock: the filler reads the clock
//! every round (at least every 10 ms) and publishes the oldest time still fresh (the
//! horizon) as the smallest id still fresh (ids carry their time in their high bits), and a
//! take compares the id it took with it (one load and a compare; a clock read would double
//! the take's cost). A take that finds a stale id discards the ring's front older than half the
//! bound (under the putters' lock) and goes on with the first id left or fills a unit from
//! the clock; the filler does the same every round, so an idle ring is renewed before a take
//! needs it. Discarded ids are never handed out, and the ids after them are larger, so
//! uniqueness and order hold. The bound is exact up to the filler's period while it runs; a
//! process paused as a whole (SIGSTOP, a frozen VM) resumes with the horizon of before the
//! pause until the filler's next round, at most 10 ms later. On an idle node it costs one
//! ring of ids made and dropped per `max_age_ms`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idmint_core::Ring;
use idmint_core::limits::{
    BORROW_LEAD_MS_MAX, RING_CAPACITY_MAX, RING_CAPACITY_MIN, RING_PADDING_PERMILLE_DEFAULT,
};
use idmint_core::snowflake::Layout;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::generator::{SNOWFLAKE_WAIT_MS_MAX, Snowflake, SnowflakeError};

/// Longest a take on an empty ring waits for borrowing to resume before it is refused.
pub const TAKE_WAIT_MS_MAX: u64 = SNOWFLAKE_WAIT_MS_MAX;

/// Pause of a take while borrowing is stopped (the filler is moving the mark).
const STOPPED_PAUSE: Duration = Duration::from_micros(100);

/// One step of a take on a dry ring.
enum Attempt {
    /// An id.
    Id(u64),
    /// This thread put a unit; take again.
    Filled,
    /// Another thread is putting ids (or a put is finishing its slot).
    Busy,
    /// Borrowing is stopped by the lead bound or the mark.
    Stopped,
}

/// Default ring capacity (ids), uid-generator's default.
pub const CACHED_RING_CAPACITY_DEFAULT: u64 = 1 << 16;

/// Default bound on how far the ring's borrowed time may run ahead of the clock.
pub const CACHED_MAX_LEAD_MS_DEFAULT: u64 = BORROW_LEAD_MS_MAX;

/// Default bound on the age of a handed-out id's time: at most 1 s before the clock.
pub const CACHED_MAX_AGE_MS_DEFAULT: u64 = 1_000;

/// Smallest age bound: below it the ring would be emptied and refilled over and over at
/// moderate rates (and it must also cover one time unit, see [`CachedConfig::check`]).
pub const CACHED_MAX_AGE_MS_MIN: u64 = 10;

/// Largest age bound, one hour.
pub const CACHED_MAX_AGE_MS_MAX: u64 = 3_600_000;

const _: () = assert!(
    CACHED_MAX_AGE_MS_MIN <= CACHED_MAX_AGE_MS_DEFAULT
        && CACHED_MAX_AGE_MS_DEFAULT <= CACHED_MAX_AGE_MS_MAX
);

/// How a server runs the cached generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedConfig {
    /// Ring capacity in ids: a power of two holding at least one time unit.
    pub capacity: u64,
    /// Bound on the borrowed time's lead over the clock, in ms.
    pub max_lead_ms: u64,
    /// Bound on a handed-out id's age: its time is at most this many ms before the clock at
    /// the take.
    pub max_age_ms: u64,
}

impl CachedConfig {
    /// A ring of `capacity` ids leading the clock by at most `max_lead_ms`, with the default
    /// age bound.
    pub fn new(capacity: u64, max_lead_ms: u64) -> CachedConfig {
        CachedConfig { capacity, max_lead_ms, max_age_ms: CACHED_MAX_AGE_MS_DEFAULT }
    }
}

impl CachedConfig {
    /// Why this ring cannot run over `layout`, if it cannot: the capacity must be a power of
    /// two within the ring bounds and hold one whole time unit; the lead is bounded.
    pub fn check(&self, layout: &Layout) -> Result<(), String> {
        let CachedConfig { capacity, max_lead_ms, max_age_ms } = *self;
        if !(RING_CAPACITY_MIN..=RING_CAPACITY_MAX).contains(&capacity)
            || !capacity.is_power_of_two()
        {
            return Err(format!(
                "a ring capacity of {capacity} is not a power of two from {RING_CAPACITY_MIN} \
                 to {RING_CAPACITY_MAX}; use e.g. {CACHED_RING_CAPACITY_DEFAULT}"
            ));
        }
        let unit_ids = layout.max_sequence() + 1;
        if capacity < unit_ids {
            return Err(format!(
                "a ring of {capacity} ids cannot hold one time unit of layout {layout} \
                 ({unit_ids} ids); use a capacity of at least {}",
                unit_ids.next_power_of_two()
            ));
        }
        if max_lead_ms > BORROW_LEAD_MS_MAX {
            return Err(format!(
                "a ring lead of {max_lead_ms} ms is above {BORROW_LEAD_MS_MAX} ms (a restart \
                 waits out the lead); use a smaller lead"
            ));
        }
        // An id of the current unit may be a whole unit old: a smaller bound would find
        // every fresh unit stale.
        let age_min_ms = CACHED_MAX_AGE_MS_MIN.max(layout.unit().millis());
        if !(age_min_ms..=CACHED_MAX_AGE_MS_MAX).contains(&max_age_ms) {
            return Err(format!(
                "a ring age bound of {max_age_ms} ms is outside {age_min_ms}..=\
                 {CACHED_MAX_AGE_MS_MAX} ms (at least {CACHED_MAX_AGE_MS_MIN} ms and one time \
                 unit of layout {layout}); use e.g. {CACHED_MAX_AGE_MS_DEFAULT}"
            ));
        }
        Ok(())
    }
}

/// A ring of pre-made snowflake ids over a [`Snowflake`].
#[derive(Debug)]
pub struct CachedSnowflake {
    /// What every take reads, on cache lines of its own: the filler's and putters' writes
    /// (the `filling` lock, the wake-up, the counters) would otherwise invalidate it.
    taken: TakeState,
    generator: Arc<Snowflake>,
    ring: Ring,
    max_lead_ms: u64,
    max_age_ms: u64,
    wake: tokio::sync::Notify,
    /// Held by whoever is putting a unit (the filler task or a taker on an empty ring): one
    /// putter at a time keeps units whole and in order.
    filling: std::sync::Mutex<()>,
    rejected: AtomicU64,
    /// Ids dropped from the ring's front because their time grew older than the age bound.
    stale: AtomicU64,
    cancel: CancellationToken,
    /// The filler task.
    tasks: TaskTracker,
}

/// The fields a take reads, written rarely: at a close, a lease loss, and once per filler
/// round (the horizon). Aligned to two cache lines (against adjacent-line prefetch), so no
/// write to the rest of [`CachedSnowflake`] makes a taker miss.
#[derive(Debug)]
#[repr(align(128))]
struct TakeState {
    /// Set by [`CachedSnowflake::shutdown`]: every take is refused from then on.
    closed: AtomicBool,
    /// The smallest id still fresh: the first id of the first time unit that starts at or
    /// after `now - max_age_ms`, as of the last clock read of the filler or a slow take. Ids
    /// carry their time in their high bits, so an id is older than the bound exactly when it
    /// is below this; a take compares instead of decoding its id's time.
    fresh_id_min: AtomicU64,
    /// The largest id the layout can make: anything above is no id of this ring (counted
    /// as stale, never handed out).
    id_max: u64,
    /// The generator's lease losses when the ring was last checked against them.
    losses_seen: AtomicU64,
}

impl CachedSnowflake {
    /// A ring of `capacity` ids (a power of two) over `generator`, borrowing at most
    /// `max_lead_ms` ahead of the clock, with the default age bound
    /// ([`CACHED_MAX_AGE_MS_DEFAULT`]) and its filler task spawned on the current runtime.
    pub fn start(
        generator: Arc<Snowflake>,
        capacity: u64,
        max_lead_ms: u64,
    ) -> Result<Arc<CachedSnowflake>, SnowflakeError> {
        Self::start_with(generator, CachedConfig::new(capacity, max_lead_ms))
    }

    /// A ring as `config` says over `generator`, with its filler task spawned on the current
    /// runtime.
    pub fn start_with(
        generator: Arc<Snowflake>,
        config: CachedConfig,
    ) -> Result<Arc<CachedSnowflake>, SnowflakeError> {
        config.check(generator.layout()).map_err(SnowflakeError::Config)?;
        let CachedConfig { capacity, max_lead_ms, max_age_ms } = config;
        let ring = Ring::new(capacity).map_err(|e| SnowflakeError::Config(e.to_string()))?;
        let generator_losses = generator.lease_losses();
        let layout = generator.layout();
        let id_bits = layout.time_bits() + layout.worker_bits() + layout.sequence_bits();
        let cached = Arc::new(CachedSnowflake {
            taken: TakeState {
                closed: AtomicBool::new(false),
                fresh_id_min: AtomicU64::new(0),
                // Layouts have at most 63 bits, so the shift is below 64.
                id_max: u64::MAX >> (64 - id_bits),
                losses_seen: AtomicU64::new(generator_losses),
            },
            generator,
            ring,
            max_lead_ms,
            max_age_ms,
            wake: tokio::sync::Notify::new(),
            filling: std::sync::Mutex::new(()),
            rejected: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        let weak = Arc::downgrade(&cached);
        let cancel = cached.cancel.clone();
        cached.tasks.spawn(async move {
            // The filler retries every 10 ms: a failure is logged when filling stops and when
            // it resumes, not at every round.
            let mut failing = false;
            loop {
                let Some(cached) = weak.upgrade() else { return };
                match cached.fill().await {
                    Err(error) if !failing => {
                        failing = true;
                        tracing::warn!(%error, "cached snowflake ring not filled; retrying every 10 ms");
                    }
                    Ok(()) if failing => {
                        failing = false;
                        tracing::info!("cached snowflake ring filling again");
                    }
                    _ => {}
                }
                // Held for at most the 10 ms wait: dropping the last other handle still
                // stops the task at the next round.
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = cached.wake.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
            }
        });
        Ok(cached)
    }

    /// The next id: one atomic step on the ring and a load (the age bound's horizon, an id
    /// to compare with); on an empty ring, or a stale front, the caller fills one unit.
    /// `None` only when borrowing is stopped by the lead bound or the time mark (counted).
    pub fn take(&self) -> Result<Option<u64>, SnowflakeError> {
        self.refuse_once_closed()?;
        // Pre-made ids carry the leased worker id and this clock's time: refused with the
        // generator's while the clock is off the store's past the margin (one load).
        self.generator.refuse_while_skewed()?;
        self.discard_after_a_lost_lease();
        if let Some((id, fill_due)) = self.ring.take_checked(RING_PADDING_PERMILLE_DEFAULT) {
            // Checked every 1 024th take (`Ring::take_checked`): the check reads the tail,
            // which the filler rewrites with every put.
            if fill_due {
                self.wake.notify_one();
            }
            if self.past_horizon(id) {
                self.stale.fetch_add(1, Ordering::Relaxed);
                self.discard_stale(true);
                return self.take_slow();
            }
            return Ok(Some(id));
        }
        self.take_slow()
    }

    /// Whether `id`'s time lies more than the age bound before `now_ms`.
    fn is_stale(&self, id: u64, now_ms: u64) -> bool {
        self.older_than(id, now_ms, self.max_age_ms)
    }

    /// Whether `id`'s time lies before the published horizon (or `id` is no id of the
    /// layout): the fast take's check, two compares.
    #[inline]
    fn past_horizon(&self, id: u64) -> bool {
        id < self.taken.fresh_id_min.load(Ordering::Relaxed) || id > self.taken.id_max
    }

    /// Reads the clock and publishes the horizon it gives.
    fn read_clock(&self) -> u64 {
        let now_ms = self.generator.now_ms();
        let fresh_id_min = fresh_id_min(self.generator.layout(), now_ms, self.max_age_ms);
        self.taken.fresh_id_min.fetch_max(fresh_id_min, Ordering::Relaxed);
        now_ms
    }

    /// Whether `id`'s time lies more than `age_ms` before `now_ms`.
    fn older_than(&self, id: u64, now_ms: u64, age_ms: u64) -> bool {
        // Every id in the ring decodes under its generator's layout; `None` cannot happen
        // and would count as old (dropped, never handed out).
        self.generator
            .decode(id)
            .is_none_or(|parts| now_ms.saturating_sub(parts.timestamp_ms) > age_ms)
    }

    /// Once the front is stale (or a taker just found a stale id, `took_stale`), drops the
    /// ring's front while it is older than half the age bound, with no put meanwhile: the ids
    /// are in time order, so what stays has half the bound to live. (Dropping only what is
    /// past the bound would leave units filled together to expire one a millisecond, each
    /// restarting the sequence at 0 after a few ids, which skews `id % N` at a low rate.)
    /// Takers racing it may take some of those ids; each checks its own.
    fn discard_stale(&self, took_stale: bool) {
        let _filling = self.filling.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now_ms = self.read_clock();
        let front_stale = self.ring.peek().is_some_and(|front| self.is_stale(front, now_ms));
        if !took_stale && !front_stale {
            return;
        }
        let keep_ms = self.max_age_ms / 2;
        let mut discarded: u64 = 0;
        // At most the ring's ids: nothing is put while the lock is held.
        while let Some(front) = self.ring.peek() {
            if !self.older_than(front, now_ms, keep_ms) {
                break;
            }
            if self.ring.take().is_some() {
                discarded += 1;
            }
        }
        if discarded > 0 {
            self.stale.fetch_add(discarded, Ordering::Relaxed);
            tracing::debug!(
                discarded,
                max_age_ms = self.max_age_ms,
                "stale ids dropped from the ring's front; it refills from the clock"
            );
        }
    }

    /// Ids dropped so far because their time grew older than the age bound.
    pub fn stale_discarded(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Empties the ring once the generator has lost its lease: its ids were made ahead under
    /// that lease, and the row that proved it may have been deleted or restored (the next
    /// owner of the worker id then starts below them). Takes after that go to the generator,
    /// which refuses until a lease is held again.
    fn discard_after_a_lost_lease(&self) {
        let losses = self.generator.lease_losses();
        if losses == self.taken.losses_seen.load(Ordering::Acquire) {
            return;
        }
        // No put while the ring is emptied.
        let _filling = self.filling.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut discarded: u64 = 0;
        while self.ring.take().is_some() {
            discarded += 1;
        }
        self.taken.losses_seen.store(losses, Ordering::Release);
        tracing::warn!(discarded, "worker lease lost: the ring's pre-made ids are discarded");
    }

    /// A take that found no id: the ring is empty, or a put is still writing the front slot.
    /// Waits (sleeping, not spinning: on a busy machine the filler, which moves the mark,
    /// needs this core) at most [`TAKE_WAIT_MS_MAX`].
    fn take_slow(&self) -> Result<Option<u64>, SnowflakeError> {
        let deadline = Instant::now() + Duration::from_millis(TAKE_WAIT_MS_MAX);
        loop {
            match self.attempt()? {
                Attempt::Id(id) => return Ok(Some(id)),
                Attempt::Filled => continue,
                Attempt::Busy => std::thread::yield_now(),
                Attempt::Stopped => std::thread::sleep(STOPPED_PAUSE),
            }
            if Instant::now() >= deadline {
                return Ok(self.reject());
            }
        }
    }

    /// `count` ids for an async caller: like [`Self::take`], but a wait for the ring
    /// suspends the task instead of its thread. An error when the ring stays dry for
    /// [`TAKE_WAIT_MS_MAX`] (counted as a rejected take).
    pub async fn next_ids(&self, count: u64) -> Result<Vec<u64>, SnowflakeError> {
        let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut deadline = None;
        self.refuse_once_closed()?;
        self.generator.refuse_while_skewed()?;
        self.discard_after_a_lost_lease();
        while (ids.len() as u64) < count {
            if let Some(id) = self.ring.take() {
                if self.past_horizon(id) {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                    self.discard_stale(true);
                    continue;
                }
                ids.push(id);
                continue;
            }
            let deadline = *deadline
                .get_or_insert_with(|| Instant::now() + Duration::from_millis(TAKE_WAIT_MS_MAX));
            match self.attempt()? {
                Attempt::Id(id) => ids.push(id),
                Attempt::Filled => {}
                Attempt::Busy => tokio::task::yield_now().await,
                Attempt::Stopped => tokio::time::sleep(STOPPED_PAUSE).await,
            }
            if Instant::now() >= deadline {
                self.reject();
                return Err(SnowflakeError::Unavailable(
                    "the cached ring stayed empty: borrowing is stopped by its lead bound or \
                     the time mark"
                        .into(),
                ));
            }
        }
        if self.ring.needs_fill(RING_PADDING_PERMILLE_DEFAULT) {
            self.wake.notify_one();
        }
        Ok(ids)
    }

    /// One step of a take on a dry ring: an id, or a unit put in place (by this thread alone,
    /// and only when all of it fits, so no borrowed time is wasted), or another thread is
    /// putting, or borrowing is stopped (the filler is woken to move the mark).
    fn attempt(&self) -> Result<Attempt, SnowflakeError> {
        if let Some(id) = self.ring.take() {
            // The slow path reads the clock itself.
            if !self.is_stale(id, self.read_clock()) {
                return Ok(Attempt::Id(id));
            }
            self.stale.fetch_add(1, Ordering::Relaxed);
            self.discard_stale(true);
            return Ok(Attempt::Busy);
        }
        let unit_ids = self.generator.layout().max_sequence() + 1;
        if self.ring.capacity() - self.ring.len() < unit_ids {
            return Ok(Attempt::Busy);
        }
        Ok(match self.fill_unit_alone()? {
            Some(true) => Attempt::Filled,
            Some(false) => {
                self.wake.notify_one();
                Attempt::Stopped
            }
            None => Attempt::Busy,
        })
    }

    /// Counts a refused take and wakes the filler.
    fn reject(&self) -> Option<u64> {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
        None
    }

    /// Takes refused so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Ids in the ring now.
    pub fn len(&self) -> u64 {
        self.ring.len()
    }

    /// Whether the ring is empty now.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Reserves one unit and puts its ids in the ring; `false` when no unit may be borrowed
    /// now. Ids of the unit that do not fit are dropped (wasted, never reused).
    fn fill_unit(&self) -> Result<bool, SnowflakeError> {
        let Some((unit, worker)) = self.generator.reserve_unit(self.max_lead_ms)? else {
            return Ok(false);
        };
        let layout = self.generator.layout();
        // The unit's ids are `first + sequence` for every sequence (the sequence is the low
        // field, see `Layout::ids_of_unit`): one run, claimed in the ring with one CAS.
        let first = layout
            .compose(unit, worker, 0)
            .ok_or_else(|| SnowflakeError::Exhausted(layout.to_string()))?;
        self.ring.put_run(first, layout.max_sequence() + 1);
        Ok(true)
    }

    /// Fills the ring up while a whole unit fits, extending the time mark when borrowing
    /// reaches it.
    async fn fill(&self) -> Result<(), SnowflakeError> {
        let unit_ids = self.generator.layout().max_sequence() + 1;
        // An idle ring is renewed here, before a take would find it stale.
        self.discard_stale(false);
        if self.generator.mark_due() {
            self.generator.extend_mark_now().await?;
        }
        while self.ring.capacity() - self.ring.len() >= unit_ids {
            if self.generator.mark_due() {
                self.generator.extend_mark_now().await?;
            }
            match self.fill_unit_alone()? {
                Some(true) => {}
                // A taker is putting a unit: let it finish.
                None => tokio::task::yield_now().await,
                Some(false) => {
                    // The mark (or the lead) stops borrowing: move the mark, then retry once.
                    self.generator.extend_mark_now().await?;
                    if self.fill_unit_alone()? == Some(false) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Stops the filler task, waits for it, then closes the ring: every take is refused from
    /// then on and the pre-made ids are discarded (never handed out). Part of the node's
    /// shutdown, BEFORE the generator's: the ring's ids were made under the generator's
    /// worker lease, which the generator's shutdown releases.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        self.taken.closed.store(true, Ordering::Release);
        // No put while the ring is emptied.
        let _filling = self.filling.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while self.ring.take().is_some() {}
    }

    /// The refusal of every take once [`Self::shutdown`] closed the ring.
    fn refuse_once_closed(&self) -> Result<(), SnowflakeError> {
        if self.taken.closed.load(Ordering::Acquire) {
            return Err(SnowflakeError::Unavailable(
                "the node is shutting down: the snowflake ring is closed".into(),
            ));
        }
        Ok(())
    }

    /// [`Self::fill_unit`] unless another thread is putting a unit (`None`).
    fn fill_unit_alone(&self) -> Result<Option<bool>, SnowflakeError> {
        let Ok(_filling) = self.filling.try_lock() else { return Ok(None) };
        self.fill_unit().map(Some)
    }
}

/// The smallest id of `layout` whose time is not more than `max_age_ms` before `now_ms`: the
/// first id of the first time unit starting at or after `now_ms - max_age_ms` (0 when that is
/// before the epoch, `u64::MAX` when it is past the layout's end). An id's time is older than
/// the bound exactly when the id is below it, because the time is the id's high field.
fn fresh_id_min(layout: &Layout, now_ms: u64, max_age_ms: u64) -> u64 {
    let horizon_ms = now_ms.saturating_sub(max_age_ms);
    let Some(since_epoch_ms) = horizon_ms.checked_sub(layout.epoch_ms()) else { return 0 };
    let units = since_epoch_ms.div_ceil(layout.unit().millis());
    layout.compose(units, 0, 0).unwrap_or(u64::MAX)
}

impl Drop for CachedSnowflake {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::snowflake::{SnowflakeConfig, WorkerIdSource};

    /// The fast take's own age check, alone: the clock jumps past the bound and the horizon is
    /// published (as a filler round does just before it drops the stale front, while takers
    /// race it), but nothing is dropped yet. The next take must not hand out the stale front.
    /// (Every other path that publishes the horizon also drops the front, so only this check
    /// stands between a take racing that round and a stale id.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_take_racing_a_published_horizon_hands_out_no_stale_id() {
        let clock = Arc::new(ManualClock::at_system_time());
        let layout = Layout::preset("snowflake").expect("preset");
        let mut config = SnowflakeConfig::new("snowflake", layout);
        config.worker = WorkerIdSource::Static(1);
        // A window past the jump below: the next id needs no new mark, which only the filler
        // (not run again here) would write.
        config.time_window_ms = 3_000;
        let generator = Snowflake::start(None, config, Arc::clone(&clock) as Arc<dyn Clock>)
            .await
            .expect("generator");
        let cached = CachedSnowflake::start_with(generator, CachedConfig::new(1 << 12, 10_000))
            .expect("ring");
        // The filler's first round, on this thread.
        tokio::task::yield_now().await;
        let first = cached.take().expect("take").expect("an id");
        assert!(!cached.is_empty(), "the ring holds the rest of the unit");
        clock.advance(CACHED_MAX_AGE_MS_DEFAULT + 500);
        cached.read_clock();
        let next = cached.take().expect("take").expect("an id");
        let age_ms = |id: u64| clock.now_ms() - layout.decode(id).expect("decodes").timestamp_ms;
        assert!(next > first, "ids increase");
        assert!(
            age_ms(next) <= CACHED_MAX_AGE_MS_DEFAULT,
            "a stale id handed out: {} ms old",
            age_ms(next)
        );
        assert!(cached.stale_discarded() > 0);
    }

    /// The fast take's compare with the smallest fresh id says "stale" for exactly the ids the
    /// slow path's decode says are older than the bound, for ms and 10 ms units, around unit
    /// boundaries, before the epoch and past the layout's end.
    #[test]
    fn the_smallest_fresh_id_splits_ids_exactly_where_decoding_them_does() {
        for name in ["snowflake", "sonyflake"] {
            let layout = Layout::preset(name).expect("preset");
            let unit_ms = layout.unit().millis();
            let epoch_ms = layout.epoch_ms();
            let end_ms = layout.expires_at_ms();
            let worker = layout.max_worker();
            for max_age_ms in [10, 15, 1_000] {
                let probes = [0, 1, epoch_ms, epoch_ms + 7, epoch_ms + 1_000_003, end_ms - 1];
                for base_ms in probes {
                    for now_ms in base_ms..base_ms + 2 * unit_ms + max_age_ms + 2 {
                        let floor = fresh_id_min(&layout, now_ms, max_age_ms);
                        let horizon_ms = now_ms.saturating_sub(max_age_ms);
                        let first_units = layout.to_units(horizon_ms).unwrap_or(0);
                        for units in first_units.saturating_sub(2)..first_units + 3 {
                            for sequence in [0, layout.max_sequence()] {
                                let Some(id) = layout.compose(units, worker, sequence) else {
                                    continue;
                                };
                                let parts = layout.decode(id).expect("a composed id decodes");
                                assert_eq!(
                                    id < floor,
                                    parts.timestamp_ms < horizon_ms,
                                    "{name}: id {id} ({parts:?}) at {now_ms} ms, bound \
                                     {max_age_ms} ms"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
