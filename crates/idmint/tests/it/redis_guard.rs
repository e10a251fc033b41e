//! The store-regression guard on a real Redis (the test kit's; skipped and reported without):
//! a Redis without durable writes can come back from a crash with a `max_id` older than
//! what it handed out. The test lowers the tag's `max_id` itself, in its own key prefix, as
//! such a lost write would, and the running node must not serve any id twice.
//!
//! Nothing else on the shared server is touched; the test's keys are deleted at the end.

use std::sync::Arc;
use std::time::Duration;

use idmint::segment::SegmentConfig;
use idmint::{Segments, Tag};
use idmint_store::SegmentStore;
use idmint_store::redis::{RedisStore, driver};

use crate::redis_keys::fresh_url;
use crate::test_store::create_tag;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_lost_its_latest_writes_is_jumped_past() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store = Arc::new(RedisStore::connect(&url).await.unwrap());
    let tag = create_tag(&*store, "lost", 100).await;
    let config = SegmentConfig::default().with_adaptive_step(false);
    let segments = Segments::start(store.clone(), config).unwrap();

    let mut served = take(&segments, &tag, 150).await;
    wait_for_next(&segments, &tag).await;
    let mark = segments.snapshot(&tag).unwrap().high_water;
    assert_eq!(max_id(&*store, &tag).await, mark, "the store holds what the node reserved");

    // The crash: Redis comes back without the allocations after the first one.
    let mut raw = url.connect().await.unwrap();
    let lose_writes =
        driver::cmd("HSET").arg(raw.key("tag:{lost}")).arg("max_id").arg("101").clone();
    let _: i64 = lose_writes.query_async(&mut raw).await.unwrap();

    // Through the rest of the loaded ranges and into those allocated after the loss.
    served.extend(take(&segments, &tag, 300).await);
    // One consumer: strictly increasing means no id was handed out twice.
    assert!(served.windows(2).all(|w| w[0] < w[1]), "an id was served twice: {served:?}");
    assert!(max_id(&*store, &tag).await > mark, "the store was not moved past the mark");
    segments.shutdown().await;

    // The control: the same loss under a node without the guard's marks re-serves id 101.
    let _: i64 = lose_writes.query_async(&mut raw).await.unwrap();
    let blind = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    assert_eq!(blind.next_id(&tag).await, Ok(101));
    assert!(served.contains(&101));
    blind.shutdown().await;
}

async fn take(segments: &Segments, tag: &Tag, n: u64) -> Vec<u64> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(segments.next_id(tag).await.unwrap());
    }
    ids
}

async fn wait_for_next(segments: &Segments, tag: &Tag) {
    for _ in 0..1_000 {
        if segments.snapshot(tag).unwrap().next.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the next segment was never loaded");
}

async fn max_id(store: &dyn SegmentStore, tag: &Tag) -> u64 {
    store.get_tag(tag).await.unwrap().unwrap().max_id
}
