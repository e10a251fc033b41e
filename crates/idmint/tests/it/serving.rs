//! Serving ids of one store: concurrency, single-flight refills, bounded waits, tag
//! lifecycle and shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idmint::segment::{Count, SegmentConfig};
use idmint::{Error, Segments, Tag};

use crate::test_store::{Mode, TestStore};

fn config() -> SegmentConfig {
    SegmentConfig::default().with_refill_wait_ms(300).unwrap()
}

/// Runs `tasks` tasks taking `per_task` single ids each; returns each task's ids in order.
async fn take_concurrently(
    segments: &Arc<Segments>,
    tag: &Tag,
    tasks: usize,
    per_task: usize,
) -> Vec<Vec<u64>> {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (segments, tag) = (Arc::clone(segments), tag.clone());
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(per_task);
                for i in 0..per_task {
                    ids.push(segments.next_id(&tag).await.expect("id"));
                    // A caller that never yields would keep a refill queued behind it on its
                    // worker (tokio's LIFO slot is not stolen) past the refill wait; callers
                    // that do I/O between ids yield. Since the step grows by at most ×2 per
                    // refill, a burst from a step of 1 000 takes ten refills, not two.
                    if i % 1_000 == 999 {
                        tokio::task::yield_now().await;
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for handle in handles {
        all.push(handle.await.expect("task"));
    }
    all
}

fn assert_unique_and_increasing_per_task(per_task: &[Vec<u64>]) -> Vec<u64> {
    for ids in per_task {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a task's ids did not increase");
    }
    let mut all: Vec<u64> = per_task.iter().flatten().copied().collect();
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "an id was handed out twice");
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_get_unique_increasing_ids() {
    let store = TestStore::new(1);
    let tag = store.create("order", 1000).await;
    let segments = Segments::start(store.clone(), config()).unwrap();
    let per_task = take_concurrently(&segments, &tag, 8, 100_000).await;
    let all = assert_unique_and_increasing_per_task(&per_task);
    assert_eq!(all.len(), 800_000);
    assert!(all[0] >= 1 && *all.last().unwrap() < 1 + 800_000 + 2 * 1000);
    segments.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_store_call_per_refill_under_contention() {
    let store = TestStore::new(2);
    let tag = store.create("contended", 100).await;
    // A fixed step, so the number of segments needed is known.
    let segments = Segments::start(store.clone(), config().with_adaptive_step(false)).unwrap();
    let per_task = take_concurrently(&segments, &tag, 8, 20_000).await;
    assert_unique_and_increasing_per_task(&per_task);
    // 160 000 ids at 100 per segment need 1600 segments; at most the two in the buffer at
    // the end are extra. A second call for the same need would show as more.
    let calls = store.allocations.load(Ordering::SeqCst);
    assert!((1600..=1602).contains(&calls), "{calls} store calls for 1600 segments");
    assert_eq!(store.max_in_flight.load(Ordering::SeqCst), 1, "two refills ran at once");
    segments.shutdown().await;
}

#[tokio::test]
async fn batches_are_exact_and_continue_each_other() {
    let store = TestStore::new(3);
    let tag = store.create("batch", 10).await;
    let segments = Segments::start(store.clone(), config()).unwrap();
    let first = segments.next_ids(&tag, Count::new(25).unwrap()).await.unwrap();
    let second = segments.next_ids(&tag, Count::new(7).unwrap()).await.unwrap();
    let ids: Vec<u64> = first.iter().chain(&second).flat_map(|r| r.ids()).collect();
    assert_eq!(ids.len(), 32);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    // Step 10 from start 1: ranges are contiguous, so the batches are too.
    assert_eq!(ids, (1..=32).collect::<Vec<u64>>());
    segments.shutdown().await;
}

#[tokio::test]
async fn a_store_that_never_answers_fails_within_the_bound() {
    let store = TestStore::new(4);
    let tag = store.create("stuck", 10).await;
    store.set_mode(Mode::Hang);
    let segments = Segments::start(store.clone(), config()).unwrap();
    let started = Instant::now();
    let result = segments.next_id(&tag).await;
    let waited = started.elapsed();
    assert!(matches!(result, Err(Error::Unavailable { .. })), "{result:?}");
    assert!(waited >= Duration::from_millis(250), "gave up early: {waited:?}");
    assert!(waited < Duration::from_millis(1000), "waited {waited:?}, bound is 300 ms");
    segments.shutdown().await;
}

#[tokio::test]
async fn a_failing_store_answers_fast_and_recovers_without_restart() {
    let store = TestStore::new(5);
    let tag = store.create("flaky", 10).await;
    store.set_mode(Mode::Fail);
    let segments = Segments::start(store.clone(), config()).unwrap();
    let started = Instant::now();
    let result = segments.next_id(&tag).await;
    assert!(
        matches!(&result, Err(Error::Unavailable { reason, .. }) if reason.contains("injected"))
    );
    assert!(started.elapsed() < Duration::from_millis(200), "failure was not fast");
    // While the refill retries in the background, requests fail at once with the cause.
    for _ in 0..5 {
        let started = Instant::now();
        assert!(matches!(segments.next_id(&tag).await, Err(Error::Unavailable { .. })));
        assert!(started.elapsed() < Duration::from_millis(50), "failure was not fast");
    }
    store.set_mode(Mode::Normal);
    // The retry (backoff at most REFILL_RETRY_MS_MAX) brings service back by itself.
    let recovered = Instant::now();
    let id = loop {
        match segments.next_id(&tag).await {
            Ok(id) => break id,
            Err(_) if recovered.elapsed() < Duration::from_secs(3) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("did not recover: {e}"),
        }
    };
    assert_eq!(id, 1, "ids were skipped or repeated across the outage");
    segments.shutdown().await;
}

#[tokio::test]
async fn a_store_that_goes_backwards_is_refused() {
    let store = TestStore::new(6);
    let tag = store.create("restored", 10).await;
    let segments = Segments::start(store.clone(), config()).unwrap();
    let mut seen: Vec<u64> = Vec::new();
    for _ in 0..10 {
        seen.push(segments.next_id(&tag).await.unwrap());
    }
    store.set_mode(Mode::Regress);
    // The preloaded segment [11, 21) was allocated before the regression and is served.
    for _ in 0..40 {
        match segments.next_id(&tag).await {
            Ok(id) => seen.push(id),
            Err(Error::Unavailable { reason, .. }) => assert!(reason.contains("below ids")),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    let total = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), total, "a regressed store made the node repeat an id");
    assert!(total < 50, "the regressed range was served");
    segments.shutdown().await;
}

#[tokio::test]
async fn a_new_tag_works_on_its_first_request_and_an_unknown_one_is_named() {
    let store = TestStore::new(7);
    let segments = Segments::start(store.clone(), config()).unwrap();
    let missing = Tag::parse("missing").unwrap();
    assert_eq!(segments.next_id(&missing).await, Err(Error::UnknownTag(missing.clone())));
    assert!(segments.snapshot(&missing).is_none(), "an unknown tag stayed registered");
    let tag = store.create("fresh", 10).await;
    assert_eq!(segments.next_id(&tag).await.unwrap(), 1);
    segments.shutdown().await;
}

#[tokio::test]
async fn a_deleted_tag_stops_being_served_after_the_refresh() {
    let store = TestStore::new(8);
    let tag = store.create("gone", 1000).await;
    let config = config().with_tag_refresh_ms(100).unwrap();
    let segments = Segments::start(store.clone(), config).unwrap();
    assert_eq!(segments.next_id(&tag).await.unwrap(), 1);
    idmint_store::SegmentStore::delete_tag(&*store, &tag).await.unwrap();
    // Until the refresh the node serves what it holds; after it, the tag is unknown.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(segments.next_id(&tag).await, Err(Error::UnknownTag(tag.clone())));
    segments.shutdown().await;
}

#[tokio::test]
async fn after_shutdown_no_id_is_handed_out_once_segments_run_out() {
    let store = TestStore::new(9);
    let tag = store.create("closing", 5).await;
    let segments = Segments::start(store.clone(), config()).unwrap();
    segments.next_id(&tag).await.unwrap();
    segments.shutdown().await;
    let mut last = Ok(0);
    for _ in 0..20 {
        last = segments.next_id(&tag).await;
        if last.is_err() {
            break;
        }
    }
    assert_eq!(last, Err(Error::ShuttingDown));
}

#[test]
fn synchronous_takes_work_from_threads_outside_the_runtime() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = TestStore::new(9);
    let tag = runtime.block_on(store.create("sync", 50));
    let segments = runtime.block_on(async { Segments::start(store.clone(), config()).unwrap() });
    let generator = segments.generator(&tag).unwrap();
    // Plain threads: refills spawn onto the runtime the node started in.
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let generator = Arc::clone(&generator);
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while ids.len() < 2_000 {
                    match generator.try_next_id() {
                        Some(id) => ids.push(id),
                        None => std::thread::yield_now(),
                    }
                }
                ids
            })
        })
        .collect();
    let per_task: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(assert_unique_and_increasing_per_task(&per_task).len(), 4_000);
    runtime.block_on(segments.shutdown());
    assert_eq!(generator.try_next_id(), None, "a frozen generator gave an id");
}

/// Issue 20 item 7: a tag whose next range would pass the largest id is spent for good; the
/// answer is the final `Store(Exhausted)` (HTTP 409 `tag_exhausted`), never the retryable
/// `Unavailable`, whether the step is the tag's own or the pacing asked for more.
#[tokio::test]
async fn an_exhausted_tag_answers_exhausted_not_unavailable() {
    for adaptive in [false, true] {
        let store = TestStore::new(21);
        let tag = store.create("spent", 10).await;
        let segments =
            Segments::start(store.clone(), config().with_adaptive_step(adaptive)).unwrap();
        assert_eq!(segments.next_id(&tag).await.unwrap(), 1);
        segments.shutdown().await;
        // Room for one more range of 10 below the largest id, then none.
        store.restore_max_id(&tag, idmint_core::limits::ID_MAX - 15).await;
        let segments =
            Segments::start(store.clone(), config().with_adaptive_step(adaptive)).unwrap();
        let ids = segments.next_ids(&tag, Count::new(10).unwrap()).await.unwrap();
        assert_eq!(ids.iter().map(|r| r.len()).sum::<u64>(), 10, "the last range is served");
        for _ in 0..3 {
            let error = segments.next_id(&tag).await.unwrap_err();
            assert!(
                matches!(error, Error::Store(idmint_store::StoreError::Exhausted { .. })),
                "adaptive {adaptive}: {error:?}"
            );
        }
        segments.shutdown().await;
    }
}

/// More requests waiting than the buffer holds ids make the refill go on to the next range
/// at once; when that finds the tag spent, the range installed before it is still served:
/// one request gets the last id, the others the final `Exhausted`.
#[tokio::test]
async fn waiting_requests_take_the_last_range_before_answering_that_the_tag_is_spent() {
    const REQUESTS: usize = 4;
    let store = TestStore::new(22);
    let tag = store.create("last", 1).await;
    let segments = Segments::start(store.clone(), config().with_adaptive_step(false)).unwrap();
    assert_eq!(segments.next_id(&tag).await.unwrap(), 1);
    segments.shutdown().await;
    // Room for one more range of 1 below the largest id, then none.
    let last = idmint_core::limits::ID_MAX - 1;
    store.restore_max_id(&tag, last).await;
    let segments = Segments::start(store.clone(), config().with_adaptive_step(false)).unwrap();
    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let (segments, tag) = (Arc::clone(&segments), tag.clone());
            tokio::spawn(async move { segments.next_id(&tag).await })
        })
        .collect();
    let mut served = Vec::new();
    for request in requests {
        match request.await.unwrap() {
            Ok(id) => served.push(id),
            Err(Error::Store(idmint_store::StoreError::Exhausted { .. })) => {}
            Err(error) => panic!("neither the last id nor exhausted: {error:?}"),
        }
    }
    assert_eq!(served, vec![last], "the last range goes to exactly one request");
    segments.shutdown().await;
}

/// A request for a name the store does not hold costs exactly one store call, however the
/// refill task and the request interleave on two threads (a request that found the first
/// attempt finished just as it began to wait once started a second one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_costs_one_store_call_per_lookup() {
    let store = TestStore::new(34);
    let segments = Segments::start(store.clone(), config().with_unknown_tags_unbounded()).unwrap();
    const NAMES: u64 = 60_000;
    for i in 0..NAMES {
        let tag = Tag::parse(&format!("nope-{i}")).unwrap();
        assert_eq!(segments.next_id(&tag).await, Err(Error::UnknownTag(tag.clone())));
    }
    let calls = store.allocations.load(Ordering::SeqCst);
    assert_eq!(calls, NAMES, "{calls} store calls for {NAMES} unknown names asked once each");
    segments.shutdown().await;
}

/// A tag the store's table cannot hold (an emoji on Leaf's `utf8` table) is refused as final,
/// one store call per request and no retry behind it, and the node keeps no generator for
/// it: such names never fill the registry (`TAG_COUNT_MAX`) and crowd out real tags.
#[tokio::test]
async fn a_tag_the_store_cannot_hold_is_final_and_never_kept() {
    const NAMES: u64 = 500;
    let store = TestStore::new(35);
    store.set_mode(Mode::Utf8mb3);
    let segments = Segments::start(store.clone(), config().with_unknown_tags_unbounded()).unwrap();
    for i in 0..NAMES {
        let tag = Tag::parse(&format!("rocket-{i}-🚀")).unwrap();
        match segments.next_id(&tag).await {
            Err(Error::Store(idmint_store::StoreError::TagNotStorable {
                tag: refused, ..
            })) => {
                assert_eq!(refused, tag);
            }
            other => panic!("{other:?}"),
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(store.allocations.load(Ordering::SeqCst), NAMES, "no retry behind a refusal");
    assert!(segments.statuses().is_empty(), "{} generators kept", segments.statuses().len());
    segments.shutdown().await;
}

/// Issue 20 item 8: requests for names the store does not hold cost bounded store calls (a
/// name found unknown is not looked up again for `UNKNOWN_TAG_TTL_MS`; at most
/// `UNKNOWN_TAG_LOOKUPS_PER_S_MAX` unknown lookups a second), every answer is a typed error,
/// and a tag created behind the node's back is still served within about a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_cost_bounded_store_calls_and_a_tag_made_elsewhere_is_served_soon() {
    use idmint_core::limits::UNKNOWN_TAG_LOOKUPS_PER_S_MAX;
    let store = TestStore::new(33);
    let segments = Segments::start(store.clone(), config()).unwrap();
    let started = Instant::now();
    for _ in 0..2 {
        for i in 0..20_000 {
            let tag = Tag::parse(&format!("nope-{i}")).unwrap();
            match segments.next_id(&tag).await {
                Err(Error::UnknownTag(_) | Error::Unavailable { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
    }
    let calls = store.allocations.load(Ordering::SeqCst);
    let budget = UNKNOWN_TAG_LOOKUPS_PER_S_MAX * (started.elapsed().as_secs() + 1);
    eprintln!(
        "{calls} store calls for 40 000 requests of 20 000 unknown names in {:?}",
        started.elapsed()
    );
    assert!(calls <= budget, "{calls} store calls for 40 000 requests of 20 000 unknown names");

    // One name asked for again and again: one store call.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ghost = Tag::parse("ghost").unwrap();
    let before = store.allocations.load(Ordering::SeqCst);
    for _ in 0..1000 {
        assert_eq!(segments.next_id(&ghost).await, Err(Error::UnknownTag(ghost.clone())));
    }
    assert_eq!(store.allocations.load(Ordering::SeqCst) - before, 1);

    // Created behind the node's back: served within about a second.
    store.create("ghost", 10).await;
    let created = Instant::now();
    loop {
        match segments.next_id(&ghost).await {
            Ok(id) => break assert_eq!(id, 1),
            Err(Error::UnknownTag(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(created.elapsed() < Duration::from_millis(1500), "{:?}", created.elapsed());

    // Created through this node: served at once.
    let local = Tag::parse("local").unwrap();
    assert_eq!(segments.next_id(&local).await, Err(Error::UnknownTag(local.clone())));
    let spec = idmint_store::TagSpec {
        tag: local.clone(),
        step: idmint_core::Step::new(10).unwrap(),
        start: None,
        description: Default::default(),
        force: false,
    };
    segments.create_tag(&spec).await.unwrap();
    assert_eq!(segments.next_id(&local).await, Ok(1));
    segments.shutdown().await;
}
