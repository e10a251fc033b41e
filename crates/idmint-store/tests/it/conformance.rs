//! The conformance suite: what every `SegmentStore` backend must do, written once against the
//! trait and instantiated per backend with [`conformance_suite!`].
//!
//! Each check is an async function taking a fresh, empty store; the macro turns each into one
//! named `#[tokio::test]` per backend. A backend plugs in with a factory returning a
//! [`Subject`] (the store plus whatever must outlive it, such as a temporary directory) and
//! one macro call. Checks must not assume anything the trait does not promise, and must not
//! know which backend they run against: backend-specific behaviour (persistence, foreign
//! table layouts) is tested beside the backend's instantiation.

use std::any::Any;
use std::sync::Arc;

use idmint_core::limits::{DESCRIPTION_LEN_MAX, ID_MAX, ID_MIN, STEP_MAX, TAG_LEN_MAX};
use idmint_core::{Description, IdRange, StartId, Step, Tag};
use idmint_store::{Allocation, SegmentStore, StoreError, TagRecord, TagSpec};

/// Concurrent allocators in [`concurrent_allocations_tile_without_overlap`].
const CONCURRENT_TASK_COUNT: usize = 8;
/// Allocations each of them makes.
const ALLOCATIONS_PER_TASK: usize = 50;
/// Times the step changes while [`concurrent_mixed_steps_tile_without_overlap`] allocates.
const STEP_CHANGE_COUNT: usize = 40;

/// A store under test (a segment store by default; the worker suite uses it for worker
/// stores), with whatever must live as long as it does.
pub struct Subject<S: ?Sized = dyn SegmentStore> {
    /// The store, fresh and empty.
    pub store: Arc<S>,
    /// Dropped after the check: a temporary directory, a scratch schema.
    _guard: Box<dyn Any + Send>,
}

impl<S: ?Sized> Subject<S> {
    /// A store that needs nothing kept alive.
    pub fn new(store: Arc<S>) -> Subject<S> {
        Subject { store, _guard: Box::new(()) }
    }

    /// A store whose backing resource `guard` is released when the check ends.
    pub fn with_guard(store: Arc<S>, guard: impl Any + Send) -> Subject<S> {
        Subject { store, _guard: Box::new(guard) }
    }
}

/// Generates one `#[tokio::test]` per conformance check in the calling module (the test
/// kit's [`idmint_testkit::suite!`] over this module's checks and [`run`]).
///
/// `$factory` is an `async fn() -> Option<Subject>` that yields a fresh, empty store on every
/// call (checks run in parallel and each expects to be alone in its store), or `None` when
/// the backend cannot run here: the test kit has then recorded the skip, which the run's
/// summary shows (`scripts/test`). CI has every backend, so there nothing is skipped.
macro_rules! conformance_suite {
    ($factory:path) => {
        idmint_testkit::suite! {
            checks: crate::conformance, runner: run, subject: $factory,
            tests: [
                first_allocation_is_start_to_start_plus_step,
                consecutive_allocations_are_contiguous_and_max_id_follows,
                tags_allocate_independently,
                concurrent_allocations_tile_without_overlap,
                overflow_is_refused_and_the_row_left_unchanged,
                exhaustion_boundary_is_exact,
                requested_step_above_the_tag_step_is_reserved,
                requested_step_below_the_tag_step_reserves_the_tag_step,
                set_step_applies_to_the_next_allocation_whatever_the_request,
                allocation_reports_the_tag_step_as_stored,
                exhaustion_with_a_requested_step_is_refused_and_the_row_left_unchanged,
                concurrent_mixed_steps_tile_without_overlap,
                compare_and_set_applies_and_the_next_allocation_starts_at_new,
                compare_and_set_with_a_stale_expected_changes_nothing,
                compare_and_set_of_an_unknown_tag_is_not_found,
                compare_and_sets_in_a_batch_answer_each_change_in_order,
                compare_and_set_to_an_invalid_max_id_is_refused,
                concurrent_compare_and_sets_apply_once,
                create_returns_the_record_as_stored,
                create_of_an_existing_tag_is_refused_and_the_row_left_unchanged,
                concurrent_creates_of_one_tag_succeed_once,
                get_of_an_unknown_tag_is_none,
                list_is_exact_and_ordered_by_tag,
                set_step_changes_later_allocations,
                delete_removes_the_tag_and_only_it,
                created_again_without_a_start_a_tag_continues_above_its_issued_ids,
                created_again_with_a_lower_start_a_tag_is_refused_unless_forced,
                ping_answers,
                every_tag_a_leaf_row_holds_is_stored_and_served_exactly,
            ],
        }
    };
}
pub(crate) use conformance_suite;

/// Tags in the characters Leaf's `biz_tag` holds that once were refused, and the ones that
/// could break a backend: SQL quoting and `LIKE` wildcards, Redis hash-tag braces, case
/// (a case-insensitive collation would merge `Order` and `order`), and the longest tag in
/// three-byte characters.
pub fn exotic_tags() -> Vec<String> {
    let mut names: Vec<String> = [
        "order@v2",
        "user/login",
        "订单",
        "🚀",
        "a b",
        "it's",
        "back\\slash",
        "\"quoted\"",
        "100%",
        "a_b",
        "a%_",
        "Order",
        "order",
        "{braced}",
        "}x",
        "a}b{",
        "x{",
        "<img src=x onerror=alert(1)>",
        "ordré",
        "idmint.keys",
        "(other)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // 42 three-byte characters and two bytes: 128 bytes.
    names.push(format!("{}ab", "订".repeat(42)));
    names.push(format!("{}🚀", "x".repeat(TAG_LEN_MAX - 4)));
    names
}

/// Every exotic tag ([`exotic_tags`]) is created, read back, listed and allocated as itself,
/// each from its own row: no two share a counter, none is mangled, and deleting one leaves
/// the others.
pub async fn every_tag_a_leaf_row_holds_is_stored_and_served_exactly(store: Arc<dyn SegmentStore>) {
    let names = exotic_tags();
    for (i, name) in names.iter().enumerate() {
        let start = 1000 * (i as u64 + 1);
        let created = store.create_tag(&spec(name, start, 10, name)).await.unwrap();
        assert_eq!(created.tag.as_str(), name);
    }
    for (i, name) in names.iter().enumerate() {
        let start = 1000 * (i as u64 + 1);
        let t = tag(name);
        let got = record(&store, &t).await;
        assert_eq!(
            (got.tag.as_str(), got.max_id, got.description.as_str()),
            (name.as_str(), start, name.as_str())
        );
        let allocation = store.allocate(&t, None).await.unwrap();
        assert_eq!(allocation.range, range(start, start + 10), "{name:?}");
    }
    let listed: Vec<String> =
        store.list_tags().await.unwrap().into_iter().map(|r| r.tag.to_string()).collect();
    let mut want = names.clone();
    // Listed in byte order, as every backend sorts (no collation).
    want.sort();
    assert_eq!(listed, want);
    store.delete_tag(&tag("Order")).await.unwrap();
    assert!(store.get_tag(&tag("Order")).await.unwrap().is_none());
    assert_eq!(record(&store, &tag("order")).await.max_id, 1000 * 13 + 10, "order survives Order");
    assert!(
        store.get_tag(&tag("ORDER")).await.unwrap().is_none(),
        "a case-folded name is another tag"
    );
}

/// Runs one check on the subject's store, then releases the subject (its guard last).
pub async fn run<S: ?Sized, F: Future<Output = ()>>(
    subject: Subject<S>,
    check: impl FnOnce(Arc<S>) -> F,
) {
    check(Arc::clone(&subject.store)).await;
    drop(subject);
}

/// The first allocation of a new tag is exactly `[start, start + step)`.
pub async fn first_allocation_is_start_to_start_plus_step(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "first", 1_000, 10).await;
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(1_000, 1_010));

    let tag = create(&store, "from-one", 1, 1).await;
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(1, 2));
}

/// Each allocation is `[old max_id, old max_id + step)`, follows the previous one without a
/// gap, and leaves `max_id` at its end.
pub async fn consecutive_allocations_are_contiguous_and_max_id_follows(
    store: Arc<dyn SegmentStore>,
) {
    let tag = create(&store, "contiguous", 5, 3).await;
    let mut max_id = 5;
    for _ in 0..20 {
        let got = store.allocate(&tag, None).await.unwrap().range;
        assert_eq!(got, range(max_id, max_id + 3), "allocation must start at the old max_id");
        let after = record(&store, &tag).await.max_id;
        assert_eq!(after, got.end(), "max_id must equal the end of the last range");
        assert!(after > max_id, "max_id went from {max_id} to {after}");
        max_id = after;
    }
    assert_eq!(max_id, 5 + 20 * 3);
}

/// Allocating one tag moves only that tag's `max_id`.
pub async fn tags_allocate_independently(store: Arc<dyn SegmentStore>) {
    let a = create(&store, "a", 100, 10).await;
    let b = create(&store, "b", 100, 20).await;
    assert_eq!(store.allocate(&a, None).await.unwrap().range, range(100, 110));
    assert_eq!(store.allocate(&a, None).await.unwrap().range, range(110, 120));
    assert_eq!(record(&store, &b).await.max_id, 100);
    assert_eq!(store.allocate(&b, None).await.unwrap().range, range(100, 120));
    assert_eq!(record(&store, &a).await.max_id, 120);
}

/// Many tasks allocating one tag at once receive disjoint ranges that together tile
/// `[start, final max_id)` exactly.
pub async fn concurrent_allocations_tile_without_overlap(store: Arc<dyn SegmentStore>) {
    let start = 42;
    let step = 7;
    let tag = create(&store, "contended", start, step).await;
    let stores = vec![Arc::clone(&store); CONCURRENT_TASK_COUNT];
    let per_task = allocate_concurrently(&stores, &tag, ALLOCATIONS_PER_TASK).await;
    let mut ranges = Vec::new();
    for ranges_of_task in per_task {
        // Within one caller, allocations are sequential, so they must increase.
        assert!(ranges_of_task.windows(2).all(|w| w[0].end() <= w[1].start()));
        ranges.extend(ranges_of_task);
    }
    assert_eq!(ranges.len(), CONCURRENT_TASK_COUNT * ALLOCATIONS_PER_TASK);
    assert!(ranges.iter().all(|r| r.len() == step), "every range must be one step long");
    let max_id = record(&store, &tag).await.max_id;
    assert_eq!(max_id, start + step * ranges.len() as u64);
    assert_tiles(ranges, start, max_id);
}

/// Runs one task per entry of `stores`, each making `allocations` allocations of `tag` on
/// its store with the tag's step; returns each task's ranges in the order it received them.
pub async fn allocate_concurrently(
    stores: &[Arc<dyn SegmentStore>],
    tag: &Tag,
    allocations: usize,
) -> Vec<Vec<IdRange>> {
    let callers: Vec<_> = stores.iter().map(|store| (Arc::clone(store), None)).collect();
    allocate_concurrently_with_steps(&callers, tag, allocations)
        .await
        .into_iter()
        .map(|allocations| allocations.into_iter().map(|a| a.range).collect())
        .collect()
}

/// One allocation of `tag`, asked again while the store answers that it lost its
/// compare-and-set to other allocations every time (`alloc=cas` under contention: retryable
/// by contract, and a loaded machine makes it likely).
async fn allocate_retrying(store: &dyn SegmentStore, tag: &Tag, step: Option<Step>) -> Allocation {
    for _ in 0..100 {
        match store.allocate(tag, step).await {
            Err(idmint_store::StoreError::Unavailable(reason)) if reason.contains("contended") => {}
            answer => return answer.unwrap(),
        }
    }
    panic!("tag {tag} stayed contended for 100 allocations in a row")
}

/// Runs one task per `(store, requested step)` of `callers`, each making `allocations`
/// allocations of `tag` on its store, asking for its step; returns each task's allocations in
/// the order it received them.
pub async fn allocate_concurrently_with_steps(
    callers: &[(Arc<dyn SegmentStore>, Option<Step>)],
    tag: &Tag,
    allocations: usize,
) -> Vec<Vec<Allocation>> {
    let tasks: Vec<_> = callers
        .iter()
        .map(|(store, step)| {
            let (store, tag, step) = (Arc::clone(store), tag.clone(), *step);
            tokio::spawn(async move {
                let mut got = Vec::with_capacity(allocations);
                for _ in 0..allocations {
                    got.push(allocate_retrying(&*store, &tag, step).await);
                }
                got
            })
        })
        .collect();
    let mut per_task = Vec::with_capacity(tasks.len());
    for task in tasks {
        per_task.push(task.await.unwrap());
    }
    per_task
}

/// A tag started at the highest start id with the largest step allocates once, ending
/// exactly at `ID_MAX`; the next allocation is refused and changes nothing.
pub async fn overflow_is_refused_and_the_row_left_unchanged(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "edge", StartId::MAX, STEP_MAX).await;
    let got = store.allocate(&tag, None).await.unwrap().range;
    assert_eq!(got, range(StartId::MAX, ID_MAX));
    assert_eq!(got.end(), i64::MAX as u64);
    let before = record(&store, &tag).await;
    assert_eq!(before.max_id, ID_MAX);

    for _ in 0..2 {
        let refused = store.allocate(&tag, None).await;
        assert_eq!(
            refused,
            Err(StoreError::Exhausted { tag: tag.clone(), max_id: ID_MAX, step: STEP_MAX })
        );
        assert_eq!(record(&store, &tag).await, before, "a refused allocation changed the row");
    }
}

/// Allocation is allowed exactly while `max_id + step <= ID_MAX`: a step with too little room
/// is refused, a step that fits exactly is served, and nothing fits after `ID_MAX`.
pub async fn exhaustion_boundary_is_exact(store: Arc<dyn SegmentStore>) {
    let big = 600_000;
    let tag = create(&store, "boundary", StartId::MAX, big).await;
    assert_eq!(
        store.allocate(&tag, None).await.unwrap().range,
        range(StartId::MAX, StartId::MAX + big)
    );
    let room = ID_MAX - (StartId::MAX + big);
    assert!(room < big);
    let before = record(&store, &tag).await;
    assert!(matches!(store.allocate(&tag, None).await, Err(StoreError::Exhausted { .. })));
    assert_eq!(record(&store, &tag).await, before);

    store.set_step(&tag, Step::new(room).unwrap()).await.unwrap();
    let last = store.allocate(&tag, None).await.unwrap().range;
    assert_eq!(last, range(ID_MAX - room, ID_MAX));
    assert!(last.ids().all(|id| id <= ID_MAX));

    store.set_step(&tag, Step::new(1).unwrap()).await.unwrap();
    let before = record(&store, &tag).await;
    assert_eq!(
        store.allocate(&tag, None).await,
        Err(StoreError::Exhausted { tag: tag.clone(), max_id: ID_MAX, step: 1 })
    );
    assert_eq!(record(&store, &tag).await, before);
}

/// A requested step above the tag's reserves that many ids, reports the tag's own step, and
/// leaves later default allocations at the tag's step.
pub async fn requested_step_above_the_tag_step_is_reserved(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "raised", 100, 10).await;
    let got = store.allocate(&tag, requested(25)).await.unwrap();
    assert_eq!(got, Allocation { range: range(100, 125), tag_step: 10 });
    assert_eq!(record(&store, &tag).await.max_id, 125);
    assert_eq!(record(&store, &tag).await.step, 10, "a request must not change the row's step");

    let got = store.allocate(&tag, requested(STEP_MAX)).await.unwrap();
    assert_eq!(got.range, range(125, 125 + STEP_MAX));
    assert_eq!(
        store.allocate(&tag, None).await.unwrap().range,
        range(125 + STEP_MAX, 135 + STEP_MAX)
    );
}

/// A requested step at or below the tag's reserves the tag's step: a caller cannot shrink
/// what an operator configured.
pub async fn requested_step_below_the_tag_step_reserves_the_tag_step(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "floored", 1, 10).await;
    assert_eq!(store.allocate(&tag, requested(3)).await.unwrap().range, range(1, 11));
    assert_eq!(store.allocate(&tag, requested(1)).await.unwrap().range, range(11, 21));
    assert_eq!(store.allocate(&tag, requested(10)).await.unwrap().range, range(21, 31));
    assert_eq!(record(&store, &tag).await.max_id, 31);
}

/// A step changed by `set_step` governs the very next allocation, whether the caller asks
/// for nothing, for less, or for more than it.
pub async fn set_step_applies_to_the_next_allocation_whatever_the_request(
    store: Arc<dyn SegmentStore>,
) {
    let tag = create(&store, "retuned", 1, 10).await;
    assert_eq!(store.allocate(&tag, requested(20)).await.unwrap().range, range(1, 21));

    store.set_step(&tag, Step::new(50).unwrap()).await.unwrap();
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(21, 71));
    assert_eq!(store.allocate(&tag, requested(20)).await.unwrap().range, range(71, 121));
    assert_eq!(store.allocate(&tag, requested(60)).await.unwrap().range, range(121, 181));

    store.set_step(&tag, Step::new(5).unwrap()).await.unwrap();
    assert_eq!(store.allocate(&tag, requested(20)).await.unwrap().range, range(181, 201));
    assert_eq!(store.allocate(&tag, requested(2)).await.unwrap().range, range(201, 206));
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(206, 211));
    assert_eq!(record(&store, &tag).await.max_id, 211);
}

/// Every allocation reports the row's step as stored at that moment, whatever was requested.
pub async fn allocation_reports_the_tag_step_as_stored(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "reported", 1, 7).await;
    for step in [None, requested(1), requested(7), requested(500)] {
        assert_eq!(store.allocate(&tag, step).await.unwrap().tag_step, 7, "asked for {step:?}");
    }
    store.set_step(&tag, Step::new(300).unwrap()).await.unwrap();
    for step in [None, requested(1), requested(500)] {
        assert_eq!(store.allocate(&tag, step).await.unwrap().tag_step, 300, "asked for {step:?}");
    }
    let other = create(&store, "other", 1, 42).await;
    assert_eq!(store.allocate(&other, requested(500)).await.unwrap().tag_step, 42);
}

/// A requested step with too little room left is refused as exhausted (naming the step it
/// needed) and changes nothing, even where the tag's own step would fit; the request that
/// fits exactly is served, and after `ID_MAX` the tag's step is what is reported.
pub async fn exhaustion_with_a_requested_step_is_refused_and_the_row_left_unchanged(
    store: Arc<dyn SegmentStore>,
) {
    let tag = create(&store, "cramped", StartId::MAX, 10).await;
    let max_id = StartId::MAX + 10;
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(StartId::MAX, max_id));
    let room = ID_MAX - max_id;
    assert_eq!(room, STEP_MAX - 10);

    let before = record(&store, &tag).await;
    for _ in 0..2 {
        assert_eq!(
            store.allocate(&tag, requested(room + 1)).await,
            Err(StoreError::Exhausted { tag: tag.clone(), max_id, step: room + 1 })
        );
        assert_eq!(record(&store, &tag).await, before, "a refused allocation changed the row");
    }

    let last = store.allocate(&tag, requested(room)).await.unwrap();
    assert_eq!(last, Allocation { range: range(max_id, ID_MAX), tag_step: 10 });
    let before = record(&store, &tag).await;
    assert_eq!(
        store.allocate(&tag, requested(1)).await,
        Err(StoreError::Exhausted { tag: tag.clone(), max_id: ID_MAX, step: 10 })
    );
    assert_eq!(record(&store, &tag).await, before);
}

/// Tasks asking for different steps, while the tag's step keeps changing, still receive
/// disjoint ranges that tile `[start, final max_id)`; each range is as long as the larger of
/// the step it reports and the step asked for, so the step is read in the allocating update.
pub async fn concurrent_mixed_steps_tile_without_overlap(store: Arc<dyn SegmentStore>) {
    let start = 9;
    let (step_a, step_b) = (7, 11);
    let tag = create(&store, "mixed", start, step_a).await;
    let asks = [None, requested(1), requested(7), requested(9), requested(13), requested(100)];
    let callers: Vec<_> =
        (0..CONCURRENT_TASK_COUNT).map(|i| (Arc::clone(&store), asks[i % asks.len()])).collect();
    let retuner = {
        let (store, tag) = (Arc::clone(&store), tag.clone());
        tokio::spawn(async move {
            for i in 0..STEP_CHANGE_COUNT {
                let step = if i % 2 == 0 { step_b } else { step_a };
                store.set_step(&tag, Step::new(step).unwrap()).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let per_task = allocate_concurrently_with_steps(&callers, &tag, ALLOCATIONS_PER_TASK).await;
    retuner.await.unwrap();

    let mut ranges = Vec::new();
    for ((_, asked), got) in callers.iter().zip(per_task) {
        assert!(got.windows(2).all(|w| w[0].range.end() <= w[1].range.start()));
        for allocation in got {
            assert!([step_a, step_b].contains(&allocation.tag_step), "{allocation:?}");
            let expected_len = allocation.tag_step.max(asked.map_or(0, Step::get));
            assert_eq!(allocation.range.len(), expected_len, "{allocation:?} asked {asked:?}");
            ranges.push(allocation.range);
        }
    }
    assert_eq!(ranges.len(), CONCURRENT_TASK_COUNT * ALLOCATIONS_PER_TASK);
    let max_id = record(&store, &tag).await.max_id;
    assert_eq!(max_id, start + ranges.iter().map(IdRange::len).sum::<u64>());
    assert_tiles(ranges, start, max_id);
}

/// A compare-and-set whose `expected` is current is applied: it returns true, `max_id` is
/// `new`, and the next allocation starts there, whether it gave ids back or jumped forward.
pub async fn compare_and_set_applies_and_the_next_allocation_starts_at_new(
    store: Arc<dyn SegmentStore>,
) {
    let tag = create(&store, "handback", 1, 100).await;
    let mine = store.allocate(&tag, None).await.unwrap().range;
    assert_eq!(mine, range(1, 101));
    // Give back the unissued tail [40, 101).
    assert_eq!(store.compare_and_set_max_id(&tag, mine.end(), 40).await, Ok(true));
    let row = record(&store, &tag).await;
    assert_eq!((row.max_id, row.step), (40, 100));
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(40, 140));

    // Jump forward past ids served before a store regression.
    assert_eq!(store.compare_and_set_max_id(&tag, 140, 1_000).await, Ok(true));
    assert_eq!(record(&store, &tag).await.max_id, 1_000);
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(1_000, 1_100));

    // Setting the value already held is applied too.
    assert_eq!(store.compare_and_set_max_id(&tag, 1_100, 1_100).await, Ok(true));
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(1_100, 1_200));
}

/// A batch of compare-and-sets (the shutdown's give-back) answers each change in order: the
/// current ones applied, a stale one and one of a missing row not, and no row touched by a
/// change that was not applied.
pub async fn compare_and_sets_in_a_batch_answer_each_change_in_order(store: Arc<dyn SegmentStore>) {
    let given = create(&store, "given", 1, 100).await;
    let raced = create(&store, "raced", 1, 100).await;
    let mine = store.allocate(&given, None).await.unwrap().range;
    let stale = store.allocate(&raced, None).await.unwrap().range;
    let theirs = store.allocate(&raced, None).await.unwrap().range;
    let gone = Tag::parse("gone").unwrap();
    let change =
        |tag: &Tag, expected, new| idmint_store::MaxIdChange { tag: tag.clone(), expected, new };
    let changes =
        [change(&given, mine.end(), 40), change(&raced, stale.end(), 50), change(&gone, 10, 5)];
    assert_eq!(store.compare_and_set_max_ids(&changes).await, Ok(vec![true, false, false]));
    assert_eq!(record(&store, &given).await.max_id, 40);
    assert_eq!(record(&store, &raced).await.max_id, theirs.end());
    assert_eq!(store.compare_and_set_max_ids(&[]).await, Ok(vec![]));
    assert_eq!(store.allocate(&given, None).await.unwrap().range, range(40, 140));
}

/// A compare-and-set whose `expected` is stale (another node allocated since) returns false
/// and leaves the row, and later allocations, exactly as they were.
pub async fn compare_and_set_with_a_stale_expected_changes_nothing(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "raced-back", 1, 10).await;
    let mine = store.allocate(&tag, None).await.unwrap().range;
    let theirs = store.allocate(&tag, None).await.unwrap().range;
    assert_eq!((mine, theirs), (range(1, 11), range(11, 21)));
    let before = record(&store, &tag).await;

    for (expected, new) in [(mine.end(), 5), (mine.end(), 500), (0, 5), (ID_MAX, 5), (u64::MAX, 5)]
    {
        assert_eq!(
            store.compare_and_set_max_id(&tag, expected, new).await,
            Ok(false),
            "expected {expected}, new {new}"
        );
        assert_eq!(record(&store, &tag).await, before, "a failed compare-and-set changed the row");
    }
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(21, 31));
}

/// A compare-and-set of a tag without a row is refused as not found and creates no row.
pub async fn compare_and_set_of_an_unknown_tag_is_not_found(store: Arc<dyn SegmentStore>) {
    let never = tag("never-created");
    let not_found = Err(StoreError::TagNotFound(never.clone()));
    assert_eq!(store.compare_and_set_max_id(&never, 1, 5).await, not_found);
    assert_eq!(store.get_tag(&never).await, Ok(None), "compare-and-set must not create a row");

    let doomed = create(&store, "doomed", 1, 10).await;
    store.allocate(&doomed, None).await.unwrap();
    store.delete_tag(&doomed).await.unwrap();
    assert_eq!(
        store.compare_and_set_max_id(&doomed, 11, 1).await,
        Err(StoreError::TagNotFound(doomed.clone()))
    );
    assert_eq!(store.get_tag(&doomed).await, Ok(None));
}

/// A compare-and-set to a `max_id` outside `ID_MIN..=ID_MAX` is refused and changes nothing,
/// even when `expected` matches; both bounds themselves are accepted.
pub async fn compare_and_set_to_an_invalid_max_id_is_refused(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "bounded", 1, 10).await;
    store.allocate(&tag, None).await.unwrap();
    let before = record(&store, &tag).await;
    for new in [0, ID_MAX + 1, u64::MAX] {
        let refused = store.compare_and_set_max_id(&tag, before.max_id, new).await;
        assert!(matches!(refused, Err(StoreError::InvalidValue(_))), "new {new}: {refused:?}");
        assert_eq!(record(&store, &tag).await, before, "a refused compare-and-set changed the row");
    }

    assert_eq!(store.compare_and_set_max_id(&tag, before.max_id, ID_MAX).await, Ok(true));
    assert!(matches!(store.allocate(&tag, None).await, Err(StoreError::Exhausted { .. })));
    assert_eq!(store.compare_and_set_max_id(&tag, ID_MAX, ID_MIN).await, Ok(true));
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(ID_MIN, ID_MIN + 10));
}

/// Callers racing to compare-and-set from the same `expected` (two nodes giving back at
/// once): exactly one is applied, and the row holds its value.
pub async fn concurrent_compare_and_sets_apply_once(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "contested", 1, 1_000).await;
    let end = store.allocate(&tag, None).await.unwrap().range.end();
    let tasks: Vec<_> = (1..=CONCURRENT_TASK_COUNT as u64)
        .map(|i| {
            let (store, tag) = (Arc::clone(&store), tag.clone());
            tokio::spawn(async move { (i, store.compare_and_set_max_id(&tag, end, end - i).await) })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (i, applied) = task.await.unwrap();
        if applied.unwrap() {
            winners.push(end - i);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one compare-and-set must apply: {winners:?}");
    assert_eq!(record(&store, &tag).await.max_id, winners[0]);
}

/// `create_tag` returns the row as stored, and `get_tag` reads the same row back; the longest
/// tag and description survive the round trip intact.
pub async fn create_returns_the_record_as_stored(store: Arc<dyn SegmentStore>) {
    let long_description = "é".repeat(DESCRIPTION_LEN_MAX);
    let long_tag = "t".repeat(TAG_LEN_MAX);
    for (name, start, step, description) in
        [("orders", 17, 250, "order ids"), (long_tag.as_str(), 1, 1, &long_description)]
    {
        let spec = spec(name, start, step, description);
        let created = store.create_tag(&spec).await.unwrap();
        assert_eq!(created.tag, spec.tag);
        assert_eq!(created.max_id, start);
        assert_eq!(created.step, step);
        assert_eq!(created.description, description);
        let got = record(&store, &spec.tag).await;
        assert_eq!(got.tag, spec.tag);
        assert_eq!((got.max_id, got.step, got.description.as_str()), (start, step, description));
    }
}

/// Creating an existing tag is refused and leaves its row, including allocations, as it was.
pub async fn create_of_an_existing_tag_is_refused_and_the_row_left_unchanged(
    store: Arc<dyn SegmentStore>,
) {
    let tag = create(&store, "taken", 10, 5).await;
    store.allocate(&tag, None).await.unwrap();
    let before = record(&store, &tag).await;
    let again = spec("taken", 1, 99, "other");
    assert_eq!(store.create_tag(&again).await, Err(StoreError::TagExists(tag.clone())));
    assert_eq!(record(&store, &tag).await, before);
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(15, 20));
}

/// Callers racing to create one tag (two operators, two CLIs): exactly one wins, the others
/// are told it exists, and the row is the winner's.
pub async fn concurrent_creates_of_one_tag_succeed_once(store: Arc<dyn SegmentStore>) {
    let mut tasks = Vec::new();
    for i in 0..CONCURRENT_TASK_COUNT as u64 {
        let store = Arc::clone(&store);
        let spec = spec("raced", 1 + i, 10 + i, "");
        tasks.push(tokio::spawn(async move { store.create_tag(&spec).await }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(created) => winners.push(created),
            Err(e) => assert_eq!(e, StoreError::TagExists(tag("raced"))),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create must succeed: {winners:?}");
    let row = record(&store, &tag("raced")).await;
    assert_eq!((row.max_id, row.step), (winners[0].max_id, winners[0].step));
}

/// Looking up a tag that was never created is not an error.
pub async fn get_of_an_unknown_tag_is_none(store: Arc<dyn SegmentStore>) {
    assert_eq!(store.get_tag(&tag("nobody")).await, Ok(None));
    create(&store, "somebody", 1, 1).await;
    assert_eq!(store.get_tag(&tag("nobody")).await, Ok(None));
}

/// `list_tags` returns exactly the created tags, ordered as `Tag` orders them (byte order:
/// upper case before lower case, punctuation by its code).
pub async fn list_is_exact_and_ordered_by_tag(store: Arc<dyn SegmentStore>) {
    assert_eq!(store.list_tags().await, Ok(Vec::new()));
    let names = ["b", "a_1", "B", "a:1", "a1", "a.1", "A", "a-1"];
    let mut created = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        let i = i as u64 + 1;
        created.push(store.create_tag(&spec(name, i, i * 10, name)).await.unwrap());
    }
    created.sort_by(|a, b| a.tag.cmp(&b.tag));
    let listed = store.list_tags().await.unwrap();
    let listed_names: Vec<&str> = listed.iter().map(|r| r.tag.as_str()).collect();
    assert_eq!(listed_names, ["A", "B", "a-1", "a.1", "a1", "a:1", "a_1", "b"]);
    assert_eq!(without_time(listed), without_time(created));
}

/// After `set_step`, allocations have the new length and continue from the old `max_id`; an
/// unknown tag is refused.
pub async fn set_step_changes_later_allocations(store: Arc<dyn SegmentStore>) {
    let tag = create(&store, "resized", 1, 10).await;
    assert_eq!(store.allocate(&tag, None).await.unwrap().range, range(1, 11));
    let updated = store.set_step(&tag, Step::new(7).unwrap()).await.unwrap();
    assert_eq!((updated.tag.as_str(), updated.max_id, updated.step), ("resized", 11, 7));
    assert_eq!(record(&store, &tag).await.step, 7);
    let got = store.allocate(&tag, None).await.unwrap().range;
    assert_eq!(got, range(11, 18));
    assert_eq!(got.len(), 7);

    let unknown = self::tag("unknown");
    assert_eq!(
        store.set_step(&unknown, Step::new(7).unwrap()).await,
        Err(StoreError::TagNotFound(unknown.clone()))
    );
    assert_eq!(store.get_tag(&unknown).await, Ok(None), "set_step must not create a row");
}

/// A deleted tag is gone for every call; other tags are untouched. Unknown tags are refused.
pub async fn delete_removes_the_tag_and_only_it(store: Arc<dyn SegmentStore>) {
    let doomed = create(&store, "doomed", 1, 10).await;
    let kept = create(&store, "kept", 1, 10).await;
    store.allocate(&doomed, None).await.unwrap();
    let kept_before = record(&store, &kept).await;

    assert_eq!(store.delete_tag(&doomed).await, Ok(()));
    assert_eq!(store.get_tag(&doomed).await, Ok(None));
    let not_found = || StoreError::TagNotFound(doomed.clone());
    assert_eq!(store.delete_tag(&doomed).await, Err(not_found()));
    assert_eq!(store.allocate(&doomed, None).await, Err(not_found()));
    assert_eq!(store.set_step(&doomed, Step::new(3).unwrap()).await, Err(not_found()));
    assert_eq!(record(&store, &kept).await, kept_before);
    let listed = store.list_tags().await.unwrap();
    assert_eq!(listed.iter().map(|r| r.tag.as_str()).collect::<Vec<_>>(), ["kept"]);

    let never = tag("never-created");
    assert_eq!(store.allocate(&never, None).await, Err(StoreError::TagNotFound(never.clone())));
    assert_eq!(store.delete_tag(&never).await, Err(StoreError::TagNotFound(never)));
}

/// Issue 20 item 3: a deleted tag leaves a tombstone with its `max_id`; created again with
/// no start (the default), the tag continues there, so no id it handed out comes again.
pub async fn created_again_without_a_start_a_tag_continues_above_its_issued_ids(
    store: Arc<dyn SegmentStore>,
) {
    let reborn = create(&store, "reborn", 1, 10).await;
    assert_eq!(store.tombstone(&reborn).await, Ok(None));
    for _ in 0..3 {
        store.allocate(&reborn, None).await.unwrap();
    }
    store.delete_tag(&reborn).await.unwrap();
    assert_eq!(store.tombstone(&reborn).await, Ok(Some(31)));
    let again = TagSpec { start: None, ..spec("reborn", 1, 10, "") };
    assert_eq!(store.create_tag(&again).await.unwrap().max_id, 31);
    assert_eq!(store.allocate(&reborn, None).await.unwrap().range, range(31, 41));
    // A second life deleted leaves the higher mark; the tombstone is only ever raised.
    store.delete_tag(&reborn).await.unwrap();
    assert_eq!(store.tombstone(&reborn).await, Ok(Some(41)));
    assert_eq!(store.create_tag(&again).await.unwrap().max_id, 41);
    // A name never deleted starts at 1, as always.
    let fresh = TagSpec { start: None, ..spec("fresh", 1, 10, "") };
    assert_eq!(store.create_tag(&fresh).await.unwrap().max_id, 1);
}

/// Issue 20 item 3: created again with a start below the tombstone (start=1 included), a tag
/// is refused with the reason, nothing created; at or above it, accepted; forced, accepted,
/// and the tombstone is kept (a later delete only raises it).
pub async fn created_again_with_a_lower_start_a_tag_is_refused_unless_forced(
    store: Arc<dyn SegmentStore>,
) {
    let reborn = create(&store, "reborn", 1, 10).await;
    store.allocate(&reborn, None).await.unwrap();
    store.allocate(&reborn, None).await.unwrap();
    store.delete_tag(&reborn).await.unwrap();
    for start in [1, 20] {
        let refused = store.create_tag(&spec("reborn", start, 10, "")).await;
        assert_eq!(
            refused,
            Err(StoreError::StartBelowIssued { tag: reborn.clone(), start, tomb: 21 })
        );
        assert_eq!(store.get_tag(&reborn).await, Ok(None), "a refused create made a row");
    }
    assert_eq!(store.create_tag(&spec("reborn", 21, 10, "")).await.unwrap().max_id, 21);
    store.delete_tag(&reborn).await.unwrap();
    let forced = TagSpec { force: true, ..spec("reborn", 1, 10, "") };
    assert_eq!(store.create_tag(&forced).await.unwrap().max_id, 1);
    assert_eq!(store.allocate(&reborn, None).await.unwrap().range, range(1, 11));
    store.delete_tag(&reborn).await.unwrap();
    assert_eq!(store.tombstone(&reborn).await, Ok(Some(21)), "a tombstone was lowered");
}

/// A reachable store answers `ping`, empty or not.
pub async fn ping_answers(store: Arc<dyn SegmentStore>) {
    assert_eq!(store.ping().await, Ok(()));
    create(&store, "pinged", 1, 1).await;
    assert_eq!(store.ping().await, Ok(()));
}

/// Asserts that `ranges`, in any order, are disjoint and together cover exactly
/// `[start, end)`.
pub fn assert_tiles(mut ranges: Vec<IdRange>, start: u64, end: u64) {
    ranges.sort_by_key(IdRange::start);
    let first = ranges.first().expect("no ranges to check");
    assert_eq!(first.start(), start, "the first range must begin at the start id");
    for pair in ranges.windows(2) {
        assert!(pair[0].end() <= pair[1].start(), "overlap: {:?} and {:?}", pair[0], pair[1]);
        assert_eq!(pair[0].end(), pair[1].start(), "gap between {:?} and {:?}", pair[0], pair[1]);
    }
    let last = ranges.last().expect("no ranges to check");
    assert_eq!(last.end(), end, "the last range must end at max_id");
}

/// A valid tag from a literal.
pub fn tag(name: &str) -> Tag {
    Tag::parse(name).unwrap()
}

/// A creation request from literals.
pub fn spec(name: &str, start: u64, step: u64, description: &str) -> TagSpec {
    TagSpec {
        tag: tag(name),
        step: Step::new(step).unwrap(),
        start: Some(StartId::new(start).unwrap()),
        force: false,
        description: Description::new(description).unwrap(),
    }
}

/// A requested step from a literal.
pub fn requested(step: u64) -> Option<Step> {
    Some(Step::new(step).unwrap())
}

/// A range from literals.
pub fn range(start: u64, end: u64) -> IdRange {
    IdRange::new(start, end).unwrap()
}

/// Creates a tag with an empty description and returns it.
pub async fn create(store: &Arc<dyn SegmentStore>, name: &str, start: u64, step: u64) -> Tag {
    store.create_tag(&spec(name, start, step, "")).await.unwrap().tag
}

/// The row of a tag that must exist.
pub async fn record(store: &Arc<dyn SegmentStore>, tag: &Tag) -> TagRecord {
    store.get_tag(tag).await.unwrap().unwrap_or_else(|| panic!("tag {tag} has no row"))
}

/// Rows without `update_time_s`, which moves with the wall clock.
fn without_time(records: Vec<TagRecord>) -> Vec<TagRecord> {
    records.into_iter().map(|r| TagRecord { update_time_s: 0, ..r }).collect()
}
