//! The snowflake generator: `time | worker | sequence` ids from the injected [`Clock`], with
//! a worker id that two nodes never share and a time mark that a restart never goes below.
//!
//! - **Worker ids** ([`WorkerIdSource`]): `lease` (the default) claims the lowest free id in
//!   the store with a TTL and renews it; the generator issues only while the lease is
//!   *proven*, i.e. its clock is less than one TTL past the moment it asked for the lease or
//!   its last confirmed renewal (fencing: a node that was paused or cut off stops then, and
//!   resumes only on a lease it holds again). The store judges expiry by its own clock, so
//!   the holder's fence, counted from before the store's, always closes first.
//!   `store-assigned` takes a fresh id from the store at every start (Baidu's WORKER_NODE);
//!   `static` takes it from the configuration; `ordinal` from the trailing number of a
//!   Kubernetes StatefulSet host name (`ids-3` → 3).
//! - **Time mark**: before issuing an id whose time passes the mark, the generator persists
//!   a new mark `now + time_window_ms`, first in the local marks file
//!   (`data_dir/snowflake.time-mark`, per layout and worker id), then in the store's lease
//!   row. At start the state begins at the highest of those marks, so after a `kill -9` and
//!   a clock set back, no id at or below one issued before can be issued again: the run-time
//!   rule (wait out a step back within `tolerance_ms`, refuse beyond it) applies to the mark
//!   too. A background task keeps the mark ahead of the clock, so the hot path never waits
//!   for a write in steady state. A graceful stop closes the fence first, then lowers the
//!   local mark to the last id issued, so the same node restarted issues at once; a crash
//!   leaves the window mark, which the restart waits out.
//! - **Clock offset from the store**: measured at start and every
//!   [`CLOCK_OFFSET_PERIOD_MS`] (the store's `now`, round-trip corrected). Past a quarter of
//!   `lease_margin_ms` it is logged; past half of it, with a leased worker id, ids are refused
//!   ([`SnowflakeError::ClockSkew`]) until a measurement finds it back within: an id's time is
//!   this clock's, and the worker id may pass to another node. Half, because the settling
//!   floor counts on any *two* nodes differing by less than the margin, and each node is
//!   measured against the store alone.
//! - **Clock rollback at run time** follows `idmint_core::snowflake::step`: waited out within
//!   the tolerance, refused beyond it (counted), or, with `borrow`, run on a logical clock at
//!   most `max_lead_ms` ahead.
//!
//! The hot state is one atomic word, `idmint_core::snowflake_cell::IssueCell`: the last id
//! issued (its worker id in it, a stop bit above it) and the persisted mark beside it, stepped
//! by one CAS per id, so every core issues without a lock and a thread descheduled mid-issue
//! holds no one up (under a lock it stalled every other caller). A lease lost, a shutdown or a
//! new incarnation is one change of that word, so no id is issued after one returned. The
//! fence (`crate::fence::Fence`, which holds the lease, renews it and closes on its loss) is
//! an atomic read beside it; the rest (lease, floor, reasons, the worker id) sits behind the
//! fence's mutex, taken only off the per-id path. A caller that finds the unit's sequence spent only reads
//! the word and the clock until the next unit, so it does not take the shared line from the
//! thread issuing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use idmint_core::Tag;
use idmint_core::snowflake::{ClockPolicy, Layout, LifetimeError, Parts};
use idmint_core::snowflake_cell::{IssueCell, Issued, Reserved};
use idmint_store::{
    AssignRequest, Lease, LeaseRequest, LeaseStore, StoreError, WorkerSpace, WorkerStore,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::fence::{Fence, Fenced};
use crate::marks::{LocalMarks, MarksFile};

/// Name of the snowflake time-mark file inside the state directory.
pub const TIME_MARK_FILE: &str = "snowflake.time-mark";
/// Name of its lock file.
pub const TIME_MARK_LOCK_FILE: &str = "snowflake.lock";
/// Default clock step back that is waited out rather than refused.
pub const TOLERANCE_MS_DEFAULT: u64 = 10;
/// Largest tolerance accepted (the core's bound on waiting out a step back).
pub const TOLERANCE_MS_MAX: u64 = idmint_core::limits::CLOCK_TOLERANCE_MS_MAX;
/// Largest lead over the wall clock that borrowing may take.
pub const BORROW_LEAD_MS_MAX: u64 = idmint_core::limits::BORROW_LEAD_MS_MAX;
/// Default time mark persisted ahead of the clock. Marks are written every third of it (the
/// local file fsynced, and the lease row updated with a leased worker id): three writes a
/// second by default, for a start-up delay ([`SETTLE_MS_DEFAULT`]) under 3 s.
pub const TIME_WINDOW_MS_DEFAULT: u64 = 1_000;
/// Time-mark window bounds.
pub const TIME_WINDOW_MS_MIN: u64 = 100;
/// Largest time-mark window: a restart with a clock this far behind waits or is refused.
pub const TIME_WINDOW_MS_MAX: u64 = 60_000;
/// Default worker-lease TTL.
pub const LEASE_TTL_MS_DEFAULT: u64 = 10_000;
/// Default wait after a lease expired before another node may take its worker id; also the
/// clock skew the settling floor allows between two nodes, which the offset check enforces
/// (ids refused past half of it from the store: 750 ms by default, logged past 375 ms).
pub const LEASE_MARGIN_MS_DEFAULT: u64 = 1_500;
/// A new lease holder's start-up delay with the defaults ([`settle_ms`]): the window plus
/// the margin (no borrowing by default); the 2.5 s that docs/operations.md states.
pub const SETTLE_MS_DEFAULT: u64 = TIME_WINDOW_MS_DEFAULT + LEASE_MARGIN_MS_DEFAULT;
/// What a fresh node with the default keys promises: its first snowflake id within 3 s of
/// its start, so the start-up delay leaves room for opening the store and leasing.
pub const FIRST_ID_MS_DEFAULT_MAX: u64 = 3_000;
const _: () = assert!(TIME_WINDOW_MS_DEFAULT <= LEASE_TTL_MS_DEFAULT);
const _: () = assert!(SETTLE_MS_DEFAULT == 2_500);
const _: () = assert!(SETTLE_MS_DEFAULT + 500 <= FIRST_ID_MS_DEFAULT_MAX);
/// How often the clock's offset from the store is measured (also once at start).
pub const CLOCK_OFFSET_PERIOD_MS: u64 = 5_000;
/// Longest a `next_id` call waits (sequence spent, clock behind within tolerance, a mark
/// being written) before it fails.
pub const SNOWFLAKE_WAIT_MS_MAX: u64 = 1_000;
/// Longest a `next_id` call waits for the next millisecond by yielding to the runtime and
/// re-reading the clock, instead of sleeping on a timer (whose 1 ms granularity would lose
/// up to a whole unit of ids each time a unit's sequence is spent); past it, it sleeps.
pub const SNOWFLAKE_SPIN_US_MAX: u64 = 2_000;
const _: () = assert!(SNOWFLAKE_SPIN_US_MAX < SNOWFLAKE_WAIT_MS_MAX * 1_000);

const SNOWFLAKE_MARKS: MarksFile = MarksFile {
    file: TIME_MARK_FILE,
    lock: TIME_MARK_LOCK_FILE,
    meaning: "the time (ms) up to which each snowflake worker id of this node may have issued ids",
    fix: "Restore it from a backup of this data directory. Or, knowing that ids may then \
          repeat, delete it once the clock has passed the newest mark it may have held (with \
          a leased worker id the store's lease row keeps that mark too)",
};

/// Where a node's worker id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerIdSource {
    /// A fixed id from the configuration. Two nodes configured alike share it: that is on
    /// whoever configured them.
    Static(u64),
    /// A fresh id from the store at every start.
    StoreAssigned,
    /// The lowest free id in the store, leased with a TTL and renewed (the default).
    Lease,
    /// The trailing number of this host's name (`ids-3` → 3), as a StatefulSet gives.
    Ordinal,
}

/// A range of worker ids, `min..=max` (`snowflake.worker_ids = "512-1023"`): the ids a node
/// may use when other generators (Leaf's or uid-generator's nodes) hold the rest of the
/// layout's ids during a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerIdRange {
    min: u64,
    max: u64,
}

impl WorkerIdRange {
    /// Parses `LOW-HIGH` (or one id `N`), decimal, `LOW <= HIGH`; the error says what is
    /// wrong and the form expected.
    pub fn parse(text: &str) -> Result<WorkerIdRange, String> {
        let number = |part: &str| part.trim().parse::<u64>().ok();
        let parsed = match text.split_once('-') {
            Some((low, high)) => number(low).zip(number(high)),
            None => number(text).map(|id| (id, id)),
        };
        match parsed {
            Some((min, max)) if min <= max => Ok(WorkerIdRange { min, max }),
            Some((min, max)) => Err(format!(
                "{text:?}: the range starts at {min}, above its end {max}; write LOW-HIGH with \
                 LOW <= HIGH, e.g. \"512-1023\""
            )),
            None => Err(format!(
                "{text:?} is not a worker-id range; write LOW-HIGH in decimal, e.g. \"512-1023\" \
                 (or one id, e.g. \"7\")"
            )),
        }
    }

    /// The smallest id of the range.
    pub fn min(&self) -> u64 {
        self.min
    }

    /// The largest id of the range.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Whether `id` is inside the range.
    pub fn contains(&self, id: u64) -> bool {
        (self.min..=self.max).contains(&id)
    }

    /// Refuses a range that does not fit `layout`'s worker bits, with the reason.
    pub fn check(&self, layout: &Layout) -> Result<(), String> {
        if self.max > layout.max_worker() {
            return Err(format!(
                "worker ids {self} do not fit the layout's {} worker bits (ids 0-{}); use a \
                 range within it",
                layout.worker_bits(),
                layout.max_worker()
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for WorkerIdRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// How a snowflake generator runs.
#[derive(Debug, Clone)]
pub struct SnowflakeConfig {
    /// Name of the id space (the layout's name): worker ids and time marks are per space.
    pub space: String,
    /// The bit layout.
    pub layout: Layout,
    /// Where the worker id comes from.
    pub worker: WorkerIdSource,
    /// The worker ids this node may use (`snowflake.worker_ids`); `None`: every id of the
    /// layout. Leases are taken inside it only, and a static or ordinal id outside it is
    /// refused at start, so Leaf or uid-generator nodes beside idmint keep the rest.
    pub worker_ids: Option<WorkerIdRange>,
    /// A clock step back up to this is waited out; beyond it ids are refused.
    pub tolerance_ms: u64,
    /// `Some(lead)`: run ahead of the clock on borrowed time by at most `lead` ms instead of
    /// waiting.
    pub borrow_max_lead_ms: Option<u64>,
    /// Sequence vibration: a new unit's first sequence cycles `0..=max_vibration`; by default
    /// the layout's [`Layout::vibration_default`] (255 for `snowflake`), so `id % N` shards
    /// evenly for every `N` dividing 256 (see `idmint_core::snowflake::step`).
    pub max_vibration: u64,
    /// How far ahead of the clock the persisted time mark is kept.
    pub time_window_ms: u64,
    /// Worker-lease TTL.
    pub lease_ttl_ms: u64,
    /// Wait after a lease expired before its id may be taken by another node.
    pub lease_margin_ms: u64,
    /// The node's state directory (time marks); `None` keeps marks in the store only.
    pub state_dir: Option<PathBuf>,
    /// Who this node is, for the store's lease rows (`host:port`).
    pub holder: String,
    /// The port recorded by `store-assigned`.
    pub port: u16,
}

impl SnowflakeConfig {
    /// A generator of `layout` named `space`, with leased worker ids and the defaults (the
    /// layout's default vibration among them).
    pub fn new(space: &str, layout: Layout) -> SnowflakeConfig {
        SnowflakeConfig {
            space: space.to_string(),
            layout,
            worker: WorkerIdSource::Lease,
            worker_ids: None,
            tolerance_ms: TOLERANCE_MS_DEFAULT,
            borrow_max_lead_ms: None,
            max_vibration: layout.vibration_default(),
            time_window_ms: TIME_WINDOW_MS_DEFAULT,
            lease_ttl_ms: LEASE_TTL_MS_DEFAULT,
            lease_margin_ms: LEASE_MARGIN_MS_DEFAULT,
            state_dir: None,
            holder: "idmint".to_string(),
            port: 0,
        }
    }
}

/// Why a snowflake id was not issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnowflakeError {
    /// The clock is behind the last id issued (or the persisted mark) by more than the
    /// tolerance: issuing could repeat an id.
    #[error(
        "the clock is {behind_ms} ms behind the last id issued or the persisted time mark \
         (tolerance {tolerance_ms} ms); no id is issued until it catches up. Check the node's \
         time sync; if the clock had jumped ahead and left the mark there, restart the node: \
         with leased worker ids it takes one not marked ahead (docs/operations.md)"
    )]
    ClockBehind {
        /// How far behind.
        behind_ms: u64,
        /// The configured tolerance.
        tolerance_ms: u64,
    },
    /// The worker-id lease is not proven (renewal failed, or the node was paused past it).
    #[error("worker id {worker} of {space}: the lease is not proven ({reason}); retrying")]
    LeaseNotProven {
        /// The layout space.
        space: String,
        /// The worker id.
        worker: u64,
        /// Why.
        reason: String,
    },
    /// The worker id was leased a moment ago: an earlier holder of it (whose row was deleted,
    /// restored from an older backup, or expired under it) may still issue ids until its
    /// next store call, so this node issues only ids whose time lies above the acquisition
    /// plus [`settle_ms`]. Retryable: it ends by itself at `from_ms`.
    #[error(
        "worker id {worker} of {space} was leased at {acquired_ms} ms; it issues from \
         {from_ms} ms, once any earlier holder's ids are behind it (time_window_ms + \
         lease_margin_ms: {settle_ms} ms); retry then, or shorten those keys \
         (docs/operations.md, \"Start-up delay\")"
    )]
    LeaseSettling {
        /// The layout space.
        space: String,
        /// The worker id.
        worker: u64,
        /// When the lease was acquired (ms since the Unix epoch).
        acquired_ms: u64,
        /// From when ids are issued (ms since the Unix epoch).
        from_ms: u64,
        /// The settling time, `from_ms - acquired_ms`.
        settle_ms: u64,
        /// How long from the refusal until ids are issued, in ms (what `Retry-After` says).
        retry_after_ms: u64,
    },
    /// This node's clock is off the store's by more than half of `lease_margin_ms` (a leased
    /// worker id only): an id's time is this clock's, and the worker id passes to other
    /// nodes, which may be off the other way, so ids are refused until a measurement finds
    /// the offset back within. Not passed by retrying: the node's (or the store's) time sync
    /// must be fixed.
    #[error(
        "this node's clock is {offset_ms} ms off the store's (positive: ahead), more than \
         half of lease_margin_ms ({margin_ms} ms): snowflake ids are refused, since a worker \
         id leased with a clock this far off could repeat ids of its other holders (two nodes \
         each off by half the margin, in opposite directions, differ by all of it). Fix the time sync \
         (chrony/ntpd) of this node or of the store; ids are served again within \
         {CLOCK_OFFSET_PERIOD_MS} ms of the offset coming back (docs/operations.md, \
         \"Clock offset from the store\")"
    )]
    ClockSkew {
        /// This clock minus the store's, in milliseconds, at the last measurement.
        offset_ms: i64,
        /// The configured `lease_margin_ms`.
        margin_ms: u64,
    },
    /// The layout's time field is full: no id can be made under it again. Final: only a
    /// layout with more time bits or a later epoch ends it.
    #[error(
        "layout {0}: its time field ran out, so it makes no more ids; configure a layout with \
         more time bits (snowflake.time_bits or a longer time_unit) or a later epoch \
         (snowflake.epoch) and restart the node. A new layout is a new id space: make sure its \
         ids cannot repeat the old ones (docs/configuration.md, \"Custom layouts\")"
    )]
    Exhausted(String),
    /// No id within [`SNOWFLAKE_WAIT_MS_MAX`] (a mark could not be written, or the clock did
    /// not move).
    #[error("no snowflake id within {SNOWFLAKE_WAIT_MS_MAX} ms: {0}")]
    Unavailable(String),
    /// The configuration cannot run; the message names the field and the fix.
    #[error("snowflake configuration: {0}")]
    Config(String),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The local marks file failed.
    #[error("local state: {0}")]
    LocalState(String),
}

/// A snowflake generator, started with [`Snowflake::start`].
pub struct Snowflake {
    config: SnowflakeConfig,
    policy: ClockPolicy,
    clock: Arc<dyn Clock>,
    store: Option<Arc<dyn WorkerStore>>,
    space: WorkerSpace,
    marks: Option<Arc<LocalMarks>>,
    /// The last id issued and the persisted mark, stepped by CAS (the per-id path).
    cell: IssueCell,
    /// The worker id's lease (none for a worker id that needs none) and its gate, with the
    /// state off the per-id path under its lock.
    fence: Fence<State>,
    /// Ids are being refused because the clock is behind the last one: logged once when it
    /// starts and once when it ends, not once per refused request.
    clock_behind: AtomicBool,
    /// Serialises mark writes and lease changes.
    writer: tokio::sync::Mutex<()>,
    rollbacks: AtomicU64,
    waits: AtomicU64,
    /// This clock minus the store's at the last measurement (ms), once `offset_measured`.
    offset_ms: AtomicI64,
    offset_measured: AtomicBool,
    /// The last offset was past half of `lease_margin_ms` with a leased worker id: ids are
    /// refused.
    skewed: AtomicBool,
    /// The last offset was past a quarter of the margin (logged once when it passes, once
    /// back).
    offset_warned: AtomicBool,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl std::fmt::Debug for Snowflake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snowflake").field("status", &self.status()).finish()
    }
}

/// The generator's state off the per-id path, under the fence's lock beside the lease and
/// its floor (no id's time lies at or below the floor: see [`settle_ms`]); the cell holds
/// the rest.
#[derive(Debug, Clone)]
struct State {
    /// The worker id of the current incarnation (the cell's word carries it too).
    worker: u64,
    /// The layout's time is spent above the held lease's floor: the cell stays stopped and
    /// a take is refused as `Exhausted` (final), not as a lease not proven.
    spent: bool,
    /// Set by [`Snowflake::shutdown`] once the fence closed: no id and no mark write after.
    stopped: bool,
}

/// The fence's lock: the lease, its floor and the generator's [`State`].
type Locked<'a> = MutexGuard<'a, Fenced<State>>;

/// What [`Snowflake::status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnowflakeStatus {
    /// The layout space.
    pub space: String,
    /// The layout.
    pub layout: Layout,
    /// The worker id.
    pub worker: u64,
    /// The persisted time mark, ms since the Unix epoch.
    pub mark_ms: u64,
    /// Until when the lease is proven (ms since the Unix epoch); `None` without a lease.
    pub lease_until_ms: Option<u64>,
    /// This clock minus the store's at the last measurement, in ms; `None` without a store
    /// or before the first measurement answered.
    pub clock_offset_ms: Option<i64>,
    /// Clock steps back beyond the tolerance (ids refused).
    pub rollbacks: u64,
    /// Waits (sequence spent, or a step back within the tolerance).
    pub waits: u64,
}

/// One attempt of the hot path.
enum Attempt {
    Id(u64),
    Wait(u64),
    NeedMark,
}

impl Snowflake {
    /// Starts a generator: takes its worker id, reads the highest time mark (local file and
    /// store), persists a mark ahead of the clock, and starts the tasks that keep the mark
    /// ahead and the lease renewed. `store` is required for `lease` and `store-assigned`.
    pub async fn start(
        store: Option<Arc<dyn WorkerStore>>,
        config: SnowflakeConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Snowflake>, SnowflakeError> {
        let layout = config.layout;
        let bad = |m: String| SnowflakeError::Config(m);
        if config.tolerance_ms > TOLERANCE_MS_MAX {
            return Err(bad(format!(
                "tolerance_ms {} is above {TOLERANCE_MS_MAX}",
                config.tolerance_ms
            )));
        }
        if !(TIME_WINDOW_MS_MIN..=TIME_WINDOW_MS_MAX).contains(&config.time_window_ms) {
            return Err(bad(format!(
                "time_window_ms {} is outside {TIME_WINDOW_MS_MIN}..={TIME_WINDOW_MS_MAX}",
                config.time_window_ms
            )));
        }
        if config.borrow_max_lead_ms.is_some_and(|lead| lead > BORROW_LEAD_MS_MAX) {
            return Err(bad(format!(
                "borrow_max_lead_ms {:?} is above {BORROW_LEAD_MS_MAX}",
                config.borrow_max_lead_ms
            )));
        }
        // A layout before its epoch or past its time would refuse every id: say so now.
        if let Err(error @ (LifetimeError::EpochInFuture { .. } | LifetimeError::Expired { .. })) =
            layout.lifetime(clock.now_ms())
        {
            return Err(bad(format!(
                "layout {layout}: {error}; set a later epoch or more time bits"
            )));
        }
        let space = WorkerSpace::parse(&config.space)?;
        let policy = ClockPolicy::from_ms(&layout, config.tolerance_ms, config.borrow_max_lead_ms);
        let marks = match &config.state_dir {
            Some(dir) => Some(Arc::new(
                LocalMarks::open_as(dir, SNOWFLAKE_MARKS)
                    .map_err(|e| SnowflakeError::LocalState(e.to_string()))?,
            )),
            None => None,
        };
        if let Some(range) = &config.worker_ids {
            range.check(&layout).map_err(bad)?;
            if config.worker == WorkerIdSource::StoreAssigned && range.min() > 1 {
                return Err(bad(format!(
                    "worker = \"store-assigned\" counts ids up from 1 and cannot start at \
                     {}; use worker = \"lease\" with worker_ids = \"{range}\"",
                    range.min()
                )));
            }
        }
        let now = clock.now_ms();
        let (worker, lease) = match &config.worker {
            WorkerIdSource::Static(id) => (*id, None),
            WorkerIdSource::Ordinal => (ordinal()?, None),
            WorkerIdSource::StoreAssigned => {
                let store = need(&store, "store-assigned")?;
                let request = AssignRequest {
                    space: space.clone(),
                    max_worker: config.worker_ids.map_or(layout.max_worker(), |r| r.max()),
                    host: config.holder.clone(),
                    port: config.port,
                    launch_ms: now,
                };
                (store.assign_worker(&request).await?, None)
            }
            WorkerIdSource::Lease => {
                let store = need(&store, "lease")?;
                let lease =
                    Fence::<State>::acquire(&**store, &lease_request(&config, &space, now)).await?;
                (lease.worker_id, Some(lease))
            }
        };
        if worker > layout.max_worker() {
            return Err(bad(format!(
                "worker id {worker} does not fit the layout's {} worker bits (at most {})",
                layout.worker_bits(),
                layout.max_worker()
            )));
        }
        if let Some(range) = config.worker_ids.filter(|range| !range.contains(worker)) {
            return Err(bad(format!(
                "worker id {worker} is outside snowflake.worker_ids = \"{range}\", the ids this \
                 node may use (the others belong to the generators running beside it); give a \
                 worker id inside the range, or use worker = \"lease\""
            )));
        }
        // One TTL from before the store was asked (see `fence`), unless this clock is stepped
        // back meanwhile; then the time mark, which the next holder starts above, still keeps
        // this node's ids below the next holder's.
        let state = State { worker, spent: false, stopped: false };
        let fence = match (lease, &store) {
            (Some(lease), Some(store)) => Fence::leased(
                (Arc::clone(store) as Arc<dyn LeaseStore>, "worker lease"),
                lease,
                (config.lease_ttl_ms, settle_ms(&config), now),
                state,
            ),
            _ => Fence::unleased(state),
        };
        let unmeasured = config.worker == WorkerIdSource::Lease && store.is_some();
        let generator = Arc::new(Snowflake {
            policy,
            clock,
            store,
            space,
            marks,
            // The worker id was checked against the layout above.
            cell: IssueCell::new(&layout, worker).ok_or_else(|| {
                bad(format!("worker id {worker} does not fit the layout {layout}"))
            })?,
            fence,
            clock_behind: AtomicBool::new(false),
            writer: tokio::sync::Mutex::new(()),
            rollbacks: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            offset_ms: AtomicI64::new(0),
            offset_measured: AtomicBool::new(false),
            // With a leased worker id, unproven until the first measurement: the settling
            // floor counts on the margin, so no id before the offset is known.
            skewed: AtomicBool::new(unmeasured),
            offset_warned: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            tracker: TaskTracker::new(),
            config,
        });
        if generator.lock().lease.is_some() {
            // From when the acquisition answered, not when it was asked: a slow store must not
            // eat into the clock-skew margin (an earlier holder may mark up to then).
            generator.settle_from(generator.clock.now_ms().max(now));
        }
        if let Err(error) = generator.begin_first_mark().await {
            // A lease taken goes back now: a start retried while its store fails would
            // otherwise hold one worker id per attempt until each TTL ran out.
            generator.tracker.close();
            generator.shutdown().await;
            return Err(error);
        }
        if generator.store.is_some()
            && let Err(error) = generator.measure_clock_offset().await
        {
            tracing::warn!(space = %generator.config.space, %error, "the clock's offset from the store was not measured; retried every {CLOCK_OFFSET_PERIOD_MS} ms");
        }
        tracing::info!(
            space = %generator.config.space, worker, layout = %layout,
            expires = %idmint_core::snowflake::UtcMs(layout.expires_at_ms()),
            max_vibration = generator.config.max_vibration,
            even_modulus = layout.even_modulus(generator.config.max_vibration),
            "snowflake generator started (id % N is even for every N dividing even_modulus)"
        );
        // The tasks hold the generator weakly: dropping it (without `shutdown`, as a crash
        // would) stops them and releases the marks file's lock.
        let cancel = generator.cancel.clone();
        let period = Duration::from_millis((generator.config.time_window_ms / 3).max(1));
        let weak = Arc::downgrade(&generator);
        generator.tracker.spawn(every(period, cancel.clone(), weak, |g| async move {
            if let Err(error) = g.extend_mark().await {
                tracing::warn!(space = %g.config.space, %error, "time mark not extended; ids stop at the current mark until it is");
            }
        }));
        if generator.store.is_some() {
            let period = Duration::from_millis(CLOCK_OFFSET_PERIOD_MS);
            let weak = Arc::downgrade(&generator);
            generator.tracker.spawn(every(period, cancel.clone(), weak, |g| async move {
                if let Err(error) = g.measure_clock_offset().await {
                    tracing::debug!(space = %g.config.space, %error, "the clock's offset from the store was not measured");
                }
            }));
        }
        if generator.lock().lease.is_some() {
            let period = Duration::from_millis((generator.config.lease_ttl_ms / 3).max(1));
            let weak = Arc::downgrade(&generator);
            generator.tracker.spawn(every(period, cancel, weak, |g| async move {
                g.renew_once().await;
            }));
        }
        generator.tracker.close();
        Ok(generator)
    }

    /// The next id, waiting (bounded by [`SNOWFLAKE_WAIT_MS_MAX`]) for the next unit when the
    /// sequence is spent, for the clock when it is behind within tolerance, and for a mark
    /// write when the clock passed the mark.
    pub async fn next_id(&self) -> Result<u64, SnowflakeError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(SNOWFLAKE_WAIT_MS_MAX);
        // Real time, not tokio's (which a paused test runtime stops): bounds the yielding.
        let mut spin_since: Option<std::time::Instant> = None;
        loop {
            match self.attempt()? {
                Attempt::Id(id) => return Ok(id),
                Attempt::Wait(until_ms) => {
                    let now_ms = self.clock.now_ms();
                    let spinning = spin_since.get_or_insert_with(std::time::Instant::now);
                    // The next unit within the next millisecond (or already here: another
                    // thread took the id): yield and read the clock again, touching nothing
                    // shared, rather than sleep past the unit's start.
                    if until_ms <= now_ms + 1
                        && spinning.elapsed() < Duration::from_micros(SNOWFLAKE_SPIN_US_MAX)
                    {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    let pause = until_ms.saturating_sub(now_ms).clamp(1, 50);
                    if tokio::time::Instant::now() + Duration::from_millis(pause) > deadline {
                        return Err(SnowflakeError::Unavailable(
                            "the clock did not reach the next usable unit".into(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Attempt::NeedMark => {
                    let extended = tokio::time::timeout_at(deadline, self.extend_mark())
                        .await
                        .map_err(|_| {
                            SnowflakeError::Unavailable("the time mark could not be written".into())
                        })?;
                    extended?;
                }
            }
        }
    }

    /// The next id without waiting: `None` when it would have to wait (sequence spent, mark
    /// not yet written); an error when it must refuse.
    pub fn try_next_id(&self) -> Result<Option<u64>, SnowflakeError> {
        match self.attempt()? {
            Attempt::Id(id) => Ok(Some(id)),
            Attempt::Wait(_) | Attempt::NeedMark => Ok(None),
        }
    }

    /// `count` ids, increasing.
    pub async fn next_ids(&self, count: u64) -> Result<Vec<u64>, SnowflakeError> {
        let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        for _ in 0..count {
            ids.push(self.next_id().await?);
        }
        Ok(ids)
    }

    /// Reserves one whole unit of borrowed time for the cached generator: every sequence of
    /// the first unit above the last one issued (or the clock, if later), as long as it lies
    /// within the persisted mark and at most `max_lead_ms` ahead of the clock. Returns the
    /// unit and the worker id; `None` when the lead or the mark forbids it for now.
    pub(crate) fn reserve_unit(
        &self,
        max_lead_ms: u64,
    ) -> Result<Option<(u64, u64)>, SnowflakeError> {
        self.refuse_while_skewed()?;
        let layout = &self.config.layout;
        let now_ms = self.clock.now_ms();
        if !self.fence.open_at(now_ms) {
            return Err(self.fence_closed(&self.lock()));
        }
        let now_units = layout.to_units(now_ms).unwrap_or(0);
        let lead_units = max_lead_ms / layout.unit().millis();
        match self.cell.reserve_unit(layout, now_units, lead_units) {
            Reserved::Unit { unit, worker } => Ok(Some((unit, worker))),
            Reserved::NotNow => Ok(None),
            Reserved::Stopped => Err(self.fence_closed(&self.lock())),
            Reserved::Exhausted => Err(SnowflakeError::Exhausted(self.config.space.clone())),
        }
    }

    /// Whether the last id's time is within half a time window of the persisted mark: the
    /// cached generator's filler extends the mark then, before borrowing reaches it.
    pub(crate) fn mark_due(&self) -> bool {
        let layout = &self.config.layout;
        let (last_time, _) = layout.unpack(self.cell.last(layout));
        let half_window = self.config.time_window_ms / 2 / layout.unit().millis();
        last_time + half_window >= self.cell.mark_units()
    }

    /// Persists the time mark now (the cached generator's filler, before borrowing past it).
    pub(crate) async fn extend_mark_now(&self) -> Result<(), SnowflakeError> {
        self.extend_mark().await
    }

    /// The parts of `id` under this generator's layout.
    pub fn decode(&self, id: u64) -> Option<Parts> {
        self.config.layout.decode(id)
    }

    /// The generator's clock, read (the cached ring ages its ids by it).
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.config.layout
    }

    /// The generator's worker id, lease and counters.
    pub fn status(&self) -> SnowflakeStatus {
        let (worker, lease_until_ms) = {
            let state = self.lock();
            (state.holder.worker, self.fence.until_ms(&state))
        };
        let layout = self.config.layout;
        SnowflakeStatus {
            space: self.config.space.clone(),
            layout,
            worker,
            mark_ms: layout.timestamp_ms(self.cell.mark_units()).unwrap_or(0),
            lease_until_ms,
            clock_offset_ms: self.clock_offset_ms(),
            rollbacks: self.rollbacks.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
        }
    }

    /// Whether an id could be issued now, checked without issuing one or waiting: `Err` names
    /// what stops it, for `/ready` and the metrics. [`SnowflakeError::LeaseNotProven`] when the
    /// lease is not proven (lost, not renewed in time, shutting down);
    /// [`SnowflakeError::ClockBehind`] when the clock is behind the last id or the persisted
    /// mark by more than the tolerance (plus the borrowing lead), as after a clock that jumped
    /// ahead and was corrected: ids are refused until the clock catches up.
    pub fn readiness(&self) -> Result<(), SnowflakeError> {
        self.refuse_while_skewed()?;
        let layout = &self.config.layout;
        let state = self.lock();
        let now_ms = self.clock.now_ms();
        if !self.fence.open_at(now_ms) || self.cell.is_stopped() {
            return Err(self.fence_closed(&state));
        }
        let last_ms = layout.timestamp_ms(layout.unpack(self.cell.last(layout)).0).unwrap_or(0);
        let behind_ms = last_ms.saturating_sub(now_ms);
        let allowed_ms = self.config.tolerance_ms + self.config.borrow_max_lead_ms.unwrap_or(0);
        if behind_ms > allowed_ms {
            if self.settling_at(&state, now_ms) {
                return Err(self.settling(&state, now_ms));
            }
            return Err(SnowflakeError::ClockBehind {
                behind_ms,
                tolerance_ms: self.config.tolerance_ms,
            });
        }
        Ok(())
    }

    /// Stops the generator: the background tasks end, the fence closes (no id is issued
    /// after), the local mark of the worker id comes down to the last id issued (see
    /// `record_last_id`) and the lease is released (its time mark stays in the store).
    /// Idempotent.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tracker.wait().await;
        // After a mark write under way (a request's), and before any later one: once the
        // fence is closed under this lock, `extend_mark` writes nothing.
        let _writing = self.writer.lock().await;
        let (lease, worker, last) = {
            let mut state = self.lock();
            let lease = self.fence.close(&mut state, "the node is shutting down");
            state.holder.stopped = true;
            // Once the cell is stopped nothing is issued: `last` is final.
            let last = self.cell.stop(&self.config.layout);
            (lease, state.holder.worker, last)
        };
        self.record_last_id(worker, last).await;
        if let Some(lease) = lease {
            self.fence.release(lease).await;
        }
        self.release_marks();
    }

    /// Gives the marks file's lock up, so a restart in this process opens it at once. A
    /// blocking-pool task of a group write may still hold the file a moment after its write
    /// was answered (see `LocalMarks::change`); the lock must not wait for it. Sound once
    /// nothing issues: `release` waits for a write under way and refuses any later one.
    fn release_marks(&self) {
        if let Some(marks) = &self.marks {
            marks.release();
        }
    }

    /// At a graceful stop, with the fence closed: lowers the local mark of `worker` from one
    /// window ahead of the clock to the time of `last`, the last id issued (or the floor or
    /// inherited mark the state started above), so a restart of this node issues at once
    /// instead of waiting for the clock to pass the window. Sound because nothing is issued
    /// under this generator any more, and `last` is at or above every id it issued, every id
    /// an earlier holder may have issued unseen (the floor) and every mark it started above;
    /// a crash skips this and keeps the window mark. The store's lease row keeps its mark:
    /// the store's marks only rise (a restored backup or a deleted row is fenced by the next
    /// holder's floor, not by the row), and a new holder's floor lies above any mark this
    /// node wrote, by the margin, so lowering the row would start no node sooner. A failed
    /// write keeps the higher mark, which is safe, and is logged.
    async fn record_last_id(&self, worker: u64, last: u64) {
        let Some(marks) = &self.marks else { return };
        let layout = self.config.layout;
        let Some(last_ms) = layout.timestamp_ms(layout.unpack(last).0) else { return };
        let Ok(key) = self.mark_key(worker) else { return };
        if marks.get(&key).is_none_or(|mark| mark <= last_ms) {
            return;
        }
        match marks.lower_many(vec![(key, last_ms)]).await {
            Ok(()) => {
                tracing::info!(space = %self.config.space, worker, last_ms, "time mark lowered to the last id issued: a restart issues at once")
            }
            Err(error) => {
                tracing::warn!(space = %self.config.space, worker, %error, "time mark not lowered to the last id; a restart waits until the clock passes the window")
            }
        }
    }

    /// The refusal once the clock has passed the fence, with the reason it closed.
    fn fence_closed(&self, state: &Fenced<State>) -> SnowflakeError {
        SnowflakeError::LeaseNotProven {
            space: self.config.space.clone(),
            worker: state.holder.worker,
            reason: Fence::reason(state),
        }
    }

    fn lock(&self) -> Locked<'_> {
        self.fence.lock()
    }

    /// One try of the per-id path: one CAS on the cell, no lock (the lock only to build a
    /// refusal).
    #[inline]
    fn attempt(&self) -> Result<Attempt, SnowflakeError> {
        self.refuse_while_skewed()?;
        let layout = &self.config.layout;
        let mut now_ms = 0;
        let issued = self.cell.issue(layout, &self.policy, self.config.max_vibration, || {
            now_ms = self.clock.now_ms();
            // Before the epoch reads as unit 0, never issued at (checked below).
            layout.to_units(now_ms).unwrap_or(0)
        });
        // A stopped cell read no clock: answered before the checks of the clock's reading.
        if let Issued::Stopped = issued {
            let state = self.lock();
            if state.holder.spent {
                return Err(SnowflakeError::Exhausted(self.config.space.clone()));
            }
            return Err(self.fence_closed(&state));
        }
        // The fence against the clock read that made the id (an id made past it is dropped,
        // never handed out: skipping ids is safe).
        if !self.fence.open_at(now_ms) {
            return Err(self.fence_closed(&self.lock()));
        }
        if now_ms < layout.epoch_ms() {
            return Err(SnowflakeError::Config(format!(
                "the clock reads {now_ms} ms, before the layout's epoch {}",
                layout.epoch_ms()
            )));
        }
        match issued {
            Issued::Id(id) => {
                if self.clock_behind.load(Ordering::Relaxed)
                    && self.clock_behind.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(space = %self.config.space, "clock caught up with the last id; issuing again");
                }
                Ok(Attempt::Id(id))
            }
            Issued::NeedMark { .. } => Ok(Attempt::NeedMark),
            Issued::WaitUntil { units } => {
                Ok(Attempt::Wait(layout.timestamp_ms(units).unwrap_or(now_ms + 1)))
            }
            // Every attempt lost to another thread's id: try again at once.
            Issued::Contended => Ok(Attempt::Wait(now_ms)),
            Issued::Stopped => Err(self.fence_closed(&self.lock())),
            Issued::Refuse { behind_units } => {
                let state = self.lock();
                if self.settling_at(&state, now_ms) {
                    return Err(self.settling(&state, now_ms));
                }
                self.rollbacks.fetch_add(1, Ordering::Relaxed);
                let behind_ms = behind_units.saturating_mul(layout.unit().millis());
                if !self.clock_behind.swap(true, Ordering::Relaxed) {
                    tracing::warn!(space = %self.config.space, behind_ms, "clock behind the last id beyond tolerance; refusing ids until it catches up (/ready reports not ready). Fix: check the time sync; if the clock had jumped ahead, restart the node in lease mode to lease a worker id not marked ahead (docs/operations.md)");
                }
                Err(SnowflakeError::ClockBehind {
                    behind_ms,
                    tolerance_ms: self.config.tolerance_ms,
                })
            }
            Issued::Exhausted => Err(SnowflakeError::Exhausted(self.config.space.clone())),
        }
    }

    /// The marks key of this space and worker.
    fn mark_key(&self, worker: u64) -> Result<Tag, SnowflakeError> {
        Tag::parse(&format!("{}.w{worker}", self.config.space))
            .map_err(|e| SnowflakeError::Config(format!("space {}: {e}", self.config.space)))
    }

    /// Starts above the known marks and persists the first mark ahead of the clock.
    async fn begin_first_mark(&self) -> Result<(), SnowflakeError> {
        self.begin_at_marks().await?;
        self.extend_mark().await
    }

    /// Starts the state above the highest mark known for the worker id: the local file's and
    /// the lease's (the previous owner's).
    async fn begin_at_marks(&self) -> Result<(), SnowflakeError> {
        let layout = self.config.layout;
        let state = self.lock();
        let local = match &self.marks {
            Some(marks) => marks.get(&self.mark_key(state.holder.worker)?).unwrap_or(0),
            None => 0,
        };
        let stored = state.lease.as_ref().map_or(0, |l| l.mark);
        let mark_ms = local.max(stored).max(state.floor_ms);
        if mark_ms > 0 {
            // Ids at or below the mark's unit may have been issued: start as if its last
            // sequence had been, so the next id lies above it; a clock behind it is the
            // run-time rollback rule's to wait out or refuse.
            let units = layout.to_units(mark_ms).unwrap_or(0);
            let last = layout
                .pack(units, layout.max_sequence())
                .ok_or_else(|| SnowflakeError::Exhausted(self.config.space.clone()))?;
            if !self.cell.raise_floor(&layout, last) {
                return Err(SnowflakeError::Exhausted(self.config.space.clone()));
            }
            self.cell.raise_mark(units);
            tracing::info!(space = %self.config.space, worker = state.holder.worker, mark_ms, "snowflake resumes above its time mark");
            let behind_ms = mark_ms.saturating_sub(self.clock.now_ms());
            if mark_ms > state.floor_ms && behind_ms > self.config.tolerance_ms {
                tracing::warn!(
                    space = %self.config.space, worker = state.holder.worker, mark_ms, behind_ms,
                    "the time mark of this worker id is ahead of the clock (a clock that jumped \
                     ahead left it): no id is issued until the clock passes it and /ready \
                     reports not ready. Fix: check the time sync; in lease mode stop this node \
                     and start it again once its lease margin has passed, so it leases a worker \
                     id not marked ahead (docs/operations.md, \"A clock that jumped ahead\")"
                );
            }
        }
        Ok(())
    }

    /// Persists a mark `time_window_ms` ahead of the clock (local file first, then the
    /// store) and publishes it.
    async fn extend_mark(&self) -> Result<(), SnowflakeError> {
        let _writing = self.writer.lock().await;
        let layout = self.config.layout;
        let (worker, lease, last) = {
            let state = self.lock();
            if state.holder.stopped {
                // The mark was brought down to the last id; raising it again would make a
                // restart wait for nothing.
                return Err(self.fence_closed(&state));
            }
            (state.holder.worker, state.lease.clone(), self.cell.last(&layout))
        };
        let now_ms = self.clock.now_ms();
        let ahead_ms = now_ms + self.config.time_window_ms;
        // With borrowed time the state may already be ahead of the clock.
        let last_ms = layout.timestamp_ms(layout.unpack(last).0).unwrap_or(0);
        // Never more than `time_window_ms` plus the borrowing lead above the clock, whatever
        // the state (a cached ring running ahead, a floor not yet reached): `settle_ms`
        // relies on it, since a holder that lost its row unseen may issue up to its mark.
        let cap_ms = ahead_ms + self.config.borrow_max_lead_ms.unwrap_or(0);
        let mark_ms = ahead_ms.max(last_ms + self.config.time_window_ms).min(cap_ms);
        if let Some(marks) = &self.marks {
            marks
                .raise(&self.mark_key(worker)?, mark_ms)
                .await
                // Retryable (a full disk frees up): ids stop at the mark on disk until then.
                .map_err(|e| SnowflakeError::Unavailable(e.to_string()))?;
        }
        if let Some(lease) = &lease {
            // Another holder's row, or none: the row no longer proves this lease.
            self.fence.raise(lease, mark_ms, |_| self.stop_cell()).await?;
        }
        let units = layout.to_units(mark_ms).unwrap_or(0);
        // Under the lock: a new incarnation (which resets the mark) is one step with its
        // worker change, so a mark written for the old worker id never serves the new one.
        let state = self.lock();
        if state.holder.worker == worker && !state.holder.stopped {
            self.cell.raise_mark(units);
        }
        Ok(())
    }

    /// One lease renewal; when the lease is lost, closes the fence at once (a later round
    /// acquires a lease again, possibly another worker id, starting above its marks).
    async fn renew_once(&self) {
        let request = |now_ms| lease_request(&self.config, &self.space, now_ms);
        let renewal = self.fence.renew(request, &*self.clock, |_| self.stop_cell()).await;
        if let Some(renewal) = renewal {
            self.install_lease(renewal.lease, renewal.answered_ms, renewal.until_ms).await;
        }
    }

    /// Stops the cell, under the fence's lock as the lease is lost: nothing issues after.
    fn stop_cell(&self) {
        let _ = self.cell.stop(&self.config.layout);
    }

    /// Sets the floor of a lease acquired at `acquired_ms` (see [`settle_ms`]).
    fn settle_from(&self, acquired_ms: u64) {
        self.set_floor(&mut self.lock(), acquired_ms);
    }

    fn set_floor(&self, state: &mut Fenced<State>, acquired_ms: u64) {
        self.fence.settle(state, acquired_ms);
        tracing::info!(
            space = %self.config.space, worker = state.holder.worker, from_ms = state.floor_ms,
            settle_ms = state.floor_ms - acquired_ms,
            "worker id leased: ids are issued once any earlier holder's ids are behind \
             (time_window_ms + lease_margin_ms); until then snowflake requests answer 503 \
             lease_settling (and /ready, when it waits for snowflake)"
        );
    }

    /// Whether a refusal at `now_ms` is the new lease's floor: the clock is below it and no
    /// id was issued above it (after one was, a clock below it is a clock that went back).
    fn settling_at(&self, state: &Fenced<State>, now_ms: u64) -> bool {
        let layout = &self.config.layout;
        let floor_units = layout.to_units(state.floor_ms).unwrap_or(0);
        now_ms < state.floor_ms && layout.unpack(self.cell.last(layout)).0 <= floor_units
    }

    /// The refusal at `now_ms` while the clock is below the floor of a lease just acquired.
    fn settling(&self, state: &Fenced<State>, now_ms: u64) -> SnowflakeError {
        SnowflakeError::LeaseSettling {
            space: self.config.space.clone(),
            worker: state.holder.worker,
            acquired_ms: state.acquired_ms,
            from_ms: state.floor_ms,
            settle_ms: state.floor_ms - state.acquired_ms,
            // The first id lies in the unit after the floor's, and the step back tolerated
            // is waited out by `next_id` itself.
            retry_after_ms: state.floor_ms.saturating_sub(now_ms) + 1,
        }
    }

    /// Measures this clock's offset from the store's (done at start and every
    /// [`CLOCK_OFFSET_PERIOD_MS`]): the store's `now` against the middle of the round trip,
    /// off by at most half of it. Past a quarter of `lease_margin_ms` it is logged; past half
    /// of it, with a leased worker id, ids are refused ([`SnowflakeError::ClockSkew`]) until a
    /// measurement finds it back within. Returns this clock minus the store's, in ms.
    pub async fn measure_clock_offset(&self) -> Result<i64, SnowflakeError> {
        let store = self.store.as_ref().ok_or_else(|| {
            SnowflakeError::Config("no store: the clock's offset has nothing to compare".into())
        })?;
        let sent_ms = self.clock.now_ms();
        let store_ms = store.now_ms().await?;
        let received_ms = self.clock.now_ms();
        let middle_ms = sent_ms.saturating_add(received_ms.saturating_sub(sent_ms) / 2);
        // In i128, so no reading of either clock, however far off, overflows.
        let offset_ms = (i128::from(middle_ms) - i128::from(store_ms))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        self.record_offset(offset_ms);
        Ok(offset_ms)
    }

    /// This clock minus the store's at the last measurement, in ms; `None` before one.
    pub fn clock_offset_ms(&self) -> Option<i64> {
        self.offset_measured.load(Ordering::Acquire).then(|| self.offset_ms.load(Ordering::Acquire))
    }

    /// [`SnowflakeError::ClockSkew`] while the last offset measured is past half the margin with a
    /// leased worker id: one load when it is not (the cached ring checks it on every take).
    pub(crate) fn refuse_while_skewed(&self) -> Result<(), SnowflakeError> {
        if !self.skewed.load(Ordering::Acquire) {
            return Ok(());
        }
        if !self.offset_measured.load(Ordering::Acquire) {
            return Err(SnowflakeError::Unavailable(format!(
                "this node's clock offset from the store is not measured yet (retried every \
                 {CLOCK_OFFSET_PERIOD_MS} ms); with a leased worker id no snowflake id is \
                 issued before it is"
            )));
        }
        Err(SnowflakeError::ClockSkew {
            offset_ms: self.offset_ms.load(Ordering::Acquire),
            margin_ms: self.config.lease_margin_ms,
        })
    }

    /// Publishes a measured offset, and logs when it passes a quarter or half of the margin
    /// (and when it comes back), not at every measurement.
    fn record_offset(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::Release);
        let first = !self.offset_measured.swap(true, Ordering::AcqRel);
        let margin_ms = self.config.lease_margin_ms;
        let off_ms = offset_ms.unsigned_abs();
        let space = &self.config.space;
        let warn = off_ms > margin_ms / 4;
        if warn != self.offset_warned.swap(warn, Ordering::AcqRel) {
            if warn {
                tracing::warn!(%space, offset_ms, margin_ms, "this node's clock is off the store's by more than a quarter of lease_margin_ms; past half of it snowflake ids with a leased worker id are refused. Fix: check the time sync (chrony/ntpd) of this node and of the store");
            } else {
                tracing::info!(%space, offset_ms, margin_ms, "this node's clock is within a quarter of lease_margin_ms of the store's again");
            }
        }
        // Half: two nodes each within half the margin of the store differ by less than the
        // margin, which is what the settling floor counts on.
        let skewed = self.config.worker == WorkerIdSource::Lease && off_ms > margin_ms / 2;
        let was = self.skewed.swap(skewed, Ordering::AcqRel);
        // The first measurement ends the unmeasured state quietly when the clock is within.
        let changed = if first { skewed } else { skewed != was };
        if changed {
            if skewed {
                tracing::error!(%space, offset_ms, margin_ms, "this node's clock is off the store's by more than half of lease_margin_ms: snowflake ids are refused (501 clock_skew) until it is back within. Fix: the time sync of this node or of the store");
            } else {
                tracing::info!(%space, offset_ms, margin_ms, "this node's clock is within half of lease_margin_ms of the store's again: snowflake ids are served");
            }
        }
    }

    /// How many leases this generator has lost. Ids made ahead under a lost lease (the cached
    /// ring's) must be discarded: the row that proved it may have been deleted or restored,
    /// taking the mark that would keep the next owner above them.
    pub(crate) fn lease_losses(&self) -> u64 {
        self.fence.losses()
    }

    /// Installs a renewed or newly acquired lease, answered at `now_ms`, proven until
    /// `fence_ms` (one TTL after it was asked for).
    async fn install_lease(&self, lease: Lease, now_ms: u64, fence_ms: u64) {
        let layout = self.config.layout;
        let changed = {
            let mut state = self.lock();
            let changed = state.holder.worker != lease.worker_id || state.lease.is_none();
            if changed {
                // A new incarnation: start above the previous owner's mark, our own, and the
                // floor above any earlier holder that has not yet learnt it lost the row.
                state.holder.worker = lease.worker_id;
                self.set_floor(&mut state, now_ms);
                let units = layout.to_units(lease.mark.max(state.floor_ms)).unwrap_or(0);
                let floor = layout.pack(units, layout.max_sequence()).unwrap_or(u64::MAX);
                // The mark goes to 0 with it (this worker id's is not written yet); a state
                // that no longer fits the layout leaves the cell stopped (`Exhausted` is
                // then answered by the mark's write, which finds nothing to issue).
                state.holder.spent = !self.cell.begin(&layout, lease.worker_id, floor);
                if state.holder.spent {
                    tracing::error!(space = %self.config.space, worker = lease.worker_id, "the layout's time is spent above this lease's floor; no id is issued");
                }
                tracing::info!(space = %self.config.space, worker = lease.worker_id, "worker lease held again");
            }
            self.fence.install(&mut state, lease, fence_ms);
            changed
        };
        if changed && let Err(error) = self.extend_mark().await {
            tracing::warn!(space = %self.config.space, %error, "time mark not written after a new lease");
        }
    }
}

/// Runs `work` on the generator every `period` until `cancel`, or until the generator is
/// dropped.
async fn every<F, Fut>(
    period: Duration,
    cancel: CancellationToken,
    generator: std::sync::Weak<Snowflake>,
    work: F,
) where
    F: Fn(Arc<Snowflake>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let Some(generator) = generator.upgrade() else { return };
        work(generator).await;
    }
}

impl Drop for Snowflake {
    fn drop(&mut self) {
        self.cancel.cancel();
        // Dropped without `shutdown` (as a crash would end it): no request holds the
        // generator any more and its tasks hold it weakly, so nothing issues from here on.
        self.release_marks();
    }
}

fn need<'a>(
    store: &'a Option<Arc<dyn WorkerStore>>,
    kind: &str,
) -> Result<&'a Arc<dyn WorkerStore>, SnowflakeError> {
    store.as_ref().ok_or_else(|| {
        SnowflakeError::Config(format!(
            "worker = \"{kind}\" needs a store; configure one or use a static worker id"
        ))
    })
}

/// How far above its acquisition time a new lease holder starts issuing.
///
/// An earlier holder of the worker id (its row deleted, restored from an older backup, or
/// expired under it while it was cut off) learns it lost the row only at its next store call,
/// and issues until then. But every time mark it persisted was written before this
/// acquisition (a later write finds another holder id, or no row, and fails), each at most
/// `time_window_ms` above its clock at that write, and it never issues past its mark; nor past
/// its fence, its last renewal (also before this acquisition) plus `lease_ttl_ms` (plus the
/// borrowing lead, by which borrowed ids run ahead of the clock). Marks are written at most
/// `time_window_ms` plus the borrowing lead above the clock (`extend_mark` caps them, whatever
/// a cached ring or a floor not yet reached would ask for), and a cached ring hands out ids
/// below its mark even after its fence closed, so the fence does not bound those. So every id
/// it issued lies below `acquired + time_window_ms + lead`, as long as its clock was not ahead
/// of ours by more than `lease_margin_ms`, which is added on top. `acquired` is read when the
/// acquisition answered.
///
/// The margin is enforced, not hoped for: every node measures its clock against the store's
/// at start and every [`CLOCK_OFFSET_PERIOD_MS`] and refuses ids past half of
/// `lease_margin_ms` ([`SnowflakeError::ClockSkew`]), so any two nodes issuing differ by less
/// than the margin. That is what lets the defaults be small (1 s window, 1.5 s margin: a fresh
/// node serves 2.5 s after it leased, [`SETTLE_MS_DEFAULT`]): a larger margin buys tolerance of
/// worse time sync, not safety. A graceful stop does not shorten it: the floor guards against
/// holders this node cannot see, whatever the row says.
pub fn settle_ms(config: &SnowflakeConfig) -> u64 {
    config
        .time_window_ms
        .saturating_add(config.borrow_max_lead_ms.unwrap_or(0))
        .saturating_add(config.lease_margin_ms)
}

fn lease_request(config: &SnowflakeConfig, space: &WorkerSpace, now_ms: u64) -> LeaseRequest {
    LeaseRequest {
        space: space.clone(),
        min_worker: config.worker_ids.map_or(0, |range| range.min()),
        // A wide layout (uid's 22 worker bits) leases from the ids a lease space holds.
        max_worker: config
            .worker_ids
            .map_or(config.layout.max_worker().min(idmint_store::LEASE_WORKER_ID_MAX), |range| {
                range.max()
            }),
        holder: config.holder.clone(),
        ttl_ms: config.lease_ttl_ms,
        margin_ms: config.lease_margin_ms,
        // An id marked further ahead could issue nothing until the clock got there (a clock
        // that once jumped ahead leaves such marks): the store passes it over. Every new
        // holder waits out its floor anyway, and persists its mark one window above it, so a
        // mark up to there (an id a node held a moment ago) costs at most one window more.
        mark_max: now_ms
            .saturating_add(settle_ms(config))
            .saturating_add(config.time_window_ms)
            .saturating_add(config.tolerance_ms),
    }
}

/// The worker id of a StatefulSet pod: the number after the host name's last `-`.
fn ordinal() -> Result<u64, SnowflakeError> {
    ordinal_of(&idmint_store::host_name())
}

/// The number after the last `-` of `host`.
pub(crate) fn ordinal_of(host: &str) -> Result<u64, SnowflakeError> {
    host.rsplit_once('-').and_then(|(_, n)| n.parse::<u64>().ok()).ok_or_else(|| {
        SnowflakeError::Config(format!(
            "worker = \"ordinal\" needs a host name ending in -N (a StatefulSet pod, e.g. ids-3); \
             this host is {host:?}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_statefulset_names() {
        assert_eq!(ordinal_of("ids-0"), Ok(0));
        assert_eq!(ordinal_of("idmint-web-12"), Ok(12));
        assert!(ordinal_of("laptop").is_err());
        assert!(ordinal_of("ids-x").is_err());
    }

    #[test]
    fn worker_id_ranges_parse_and_fit_the_layout() {
        let range = WorkerIdRange::parse("512-1023").expect("range");
        assert_eq!((range.min(), range.max(), range.to_string()), (512, 1023, "512-1023".into()));
        assert!(range.contains(512) && range.contains(1023) && !range.contains(511));
        assert_eq!(WorkerIdRange::parse("7").map(|r| (r.min(), r.max())), Ok((7, 7)));
        for bad in ["", "x", "5-", "-5", "1023-512", "1-2-3", "0x10-20"] {
            assert!(WorkerIdRange::parse(bad).is_err(), "{bad:?}");
        }
        let leaf = Layout::preset("snowflake").expect("preset");
        assert!(range.check(&leaf).is_ok());
        let wide = WorkerIdRange::parse("512-1024").expect("range");
        let refused = wide.check(&leaf).unwrap_err();
        assert!(refused.contains("10 worker bits"), "{refused}");
    }

    /// uid-generator's 22 worker bits hold more ids than a lease space: without a range the
    /// lease comes from the ids a lease space holds (the store refuses anything wider).
    #[test]
    fn a_wide_layout_leases_within_a_lease_space() {
        let space = WorkerSpace::parse("ids").expect("space");
        let uid = SnowflakeConfig::new("uid", Layout::preset("uid").expect("preset"));
        assert!(uid.layout.max_worker() > idmint_store::LEASE_WORKER_ID_MAX);
        let request = lease_request(&uid, &space, 0);
        assert_eq!(request.max_worker, idmint_store::LEASE_WORKER_ID_MAX);
        let leaf = SnowflakeConfig::new("leaf", Layout::preset("snowflake").expect("preset"));
        assert_eq!(lease_request(&leaf, &space, 0).max_worker, 1023);
    }
}
