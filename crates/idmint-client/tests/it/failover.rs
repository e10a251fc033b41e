//! Two servers on one store, one killed (`kill -9`-like) while a client takes a million ids:
//! the client keeps serving from its buffer and the other server, every id unique, each
//! task's ids increasing, although the other server first leases ranges below the ids the
//! client already served (the client skips them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idmint_client::{Client, ClientError, Tag};

use crate::support::{BlackHole, Node, assert_increasing, assert_unique, client_runtime, dead_url};

const TOTAL: u64 = 1_000_000;
const KILL_AT: u64 = 300_000;
const TASKS: u64 = 2;

#[test]
fn a_server_killed_under_load_costs_no_repeat_and_no_error() {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let mut first = Node::shared(&store);
    let second = Node::shared(&store);
    let runtime = client_runtime();
    runtime.block_on(async {
        first.create_tag("order", 1000).await;
        // The second server holds a segment of the tag below everything the first one will
        // lease: after the failover its first leases lie below the client's ids.
        let early = second.next_id("order").await;
        let early_end = second.current_segment("order").expect("segment").end();
        let client = Client::builder()
            .endpoint(&first.url)
            .endpoint(&second.url)
            .build()
            .await
            .expect("client");
        let tag = Tag::parse("order").expect("tag");
        let handle = client.tag(&tag).expect("handle");
        let taken = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let (client, tag, handle, taken) =
                (client.clone(), tag.clone(), handle.clone(), Arc::clone(&taken));
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::with_capacity((TOTAL / TASKS) as usize);
                for _ in 0..TOTAL / TASKS {
                    // One task through the client, one through its handle's fast path.
                    let id = if task == 0 {
                        client.next_id(&tag).await
                    } else {
                        match handle.try_next_id() {
                            Some(id) => Ok(id),
                            None => handle.next_id().await,
                        }
                    };
                    ids.push(id.unwrap_or_else(|e| panic!("task {task}: {e}")));
                    taken.fetch_add(1, Ordering::Relaxed);
                }
                ids
            }));
        }
        while taken.load(Ordering::Relaxed) < KILL_AT {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let second_before = second.handed_out("order");
        first.kill();
        let mut lists = Vec::new();
        for (task, handle) in tasks.into_iter().enumerate() {
            let ids = handle.await.expect("task");
            assert_increasing(&ids, &format!("task {task}"));
            lists.push(ids);
        }
        assert_eq!(assert_unique(&lists) as u64, TOTAL);
        assert!(second.handed_out("order") > second_before, "no failover to the second server");
        // The second server's early segment was leased to the client after the failover and
        // skipped: none of its ids reached the client.
        let now = second.current_segment("order").expect("segment");
        assert!(
            now.start() >= early_end,
            "the early segment [{early}, {early_end}) was not leased"
        );
        assert!(
            lists.iter().flatten().all(|id| !(early..early_end).contains(id)),
            "an id below the failover point"
        );
        client.close().await;
    });
}

#[test]
fn a_dead_or_silent_first_server_is_passed_over_and_then_tried_last() {
    let node = Node::memory();
    let runtime = client_runtime();
    runtime.block_on(async {
        node.create_tag("order", 1000).await;
        let hole = BlackHole::start().await;
        let client = Client::builder()
            .endpoint(dead_url())
            .endpoint(&hole.url)
            .endpoint(&node.url)
            .timeout(Duration::from_millis(300))
            .min_lease(10)
            .build()
            .await
            .expect("client");
        let started = Instant::now();
        let first = client.next_id("order").await.expect("an id past the dead servers");
        // The dead port fails at once, the black hole after one timeout.
        assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
        assert_eq!(hole.accepted.load(Ordering::Relaxed), 1);
        // The next leases go straight to the server that answered: no new wait.
        let started = Instant::now();
        let ids = client.next_ids("order", 100).await.expect("ids");
        assert!(started.elapsed() < Duration::from_millis(250), "{:?}", started.elapsed());
        assert!(ids[0] > first);
        client.close().await;
    });
}

#[test]
fn when_every_server_is_down_the_error_is_unavailable_within_the_bound() {
    let runtime = client_runtime();
    runtime.block_on(async {
        let client = Client::connect([dead_url(), dead_url()]).await.expect("client");
        let started = Instant::now();
        let error = client.next_id("order").await.expect_err("no server");
        assert!(matches!(error, ClientError::Unavailable { .. }), "{error}");
        assert!(error.to_string().contains("idmint serve"), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "dead ports fail fast: {:?}",
            started.elapsed()
        );

        // Servers that never answer: bounded by the attempts × timeout and the engine's wait.
        let holes = [BlackHole::start().await, BlackHole::start().await];
        let client = Client::builder()
            .endpoints(holes.iter().map(|h| h.url.clone()))
            .timeout(Duration::from_millis(200))
            .build()
            .await
            .expect("client");
        let started = Instant::now();
        let error = client.next_id("order").await.expect_err("no answer");
        let bound = Duration::from_millis(3 * 200 + idmint_client::STORE_CALL_MARGIN_MS + 500);
        assert!(matches!(error, ClientError::Unavailable { .. }), "{error}");
        assert!(started.elapsed() < bound, "{:?} for a bound of {bound:?}", started.elapsed());
        let error = client.public_ids("order", 3).await.expect_err("no answer");
        assert!(matches!(error, ClientError::Unavailable { .. }), "{error}");
    });
}

#[test]
fn a_server_stopping_gracefully_hands_over_to_the_next() {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let mut first = Node::shared(&store);
    let second = Node::shared(&store);
    let runtime = client_runtime();
    runtime.block_on(async {
        first.create_tag("order", 1000).await;
        let client = Client::builder()
            .endpoint(&first.url)
            .endpoint(&second.url)
            .min_lease(100)
            .build()
            .await
            .expect("client");
        let handle = client.tag("order").expect("handle");
        let mut ids = handle.next_ids(5_000).await.expect("ids before the stop");
        first.stop().await;
        for _ in 0..20 {
            ids.extend(handle.next_ids(5_000).await.expect("ids after the stop"));
        }
        assert_increasing(&ids, "across a graceful stop");
        assert_eq!(assert_unique(&[ids]), 105_000);
        assert!(second.handed_out("order") > 0, "no failover to the second server");
        client.close().await;
    });
}
