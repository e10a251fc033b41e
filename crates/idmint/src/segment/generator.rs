//! One tag's generator: its double buffer, the single-flight refill that feeds it, and the
//! pacing that sizes its segments.
//!
//! The per-id path is `DoubleBuffer::take`: loads and one atomic step, no lock, no await, no
//! log line. When a take crosses the preload point (or comes up short) the generator spawns
//! at most one refill task; a request that finds both segments spent waits for that refill,
//! bounded by `refill_wait`, and fails with [`Error::Unavailable`] rather than guess.
//! When more requests wait than the buffer holds ids, the refill that has just installed a
//! range goes on to load the next slot at once: the range it installed is theirs already,
//! so waiting for one of them to cross the preload point would only add a wake-up and a new
//! task to every refill. A woken request takes what is there before it answers a failure.
//!
//! A refill asks the store for the step the pacing plans (`idmint_core::pacing`), refuses a
//! range below the tag's high-water mark (the store went backwards) and jumps the store past
//! it, makes sure the mark on disk covers the range, and only then installs it. A range whose
//! mark could not be written (a full disk) is not served: the refill fails (503) and keeps
//! the range, and the next attempt writes its mark again rather than ask the store for
//! another one.
//!
//! Marks are written ahead (`pacing::mark_ahead`): a refill whose range the mark on disk
//! covers writes nothing, and once less than half the lead is left the next mark is written
//! in the background, so at a steady rate no refill waits for the disk. After a restart the
//! floor is that mark, up to the lead above the store: a first range below it by at most
//! the lead of the tag's step is that lead, skipped quietly; anything further down is the
//! store going back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idmint_core::limits::{
    RATE_HISTORY_EVERY_MS, RATE_HISTORY_LEN, REFILL_RETRY_MS_MAX, REFILL_RETRY_MS_MIN,
    REGRESSION_JUMPS_MAX,
};
use idmint_core::pacing::{
    mark_ahead, mark_due, mark_lead, plan_step, preload_reserve, runway_seconds,
};
use idmint_core::{
    BufferSnapshot, Count, DoubleBuffer, IdRange, InstallError, RateMeter, Step, Tag, Take,
};
use idmint_store::{Allocation, RangeStore, SegmentStore, StoreError};
use tokio::sync::Notify;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::SegmentConfig;
use super::error::Error;
use super::take_first::{TakeFirst, Waiting};
use crate::marks::LocalMarks;

/// Shortest interval a rate sample covers; shorter ones are merged into the next.
const RATE_SAMPLE_MIN: Duration = Duration::from_millis(10);

/// What every generator of one [`Segments`](super::engine::Segments) shares.
pub(crate) struct Shared {
    /// The store's range part: what serving needs.
    pub(crate) store: Arc<dyn RangeStore>,
    /// The same store's tag admin; `None` for a store without one (the client's remote store).
    pub(crate) admin: Option<Arc<dyn SegmentStore>>,
    pub(crate) config: SegmentConfig,
    pub(crate) high_water: Option<Arc<LocalMarks>>,
    /// The runtime `Segments::start` ran in: refills spawn onto it from any thread, so
    /// synchronous callers outside the runtime can take ids too.
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) tracker: TaskTracker,
    pub(crate) cancel: CancellationToken,
}

/// The histogram of store allocation latencies, in seconds, labelled by `tag`: recorded
/// through the `metrics` facade on every successful store allocation.
pub const REFILL_DURATION_METRIC: &str = "idmint_segment_refill_duration_seconds";

/// Why a range is refused and the store moved past a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Jump {
    /// The lead this node's mark was written ahead by before a restart.
    Ahead,
    /// Ids this node served.
    Served,
    /// Ids the witness saw given to a node.
    Witness,
}

/// Serves one tag's ids from its double buffer.
pub struct TagGenerator {
    tag: Tag,
    buffer: DoubleBuffer,
    refill_in_flight: AtomicBool,
    /// Woken after every refill attempt, successful or not.
    refilled: Notify,
    /// Bumped after every failed refill attempt; waiters compare it to fail fast.
    failures: AtomicU64,
    /// Set by a failed refill attempt, cleared by a successful one and by a fresh refill
    /// task: while it is set and the task retries, requests that find both segments spent
    /// fail at once with the last failure instead of each waiting out `refill_wait` (fast
    /// 503s in an outage).
    failing: AtomicBool,
    /// When a request last found both segments spent, in ms since `created`: the refill
    /// keeps retrying an empty buffer only while requests keep coming.
    last_demand_ms: AtomicU64,
    created: Instant,
    last_failure: Mutex<Option<Error>>,
    /// Requests that found both segments spent and waited for the store.
    waits: AtomicU64,
    /// Requests waiting for a refill now.
    waiting: AtomicU64,
    /// Set by the give-back, so it happens once.
    given_back: AtomicBool,
    /// Ranges installed.
    refills: AtomicU64,
    /// A range the store gave whose mark could not be written: never served before its mark
    /// is on disk. The next attempt writes the mark again instead of asking the store for
    /// another range, which a disk that stays full would strand too, one per retry.
    unmarked: Mutex<Option<IdRange>>,
    /// The tag's mark in the marks file when this generator was made: the floor, which may
    /// lie up to the lead above the store (`Self::written_ahead`).
    start_mark: Option<u64>,
    /// Set while a mark is written early in the background, so one runs at a time.
    marking_ahead: AtomicBool,
    pacing: Mutex<Pacing>,
    shared: Arc<Shared>,
}

/// What the step policy knows about the tag. Touched once per second and once per refill.
#[derive(Debug)]
struct Pacing {
    meter: RateMeter,
    sampled_at: Instant,
    sampled_handed_out: u64,
    /// The row's configured step, as of the last allocation (0: none yet).
    tag_step: u64,
    /// Length of the last range the store gave.
    step: u64,
    /// Moving average of the store's allocation latency.
    latency: Duration,
    /// The last allocation's latency.
    last_latency: Duration,
    /// Recent rates, oldest first, one per `RATE_HISTORY_EVERY_MS`, at most
    /// `RATE_HISTORY_LEN`.
    history: VecDeque<f64>,
    /// When the last rate was added to `history`.
    history_at: Instant,
}

/// A tag as this node serves it: both segments, the pacing and the counters.
#[derive(Debug, Clone, PartialEq)]
pub struct TagStatus {
    /// Both segments, the ids handed out and the high-water mark.
    pub buffer: BufferSnapshot,
    /// Length of the last range the store gave (0 before the first).
    pub step: u64,
    /// The tag's configured step as of the last allocation (0 before the first).
    pub tag_step: u64,
    /// Recent consumption, ids per second.
    pub rate_per_s: f64,
    /// Ids left in both segments.
    pub remaining: u64,
    /// Seconds the remaining ids last at the recent rate; `None` when idle.
    pub runway_s: Option<f64>,
    /// Whether the tag is idle: no id handed out for `idmint_core::pacing::IDLE_AFTER` (or
    /// none yet); its runway is then infinite (`runway_s` is `None`).
    pub idle: bool,
    /// Moving average of the store's allocation latency, in milliseconds.
    pub refill_latency_ms: f64,
    /// Ranges installed.
    pub refills: u64,
    /// Failed refill attempts.
    pub refill_failures: u64,
    /// Requests that found both segments spent and waited for the store.
    pub waits: u64,
    /// The rate over the last minutes, ids per second, oldest first: one value per
    /// `RATE_HISTORY_EVERY_MS`, at most `RATE_HISTORY_LEN`.
    pub rate_history_per_s: Vec<f64>,
}

impl TagGenerator {
    pub(crate) fn new(tag: Tag, shared: Arc<Shared>) -> TagGenerator {
        let buffer = DoubleBuffer::new(shared.config.preload_ratio());
        let start_mark = shared.high_water.as_ref().and_then(|h| h.get(&tag));
        if let Some(mark) = start_mark {
            buffer.raise_floor(mark);
        }
        TagGenerator {
            buffer,
            tag,
            refill_in_flight: AtomicBool::new(false),
            refilled: Notify::new(),
            failures: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            last_demand_ms: AtomicU64::new(0),
            created: Instant::now(),
            last_failure: Mutex::new(None),
            waits: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            given_back: AtomicBool::new(false),
            refills: AtomicU64::new(0),
            unmarked: Mutex::new(None),
            start_mark,
            marking_ahead: AtomicBool::new(false),
            pacing: Mutex::new(Pacing {
                meter: RateMeter::new(),
                sampled_at: Instant::now(),
                sampled_handed_out: 0,
                tag_step: 0,
                step: 0,
                latency: Duration::ZERO,
                last_latency: Duration::ZERO,
                history: VecDeque::with_capacity(RATE_HISTORY_LEN),
                history_at: Instant::now(),
            }),
            shared,
        }
    }

    /// The tag this generator serves.
    pub fn tag(&self) -> &Tag {
        &self.tag
    }

    /// The next id of the tag. Waits (bounded) only when both segments are spent.
    ///
    /// The future takes on its first poll and answers from the buffer when it holds an id;
    /// only an empty buffer builds the (boxed) waiting future, so the fast path is the take
    /// inlined into the caller's poll and moves only the id (`take_first.rs`).
    #[inline]
    pub fn next_id(self: &Arc<Self>) -> impl Future<Output = Result<u64, Error>> + Send {
        TakeFirst::new(
            || self.try_take_one(),
            || -> Waiting<'_, Error> { Box::pin(self.next_id_waiting()) },
        )
    }

    /// The next id of the tag if one is in memory now, without waiting: the synchronous
    /// per-id path (loads and one atomic add), callable from any thread, in or outside the
    /// runtime. `None` means both segments are spent (a refill is under way; `next_id`
    /// waits for it) or the node is shutting down.
    #[inline]
    pub fn try_next_id(self: &Arc<Self>) -> Option<u64> {
        self.try_take_one()
    }

    /// `count` ids of the tag as increasing, non-adjacent ranges (contiguous ids merged).
    pub async fn next_ids(self: &Arc<Self>, count: Count) -> Result<Vec<IdRange>, Error> {
        let take = self.try_take(count);
        let ranges: Vec<IdRange> = take.ranges().collect();
        if take.count() == count.get() {
            return Ok(merge(ranges));
        }
        Box::pin(self.wait_for(count, ranges)).await
    }

    /// Both segments as they are now.
    pub fn snapshot(&self) -> BufferSnapshot {
        self.buffer.snapshot()
    }

    /// The tag as this node serves it, with the rate sampled now.
    pub fn status(&self) -> TagStatus {
        self.sample_rate();
        let buffer = self.buffer.snapshot();
        let remaining = self.buffer.remaining();
        let pacing = self.pacing();
        TagStatus {
            buffer,
            step: pacing.step,
            tag_step: pacing.tag_step,
            rate_per_s: pacing.meter.current(),
            remaining,
            runway_s: runway_seconds(remaining, &pacing.meter, self.shared.config.idle_after()),
            idle: pacing.meter.idle(self.shared.config.idle_after()),
            refill_latency_ms: pacing.latency.as_secs_f64() * 1000.0,
            refills: self.refills.load(Ordering::Relaxed),
            refill_failures: self.failures.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            rate_history_per_s: pacing.history.iter().copied().collect(),
        }
    }

    /// Records the ids handed out since the last sample in the rate meter.
    pub(crate) fn sample_rate(&self) {
        let handed_out = self.buffer.snapshot().handed_out;
        let now = Instant::now();
        let mut pacing = self.pacing();
        let elapsed = now.saturating_duration_since(pacing.sampled_at);
        if elapsed < RATE_SAMPLE_MIN {
            return;
        }
        let ids = handed_out.saturating_sub(pacing.sampled_handed_out);
        pacing.meter.observe(ids, elapsed);
        (pacing.sampled_at, pacing.sampled_handed_out) = (now, handed_out);
        if now.saturating_duration_since(pacing.history_at)
            >= Duration::from_millis(RATE_HISTORY_EVERY_MS)
        {
            if pacing.history.len() == RATE_HISTORY_LEN {
                pacing.history.pop_front();
            }
            let rate = pacing.meter.current();
            pacing.history.push_back(rate);
            pacing.history_at = now;
        }
    }

    /// The fast path: take from the buffer and start a refill if it says so.
    #[inline]
    pub(crate) fn try_take(self: &Arc<Self>, count: Count) -> Take {
        let take = self.buffer.take(count);
        if take.refill_needed() {
            self.ensure_refill();
        }
        take
    }

    /// The single-id fast path.
    #[inline]
    pub(crate) fn try_take_one(self: &Arc<Self>) -> Option<u64> {
        let (id, refill_needed) = self.buffer.take_one();
        if refill_needed {
            self.ensure_refill();
        }
        id
    }

    /// Takes back `range`, ids this generator handed out and the taker did not use, when the
    /// buffer can prove it safe (see `DoubleBuffer::give_back`); returns how many ids it took
    /// back. A range that began in an earlier segment (a client's lease that emptied it, so
    /// the buffer switched) is taken back from the current segment's start: the part below
    /// is wasted, never repeated.
    pub(crate) fn take_back(&self, range: IdRange) -> u64 {
        let current_start = self.buffer.snapshot().current.map(|c| c.range.start());
        let within = match current_start {
            // Checked again under the buffer's lock: if the segment changed since this
            // snapshot, the give-back is refused.
            Some(start) if range.start() < start => IdRange::new(start, range.end()),
            _ => Some(range),
        };
        let Some(within) = within else { return 0 };
        if !self.buffer.give_back(within) {
            return 0;
        }
        tracing::debug!(tag = %self.tag, start = within.start(), end = within.end(), "leased ids taken back");
        within.len()
    }

    /// Stops handing ids out: every later take fails with [`Error::ShuttingDown`].
    pub(crate) fn freeze(&self) {
        self.buffer.freeze();
    }

    /// Whether a refill task is running.
    pub(crate) fn refilling(&self) -> bool {
        self.refill_in_flight.load(Ordering::Acquire)
    }

    /// After the freeze: the unissued tail of the last range, which the shutdown gives back
    /// to the store with a compare-and-set (`giveback.rs`), so the next allocation (by any
    /// node) starts where this node stopped; `None` when there is none.
    ///
    /// Some at most once per generator: a second give-back of the same tail could lower the
    /// store under a range another node was given in between (the compare-and-set cannot
    /// tell `max_id` returning to the same value from never having moved).
    pub(crate) fn tail_to_give_back(&self) -> Option<IdRange> {
        if self.given_back.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.buffer.unissued_tail()
    }

    /// After a refused give-back: if the store is below this node's high-water mark (it went
    /// back and no refill noticed), moves it up to the mark so the next node, whatever its
    /// own marks, does not serve this node's ids again.
    pub(crate) async fn leave_store_above_mark(&self) {
        let high_water = self.buffer.snapshot().high_water;
        let timeout = self.shared.config.store_call_timeout();
        let Ok(Ok(Some(row))) =
            tokio::time::timeout(timeout, self.shared.store.get_tag(&self.tag)).await
        else {
            return;
        };
        if row.max_id >= high_water {
            return;
        }
        tracing::error!(tag = %self.tag, max_id = row.max_id, high_water, "the store is below ids this node served; moving it up before stopping");
        let cas = self.shared.store.compare_and_set_max_id(&self.tag, row.max_id, high_water);
        if let Ok(Err(error)) = tokio::time::timeout(timeout, cas).await {
            tracing::warn!(tag = %self.tag, %error, "store not moved up");
        }
    }

    /// The slow path: both segments ran out before `count` ids were taken. Waits for refills
    /// until the ids are there, a refill fails, or `refill_wait` passes. On failure the ids
    /// already taken are dropped: wasted, never handed out twice.
    async fn wait_for(
        self: &Arc<Self>,
        count: Count,
        mut ranges: Vec<IdRange>,
    ) -> Result<Vec<IdRange>, Error> {
        let wait = self.shared.config.refill_wait();
        let deadline = Instant::now() + wait;
        let mut got: u64 = ranges.iter().map(IdRange::len).sum();
        let mut counted: Option<WaiterCount<'_>> = None;
        // Read before anything else: an attempt that fails from here on is this request's
        // answer, even one that finished before the loop below starts.
        let failures_seen = self.failures.load(Ordering::Acquire);
        if self.failing.load(Ordering::Acquire) && !self.refill_in_flight.load(Ordering::Acquire) {
            // The attempt this request's take started (or found running) has failed already:
            // answer that, rather than start a second store call at once (an unknown tag
            // cost two store calls per request that way).
            return Err(self.last_failure());
        }
        while got < count.get() {
            let notified = self.refilled.notified();
            tokio::pin!(notified);
            // Registered before looking, so a refill finishing in between still wakes us.
            notified.as_mut().enable();
            // Cannot fail: 1 <= count - got <= count <= LEASE_COUNT_MAX, the largest Count.
            let wanted = Count::new_lease(count.get() - got).map_err(|e| self.unavailable(e))?;
            // The buffer's take, not `try_take`: a refill is started below, only after the
            // check that no attempt failed since this request began to wait.
            let take = self.buffer.take(wanted);
            if take.frozen() {
                return Err(Error::ShuttingDown);
            }
            got += take.count();
            ranges.extend(take.ranges());
            if got == count.get() {
                if take.refill_needed() {
                    self.ensure_refill();
                }
                break;
            }
            if self.shared.cancel.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            if counted.is_none() {
                self.waits.fetch_add(1, Ordering::Relaxed);
                counted = Some(WaiterCount::new(&self.waiting));
            }
            self.last_demand_ms.store(self.elapsed_ms(), Ordering::Relaxed);
            if !self.ensure_refill_unless_failed_since(failures_seen) {
                // The attempt this request found running failed just now: answer it, rather
                // than start a second store call (two per request for an unknown tag).
                return Err(self.last_failure());
            }
            if self.failing.load(Ordering::Acquire) && self.refill_in_flight.load(Ordering::Acquire)
            {
                // The store failed and the refill is retrying: say so now, not after the wait.
                return Err(self.last_failure());
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(self.unavailable(format_args!(
                        "no new segment arrived within {} ms", wait.as_millis()
                    )));
                }
                () = self.shared.cancel.cancelled() => return Err(Error::ShuttingDown),
            }
            // A failure since is answered at the top of the loop, after taking what a refill
            // installed before it failed (a refill that goes on for waiters can do both).
        }
        Ok(merge(ranges))
    }

    /// [`TagGenerator::next_id`] when both segments were spent: waits for the refill.
    async fn next_id_waiting(self: &Arc<Self>) -> Result<u64, Error> {
        Ok(self.wait_for(Count::ONE, Vec::new()).await?[0].start())
    }

    /// Starts the refill task unless one runs or none is due.
    fn ensure_refill(self: &Arc<Self>) {
        let _started_or_running = self.start_refill(None);
    }

    /// [`Self::ensure_refill`] for a waiting request that read `failures_seen` when it began
    /// to wait: false, and nothing started, when an attempt failed since (the request
    /// answers that failure). Decided after taking the in-flight flag, so an attempt that
    /// finished just before is always seen (a refill publishes its failure before it clears
    /// the flag).
    fn ensure_refill_unless_failed_since(self: &Arc<Self>, failures_seen: u64) -> bool {
        self.start_refill(Some(failures_seen))
    }

    /// Starts the refill task unless one runs, none is due, or (given `failures_seen`) an
    /// attempt failed since; false only in that last case.
    fn start_refill(self: &Arc<Self>, failures_seen: Option<u64>) -> bool {
        let unchanged =
            || failures_seen.is_none_or(|seen| self.failures.load(Ordering::Acquire) == seen);
        if self.shared.cancel.is_cancelled()
            || !self.buffer.refill_due()
            || self.refill_in_flight.swap(true, Ordering::AcqRel)
        {
            return unchanged();
        }
        if !unchanged() {
            self.refill_in_flight.store(false, Ordering::Release);
            return false;
        }
        // A fresh attempt: requests wait for its answer (bounded) rather than fail on an old one.
        self.failing.store(false, Ordering::Release);
        let this = Arc::clone(self);
        self.shared.tracker.spawn_on(async move { this.refill().await }, &self.shared.runtime);
        true
    }

    /// Allocates a range and installs it. Retries with backoff while the buffer still has
    /// ids to serve; once it is spent, waiting requests drive the retries instead, so an
    /// outage answers fast errors rather than queueing.
    async fn refill(self: Arc<Self>) {
        let mut retry_ms = REFILL_RETRY_MS_MIN;
        let installed = loop {
            let failure = match self.allocate_and_install().await {
                Ok(()) => {
                    self.failing.store(false, Ordering::Release);
                    if !self.preload_for_waiters() {
                        break true;
                    }
                    // The waiters take what was installed while the next range is loaded.
                    self.refilled.notify_waiters();
                    retry_ms = REFILL_RETRY_MS_MIN;
                    continue;
                }
                Err(failure) => failure,
            };
            if matches!(
                failure,
                Error::UnknownTag(_) | Error::Store(StoreError::TagNotStorable { .. })
            ) {
                // A client asked for a tag the store does not or cannot hold: its 404 or 409
                // says so; no alarm.
                tracing::debug!(tag = %self.tag, "tag not in the store");
            } else if matches!(failure, Error::Store(StoreError::Exhausted { .. })) {
                tracing::error!(tag = %self.tag, error = %failure, "tag exhausted: its ids are spent; create a new tag");
            } else {
                tracing::warn!(tag = %self.tag, error = %failure, "segment refill failed");
            }
            // Retry while there are ids to protect or requests waiting for them.
            let demanded =
                self.elapsed_ms().saturating_sub(self.last_demand_ms.load(Ordering::Relaxed))
                    <= 2 * REFILL_RETRY_MS_MAX;
            let keep_trying = !matches!(
                failure,
                Error::UnknownTag(_)
                    | Error::ShuttingDown
                    | Error::Store(
                        StoreError::Exhausted { .. }
                            | StoreError::Corrupt { .. }
                            | StoreError::TagNotStorable { .. }
                            | StoreError::Denied { .. }
                            | StoreError::MissingTable { .. }
                    )
            ) && !self.buffer.is_frozen()
                && (self.buffer.remaining() > 0 || demanded);
            // Published before the flag is cleared: a waiting request that takes the flag
            // sees this failure and answers it rather than start a second store call.
            self.publish_failure(failure);
            if !keep_trying {
                self.refill_in_flight.store(false, Ordering::Release);
            }
            self.refilled.notify_waiters();
            if !keep_trying {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(retry_ms)) => {}
                () = self.shared.cancel.cancelled() => break false,
            }
            retry_ms = (retry_ms * 2).min(REFILL_RETRY_MS_MAX);
        };
        self.refill_in_flight.store(false, Ordering::Release);
        self.refilled.notify_waiters();
        if installed {
            // A preload signal that arrived while this refill ran was dropped; honour it.
            self.ensure_refill();
        }
    }

    /// Whether the refill that installed a range goes on to load the next slot: more
    /// requests wait than the buffer holds ids, and the slot is free. Bounded by the
    /// requests: each attempt is one they wait for.
    fn preload_for_waiters(&self) -> bool {
        let waiting = self.waiting.load(Ordering::Acquire);
        if waiting == 0 || self.shared.cancel.is_cancelled() {
            return false;
        }
        let buffer = self.buffer.snapshot();
        !buffer.frozen && buffer.next.is_none() && waiting > self.buffer.remaining()
    }

    /// One refill: allocate at the planned step (or take back the range whose mark a failed
    /// attempt could not write), guard against a store that went back, make sure a mark that
    /// covers the range is on disk, install.
    async fn allocate_and_install(self: &Arc<Self>) -> Result<(), Error> {
        self.sample_rate();
        let (requested, reserve) = self.plan();
        let held = self.unmarked.lock().unwrap_or_else(PoisonError::into_inner).take();
        let usable = match held {
            Some(range) => range,
            None => self.allocate_above_mark(requested).await?,
        };
        if let Some(marks) = &self.shared.high_water {
            let ahead = mark_ahead(usable.end(), self.pacing().tag_step);
            if let Err(error) = marks.raise_ahead(&self.tag, usable.end(), ahead).await {
                // Not served: the mark on disk is still below it. Kept for the next attempt.
                *self.unmarked.lock().unwrap_or_else(PoisonError::into_inner) = Some(usable);
                return Err(self.unavailable(error));
            }
            self.mark_ahead_early(marks, usable);
        }
        match self.buffer.install(usable, reserve) {
            Ok(()) => {
                self.refills.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(tag = %self.tag, start = usable.start(), end = usable.end(), reserve, "segment loaded");
                Ok(())
            }
            // Another path filled the slot meanwhile; the range is stranded, not reused.
            Err(InstallError::Full) => Ok(()),
            Err(e) => Err(self.unavailable(format_args!("segment not installed: {e:?}"))),
        }
    }

    /// When the mark on disk leaves less than half the lead above `usable`, writes the next
    /// one in the background (one at a time), so the refills after it find it written. A
    /// failure costs nothing but the early start: the refill that needs the mark writes it.
    fn mark_ahead_early(self: &Arc<Self>, marks: &Arc<LocalMarks>, usable: IdRange) {
        let mark = marks.get(&self.tag).unwrap_or(0);
        let tag_step = self.pacing().tag_step;
        if !mark_due(mark, usable.end(), tag_step)
            || self.shared.cancel.is_cancelled()
            || self.marking_ahead.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let (this, marks) = (Arc::clone(self), Arc::clone(marks));
        let ahead = mark_ahead(usable.end(), tag_step);
        let task = async move {
            if let Err(error) = marks.raise(&this.tag, ahead).await {
                tracing::debug!(tag = %this.tag, %error, "mark not written ahead");
            }
            this.marking_ahead.store(false, Ordering::Release);
        };
        self.shared.tracker.spawn_on(task, &self.shared.runtime);
    }

    /// A range from the store that lies above every id this node served, and above every
    /// id the witness saw any node given: a range wholly below a mark is refused and the
    /// store jumped past it, one overlapping it is cut to the part above.
    async fn allocate_above_mark(&self, requested: Option<Step>) -> Result<IdRange, Error> {
        for _ in 0..=REGRESSION_JUMPS_MAX {
            let allocation = self.allocate(requested).await?;
            let range = allocation.range;
            let high_water = self.buffer.snapshot().high_water;
            if range.start() >= high_water {
                match self.witnessed(range).await? {
                    Some(range) => return Ok(range),
                    None => continue,
                }
            }
            let ahead = self.written_ahead(range, high_water, allocation.tag_step);
            if let Some(above) = IdRange::new(high_water, range.end()) {
                // Overlaps ids already served (or the lead): the store is past the danger
                // again, serve only the part above the mark.
                if ahead {
                    tracing::info!(tag = %self.tag, start = range.start(), end = range.end(), high_water, "skipping ids below the mark written ahead before the restart");
                } else {
                    tracing::error!(tag = %self.tag, start = range.start(), end = range.end(), high_water, "the store returned a range overlapping ids this node already served; serving only the ids above them");
                }
                match self.witnessed(above).await? {
                    Some(range) => return Ok(range),
                    None => continue,
                }
            }
            let why = if ahead { Jump::Ahead } else { Jump::Served };
            self.jump_past(range, high_water, why).await?;
        }
        Err(self.unavailable(format_args!(
            "the store kept returning ranges below ids this node already served, {} jumps in a \
             row; retrying",
            REGRESSION_JUMPS_MAX + 1
        )))
    }

    /// `range` checked with the witness, if any: its mark raised to the range's end before
    /// the range is served. A mark above the range's start means ids of it were given to a
    /// node before (the store went back, or another node's later range raised the mark
    /// first): the part above the mark is served, or, with none, the store is moved past the
    /// mark and `None` asks for another range. Ids are skipped, never served twice.
    async fn witnessed(&self, range: IdRange) -> Result<Option<IdRange>, Error> {
        let Some(witness) = self.shared.config.witness() else { return Ok(Some(range)) };
        let timeout = self.shared.config.store_call_timeout();
        let before =
            match tokio::time::timeout(timeout, witness.raise(&self.tag, range.end())).await {
                Ok(Ok(before)) => before,
                // Not served: the witness may not hold the range's end. Its ids are skipped.
                Ok(Err(error)) => {
                    return Err(
                        self.unavailable(format_args!("the witness {}: {error}", witness.name()))
                    );
                }
                Err(_elapsed) => {
                    return Err(self.unavailable(format_args!(
                        "the witness {} did not answer within {} ms",
                        witness.name(),
                        timeout.as_millis()
                    )));
                }
            };
        if before <= range.start() {
            return Ok(Some(range));
        }
        tracing::warn!(
            tag = %self.tag, start = range.start(), end = range.end(), witness_mark = before,
            "the store returned a range below the witness's mark: ids up to it were given to a \
             node before (a store restored from an older backup, or another node's later range \
             raised the mark first); skipping them"
        );
        if let Some(above) = IdRange::new(before, range.end()) {
            return Ok(Some(above));
        }
        self.jump_past(range, before, Jump::Witness).await?;
        Ok(None)
    }

    /// Whether `range`, below the floor `high_water`, is the lead a mark was written ahead
    /// by before this generator started, not the store going back: no range was installed
    /// since, the floor is the mark read at the start, and the range starts at most the lead
    /// of the tag's step below it (the mark was written as the end of a range the store
    /// gave, at most its `max_id` now, plus that lead). A store that went back by less than
    /// the lead across a restart is refused all the same, only logged as the lead.
    fn written_ahead(&self, range: IdRange, high_water: u64, tag_step: u64) -> bool {
        self.refills.load(Ordering::Relaxed) == 0
            && self.start_mark == Some(high_water)
            && range.start().saturating_add(mark_lead(tag_step)) >= high_water
    }

    /// The step to request (`None`: the tag's own) and the ids to keep in hand at the
    /// preload point, from the measured rate and refill latency.
    fn plan(&self) -> (Option<Step>, u64) {
        let pacing = self.pacing();
        let forecast = pacing.meter.forecast();
        let reserve = preload_reserve(forecast, pacing.latency.max(pacing.last_latency));
        if !self.shared.config.adaptive_step() || pacing.tag_step == 0 {
            return (None, reserve);
        }
        let planned = plan_step(
            pacing.tag_step,
            pacing.step,
            forecast,
            self.shared.config.segment_duration(),
        );
        // The store reserves at least the tag's step; ask only for more.
        let requested = (planned > pacing.tag_step).then(|| Step::new(planned).ok()).flatten();
        (requested, reserve)
    }

    /// One store allocation, bounded by the store call timeout; records its latency.
    async fn allocate(&self, requested: Option<Step>) -> Result<Allocation, Error> {
        let timeout = self.shared.config.store_call_timeout();
        let started = Instant::now();
        let call = self.shared.store.allocate(&self.tag, requested);
        let allocation = tokio::select! {
            () = self.shared.cancel.cancelled() => return Err(Error::ShuttingDown),
            allocation = tokio::time::timeout(timeout, call) => allocation,
        };
        let allocation = match allocation {
            Ok(Ok(allocation)) => allocation,
            Ok(Err(StoreError::TagNotFound(tag))) => return Err(Error::UnknownTag(tag)),
            // The pacing asked for more than the tag's step and that much no longer fits: the
            // tag's own step may still fit, so ask again for it before calling the tag spent.
            Ok(Err(StoreError::Exhausted { .. })) if requested.is_some() => {
                return Box::pin(self.allocate(None)).await;
            }
            // Final, not retryable: the row was left unchanged and no later call can fit a
            // range below the largest id (the server answers 409 `tag_exhausted`).
            Ok(Err(exhausted @ StoreError::Exhausted { .. })) => {
                return Err(Error::Store(exhausted));
            }
            // Final as well: a row idmint cannot serve stays so until someone fixes it (the
            // server answers 500 `store_row_invalid`, never a retryable 503), and a tag the
            // store's table cannot hold until the table is converted (409).
            // And a privilege or table the store lacks, until an operator grants or makes it
            // (501, named in the message).
            Ok(Err(
                final_ @ (StoreError::Corrupt { .. }
                | StoreError::TagNotStorable { .. }
                | StoreError::Denied { .. }
                | StoreError::MissingTable { .. }),
            )) => {
                return Err(Error::Store(final_));
            }
            Ok(Err(e)) => return Err(self.unavailable(e)),
            Err(_elapsed) => {
                return Err(self.unavailable(format_args!(
                    "the store did not answer within {} ms",
                    timeout.as_millis()
                )));
            }
        };
        let latency = started.elapsed();
        // Once per refill, never per id: a recorder (the server's Prometheus exporter) turns
        // this into a histogram; without one installed it costs a load and a branch.
        let tag = self.tag.to_string();
        match self.shared.config.metrics_source() {
            Some(source) => {
                metrics::histogram!(REFILL_DURATION_METRIC, "tag" => tag, "source" => source)
            }
            None => metrics::histogram!(REFILL_DURATION_METRIC, "tag" => tag),
        }
        .record(latency.as_secs_f64());
        let mut pacing = self.pacing();
        pacing.latency = if pacing.latency.is_zero() {
            latency
        } else {
            pacing.latency.mul_f64(0.7) + latency.mul_f64(0.3)
        };
        pacing.last_latency = latency;
        pacing.tag_step = allocation.tag_step;
        pacing.step = allocation.range.len();
        Ok(allocation)
    }

    /// The store returned `range`, entirely below `high_water`: ids this node already served,
    /// ids under the lead its mark was written ahead by before a restart, or ids the witness
    /// saw given to a node (`why`).
    /// Moves the store's `max_id` from the range's end up to the mark with a compare-and-set
    /// (if another node allocated meanwhile the store moved anyway; the caller allocates
    /// again and checks again).
    async fn jump_past(&self, range: IdRange, high_water: u64, why: Jump) -> Result<(), Error> {
        let ahead = why == Jump::Ahead;
        match why {
            Jump::Ahead => tracing::info!(
                tag = %self.tag, start = range.start(), end = range.end(), high_water,
                "skipping ids below the mark written ahead before the restart: moving the \
                 store up to it"
            ),
            Jump::Served => tracing::error!(
                tag = %self.tag, start = range.start(), end = range.end(), high_water,
                "the store went backwards: it returned ids this node already served \
                 (restored backup? lagging replica?); refusing them and moving the store \
                 past them"
            ),
            // Logged by the witness check.
            Jump::Witness => {}
        }
        let timeout = self.shared.config.store_call_timeout();
        let cas = self.shared.store.compare_and_set_max_id(&self.tag, range.end(), high_water);
        match tokio::time::timeout(timeout, cas).await {
            Ok(Ok(true)) if ahead => Ok(()),
            Ok(Ok(true)) => {
                tracing::warn!(tag = %self.tag, max_id = high_water, "store moved past the ids already served");
                Ok(())
            }
            Ok(Ok(false)) => Ok(()),
            Ok(Err(StoreError::TagNotFound(tag))) => Err(Error::UnknownTag(tag)),
            Ok(Err(e)) => Err(self.unavailable(e)),
            Err(_elapsed) => Err(self.unavailable(format_args!(
                "the store did not answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    fn publish_failure(&self, failure: Error) {
        *self.last_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(failure);
        self.failing.store(true, Ordering::Release);
        self.failures.fetch_add(1, Ordering::Release);
    }

    fn last_failure(&self) -> Error {
        let last = self.last_failure.lock().unwrap_or_else(PoisonError::into_inner).clone();
        last.unwrap_or_else(|| self.unavailable("a refill failed"))
    }

    fn elapsed_ms(&self) -> u64 {
        self.created.elapsed().as_millis() as u64
    }

    fn pacing(&self) -> MutexGuard<'_, Pacing> {
        // Pacing is advisory arithmetic; a poisoned value is still a usable estimate.
        self.pacing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn unavailable(&self, reason: impl std::fmt::Display) -> Error {
        Error::Unavailable { tag: self.tag.clone(), reason: reason.to_string() }
    }
}
/// Counts a request among those waiting for a refill while it lives (dropped when the
/// request answers or its future is dropped).
struct WaiterCount<'a>(&'a AtomicU64);

impl<'a> WaiterCount<'a> {
    fn new(waiting: &'a AtomicU64) -> WaiterCount<'a> {
        waiting.fetch_add(1, Ordering::AcqRel);
        WaiterCount(waiting)
    }
}

impl Drop for WaiterCount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Joins ranges that continue each other, so a batch spanning nothing but a cursor step is
/// one range.
fn merge(ranges: Vec<IdRange>) -> Vec<IdRange> {
    let mut merged: Vec<IdRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        let joined = merged
            .last()
            .filter(|last| last.end() == range.start())
            .and_then(|last| IdRange::new(last.start(), range.end()));
        match (joined, merged.last_mut()) {
            (Some(joined), Some(last)) => *last = joined,
            _ => merged.push(range),
        }
    }
    merged
}
