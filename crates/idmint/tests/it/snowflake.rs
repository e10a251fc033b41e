//! The snowflake generator on an injected clock: steps back waited out or refused, a restart
//! with the clock behind never repeating an id, leased worker ids distinct per node, fencing
//! when a lease cannot be renewed, and 2 nodes × 2 threads × 1 000 000 ids unique.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use idmint::Snowflake;
use idmint::clock::{Clock, ManualClock, SystemClock};
use idmint::snowflake::{SnowflakeConfig, SnowflakeError, WorkerIdRange, WorkerIdSource};
use idmint::store::{MemoryStore, StoreError};
use idmint_core::snowflake::Layout;
use idmint_store::{
    AssignRequest, Lease, LeaseRecord, LeaseRequest, LeaseStore, WorkerSpace, WorkerStore,
};

fn layout() -> Layout {
    Layout::preset("snowflake").unwrap()
}

/// The preset with a 1 s time window and a 1 s lease margin: a new lease holder waits 2 s of
/// the manual clock (see [`idmint::snowflake::settle_ms`]), well inside the 10 s TTL, so tests that
/// advance the clock past it need no renewal to run meanwhile.
fn config() -> SnowflakeConfig {
    let mut config = SnowflakeConfig::new("snowflake", layout());
    config.time_window_ms = 1_000;
    config.lease_margin_ms = 1_000;
    config
}

/// [`config`] with a 100 ms window and margin: a new holder waits 200 ms (for the real clock).
fn fast() -> SnowflakeConfig {
    let mut config = config();
    config.time_window_ms = 100;
    config.lease_margin_ms = 100;
    config
}

/// [`fast`] with a 300 ms TTL: renewals every 100 ms of real time.
fn quick() -> SnowflakeConfig {
    let mut config = fast();
    config.lease_ttl_ms = 300;
    config
}

/// Starts a generator on the manual clock; with a leased worker id, advances the clock until
/// it can issue (past the new lease holder's floor).
async fn start(
    store: &Arc<dyn WorkerStore>,
    config: SnowflakeConfig,
    clock: &Arc<ManualClock>,
) -> Arc<Snowflake> {
    let leased = config.worker == WorkerIdSource::Lease;
    let generator =
        Snowflake::start(Some(Arc::clone(store)), config, Arc::clone(clock) as Arc<dyn Clock>)
            .await
            .unwrap();
    if leased {
        advance_until_ready(&generator, clock).await;
    }
    generator
}

/// Waits (real time, bounded) until `generator` on the system clock can issue.
async fn until_ready(generator: &Snowflake) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(error) = generator.readiness() {
        assert!(std::time::Instant::now() < deadline, "never ready: {error}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn time_ms(generator: &Snowflake, id: u64) -> u64 {
    generator.decode(id).unwrap().timestamp_ms
}

#[tokio::test]
async fn a_small_step_back_is_waited_out_and_a_large_one_refused() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let generator = start(&store, config(), &clock).await;
    let first = generator.next_id().await.unwrap();
    let last_ms = time_ms(&generator, first);

    // 5 ms back, within the 10 ms tolerance: nothing is issued until the clock is past the
    // last id's time, then ids continue above it.
    clock.step_back(5);
    assert_eq!(generator.try_next_id(), Ok(None), "a step back within tolerance waits");
    clock.advance(5);
    let second = generator.try_next_id().unwrap().unwrap();
    assert!(second > first);

    // 10 s back: refused with a typed error, counted; never an id at or below the last.
    clock.step_back(10_000);
    match generator.try_next_id() {
        Err(SnowflakeError::ClockBehind { behind_ms, tolerance_ms: 10 }) => {
            assert!((9_999..=10_001).contains(&behind_ms), "{behind_ms}")
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(generator.next_id().await.is_err());
    assert!(generator.status().rollbacks >= 2);
    clock.advance(10_001);
    let third = generator.next_id().await.unwrap();
    assert!(third > second && time_ms(&generator, third) > last_ms);
    generator.shutdown().await;
}

#[tokio::test]
async fn a_restart_with_the_clock_behind_never_repeats_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let mut cfg = config();
    cfg.state_dir = Some(dir.path().to_path_buf());
    cfg.worker = WorkerIdSource::Static(7);
    let before = start(&store, cfg.clone(), &clock).await;
    let mut issued = Vec::new();
    for _ in 0..1_000 {
        issued.push(before.next_id().await.unwrap());
        clock.advance(1);
    }
    let highest = *issued.last().unwrap();
    // kill -9: no shutdown, the marks stay as written; the lock goes with the process.
    drop(before);

    // Restarted with the clock 10 s behind: refused until the clock passes the mark, then
    // every id lies above everything issued before.
    clock.step_back(10_000);
    let after = start(&store, cfg, &clock).await;
    assert!(matches!(after.try_next_id(), Err(SnowflakeError::ClockBehind { .. })));
    clock.advance(10_000 + idmint::snowflake::limits::TIME_WINDOW_MS_DEFAULT + 1);
    let next = after.next_id().await.unwrap();
    assert!(next > highest, "{next} after {highest}");
}

/// The time-mark file cannot be written (a directory takes its temporary file's name, as a
/// full disk would fail the write) while the clock passes the mark: ids stop with a
/// retryable error at the mark on disk, also when asked again at the same instant (a retry
/// must write the mark, not find it "already there" in memory), and resume once writes work.
#[tokio::test]
async fn ids_stop_at_the_time_mark_on_disk_while_it_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let mut cfg = config();
    cfg.state_dir = Some(dir.path().to_path_buf());
    cfg.worker = WorkerIdSource::Static(7);
    let generator = start(&store, cfg, &clock).await;
    generator.next_id().await.unwrap();
    let blocker = dir.path().join(format!("{}.tmp", idmint::snowflake::TIME_MARK_FILE));
    std::fs::create_dir(&blocker).unwrap();
    clock.advance(idmint::snowflake::limits::TIME_WINDOW_MS_DEFAULT + 1);
    for attempt in 0..3 {
        match generator.next_id().await {
            Err(SnowflakeError::Unavailable(reason)) => {
                assert!(reason.contains(idmint::snowflake::TIME_MARK_FILE), "{reason}");
            }
            other => panic!("attempt {attempt}: past the mark on disk: {other:?}"),
        }
    }
    std::fs::remove_dir(&blocker).unwrap();
    let id = generator.next_id().await.unwrap();
    let text = std::fs::read_to_string(dir.path().join(idmint::snowflake::TIME_MARK_FILE)).unwrap();
    let mark_ms: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("snowflake.w7 "))
        .and_then(|m| m.parse().ok())
        .unwrap();
    assert!(
        time_ms(&generator, id) <= mark_ms,
        "{} above the mark {mark_ms}",
        time_ms(&generator, id)
    );
}

#[tokio::test]
async fn two_nodes_on_one_store_lease_different_worker_ids() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let one = start(&store, config(), &clock).await;
    let two = start(&store, config(), &clock).await;
    assert_ne!(one.status().worker, two.status().worker);
    let (a, b) = (one.next_id().await.unwrap(), two.next_id().await.unwrap());
    assert_ne!(one.decode(a).unwrap().worker, two.decode(b).unwrap().worker);
}

/// A worker store whose renewals can be made to fail (the database unreachable), and whose
/// acquisitions may take `acquire_delay_ms` of a manual clock (a slow database).
struct Flaky {
    inner: MemoryStore,
    renewals_fail: AtomicBool,
    slow: Option<(Arc<ManualClock>, u64)>,
    /// The store's clock cannot be read (its offset is not measured).
    now_fails: AtomicBool,
}

#[async_trait]
impl LeaseStore for Flaky {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        if let Some((clock, delay_ms)) = &self.slow {
            clock.advance(*delay_ms);
        }
        self.inner.acquire_lease(req).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: u64) -> Result<Lease, StoreError> {
        if self.renewals_fail.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("switched off".into()));
        }
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release_lease(lease).await
    }
    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        self.inner.raise_mark(lease, mark_ms).await
    }
    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        self.inner.list_leases(space).await
    }
    async fn now_ms(&self) -> Result<u64, StoreError> {
        if self.now_fails.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("switched off".into()));
        }
        self.inner.now_ms().await
    }
}

#[async_trait]
impl WorkerStore for Flaky {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        self.inner.assign_worker(req).await
    }
}

/// The settling floor counts on the lease margin, which the offset check enforces: with a
/// leased worker id, no id goes out before the clock's offset from the store was measured
/// once (503, retried), however long the floor has passed.
#[tokio::test]
async fn no_leased_id_before_the_clock_offset_is_measured() {
    let clock = Arc::new(ManualClock::at_system_time());
    let flaky = Arc::new(Flaky {
        inner: MemoryStore::with_clock(clock.clone()),
        renewals_fail: AtomicBool::new(false),
        slow: None,
        now_fails: AtomicBool::new(true),
    });
    let store: Arc<dyn WorkerStore> = flaky.clone();
    let generator = Snowflake::start(Some(store), config(), Arc::clone(&clock) as Arc<dyn Clock>)
        .await
        .unwrap();
    clock.advance(idmint::snowflake::settle_ms(&config()) + 1_000);
    let refused = generator.next_id().await.unwrap_err();
    assert!(matches!(refused, SnowflakeError::Unavailable(_)), "{refused:?}");
    assert!(refused.to_string().contains("not measured yet"), "{refused}");
    assert!(generator.readiness().is_err());
    flaky.now_fails.store(false, Ordering::SeqCst);
    generator.measure_clock_offset().await.unwrap();
    assert!(generator.next_id().await.is_ok());
    assert_eq!(generator.readiness(), Ok(()));
}

#[tokio::test]
async fn a_node_that_cannot_renew_its_lease_stops_before_it_expires() {
    let clock = Arc::new(ManualClock::at_system_time());
    let flaky = Arc::new(Flaky {
        inner: MemoryStore::with_clock(clock.clone()),
        renewals_fail: AtomicBool::new(true),
        slow: None,
        now_fails: AtomicBool::new(false),
    });
    let store: Arc<dyn WorkerStore> = flaky.clone();
    let mut cfg = config();
    cfg.lease_ttl_ms = 1_000;
    cfg.time_window_ms = 100;
    cfg.lease_margin_ms = 100;
    let generator = start(&store, cfg, &clock).await;
    let until = generator.status().lease_until_ms.unwrap();
    assert!(generator.next_id().await.is_ok());
    // The lease is proven up to its expiry and not a millisecond longer.
    clock.set(until - 1);
    assert!(generator.try_next_id().is_ok());
    clock.set(until);
    assert!(matches!(generator.try_next_id(), Err(SnowflakeError::LeaseNotProven { .. })));
    // Another node may take the id only after the margin: ours is refused before it.
    let other =
        Snowflake::start(Some(Arc::clone(&store)), config(), Arc::clone(&clock) as Arc<dyn Clock>)
            .await
            .unwrap();
    assert_ne!(other.status().worker, generator.status().worker, "taken before the margin");
    flaky.renewals_fail.store(false, Ordering::SeqCst);
}

#[test]
fn two_nodes_two_threads_a_million_ids_each_unique() {
    const PER_THREAD: usize = 1_000_000;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::new());
    let nodes: Vec<Arc<Snowflake>> = (0..2)
        .map(|_| {
            runtime.block_on(async {
                let node =
                    Snowflake::start(Some(Arc::clone(&store)), fast(), Arc::new(SystemClock))
                        .await
                        .unwrap();
                until_ready(&node).await;
                node
            })
        })
        .collect();
    let threads: Vec<_> = nodes
        .iter()
        .flat_map(|node| [Arc::clone(node), Arc::clone(node)])
        .map(|node| {
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(PER_THREAD);
                while ids.len() < PER_THREAD {
                    match node.try_next_id() {
                        Ok(Some(id)) => ids.push(id),
                        Ok(None) => std::thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
                ids
            })
        })
        .collect();
    let mut seen = HashSet::with_capacity(4 * PER_THREAD);
    for thread in threads {
        let ids = thread.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a thread's ids went back");
        for id in ids {
            assert!(seen.insert(id), "id {id} twice");
        }
    }
    assert_eq!(seen.len(), 4 * PER_THREAD);
}

#[test]
fn the_cached_generator_hands_out_seven_million_unique_ids_to_four_threads() {
    const PER_THREAD: usize = 1_750_000;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::new());
    let cached = runtime.block_on(async {
        let generator = Snowflake::start(Some(store), fast(), Arc::new(SystemClock)).await.unwrap();
        until_ready(&generator).await;
        idmint::CachedSnowflake::start(
            generator,
            idmint::snowflake::limits::CACHED_RING_CAPACITY_DEFAULT,
            10_000,
        )
        .unwrap()
    });
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let cached = Arc::clone(&cached);
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(PER_THREAD);
                while ids.len() < PER_THREAD {
                    ids.push(cached.take().unwrap().expect("a take was rejected"));
                }
                ids
            })
        })
        .collect();
    let mut seen = HashSet::with_capacity(4 * PER_THREAD);
    for thread in threads {
        for id in thread.join().unwrap() {
            assert!(seen.insert(id), "id {id} twice");
        }
    }
    assert_eq!(seen.len(), 7_000_000);
    assert_eq!(cached.rejected(), 0);
}

#[tokio::test]
async fn the_cached_ring_borrows_no_further_than_its_lead_then_refuses() {
    // The clock stands still: the ring may borrow at most 5 ms ahead of it, then a take
    // waits TAKE_WAIT_MS_MAX for borrowing to resume and is refused, counted.
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let generator = start(&store, config(), &clock).await;
    let cached = idmint::CachedSnowflake::start(Arc::clone(&generator), 4_096, 5).unwrap();
    let unit_ids = layout().max_sequence() + 1;
    let mut taken = Vec::new();
    let refused = loop {
        match cached.next_ids(unit_ids).await {
            Ok(ids) => taken.extend(ids),
            Err(error) => break error,
        }
        assert!(taken.len() as u64 <= 10 * unit_ids, "borrowing ran past the lead");
    };
    assert!(matches!(refused, SnowflakeError::Unavailable(_)), "{refused}");
    assert_eq!(cached.rejected(), 1);
    let now = clock.now_ms();
    let latest = taken.iter().map(|&id| time_ms(&generator, id)).max().unwrap();
    assert!(latest <= now + 5, "an id at {latest} is more than 5 ms ahead of {now}");
    assert!(taken.len() as u64 >= 5 * unit_ids, "{} ids before the lead stopped", taken.len());
    // Time moves on: borrowing resumes above everything taken.
    clock.advance(1_000);
    let next = cached.next_ids(1).await.unwrap()[0];
    assert!(taken.iter().all(|&id| id < next));
    // A ring that cannot hold one unit, or leads too far, is refused with the fix.
    let small = idmint::CachedSnowflake::start(Arc::clone(&generator), 1_024, 5).unwrap_err();
    assert!(small.to_string().contains("at least 4096"), "{small}");
    let far = idmint::CachedSnowflake::start(Arc::clone(&generator), 4_096, 60_000).unwrap_err();
    assert!(far.to_string().contains("above 10000 ms"), "{far}");
}

/// The lease rows are deleted under a live node A (by hand, or a restore that predates
/// them) and node B starts at once: B claims the same worker id afresh, with the same token A
/// had. A learns at its next store call that the row is no longer its own (its holder id
/// differs), closes its fence at once and refuses; from then on only B issues ids under that
/// worker id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_lease_rows_are_deleted_two_nodes_never_both_issue() {
    let clock = Arc::new(ManualClock::at_system_time());
    let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
    let store: Arc<dyn WorkerStore> = memory.clone();
    // Renewals every 100 ms of real time, so the test need not wait long for A's next call.
    let cfg = quick();
    let a = start(&store, cfg.clone(), &clock).await;
    a.next_id().await.unwrap();
    memory.delete_worker_rows(&WorkerSpace::parse("snowflake").unwrap());
    // B keeps the default TTL: the manual clock jumps past its floor faster than renewals of
    // real time could follow a 300 ms TTL.
    let b =
        Snowflake::start(Some(Arc::clone(&store)), fast(), Arc::clone(&clock) as Arc<dyn Clock>)
            .await
            .unwrap();
    assert!(
        matches!(b.try_next_id(), Err(SnowflakeError::LeaseSettling { .. })),
        "B issued below A's possible ids"
    );
    assert_eq!(a.status().worker, b.status().worker, "B must claim A's worker id afresh");

    // A's renewal (every 100 ms) or mark raise finds another holder's row.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while a.try_next_id().is_ok() {
        assert!(std::time::Instant::now() < deadline, "A still issues under B's worker id");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    advance_until_ready(&b, &clock).await;
    for _ in 0..50 {
        clock.advance(1);
        // `next_id`, not `try_next_id`, for B: it writes the marks its ids need (a mark is
        // never written more than a window ahead of the clock, and this clock runs fast).
        let issued = (a.try_next_id(), b.next_id().await);
        assert!(
            matches!(issued.0, Err(SnowflakeError::LeaseNotProven { .. })),
            "A issued after it learnt: {issued:?}"
        );
        assert!(issued.1.is_ok(), "B stopped: {issued:?}");
    }
}

/// A node's clock jumps a day ahead, the node persists a mark there, the clock is corrected
/// and the node stops: its worker id keeps a mark a day ahead. A restart leases another
/// worker id, one not marked ahead, and issues at once; the generator that held the day-ahead
/// mark reports why it cannot issue.
#[tokio::test]
async fn a_restart_after_the_clock_jumped_ahead_leases_a_worker_id_it_can_use() {
    const DAY_MS: u64 = 86_400_000;
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    // Renewals every 100 ms of real time: one happens while the clock is a day ahead.
    let cfg = quick();
    let jumped = start(&store, cfg.clone(), &clock).await;
    jumped.next_id().await.unwrap();
    clock.advance(DAY_MS);
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // The renewal found the lease expired and leased the id again: a new floor to wait out.
    advance_until_ready(&jumped, &clock).await;
    jumped.next_id().await.unwrap();
    clock.step_back(DAY_MS);
    match jumped.readiness() {
        Err(SnowflakeError::ClockBehind { behind_ms, .. }) => assert!(behind_ms >= DAY_MS - 1),
        other => panic!("a generator a day ahead of its clock is ready: {other:?}"),
    }
    let worker = jumped.status().worker;
    jumped.shutdown().await;
    clock.advance(cfg.lease_margin_ms + 1);

    let restarted = start(&store, cfg, &clock).await;
    assert_ne!(restarted.status().worker, worker, "leased the id marked a day ahead again");
    assert_eq!(restarted.readiness(), Ok(()));
    restarted.next_id().await.unwrap();
}

/// A cached node whose lease rows are deleted while its ring is full: once it learns that the
/// lease is lost, the ring's pre-made ids (made under a worker id another node now holds
/// afresh, below where that node starts) are discarded, and takes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_ring_hands_out_nothing_after_its_lease_is_lost() {
    let clock = Arc::new(ManualClock::at_system_time());
    let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
    let store: Arc<dyn WorkerStore> = memory.clone();
    let cfg = quick();
    let a = start(&store, cfg.clone(), &clock).await;
    let ring = idmint::CachedSnowflake::start(Arc::clone(&a), 1 << 14, 5_000).unwrap();
    ring.next_ids(10).await.unwrap();
    memory.delete_worker_rows(&WorkerSpace::parse("snowflake").unwrap());
    // B keeps the default TTL: the manual clock jumps past its floor faster than renewals of
    // real time could follow a 300 ms TTL.
    let b =
        Snowflake::start(Some(Arc::clone(&store)), fast(), Arc::clone(&clock) as Arc<dyn Clock>)
            .await
            .unwrap();
    assert_eq!(a.status().worker, b.status().worker);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while a.readiness().is_ok() {
        assert!(std::time::Instant::now() < deadline, "A never learnt its lease was lost");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let taken = ring.take();
    assert!(!matches!(taken, Ok(Some(_))), "the ring handed out {taken:?} after the loss");
    assert!(ring.next_ids(1).await.is_err());
}

/// Node A holds a worker id and issues; its lease rows are deleted; node B leases the same
/// id afresh while A, which has not yet made a store call, keeps issuing until its next one.
/// B must start above every id A could have issued: no id repeats, and every id of B's lies
/// later in time than every id of A's under that worker id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_holder_after_the_rows_were_deleted_starts_above_the_old_holders_ids() {
    let clock = Arc::new(ManualClock::at_system_time());
    let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
    let store: Arc<dyn WorkerStore> = memory.clone();
    let a = start(&store, config(), &clock).await;
    a.next_id().await.unwrap();
    memory.delete_worker_rows(&WorkerSpace::parse("snowflake").unwrap());
    overlap_check(&a, &store, &clock).await;
}

/// As above, but the rows come back from an older backup (an earlier holder's released row
/// with its lower mark) instead of vanishing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_holder_after_an_older_snapshot_was_restored_starts_above_the_old_holders_ids() {
    let clock = Arc::new(ManualClock::at_system_time());
    let memory = Arc::new(MemoryStore::with_clock(clock.clone()));
    let store: Arc<dyn WorkerStore> = memory.clone();
    let earlier = start(&store, config(), &clock).await;
    earlier.next_id().await.unwrap();
    earlier.shutdown().await;
    let older = memory.snapshot_worker_rows();
    clock.advance(config().lease_margin_ms + 1);
    let a = start(&store, config(), &clock).await;
    assert_eq!(a.status().worker, 0, "A must take the released worker id");
    a.next_id().await.unwrap();
    memory.restore_worker_rows(&older);
    overlap_check(&a, &store, &clock).await;
}

/// Advances `clock` a millisecond at a time until `generator` can issue at once (bounded):
/// ready, and past the tolerance within which it would wait.
async fn advance_until_ready(generator: &Snowflake, clock: &ManualClock) {
    for _ in 0..60_000 {
        if generator.readiness().is_ok() {
            clock.advance(idmint::snowflake::limits::TOLERANCE_MS_DEFAULT + 1);
            return;
        }
        clock.advance(1);
    }
    panic!("never ready: {:?}", generator.readiness());
}

/// Starts B on `store` (A's rows are gone or older), then lets both issue a millisecond at a
/// time until B has issued for a while, and checks the ids of both under the worker id.
async fn overlap_check(a: &Arc<Snowflake>, store: &Arc<dyn WorkerStore>, clock: &Arc<ManualClock>) {
    let b =
        Snowflake::start(Some(Arc::clone(store)), config(), Arc::clone(clock) as Arc<dyn Clock>)
            .await
            .unwrap();
    assert_eq!(a.status().worker, b.status().worker, "B must claim A's worker id afresh");
    let (mut ids_a, mut ids_b) = (Vec::new(), Vec::new());
    let mut a_stopped = false;
    let mut b_issued_ms = 0;
    let cfg = config();
    let steps = cfg.time_window_ms + cfg.lease_margin_ms + 500;
    for _ in 0..steps {
        clock.advance(1);
        if !a_stopped {
            match a.next_id().await {
                Ok(id) => ids_a.push(id),
                Err(_) => a_stopped = true,
            }
        }
        // Before its floor B refuses; after it, `next_id` writes the marks B's ids need.
        if let Ok(id) = b.next_id().await {
            ids_b.push(id);
            b_issued_ms += 1;
        }
    }
    assert!(b_issued_ms > 100, "B never issued after the floor passed");
    assert!(a_stopped, "A never learnt its lease was lost");
    let all: HashSet<u64> = ids_a.iter().chain(&ids_b).copied().collect();
    assert_eq!(all.len(), ids_a.len() + ids_b.len(), "an id was issued by both A and B");
    let last_a = ids_a.iter().map(|&id| time_ms(a, id)).max().unwrap();
    let first_b = ids_b.iter().map(|&id| time_ms(&b, id)).min().unwrap();
    assert!(first_b > last_a, "B issued at {first_b} ms, at or below A's last id at {last_a} ms");
}

/// Item 6 passes over worker ids marked ahead of the clock; a new holder's floor leaves its
/// mark ahead by up to the start-up delay and one window. Quick restarts (each a clean stop
/// and a start 500 ms later) must still find an id every time, reusing a few ids rather than
/// walking through the space; and an id a node held a moment ago, free again after the
/// margin, is leased again although its mark is still ahead of the clock (the window is
/// longer than the margin here, so it is).
#[tokio::test]
async fn quick_restarts_find_a_worker_id_and_retake_the_one_just_held() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let mut cfg = config();
    cfg.time_window_ms = 3_000;
    cfg.lease_margin_ms = 1_000;
    let mut used = HashSet::new();
    for _ in 0..30 {
        let node = start(&store, cfg.clone(), &clock).await;
        node.next_id().await.unwrap();
        used.insert(node.status().worker);
        node.shutdown().await;
        clock.advance(500);
    }
    assert!(used.len() <= 4, "quick restarts walked through worker ids {used:?}");

    let held = start(&store, cfg.clone(), &clock).await;
    held.next_id().await.unwrap();
    let worker = held.status().worker;
    held.shutdown().await;
    clock.advance(cfg.lease_margin_ms + 1);
    let status = store.list_leases(&WorkerSpace::parse("snowflake").unwrap()).await.unwrap();
    let mark = status.iter().find(|r| r.worker_id == worker).unwrap().mark;
    assert!(
        mark > clock.now_ms() + idmint::snowflake::limits::TOLERANCE_MS_DEFAULT,
        "the mark is not ahead"
    );
    let again = start(&store, cfg, &clock).await;
    assert_eq!(again.status().worker, 0, "the lowest id, just held, was passed over");
    assert_eq!(worker, 0);
}

/// A cached ring on a worker id just leased holds no id at or below the new holder's floor:
/// with a lead shorter than the start-up delay it hands out nothing at first, and once the
/// clock is within the lead of the floor every id it hands out lies above the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_ring_fills_nothing_below_a_new_holders_floor() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let acquired_ms = clock.now_ms();
    let generator = Snowflake::start(Some(store), config(), Arc::clone(&clock) as Arc<dyn Clock>)
        .await
        .unwrap();
    let floor_ms = acquired_ms + idmint::snowflake::settle_ms(&config());
    let ring = idmint::CachedSnowflake::start(Arc::clone(&generator), 1 << 14, 1_000).unwrap();
    assert!(!matches!(ring.take(), Ok(Some(_))), "the ring handed out an id below the floor");
    clock.advance(floor_ms - acquired_ms - 500);
    let ids = ring.next_ids(1_000).await.unwrap();
    let lowest = ids.iter().map(|&id| time_ms(&generator, id)).min().unwrap();
    assert!(lowest > floor_ms, "an id at {lowest} ms, at or below the floor {floor_ms} ms");
}

/// A holder that lost its row unseen may issue up to the last mark it wrote, so a new holder's
/// floor (`settle_ms`) counts on every mark lying at most `time_window_ms` (plus the borrowing
/// lead) above the writer's clock. Neither a fresh holder still below its own floor nor a
/// cached ring allowed to run 10 s ahead may write one further: the review of issue 20 found
/// both did (`max(now, last) + window`), so an old holder could issue above a new one's floor.
#[tokio::test]
async fn no_time_mark_is_written_further_ahead_than_the_window_and_the_lead() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let window_ms = config().time_window_ms;
    let space = idmint_store::WorkerSpace::parse("snowflake").unwrap();
    let marked_ms = |store: Arc<dyn WorkerStore>| {
        let space = space.clone();
        async move { store.list_leases(&space).await.unwrap()[0].mark }
    };
    // Below its own floor, a fresh holder's marks stay within a window of the clock.
    let generator =
        Snowflake::start(Some(Arc::clone(&store)), config(), Arc::clone(&clock) as Arc<dyn Clock>)
            .await
            .unwrap();
    let now = clock.now_ms();
    let mark = marked_ms(Arc::clone(&store)).await;
    assert!(mark <= now + window_ms, "a mark at {mark} ms, more than a window above {now} ms");
    advance_until_ready(&generator, &clock).await;
    // A ring allowed 10 s of lead, the clock standing still: it fills no further than the
    // mark, and the mark stays within a window of the clock.
    let ring = idmint::CachedSnowflake::start(Arc::clone(&generator), 1 << 14, 10_000).unwrap();
    let now = clock.now_ms();
    let mut latest = 0;
    for _ in 0..400 {
        match ring.next_ids(4_096).await {
            Ok(ids) => latest = latest.max(time_ms(&generator, *ids.last().unwrap())),
            Err(_) => break,
        }
    }
    let mark = marked_ms(Arc::clone(&store)).await;
    assert!(
        mark <= now + window_ms,
        "the ring's mark at {mark} ms, more than a window above {now} ms"
    );
    assert!(latest <= now + window_ms, "a ring id at {latest} ms, above {now} ms + the window");
    assert!(latest > now, "the ring borrowed nothing ahead of the clock");
}

/// An earlier holder may write marks until the new row exists, which is when the acquisition
/// answers, not when it was asked: a slow store (here 1.5 s of the 2 s delay) must not eat
/// into the floor, or the margin for clock skew shrinks by as much.
#[tokio::test]
async fn a_new_holders_floor_counts_from_when_the_store_answered() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(Flaky {
        inner: MemoryStore::with_clock(clock.clone()),
        renewals_fail: AtomicBool::new(false),
        slow: Some((Arc::clone(&clock), 1_500)),
        now_fails: AtomicBool::new(false),
    });
    let generator = Snowflake::start(Some(store), config(), Arc::clone(&clock) as Arc<dyn Clock>)
        .await
        .unwrap();
    let answered_ms = clock.now_ms();
    // Within the tolerance of the floor a request waits, so readiness counts that as ready.
    let before_floor_ms = idmint::snowflake::settle_ms(&config())
        - idmint::snowflake::limits::TOLERANCE_MS_DEFAULT
        - 1;
    clock.advance(before_floor_ms);
    assert!(
        generator.readiness().is_err(),
        "ready {before_floor_ms} ms after the acquisition answered, before the floor"
    );
    advance_until_ready(&generator, &clock).await;
    let first = time_ms(&generator, generator.next_id().await.unwrap());
    assert!(first > answered_ms + idmint::snowflake::settle_ms(&config()), "an id at {first} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_shut_down_hands_out_nothing_more() {
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::new());
    let generator = Snowflake::start(Some(store), fast(), Arc::new(SystemClock)).await.unwrap();
    until_ready(&generator).await;
    let cached = idmint::CachedSnowflake::start(Arc::clone(&generator), 4_096, 10_000).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cached.len() < 2_048 {
        assert!(std::time::Instant::now() < deadline, "the ring never filled");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cached.shutdown().await;
    // The ring's ids were made under the lease the generator's shutdown gives up next: none
    // is handed out once the ring is closed, by either take.
    assert_eq!(cached.len(), 0, "pre-made ids kept after the shutdown");
    assert!(matches!(cached.take(), Err(SnowflakeError::Unavailable(_))));
    assert!(matches!(cached.next_ids(10).await, Err(SnowflakeError::Unavailable(_))));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(cached.len(), 0, "the filler put ids after the shutdown");
    generator.shutdown().await;
    assert!(cached.take().is_err());
}

/// `snowflake.worker_ids` (Leaf or uid-generator nodes beside idmint): four generators with
/// the range 1020-1023 lease its four ids and issue ids whose worker part is theirs; a fifth
/// is refused with "no worker id left in range"; a static id outside the range is refused at
/// start; a range wider than the layout's worker bits is refused with the reason.
#[tokio::test]
async fn generators_with_a_worker_range_stay_inside_it() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let range = WorkerIdRange::parse("1020-1023").unwrap();
    let ranged = || SnowflakeConfig { worker_ids: Some(range), ..config() };
    let mut generators = Vec::new();
    for _ in 0..4 {
        generators.push(start(&store, ranged(), &clock).await);
    }
    let mut workers = HashSet::new();
    for generator in &generators {
        let id = generator.next_id().await.unwrap();
        let worker = layout().decode(id).unwrap().worker;
        assert_eq!(worker, generator.status().worker);
        assert!(range.contains(worker), "worker {worker} outside {range}");
        workers.insert(worker);
    }
    assert_eq!(workers, (1020..=1023).collect());
    let dyn_clock = Arc::clone(&clock) as Arc<dyn Clock>;
    let fifth = Snowflake::start(Some(Arc::clone(&store)), ranged(), dyn_clock.clone()).await;
    let Err(refused) = fifth else { panic!("a fifth generator started in a range of four") };
    let refused = refused.to_string();
    assert!(refused.contains("no worker id left in range 1020-1023"), "{refused}");
    let fixed = SnowflakeConfig { worker: WorkerIdSource::Static(7), ..ranged() };
    let refused = Snowflake::start(None, fixed, dyn_clock.clone()).await.err().unwrap();
    assert!(refused.to_string().contains("outside snowflake.worker_ids"), "{refused}");
    let wide =
        SnowflakeConfig { worker_ids: Some(WorkerIdRange::parse("512-1024").unwrap()), ..config() };
    let refused = Snowflake::start(Some(store), wide, dyn_clock).await.err().unwrap();
    assert!(refused.to_string().contains("10 worker bits"), "{refused}");
}

/// A layout before its epoch or past its time would refuse every id: the generator refuses to
/// start with it, naming the dates (issue 22: the `uid` preset ran out in 2024).
#[tokio::test]
async fn a_layout_past_its_time_or_before_its_epoch_does_not_start() {
    let clock = Arc::new(ManualClock::at_system_time());
    let uid = Layout::preset("uid").unwrap();
    let future = uid.with_epoch(clock.now_ms() + 86_400_000).unwrap();
    for (layout, says) in [(uid, "ran out at 2024-11-20"), (future, "after the clock")] {
        let mut config = SnowflakeConfig::new("uid", layout);
        config.worker = WorkerIdSource::Static(0);
        let error =
            Snowflake::start(None, config, Arc::clone(&clock) as Arc<dyn Clock>).await.unwrap_err();
        assert!(matches!(&error, SnowflakeError::Config(m) if m.contains(says)), "{error}");
    }
}

/// Issue 31: a node whose clock runs 60 s fast starts beside a live holder on one store.
/// Whether the holder's lease has expired is the store's to judge by its own clock, so the
/// fast node takes another worker id, and the holder keeps its id and keeps issuing.
#[tokio::test]
async fn a_node_whose_clock_runs_fast_cannot_take_a_live_nodes_lease() {
    let clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let holder = start(&store, config(), &clock).await;
    let before = holder.next_id().await.unwrap();
    let space = WorkerSpace::parse("snowflake").unwrap();
    let held = store.list_leases(&space).await.unwrap();
    let fast_clock = Arc::new(ManualClock::new(clock.now_ms() + 60_000));
    let fast = Snowflake::start(Some(Arc::clone(&store)), config(), fast_clock as Arc<dyn Clock>)
        .await
        .unwrap();
    assert_eq!(holder.status().worker, 0);
    assert_eq!(fast.status().worker, 1, "the fast node took the live holder's worker id");
    let rows = store.list_leases(&space).await.unwrap();
    assert_eq!(rows[0], held[0], "the holder's row changed: {rows:?}");
    assert!(holder.next_id().await.unwrap() > before);
    // The fast node measured its clock 60 s off the store's at start: it refuses its ids.
    assert_eq!(fast.status().clock_offset_ms, Some(60_000));
    assert!(
        matches!(
            fast.readiness(),
            Err(SnowflakeError::ClockSkew { offset_ms: 60_000, margin_ms: 1_000 })
        ),
        "{:?}",
        fast.readiness()
    );
    let refused = fast.next_id().await.unwrap_err();
    assert!(refused.to_string().contains("Fix the time sync"), "{refused}");
}

/// A node's clock drifts 1.5 s ahead of the store's (the lease margin is 1 s): once measured,
/// its snowflake ids and its cached ring's are refused with the offset and the margin, and
/// `/ready` would say so; once the offset is back within the margin they are served again,
/// with no restart. Half the margin is only logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_refused_while_the_clock_is_off_the_stores_past_half_the_margin() {
    let store_clock = Arc::new(ManualClock::at_system_time());
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(store_clock.clone()));
    let clock = Arc::new(ManualClock::new(store_clock.now_ms()));
    let generator = start(&store, config(), &clock).await;
    // `start` moved the node's clock past its floor; the store's follows.
    store_clock.set(clock.now_ms());
    assert_eq!(generator.measure_clock_offset().await.unwrap(), 0);
    // The id first, then the ring: the ring's filler may take every unit up to the clock,
    // which stands still, so a generator's take after it would find no unit left.
    let first = generator.next_id().await.unwrap();
    let ring = idmint::CachedSnowflake::start(Arc::clone(&generator), 1 << 14, 1_000).unwrap();
    ring.next_ids(10).await.unwrap();

    clock.advance(400);
    assert_eq!(generator.measure_clock_offset().await.unwrap(), 400);
    // Asked of the ring: the generator's own next unit may lie past what the ring's filler
    // borrowed ahead of the clock, which stands still here (the generator is asked below,
    // after the ring stops).
    assert_eq!(generator.readiness(), Ok(()), "refused within half the margin");
    let within = ring.next_ids(10).await;
    assert!(within.is_ok(), "refused within half the margin: {within:?}");

    // Past half the margin (not only past the margin): another node may be as far off the
    // other way, and the settling floor counts on two nodes differing by less than it.
    clock.advance(200);
    assert_eq!(generator.measure_clock_offset().await.unwrap(), 600);
    let skew = SnowflakeError::ClockSkew { offset_ms: 600, margin_ms: 1_000 };
    assert_eq!(generator.next_id().await, Err(skew.clone()));
    assert_eq!(generator.readiness(), Err(skew.clone()));
    assert_eq!(ring.take(), Err(skew.clone()));
    assert_eq!(ring.next_ids(1).await, Err(skew));
    assert_eq!(generator.status().clock_offset_ms, Some(600));

    store_clock.advance(600);
    assert_eq!(generator.measure_clock_offset().await.unwrap(), 0);
    assert!(ring.next_ids(10).await.is_ok());
    assert_eq!(generator.readiness(), Ok(()));
    // Served again by the generator too. The ring's filler may have borrowed every unit up to
    // its lead ahead of the clock, which stands still here: once the ring stops, both clocks
    // pass that lead (the offset stays 0) and the generator issues above it.
    ring.shutdown().await;
    clock.advance(1_001);
    store_clock.advance(1_001);
    assert_eq!(generator.measure_clock_offset().await.unwrap(), 0);
    assert!(generator.next_id().await.unwrap() > first);
}
