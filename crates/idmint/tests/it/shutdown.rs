//! Shutdown without waste: the unissued tail of the last range goes back to the store with a
//! compare-and-set, an allocation by another node makes that a no-op, a frozen generator
//! hands out nothing, and ten restarts in a row waste less than one step.
//!
//! The store's `max_id` is asserted exactly: one id too high is waste, one too low would let
//! the next node repeat an id.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idmint::segment::{Count, HIGH_WATER_FILE, SegmentConfig};
use idmint::{Error, Segments, Tag};
use idmint_store::{RangeStore, SegmentStore, SqliteStore};

use crate::test_store::{Mode, TestStore, create_tag};

/// The tag step of the SQLite tests.
const STEP: u64 = 100_000;

#[tokio::test(start_paused = true)]
async fn shutdown_gives_the_unissued_tail_back_and_the_next_node_continues_there() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite(&dir.path().join("ids.db")).await;
    let tag = create_tag(&*store, "orders", STEP).await;

    // Before the preload point: the rest of the only segment goes back.
    let a = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    assert_eq!(take(&a, &tag, 1_234).await, (1..=1_234).collect::<Vec<u64>>());
    assert_eq!(max_id(&*store, &tag).await, 1 + STEP, "one segment reserved");
    a.shutdown().await;
    assert_eq!(max_id(&*store, &tag).await, 1_235, "max_id is the first unissued id");

    // Past the preload point: the next segment is loaded and goes back with the rest of the
    // current one.
    let b = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    assert_eq!(take(&b, &tag, 20_000).await, (1_235..21_235).collect::<Vec<u64>>());
    let next = wait_for_next(&b, &tag).await;
    assert_eq!(next.start(), 1_235 + STEP);
    assert_eq!(max_id(&*store, &tag).await, next.end(), "two segments reserved");
    b.shutdown().await;
    assert_eq!(max_id(&*store, &tag).await, 21_235);

    let c = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    assert_eq!(c.next_id(&tag).await, Ok(21_235), "the next node continues exactly there");
    c.shutdown().await;
    assert_eq!(max_id(&*store, &tag).await, 21_236);
}

#[tokio::test(start_paused = true)]
async fn a_refill_in_flight_at_shutdown_lands_and_is_given_back() {
    let store = TestStore::new(11);
    let tag = store.create("inflight", 1_000).await;
    // The store reserves at once and answers 200 ms later.
    store.set_mode(Mode::Latency(200));
    let config = SegmentConfig::default().with_adaptive_step(false);
    let segments = Segments::start(store.clone(), config).unwrap();
    // Id 101 crosses the preload point of [1, 1001): the refill starts, but nothing awaits it
    // before the shutdown does.
    assert_eq!(take(&segments, &tag, 150).await, (1..=150).collect::<Vec<u64>>());
    segments.shutdown().await;
    assert_eq!(store.allocations.load(Ordering::SeqCst), 2, "the preload reached the store");
    assert_eq!(
        store.max_id(&tag).await,
        151,
        "the range reserved while the node shut down was given back with the rest"
    );
}

#[tokio::test(start_paused = true)]
async fn an_allocation_by_another_node_makes_the_give_back_a_no_op() {
    let store = TestStore::new(12);
    let tag = store.create("shared", 1_000).await;
    let config = SegmentConfig::default().with_adaptive_step(false);
    let a = Segments::start(store.clone(), config.clone()).unwrap();
    let mut served = take(&a, &tag, 150).await;
    assert_eq!(wait_for_next(&a, &tag).await.start(), 1_001);
    // Another node allocates after A's last allocation.
    let other = RangeStore::allocate(&*store, &tag, None).await.unwrap().range;
    assert_eq!((other.start(), other.end()), (2_001, 3_001));
    a.shutdown().await;
    assert_eq!(store.max_id(&tag).await, 3_001, "the give-back was not refused");

    let b = Segments::start(store.clone(), config).unwrap();
    let ids_b = take(&b, &tag, 10).await;
    assert_eq!(ids_b, (3_001..3_011).collect::<Vec<u64>>());
    served.extend(ids_b);
    served.extend(other.ids());
    assert_unique(served);
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn with_another_nodes_range_in_between_only_the_untouched_next_segment_goes_back() {
    let store = TestStore::new(13);
    let tag = store.create("gap", 1_000).await;
    let config = SegmentConfig::default().with_adaptive_step(false);
    let a = Segments::start(store.clone(), config.clone()).unwrap();
    assert_eq!(take(&a, &tag, 50).await, (1..=50).collect::<Vec<u64>>());
    // Another node takes [1001, 2001) before A preloads.
    let other = RangeStore::allocate(&*store, &tag, None).await.unwrap().range;
    assert_eq!(other.start(), 1_001);
    // A crosses its preload point; its next segment lies above the other node's.
    assert_eq!(take(&a, &tag, 60).await, (51..=110).collect::<Vec<u64>>());
    assert_eq!(wait_for_next(&a, &tag).await.start(), 2_001);
    a.shutdown().await;
    // Ids 111..1001 are A's and stay unused; giving them back would hand [1001, 2001) out
    // a second time. Only A's untouched next segment goes back.
    assert_eq!(store.max_id(&tag).await, 2_001);

    let b = Segments::start(store.clone(), config).unwrap();
    assert_eq!(b.next_id(&tag).await, Ok(2_001));
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn after_the_freeze_every_take_fails_with_shutting_down() {
    let store = TestStore::new(14);
    let tag = store.create("frozen", 1_000).await;
    let untouched = store.create("untouched", 1_000).await;
    let segments = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    // A handle kept from before the shutdown, as embedders do.
    let generator = segments.generator(&tag).unwrap();
    for expected in 1..=10 {
        assert_eq!(generator.next_id().await, Ok(expected));
    }
    assert_eq!(segments.status(&tag).unwrap().remaining, 990, "ids are left to hand out");
    segments.shutdown().await;

    assert_eq!(generator.next_id().await, Err(Error::ShuttingDown));
    assert_eq!(generator.next_ids(Count::new(5).unwrap()).await, Err(Error::ShuttingDown));
    assert_eq!(segments.next_id(&tag).await, Err(Error::ShuttingDown));
    assert_eq!(segments.next_ids(&tag, Count::new(3).unwrap()).await, Err(Error::ShuttingDown));
    assert_eq!(segments.next_id(&untouched).await, Err(Error::ShuttingDown));
    assert_eq!(segments.status(&tag).unwrap().remaining, 0);
    // The ids left were given back, and no refill was started for the refused takes.
    assert_eq!(store.max_id(&tag).await, 11);
    assert_eq!(store.allocations.load(Ordering::SeqCst), 1);
    assert_eq!(store.max_id(&untouched).await, 1, "a tag first asked for after the freeze");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_taken_while_the_node_shuts_down_stay_below_what_it_gives_back() {
    let store = TestStore::new(15);
    let tag = store.create("draining", 1_000).await;
    let segments = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let (segments, tag) = (Arc::clone(&segments), tag.clone());
            tokio::spawn(async move { take_until_shutdown(&segments, &tag, t % 2 == 0).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(30)).await;
    segments.shutdown().await;
    let mut served = Vec::new();
    for task in tasks {
        served.extend(task.await.unwrap());
    }
    let given_back_at = store.max_id(&tag).await;
    assert!(!served.is_empty());
    // Every id acknowledged, even by a take racing the freeze, lies below the first id the
    // store will hand out next.
    let highest = *served.iter().max().unwrap();
    assert!(
        highest < given_back_at,
        "id {highest} served, but the store restarts at {given_back_at}"
    );
    assert_unique(served);

    let next = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    assert_eq!(next.next_id(&tag).await, Ok(given_back_at));
    next.shutdown().await;
}

/// Found while writing these tests, kept failing on purpose: `shutdown()` does not remember
/// that it gave the tail back, so a second call sends the same compare-and-set again. If
/// another node was given exactly the returned range meanwhile, `max_id` is back at the
/// expected value (ABA) and the second give-back lowers the store under that node's ids.
#[tokio::test(start_paused = true)]
async fn a_second_shutdown_gives_nothing_back_again() {
    let store = TestStore::new(16);
    let tag = store.create("twice", 100).await;
    let config = SegmentConfig::default().with_adaptive_step(false);
    let a = Segments::start(store.clone(), config.clone()).unwrap();
    take(&a, &tag, 11).await;
    assert_eq!(wait_for_next(&a, &tag).await.start(), 101);
    take(&a, &tag, 89).await; // [1, 101) spent; [101, 201) untouched
    a.shutdown().await;
    assert_eq!(store.max_id(&tag).await, 101);
    // Another node is given the returned range, as it should be.
    let other = RangeStore::allocate(&*store, &tag, None).await.unwrap().range;
    assert_eq!((other.start(), other.end()), (101, 201));
    a.shutdown().await;
    assert_eq!(store.max_id(&tag).await, 201, "the second shutdown lowered the store again");
    let c = Segments::start(store.clone(), config).unwrap();
    let id = c.next_id(&tag).await.unwrap();
    assert!(!other.ids().contains(&id), "id {id} is the other node's");
    c.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn ten_restarts_waste_less_than_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let (db, state_dir) = (dir.path().join("ids.db"), dir.path().join("state"));
    let tag = create_tag(&*sqlite(&db).await, "restarts", STEP).await;
    let mut rng = Rng(0x5eed_0001);
    let (mut taken, mut last) = (0u64, 0u64);
    for run in 0..10 {
        let store = sqlite(&db).await;
        let config = SegmentConfig::default().with_state_dir(&state_dir);
        let segments = Segments::start(store.clone(), config).unwrap();
        // Three shapes of run: a few ids (under the preload point), enough to preload the
        // next segment, and enough to span several segments.
        let wanted = match run % 3 {
            0 => 1 + rng.below(9_000),
            1 => 10_500 + rng.below(80_000),
            _ => 2 * STEP + 1 + rng.below(2 * STEP),
        };
        let ids = take_mixed(&segments, &tag, wanted, &mut rng).await;
        for id in ids {
            assert!(id > last, "run {run}: id {id} after {last}");
            last = id;
        }
        taken += wanted;
        let status = segments.status(&tag).unwrap();
        match run % 3 {
            0 => assert_eq!((status.refills, status.buffer.next), (1, None), "run {run}"),
            1 => {
                let current = status.buffer.current.unwrap().range;
                assert_eq!(
                    wait_for_next(&segments, &tag).await.start(),
                    current.end(),
                    "run {run}"
                );
            }
            _ => assert!(status.refills >= 2, "run {run}: {} segments", status.refills),
        }
        segments.shutdown().await;
        let max_id = max_id(&*store, &tag).await;
        let waste = max_id as i64 - 1 - taken as i64;
        println!("run {run}: {wanted} ids, max_id {max_id}, waste so far {waste}");
    }
    let max_id = max_id(&*sqlite(&db).await, &tag).await;
    let waste = max_id as i64 - 1 - taken as i64;
    assert!(waste >= 0, "the store restarts at {max_id}, below the {taken} ids served");
    assert!(waste < STEP as i64, "{waste} ids wasted over ten restarts");
    // The give-back lowered the persisted mark too, so no start jumps past returned ids.
    let marks = std::fs::read_to_string(state_dir.join(HIGH_WATER_FILE)).unwrap();
    assert!(marks.lines().any(|l| l == format!("{tag} {max_id}")), "{marks}");
}

async fn sqlite(path: &Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(path).await.unwrap())
}

async fn max_id(store: &dyn SegmentStore, tag: &Tag) -> u64 {
    store.get_tag(tag).await.unwrap().unwrap().max_id
}

/// Takes `n` single ids.
async fn take(segments: &Segments, tag: &Tag, n: u64) -> Vec<u64> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(segments.next_id(tag).await.unwrap());
    }
    ids
}

/// Takes `n` ids as a seeded mix of single ids and batches of up to 30 000.
async fn take_mixed(segments: &Segments, tag: &Tag, n: u64, rng: &mut Rng) -> Vec<u64> {
    let mut ids = Vec::new();
    while (ids.len() as u64) < n {
        let left = n - ids.len() as u64;
        if rng.below(4) == 0 {
            for _ in 0..left.min(1 + rng.below(500)) {
                ids.push(segments.next_id(tag).await.unwrap());
            }
        } else {
            let count = Count::new(left.min(1 + rng.below(30_000))).unwrap();
            let ranges = segments.next_ids(tag, count).await.unwrap();
            ids.extend(ranges.iter().flat_map(|r| r.ids()));
        }
    }
    ids
}

/// Lets the preload refill run until the next segment is in place; returns it.
async fn wait_for_next(segments: &Segments, tag: &Tag) -> idmint::segment::IdRange {
    for _ in 0..1_000 {
        if let Some(next) = segments.snapshot(tag).unwrap().next {
            return next.range;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the next segment was never loaded");
}

/// Takes single ids (or batches of 7) until the node says it is shutting down.
async fn take_until_shutdown(segments: &Segments, tag: &Tag, single: bool) -> Vec<u64> {
    let mut ids = Vec::new();
    for round in 0u64.. {
        let result = if single {
            segments.next_id(tag).await.map(|id| vec![id])
        } else {
            let ranges = segments.next_ids(tag, Count::new(7).unwrap()).await;
            ranges.map(|ranges| ranges.iter().flat_map(|r| r.ids()).collect())
        };
        match result {
            Ok(batch) => ids.extend(batch),
            Err(Error::ShuttingDown) => break,
            Err(other) => panic!("unexpected {other:?}"),
        }
        // The per-id path never yields; let the timer and the shutdown run.
        if round % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    ids
}

fn assert_unique(mut ids: Vec<u64>) {
    let total = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), total, "an id was handed out twice");
}

/// xorshift64: replayable choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test]
async fn a_refused_give_back_leaves_a_store_that_went_back_above_the_served_ids() {
    let store = TestStore::new(41);
    let tag = store.create("gone-back", 100).await;
    let segments = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    let ids = segments.next_ids(&tag, Count::new(30).unwrap()).await.unwrap();
    assert_eq!(ids[0].start(), 1);
    // The preload loads [101, 201).
    while segments.snapshot(&tag).unwrap().next.is_none() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // A backup from before the node's allocations is restored: max_id back at 1, so the
    // give-back's compare-and-set (expecting 201) is refused.
    store.restore_max_id(&tag, 1).await;
    segments.shutdown().await;
    // Without the fix-up the next node would serve 1..31 again.
    assert_eq!(store.max_id(&tag).await, 201, "the store was left below served ids");
}
