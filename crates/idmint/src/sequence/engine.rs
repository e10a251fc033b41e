//! Sequences: numbers served from shared counters (Redis) below a ceiling kept in the SQL
//! store, so Redis is fast and a Redis that loses data still never repeats a number.
//!
//! - **Taking** is one counter call ([`CounterStore::take`]) per batch of concurrent requests
//!   of one counter on this node (`batch.rs`: they queue while a call is in flight, and
//!   one runner takes the sum of their counts and splits it in arrival order): the ids, "no
//!   room below the ceiling" or "reseed", for the whole batch. No room: this node raises the ceiling itself (one node at a time,
//!   under the counter's raise lock) and takes again, within [`SequenceConfig::wait_ms`];
//!   past that the caller gets [`SequenceError::Unavailable`] (503).
//! - **The ceiling** only grows, in the SQL store first ([`SequenceStore::raise_ceiling`],
//!   one atomic statement) and in the counter second, never the reverse: a counter's `max`
//!   is never above the SQL ceiling. It stops at [`COUNTER_MAX`]: a sequence whose numbers
//!   reached it is [`SequenceError::Exhausted`] (final), and its ceiling is not raised again.
//! - **Reseeding**: when the counter is missing, was seeded in another data set (another
//!   Redis run, or another replication history: a failover, a fail-back after a full
//!   resync), or hands out a number at or below this node's mark, the node raises the SQL
//!   ceiling from `c` to `c + r` and seeds the counter at `cur = c` (or at its mark, if
//!   higher), `max = c + r`. Every number ever handed out was at most `c` (the ceiling before
//!   the raise), so none repeats.
//! - **Marks**: per counter, the highest number this node handed out. In memory it is exact;
//!   with a state directory a task writes it to the marks file ([`SEQUENCE_MARKS_FILE`])
//!   every [`SEQ_MARK_WRITE_MS`], and once more at shutdown, so a restarted node starts from
//!   it. A per-take fsync would cost more than the Redis call; instead the node stops
//!   serving (503) when no write has succeeded for [`SEQ_MARK_LAG_MS_MAX`], checked when a
//!   take starts and again when its numbers are in hand (a take may wait), so a `kill -9`
//!   loses at most the marks of the numbers served in that last stretch.
//! - **Forecast and stats** (one task, every [`SequenceConfig::tick_ms`]): for each counter
//!   this node used lately it reads the rate of the last second (counted by the take
//!   script), averages it over [`SequenceConfig::long_term_s`] and records that in the
//!   counter; if the room left (`max − cur`) is less than [`SequenceConfig::forecast_s`] of
//!   the larger rate, it raises the ceiling by [`SequenceConfig::raise_s`] of it (bounded).
//!   Several nodes may run it at once: the raise lock and a re-check after taking it keep
//!   them from raising twice.
//! - **Daily** sequences count per day of their time zone (period `YYYYMMDD`), each day's
//!   counter and ceiling starting at 0, so the first number of a day is 1; their format
//!   carries the date, so ids of different days differ.

use std::collections::{HashMap, VecDeque};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use idmint_core::Tag;
use idmint_store::{
    COUNTER_MAX, CounterKey, CounterStore, SequenceRecord, SequenceSpec, SequenceStore, StoreError,
    Take,
};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::batch::{Pushed, SEQ_COUNT_MAX, SEQ_QUEUE_MAX, TakeQueue, Waiter, split};
use super::error::SequenceError;
use super::format::{DAILY_FORMAT_DEFAULT, SeqFormat, time_zone};
use crate::clock::Clock;
use crate::marks::{LocalMarks, MarkKey, MarksFile};

/// Longest a request waits for room below the ceiling before it is refused, by default.
pub const SEQ_WAIT_MS_DEFAULT: u64 = 1_000;
/// Smallest ceiling raise (and the first seed of a counter).
pub const SEQ_RAISE_MIN: u64 = 10_000;
/// Largest ceiling raise.
pub const SEQ_RAISE_MAX: u64 = 1_000_000_000;
/// How long one node holds a counter's raise lock at most.
pub const RAISE_LOCK_MS: u64 = 5_000;
/// A counter this node has not used for this long is no longer forecast by it.
pub const IDLE_AFTER_S: u64 = 600;
/// How long a sequence definition is trusted before it is read again from the store.
pub const DEFINITION_TTL_MS: u64 = 60_000;
/// Name of the sequence marks file inside the state directory.
pub const SEQUENCE_MARKS_FILE: &str = "sequences.high-water";
/// Name of its lock file.
pub const SEQUENCE_MARKS_LOCK_FILE: &str = "sequences.lock";
/// How often the marks of the numbers served are written to the marks file.
pub const SEQ_MARK_WRITE_MS: u64 = 1_000;
/// Longest a node serves numbers since the last successful write of its marks: past it (the
/// writes fail or stall), takes answer 503 until a write succeeds, even a take that began
/// before and got its numbers after. Bounds what a `kill -9` can leave unmarked.
pub const SEQ_MARK_LAG_MS_MAX: u64 = 3_000;
const _: () = assert!(2 * SEQ_MARK_WRITE_MS <= SEQ_MARK_LAG_MS_MAX);
/// Longest [`Sequences::shutdown`] waits for the engine's tasks to stop and the marks' last
/// write (a blocking fsync on a stalled disk can hold it for minutes). Past it the node
/// stops without that write: what it loses is what a `kill -9` loses, the marks of at most
/// the last [`SEQ_MARK_LAG_MS_MAX`] of numbers, since nothing is served once it began.
pub const SEQ_SHUTDOWN_MS_MAX: u64 = 3_000;
/// Days a daily sequence's marks are kept after their day (its Redis counter expires after
/// three, and a node serves an older day only with a clock set back).
pub const DAILY_MARK_DAYS: u64 = 7;

const SEQUENCE_MARKS: MarksFile = MarksFile {
    file: SEQUENCE_MARKS_FILE,
    lock: SEQUENCE_MARKS_LOCK_FILE,
    meaning: "the highest number this node handed out per sequence and day",
    fix: "Restore it from a backup of this data directory. Or delete it: the node then trusts \
          Redis counters it would have refused until it serves above its old marks, which \
          only matters if Redis went back (a restore or a fail-back) meanwhile",
};

/// Tunables of the sequence engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceConfig {
    /// Longest a request waits for room.
    pub wait_ms: u64,
    /// Period of the forecast/stats task.
    pub tick_ms: u64,
    /// Room below which the ceiling is raised, in seconds of the rate (15 minutes).
    pub forecast_s: u64,
    /// A raise is this many seconds of the rate (30 minutes), within
    /// [`SEQ_RAISE_MIN`]..=[`SEQ_RAISE_MAX`].
    pub raise_s: u64,
    /// Window of the long-term rate (5 minutes).
    pub long_term_s: u64,
    /// Who this node is, in raise locks (`host:port`).
    pub holder: String,
    /// The node's state directory, where the marks file lives; `None` keeps the marks in
    /// memory only (a restarted node then trusts a counter that went back below them).
    pub state_dir: Option<PathBuf>,
}

impl Default for SequenceConfig {
    fn default() -> SequenceConfig {
        SequenceConfig {
            wait_ms: SEQ_WAIT_MS_DEFAULT,
            tick_ms: 1_000,
            forecast_s: 900,
            raise_s: 1_800,
            long_term_s: 300,
            holder: format!("idmint-{}", std::process::id()),
            state_dir: None,
        }
    }
}

/// Ids taken from a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceIds {
    /// The sequence.
    pub name: Tag,
    /// `""`, or the day (`YYYYMMDD`) of a daily sequence.
    pub period: String,
    /// The numbers, increasing.
    pub numbers: Vec<u64>,
    /// The formatted ids, when the sequence has a format.
    pub formatted: Option<Vec<String>>,
}

/// A sequence's definition and its current counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceStatus {
    /// The definition.
    pub spec: SequenceSpec,
    /// The current period.
    pub period: String,
    /// The last number taken (0: none this period).
    pub cur: u64,
    /// The ceiling Redis holds.
    pub max: u64,
    /// Ids taken in the last second.
    pub recent_per_s: u64,
    /// Ids per second over the long-term window.
    pub long_term_per_s: u64,
    /// Requests of this node that waited for a raise.
    pub waits: u64,
    /// Counters this node reseeded.
    pub reseeds: u64,
    /// Ceiling raises this node made.
    pub raises: u64,
}

/// A definition as served.
#[derive(Debug)]
struct Definition {
    record: SequenceRecord,
    format: Option<SeqFormat>,
    zone: TimeZone,
    loaded_ms: u64,
}

/// This node's view of one counter.
#[derive(Debug, Default)]
struct CounterLocal {
    /// The largest number this node handed out from it (at start: its mark on disk).
    last_issued: AtomicU64,
    /// Last second this node took from it.
    used_s: AtomicU64,
    /// One seed or raise at a time from this node.
    refill: tokio::sync::Mutex<()>,
    /// Per-second rates sampled by the stats step, newest last.
    samples: Mutex<VecDeque<u64>>,
    /// The requests waiting for numbers of this counter, served in batches by one runner.
    queue: TakeQueue,
}

/// The sequence engine of one node.
pub struct Sequences {
    /// The engine itself, for the batch runners it spawns.
    me: Weak<Sequences>,
    store: Arc<dyn SequenceStore>,
    counters: Arc<dyn CounterStore>,
    clock: Arc<dyn Clock>,
    config: SequenceConfig,
    definitions: Mutex<HashMap<Tag, Arc<Definition>>>,
    locals: Mutex<HashMap<CounterKey, Arc<CounterLocal>>>,
    waits: AtomicU64,
    reseeds: AtomicU64,
    raises: AtomicU64,
    /// The marks file, with a state directory.
    marks: Option<Arc<LocalMarks<CounterKey>>>,
    /// One marks write at a time (the task's and shutdown's), and when the last one that
    /// succeeded looked at the counters (every number served before it is on disk).
    marks_written: tokio::sync::Mutex<()>,
    marks_covered: Mutex<tokio::time::Instant>,
    /// Why the last marks write failed, while it has not succeeded since.
    marks_error: Mutex<Option<String>>,
    /// Set by `shutdown`: nothing more is handed out.
    closed: AtomicBool,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Sequences {
    /// Starts serving sequences defined in `store` from `counters`, with the forecast task
    /// (and, with [`SequenceConfig::state_dir`], the marks writer) spawned on the current
    /// runtime. A marks file that is damaged or in use refuses the start, naming the fix.
    pub fn start(
        store: Arc<dyn SequenceStore>,
        counters: Arc<dyn CounterStore>,
        clock: Arc<dyn Clock>,
        config: SequenceConfig,
    ) -> Result<Arc<Sequences>, SequenceError> {
        let marks = open_marks(&config)?;
        Ok(Sequences::start_with_marks(store, counters, clock, config, marks))
    }

    /// [`Sequences::start`] with the marks file already opened (the node opens it before it
    /// waits for Redis, so a damaged file refuses its start).
    pub(crate) fn start_with_marks(
        store: Arc<dyn SequenceStore>,
        counters: Arc<dyn CounterStore>,
        clock: Arc<dyn Clock>,
        config: SequenceConfig,
        marks: Option<Arc<LocalMarks<CounterKey>>>,
    ) -> Arc<Sequences> {
        let sequences = Arc::new_cyclic(|me| Sequences {
            me: me.clone(),
            store,
            counters,
            clock,
            config,
            definitions: Mutex::default(),
            locals: Mutex::default(),
            waits: AtomicU64::new(0),
            reseeds: AtomicU64::new(0),
            raises: AtomicU64::new(0),
            marks,
            marks_written: tokio::sync::Mutex::new(()),
            marks_covered: Mutex::new(tokio::time::Instant::now()),
            marks_error: Mutex::new(None),
            closed: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });
        let weak = Arc::downgrade(&sequences);
        let cancel = sequences.cancel.clone();
        let tick = Duration::from_millis(sequences.config.tick_ms.max(1));
        sequences.tracker.spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = interval.tick() => {}
                }
                let Some(sequences) = weak.upgrade() else { return };
                sequences.forecast_round().await;
            }
        });
        if sequences.marks.is_some() {
            let weak = Arc::downgrade(&sequences);
            let cancel = sequences.cancel.clone();
            sequences.tracker.spawn(async move {
                let mut interval = tokio::time::interval(Duration::from_millis(SEQ_MARK_WRITE_MS));
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        _ = interval.tick() => {}
                    }
                    let Some(sequences) = weak.upgrade() else { return };
                    // A failure is logged and kept for the takes to answer; the next round
                    // retries.
                    let _ = sequences.write_marks().await;
                }
            });
        }
        sequences
    }

    /// Where the counters live, for logs.
    pub fn describe(&self) -> String {
        self.counters.describe()
    }

    /// Defines a sequence (`idmint seq create`): the format and time zone are checked first,
    /// a daily sequence gets [`DAILY_FORMAT_DEFAULT`] when it names none.
    pub async fn create(&self, spec: SequenceSpec) -> Result<SequenceRecord, SequenceError> {
        let spec = prepare_sequence(spec)?;
        Ok(self.store.create_sequence(&spec).await?)
    }

    /// Every definition.
    pub async fn list(&self) -> Result<Vec<SequenceRecord>, SequenceError> {
        Ok(self.store.list_sequences().await?)
    }

    /// Deletes a sequence and its Redis counters; its ceilings stay, so a sequence created
    /// again under the name continues above every number the old one served. This node's
    /// views and marks of it stay too: they guard the sequence created again as they guarded
    /// the old one (a ceiling row restored from an older backup included), and go as every
    /// mark goes (the forecast drops an idle view once its mark is written; a daily mark
    /// after [`DAILY_MARK_DAYS`]; a plain one, like the ceiling row it backs, never).
    pub async fn delete(&self, name: &Tag) -> Result<(), SequenceError> {
        self.store.delete_sequence(name).await.map_err(|e| match e {
            StoreError::TagNotFound(name) => SequenceError::NotFound(name),
            other => other.into(),
        })?;
        lock(&self.definitions).remove(name);
        self.counters.remove(name).await?;
        Ok(())
    }

    /// `count` ids of sequence `name`, increasing.
    pub async fn next(&self, name: &Tag, count: u64) -> Result<SequenceIds, SequenceError> {
        if !(1..=SEQ_COUNT_MAX).contains(&count) {
            return Err(SequenceError::Invalid(format!(
                "count {count} is out of range; ask for 1 to {SEQ_COUNT_MAX}"
            )));
        }
        let unavailable =
            |reason: String| SequenceError::Unavailable { name: name.clone(), reason };
        self.check_serving().map_err(unavailable)?;
        let definition = self.definition(name).await?;
        let now_ms = self.clock.now_ms();
        let at = zoned(now_ms, &definition.zone);
        let key = CounterKey { name: name.clone(), period: period_of(&definition, &at) };
        let local = self.local(&key, now_ms / 1_000);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.config.wait_ms);
        // Concurrent requests share one counter call: this one waits in the counter's queue
        // and the runner serving it (started here if none is) takes a block for the whole
        // batch and hands each request its part.
        let (reply, answer) = tokio::sync::oneshot::channel();
        match local.queue.push(Waiter { count, deadline, reply }) {
            Err(_) => {
                return Err(unavailable(format!(
                    "{} requests already wait for it on this node, the most that may \
                     ({SEQ_QUEUE_MAX}); retry later",
                    SEQ_QUEUE_MAX
                )));
            }
            Ok(Pushed::Queued) => {}
            Ok(Pushed::StartRunner) => {
                // `self` is borrowed from the `Arc` `start` made, so it is alive.
                let me = self.me.upgrade().expect("the engine is alive while it is called");
                let (key, local) = (key.clone(), Arc::clone(&local));
                self.tracker.spawn(async move { me.run_batches(&key, &local).await });
            }
        }
        // A runner drops an answer only when it ends early: the runtime stops under it, or
        // it panicked (an assertion that stopped a duplicate).
        let numbers = answer.await.map_err(|_| unavailable(ABANDONED.to_string()))??;
        let numbers: Vec<u64> = numbers.collect();
        let formatted = match &definition.format {
            Some(format) => Some(
                numbers
                    .iter()
                    .map(|n| format.render(*n, &at))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(SequenceError::Invalid)?,
            ),
            None => None,
        };
        Ok(SequenceIds { name: name.clone(), period: key.period, numbers, formatted })
    }

    /// Serves the queue of `key` batch by batch until it is empty: one runner per counter
    /// and node at a time, so this node's takes of a counter never overlap.
    async fn run_batches(&self, key: &CounterKey, local: &CounterLocal) {
        /// Abandons the queue unless the runner saw it empty: a panic (an assertion that
        /// stopped a duplicate) must not leave the counter's requests waiting for ever.
        struct Running<'a>(Option<&'a TakeQueue>);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                if let Some(queue) = self.0 {
                    queue.abandon();
                }
            }
        }
        let mut running = Running(Some(&local.queue));
        while let Some(batch) = local.queue.next_batch() {
            self.serve_batch(key, local, batch).await;
        }
        running.0 = None;
    }

    /// Takes one block for the whole batch and splits it in arrival order; answers every
    /// waiter, with numbers or with the error it would have got alone.
    ///
    /// Past the ceiling, the batch raises it as a lone request would. When the sequence is at
    /// its limit and more than one request waits, each is served alone in arrival order, so
    /// a request that fits the room left still gets its numbers and only those that do not
    /// fit get the error. A store that fails the raise fails the whole batch (retrying each
    /// request alone would only multiply the store's timeouts). A request past its wait is
    /// refused before every counter call, so no request waits much past `wait_ms`.
    async fn serve_batch(&self, key: &CounterKey, local: &CounterLocal, batch: Vec<Waiter>) {
        let mut batches = VecDeque::from([batch]);
        while let Some(mut batch) = batches.pop_front() {
            loop {
                // A request whose client left takes no numbers; one past its wait is refused.
                batch.retain(|w| !w.reply.is_closed());
                let now = tokio::time::Instant::now();
                let (expired, waiting): (Vec<Waiter>, Vec<Waiter>) =
                    batch.drain(..).partition(|w| now >= w.deadline);
                batch = waiting;
                for waiter in expired {
                    waiter.answer(Err(SequenceError::Unavailable {
                        name: key.name.clone(),
                        reason: format!(
                            "not served within {} ms: no room below the ceiling, or the \
                             counter or the store is slow (retry later)",
                            self.config.wait_ms
                        ),
                    }));
                }
                if batch.is_empty() {
                    break;
                }
                match self.take_batch(key, local, &batch).await {
                    Ok(Some(ranges)) => {
                        for (waiter, range) in batch.drain(..).zip(ranges) {
                            waiter.answer(Ok(range));
                        }
                        break;
                    }
                    // No numbers yet (a seed or a raise was made): take again.
                    Ok(None) => {}
                    Err((RefillError::Exhausted, Stage::Raise)) if batch.len() > 1 => {
                        batches.extend(batch.drain(..).map(|w| vec![w]));
                        break;
                    }
                    Err((error, _)) => {
                        let error = self.refused(key, error);
                        for waiter in batch.drain(..) {
                            waiter.answer(Err(error.clone()));
                        }
                        break;
                    }
                }
            }
        }
    }

    /// One counter call for `batch`: its numbers, split in arrival order; `None` when a
    /// seed or a raise was made and the batch takes again; or what failed, and where.
    async fn take_batch(
        &self,
        key: &CounterKey,
        local: &CounterLocal,
        batch: &[Waiter],
    ) -> Result<Option<Vec<RangeInclusive<u64>>>, (RefillError, Stage)> {
        let unserving = |reason| (RefillError::Refused(reason), Stage::Take);
        self.check_serving().map_err(unserving)?;
        let counts: Vec<u64> = batch.iter().map(|w| w.count).collect();
        let total: u64 = counts.iter().sum();
        // Everything this node handed out of the counter lies below what it gets: this
        // runner is the node's only taker of the counter, and the counter serialises takes.
        let before = local.last_issued.load(Ordering::Acquire);
        let now_s = self.clock.now_ms() / 1_000;
        let taken = self.counters.take(key, total, now_s).await;
        match taken.map_err(|e| (RefillError::Store(e), Stage::Take))? {
            Take::Taken { last } => {
                let Some(ranges) = split(last, &counts) else {
                    return Err((
                        RefillError::Store(StoreError::Unavailable(format!(
                            "the counter answered {last} for a take of {total}"
                        ))),
                        Stage::Take,
                    ));
                };
                let first = *ranges[0].start();
                // SeqCst with `closed`: either shutdown's last marks write sees these
                // numbers, or this take sees `closed` and hands nothing out.
                local.last_issued.fetch_max(last, Ordering::SeqCst);
                // Checked again with the numbers in hand: the take may have waited (raises,
                // reseeds, up to `wait_ms`) past the marks lag bound, or shutdown began.
                // Refused, they are skipped, never handed out: they are in `last_issued`, so
                // the next write marks them.
                self.check_serving().map_err(unserving)?;
                if first > before {
                    return Ok(Some(ranges));
                }
                // The counter went back below what this node handed out (Redis lost writes
                // under the same run and history, or this node's marks from before a restart
                // say so): these numbers may be out already. Drop them and reseed above the
                // ceiling.
                tracing::error!(sequence = %key.name, period = %key.period, first, handed_out = before, "sequence counter went back below this node's mark; reseeding above the ceiling");
                self.reseed(key, local, total, true).await.map_err(|e| (e, Stage::Seed))?;
            }
            Take::NeedsSeed => {
                self.reseed(key, local, total, false).await.map_err(|e| (e, Stage::Seed))?;
            }
            Take::NoRoom { .. } => {
                self.waits.fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.raise(key, local, total, total).await.map_err(|e| (e, Stage::Raise))?;
            }
        }
        Ok(None)
    }

    /// What a request is told when a seed, a raise or a take of its counter failed: retried
    /// by the caller (503), but for a counter store that cannot serve sequences at all
    /// (final, 501) and a sequence at its limit (final, 409).
    fn refused(&self, key: &CounterKey, error: RefillError) -> SequenceError {
        let unavailable =
            |reason: String| SequenceError::Unavailable { name: key.name.clone(), reason };
        match error {
            RefillError::Exhausted => SequenceError::Exhausted {
                name: key.name.clone(),
                period: key.period.clone(),
                limit: COUNTER_MAX,
            },
            RefillError::Refused(reason) => unavailable(reason),
            RefillError::Store(
                error @ (StoreError::Unsupported { .. }
                | StoreError::Denied { .. }
                | StoreError::MissingTable { .. }),
            ) => SequenceError::Store(error),
            RefillError::Store(other) => unavailable(other.to_string()),
        }
    }

    /// The definition and current counter of `name`.
    pub async fn status(&self, name: &Tag) -> Result<SequenceStatus, SequenceError> {
        let definition = self.definition(name).await?;
        let now_ms = self.clock.now_ms();
        let key = CounterKey {
            name: name.clone(),
            period: period_of(&definition, &zoned(now_ms, &definition.zone)),
        };
        let state = self.counters.state(&key, now_ms / 1_000).await?.unwrap_or_default();
        Ok(SequenceStatus {
            spec: definition.record.clone(),
            period: key.period,
            cur: state.cur,
            max: state.max,
            recent_per_s: state.recent_per_s,
            long_term_per_s: state.long_term_per_s,
            waits: self.waits.load(Ordering::Relaxed),
            reseeds: self.reseeds.load(Ordering::Relaxed),
            raises: self.raises.load(Ordering::Relaxed),
        })
    }

    /// Requests of this node that found no room and waited for a raise.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Counters this node reseeded.
    pub fn reseeds(&self) -> u64 {
        self.reseeds.load(Ordering::Relaxed)
    }

    /// Ceiling raises this node made.
    pub fn raises(&self) -> u64 {
        self.raises.load(Ordering::Relaxed)
    }

    /// Stops handing out numbers and the tasks, writes the marks a last time and gives the
    /// marks file's lock up, within [`SEQ_SHUTDOWN_MS_MAX`]. Call it once requests have
    /// ended: a take still running is refused rather than served unmarked. Past the bound
    /// the lock is kept until the engine is dropped and the write in flight has ended (or
    /// the process exits), so that write can never land over a later holder's file.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.cancel.cancel();
        self.tracker.close();
        let stopped = async {
            self.tracker.wait().await;
            self.write_marks().await
        };
        let bound = Duration::from_millis(SEQ_SHUTDOWN_MS_MAX);
        let Some(marks) = &self.marks else {
            // Without marks there is nothing to write; the tasks stop at their next await.
            let _ = tokio::time::timeout(bound, stopped).await;
            return;
        };
        match tokio::time::timeout(bound, stopped).await {
            Ok(written) => {
                if let Err(error) = written {
                    tracing::error!(%error, "the sequence marks were not written at shutdown: the numbers served in the last seconds are not in them");
                }
                marks.release();
            }
            Err(_) => {
                tracing::error!(
                    file = %marks.path().display(),
                    "the sequence marks were not written within {SEQ_SHUTDOWN_MS_MAX} ms of \
                     the shutdown (a stalled disk?): the numbers served in the last seconds \
                     may not be in them; the state directory stays locked until the write ends"
                );
            }
        }
    }

    /// Whether numbers can be handed out now: not shutting down, the marks file written
    /// within its bound, and Redis answering (the sequences' readiness, `/ready`).
    pub async fn ready(&self) -> Result<(), SequenceError> {
        self.check_serving()
            .map_err(|reason| SequenceError::Store(StoreError::Unavailable(reason)))?;
        self.counters.ping().await?;
        Ok(())
    }

    /// `Err` (why) when no number may be handed out: shutting down, or the marks file not
    /// written for longer than [`SEQ_MARK_LAG_MS_MAX`].
    fn check_serving(&self) -> Result<(), String> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(SHUTTING_DOWN.to_string());
        }
        let Some(marks) = &self.marks else { return Ok(()) };
        let since = lock(&self.marks_covered).elapsed();
        if since <= Duration::from_millis(SEQ_MARK_LAG_MS_MAX) {
            return Ok(());
        }
        let why = lock(&self.marks_error).clone().unwrap_or_else(|| "still writing".to_string());
        Err(format!(
            "{} has not been written for {} ms ({why}); nothing is served until it is, so a \
             crash cannot lose more than {SEQ_MARK_LAG_MS_MAX} ms of marks (is the disk full?)",
            marks.path().display(),
            since.as_millis()
        ))
    }

    /// Writes every counter's mark that is above the one on disk, and drops the marks of
    /// days older than [`DAILY_MARK_DAYS`], in one write. On success every number handed out
    /// before it began is on disk.
    async fn write_marks(&self) -> Result<(), SequenceError> {
        let Some(marks) = &self.marks else { return Ok(()) };
        let _one = self.marks_written.lock().await;
        let began = tokio::time::Instant::now();
        let raises: Vec<(CounterKey, u64)> = lock(&self.locals)
            .iter()
            .map(|(key, local)| (key.clone(), local.last_issued.load(Ordering::SeqCst)))
            .filter(|(key, issued)| *issued > marks.get(key).unwrap_or(0))
            .collect();
        let day_ms = 86_400_000;
        let oldest = self.clock.now_ms().saturating_sub((DAILY_MARK_DAYS + 1) * day_ms);
        let oldest = period_at(&zoned(oldest, &TimeZone::UTC));
        let active: Vec<CounterKey> = raises.iter().map(|(key, _)| key.clone()).collect();
        let keep = move |key: &CounterKey| {
            key.period.is_empty() || key.period >= oldest || active.contains(key)
        };
        match marks.raise_all(raises, keep).await {
            Ok(()) => {
                *lock(&self.marks_covered) = began;
                *lock(&self.marks_error) = None;
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, "sequence marks not written; numbers stop being served if this lasts");
                *lock(&self.marks_error) = Some(error.to_string());
                Err(SequenceError::LocalState(error.to_string()))
            }
        }
    }

    /// The definition of `name`, read again from the store after [`DEFINITION_TTL_MS`].
    async fn definition(&self, name: &Tag) -> Result<Arc<Definition>, SequenceError> {
        let now_ms = self.clock.now_ms();
        if let Some(found) = lock(&self.definitions).get(name)
            && now_ms.saturating_sub(found.loaded_ms) < DEFINITION_TTL_MS
        {
            return Ok(Arc::clone(found));
        }
        let Some(record) = self.store.get_sequence(name).await? else {
            lock(&self.definitions).remove(name);
            return Err(SequenceError::NotFound(name.clone()));
        };
        let (format, zone) = check_definition(&record)?;
        let definition = Arc::new(Definition { record, format, zone, loaded_ms: now_ms });
        lock(&self.definitions).insert(name.clone(), Arc::clone(&definition));
        Ok(definition)
    }

    /// This node's view of `key`, made on first use from its mark on disk, marked used in
    /// second `now_s`. Under the map's lock, so the forecast, which drops idle views under it
    /// too, never drops one a take holds (its number would land on a view the marks writer
    /// no longer sees, and a view made afresh would start from the older mark on disk).
    fn local(&self, key: &CounterKey, now_s: u64) -> Arc<CounterLocal> {
        let mut locals = lock(&self.locals);
        let local = locals.entry(key.clone()).or_insert_with(|| {
            let mark = self.marks.as_ref().and_then(|marks| marks.get(key)).unwrap_or(0);
            Arc::new(CounterLocal { last_issued: AtomicU64::new(mark), ..CounterLocal::default() })
        });
        local.used_s.store(now_s, Ordering::Relaxed);
        Arc::clone(local)
    }

    /// Reseeds the counter above the SQL ceiling and this node's mark, unless (not `force`)
    /// another node already seeded it in the current data set (Redis run and history).
    async fn reseed(
        &self,
        key: &CounterKey,
        local: &CounterLocal,
        need: u64,
        force: bool,
    ) -> Result<(), RefillError> {
        let _refill = local.refill.lock().await;
        let now_s = self.clock.now_ms() / 1_000;
        let why = if force {
            "it answered numbers at or below the highest this node handed out"
        } else {
            match self.counters.state(key, now_s).await? {
                Some(state) if state.current_run => return Ok(()),
                Some(_) => "it was seeded in another Redis data set (run or replication history)",
                None => "it is missing (flushed, expired, or a Redis restarted without it)",
            }
        };
        let mut by = need.clamp(SEQ_RAISE_MIN, SEQ_RAISE_MAX);
        let mark = local.last_issued.load(Ordering::SeqCst);
        if mark > 0 {
            // Above this node's mark too, whatever the ceiling says (a ceiling store that went
            // back): a raise from `c` covers the mark when it is by `mark - c` more.
            let ceiling = self.store.ceiling(&key.name, &key.period).await?;
            by = by.saturating_add(mark.saturating_sub(ceiling));
        }
        // The raise made may be smaller than asked near the limit: the floor is where it began.
        let (ceiling, by) = self.raise_store(key, by).await?;
        let floor = (ceiling - by).max(mark);
        self.counters.seed(key, floor, ceiling).await?;
        if floor == 0 {
            // The first seed of a new sequence (or a new day of a daily one): nothing was
            // lost, so it is not a reseed (a dashboard showed 2 reseeds on a new sequence).
            tracing::info!(sequence = %key.name, period = %key.period, ceiling, "sequence counter seeded");
            return Ok(());
        }
        self.reseeds.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(sequence = %key.name, period = %key.period, from = floor, ceiling, "sequence counter distrusted: {why}; reseeded above the ceiling");
        Ok(())
    }

    /// Raises the ceiling by about `by` unless `room` ids are already free, under the
    /// counter's raise lock (re-checked once held). Another node holding the lock: returns at
    /// once, the caller takes again.
    async fn raise(
        &self,
        key: &CounterKey,
        local: &CounterLocal,
        room: u64,
        by: u64,
    ) -> Result<(), RefillError> {
        let _refill = local.refill.lock().await;
        let now_s = self.clock.now_ms() / 1_000;
        let has_room = |state: Option<idmint_store::CounterState>| {
            state.is_some_and(|s| s.current_run && s.max.saturating_sub(s.cur) >= room)
        };
        if has_room(self.counters.state(key, now_s).await?) {
            return Ok(());
        }
        if !self.counters.try_lock(key, &self.config.holder, RAISE_LOCK_MS).await? {
            tokio::time::sleep(Duration::from_millis(2)).await;
            return Ok(());
        }
        let raised = async {
            let state = self.counters.state(key, now_s).await?;
            if has_room(state) {
                return Ok(());
            }
            // At least `raise_s` of the current rate, so a request that found the ceiling
            // under a heavy load does not raise by a sliver.
            let rate = state.map_or(0, |s| s.recent_per_s.max(s.long_term_per_s));
            let by = by.max(rate.saturating_mul(self.config.raise_s));
            let by = by.clamp(SEQ_RAISE_MIN, SEQ_RAISE_MAX);
            let (ceiling, by) = self.raise_store(key, by).await?;
            if !self.counters.raise_max(key, ceiling).await? {
                // Lost meanwhile (or the sequence was deleted): the next take reseeds it;
                // this raise's ids stay unused.
                return Ok(());
            }
            self.raises.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(sequence = %key.name, period = %key.period, ceiling, by, "sequence ceiling raised");
            Ok(())
        }
        .await;
        let unlocked = self.counters.unlock(key, &self.config.holder).await;
        raised.and(unlocked.map_err(RefillError::Store))
    }

    /// Raises the SQL ceiling by `by`, or by less where [`COUNTER_MAX`] stops it, and returns
    /// the new ceiling and the raise made. A ceiling already at the limit is
    /// [`RefillError::Exhausted`] and nothing is written, so an exhausted sequence's takes
    /// change nothing; a ceiling another node raised meanwhile past the limit is too.
    async fn raise_store(&self, key: &CounterKey, by: u64) -> Result<(u64, u64), RefillError> {
        let current = self.store.ceiling(&key.name, &key.period).await?;
        let by = by.min(COUNTER_MAX.saturating_sub(current));
        if by == 0 {
            return Err(RefillError::Exhausted);
        }
        let ceiling = self.store.raise_ceiling(&key.name, &key.period, by).await?;
        if ceiling > COUNTER_MAX {
            return Err(RefillError::Exhausted);
        }
        Ok((ceiling, by))
    }

    /// One round of the stats and forecast task over the counters this node used lately.
    async fn forecast_round(&self) {
        let now_s = self.clock.now_ms() / 1_000;
        let active: Vec<(CounterKey, Arc<CounterLocal>)> = {
            let mut locals = lock(&self.locals);
            // A counter whose mark is not on disk yet stays, for the marks writer to see; so
            // does one a take holds (it was used whatever the clock says: a take may wait
            // while the clock jumps). Both are judged under the lock `local` takes, so a view
            // dropped here has no holder and no number above its mark on disk.
            let unwritten = |key: &CounterKey, l: &CounterLocal| {
                self.marks.as_ref().is_some_and(|marks| {
                    l.last_issued.load(Ordering::SeqCst) > marks.get(key).unwrap_or(0)
                })
            };
            locals.retain(|key, l| {
                now_s.saturating_sub(l.used_s.load(Ordering::Relaxed)) < IDLE_AFTER_S
                    || Arc::strong_count(l) > 1
                    || unwritten(key, l)
            });
            locals.iter().map(|(k, l)| (k.clone(), Arc::clone(l))).collect()
        };
        for (key, local) in active {
            if self.cancel.is_cancelled() {
                // Shutdown waits for this round: one counter's calls at most.
                return;
            }
            if let Err(error) = self.forecast_one(&key, &local, now_s).await {
                tracing::warn!(sequence = %key.name, period = %key.period, %error, "sequence forecast failed");
            }
        }
    }

    /// Samples the rate of `key`, records the long-term average and raises the ceiling if
    /// the room left would not last [`SequenceConfig::forecast_s`].
    async fn forecast_one(
        &self,
        key: &CounterKey,
        local: &CounterLocal,
        now_s: u64,
    ) -> Result<(), RefillError> {
        let Some(state) = self.counters.state(key, now_s).await? else { return Ok(()) };
        let long_term = {
            let mut samples = lock(&local.samples);
            samples.push_back(state.recent_per_s);
            while samples.len() as u64 > self.config.long_term_s.max(1) {
                samples.pop_front();
            }
            samples.iter().sum::<u64>() / samples.len() as u64
        };
        self.counters.set_long_term(key, long_term).await?;
        let rate = state.recent_per_s.max(long_term);
        if rate == 0 || !state.current_run {
            return Ok(());
        }
        let need = rate.saturating_mul(self.config.forecast_s);
        if state.max.saturating_sub(state.cur) >= need {
            return Ok(());
        }
        self.raise(key, local, need, rate.saturating_mul(self.config.raise_s)).await
    }
}

impl std::fmt::Debug for Sequences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequences")
            .field("counters", &self.counters.describe())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Sequences {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Why a seed or a raise of a counter failed.
#[derive(Debug)]
enum RefillError {
    /// A store call failed.
    Store(StoreError),
    /// The ceiling is at [`COUNTER_MAX`]: no raise can make room.
    Exhausted,
    /// Nothing may be served now (shutting down, the marks not written): why.
    Refused(String),
}

/// Where a batch's call failed: only a failed raise may leave room for some of its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Take,
    Seed,
    Raise,
}

impl From<StoreError> for RefillError {
    fn from(error: StoreError) -> RefillError {
        RefillError::Store(error)
    }
}

impl std::fmt::Display for RefillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefillError::Store(error) => error.fmt(f),
            RefillError::Exhausted => write!(f, "the ceiling is at {COUNTER_MAX}, the limit"),
            RefillError::Refused(reason) => f.write_str(reason),
        }
    }
}

/// A definition ready to store: a daily sequence without a format gets
/// [`DAILY_FORMAT_DEFAULT`]; the format and time zone are checked (a daily format must tell
/// days apart). `idmint seq create` and `POST /v1/seqs` both go through it.
pub fn prepare_sequence(mut spec: SequenceSpec) -> Result<SequenceSpec, SequenceError> {
    if spec.daily && spec.format.is_none() {
        spec.format = Some(DAILY_FORMAT_DEFAULT.to_string());
    }
    check_definition(&spec)?;
    Ok(spec)
}

/// Checks a definition's format and time zone (a daily one's format must tell days apart).
fn check_definition(spec: &SequenceSpec) -> Result<(Option<SeqFormat>, TimeZone), SequenceError> {
    let invalid =
        |reason: String| SequenceError::Invalid(format!("sequence {}: {reason}", spec.name));
    let zone = time_zone(&spec.time_zone).map_err(invalid)?;
    let format = spec.format.as_deref().map(SeqFormat::parse).transpose().map_err(invalid)?;
    if spec.daily {
        let Some(format) = &format else {
            return Err(invalid("a daily sequence needs a format with its date".to_string()));
        };
        format.check_daily(&zone).map_err(invalid)?;
    }
    Ok((format, zone))
}

/// The period of a definition at `at`: `""`, or the day in its time zone.
fn period_of(definition: &Definition, at: &Zoned) -> String {
    if definition.record.daily { period_at(at) } else { String::new() }
}

/// The day of `at` as a period, `YYYYMMDD`.
fn period_at(at: &Zoned) -> String {
    format!("{:04}{:02}{:02}", at.year(), at.month(), at.day())
}

/// Why a take is refused once `shutdown` began.
const SHUTTING_DOWN: &str = "the node is shutting down; ask another node";
/// Why a take is refused when the runner serving its counter ended without answering it.
const ABANDONED: &str = "the take was abandoned (the node is stopping, or its counter call \
                         failed unexpectedly; the log says which); retry";

/// Opens the marks file of `config`'s state directory (none without one).
pub(crate) fn open_marks(
    config: &SequenceConfig,
) -> Result<Option<Arc<LocalMarks<CounterKey>>>, SequenceError> {
    let Some(dir) = &config.state_dir else { return Ok(None) };
    let marks = LocalMarks::open_as(dir, SEQUENCE_MARKS)
        .map_err(|e| SequenceError::LocalState(e.to_string()))?;
    Ok(Some(Arc::new(marks)))
}

/// A counter in the marks file: `NAME` (the tag's encoding) for a plain sequence,
/// `NAME@YYYYMMDD` for a day of a daily one (`@` is always escaped inside a name).
impl MarkKey for CounterKey {
    fn encode(&self) -> String {
        if self.period.is_empty() {
            self.name.encode()
        } else {
            format!("{}@{}", self.name.encode(), self.period)
        }
    }

    fn decode(word: &str) -> Result<CounterKey, String> {
        let (name, period) = word.split_once('@').unwrap_or((word, ""));
        let day = period.len() == 8 && period.bytes().all(|b| b.is_ascii_digit());
        if !period.is_empty() && !day {
            return Err(format!("{word:?}: the period {period:?} is not a day YYYYMMDD"));
        }
        Ok(CounterKey { name: Tag::decode(name)?, period: period.to_string() })
    }
}

/// `ms` in `zone` (the epoch for a time jiff cannot hold).
fn zoned(ms: u64, zone: &TimeZone) -> Zoned {
    let at = i64::try_from(ms).ok().and_then(|ms| Timestamp::from_millisecond(ms).ok());
    at.unwrap_or(Timestamp::UNIX_EPOCH).to_zoned(zone.clone())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single map or queue update, consistent if interrupted.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_keys_round_trip_through_the_marks_file_and_bad_days_are_refused() {
        for (name, period) in [("orders", ""), ("a@b c", "20261128"), ("订单", ""), ("x%40", "")]
        {
            let key = CounterKey { name: Tag::parse(name).unwrap(), period: period.to_string() };
            let word = key.encode();
            assert!(!word.contains(' ') && !word.starts_with('#'), "{word}");
            assert_eq!(CounterKey::decode(&word), Ok(key));
        }
        for bad in ["orders@2026112", "orders@day", "orders@20261128@1", "@20261128"] {
            assert!(CounterKey::decode(bad).is_err(), "{bad} accepted");
        }
    }
}
