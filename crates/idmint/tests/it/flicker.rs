//! Flicker through the segment engine: a node serving a tag from two ticket databases
//! (increment 2, offsets 1 and 2, set by idmint per session) keeps handing out ids when one
//! database is cut off midway, without a single error, and never repeats one. Runs against
//! the test kit's MariaDB in a fresh database; skipped (and reported) without one.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idmint::segment::{Count, SegmentConfig};
use idmint::store::StoreUrl;
use idmint::{Segments, Tag};

use crate::gate::{Gate, upstream};

/// Ids the node hands out; database b is cut after half of them.
const IDS: u64 = 100_000;
/// Client tasks taking ids at once.
const CLIENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_keeps_serving_when_one_ticket_database_goes_away() {
    let Some(url) = idmint_testkit::mysql::fresh_database("flicker").await else {
        return;
    };
    // The ticket parameters follow; the server URL's own query is not needed.
    let url = url.split('?').next().unwrap().replacen("mysql://", "flicker+mysql://", 1);
    let gate = Gate::start(&upstream(&url)).await;
    let urls = format!(
        "{url}?table=tickets_a&increment=2&offset=1 {}?table=tickets_b&increment=2&offset=2",
        gate.url(&url)
    );
    let store = idmint::store::open(&StoreUrl::parse(&urls).unwrap()).await.unwrap();
    let tag = Tag::parse("order").unwrap();
    store
        .create_tag(&idmint::store::TagSpec {
            tag: tag.clone(),
            step: idmint_core::Step::new(50).unwrap(),
            start: Some(idmint_core::StartId::new(1).unwrap()),
            force: false,
            description: Default::default(),
        })
        .await
        .unwrap();
    let segments = Segments::start(store, SegmentConfig::default()).unwrap();

    let taken = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (segments, tag, taken) = (Arc::clone(&segments), tag.clone(), Arc::clone(&taken));
            tokio::spawn(async move {
                let mut ids = Vec::new();
                while taken.load(Ordering::SeqCst) < IDS {
                    let ranges = segments.next_ids(&tag, Count::new(25).unwrap()).await.unwrap();
                    for range in ranges {
                        taken.fetch_add(range.len(), Ordering::SeqCst);
                        ids.extend(range.ids());
                    }
                }
                ids
            })
        })
        .collect();
    while taken.load(Ordering::SeqCst) < IDS / 2 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    gate.cut();
    let cut_at = taken.load(Ordering::SeqCst);
    // Once a refill in flight at the cut has landed, every block allocated later lies above
    // what was allocated until then.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let high_water_at_cut = segments.status(&tag).unwrap().buffer.high_water;

    let mut seen = HashSet::new();
    for client in clients {
        let ids = client.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a client's ids went back");
        for id in ids {
            assert!(seen.insert(id), "id {id} handed out twice");
        }
    }
    assert!(seen.len() as u64 >= IDS, "{} ids", seen.len());
    assert!(cut_at < IDS, "the cut came after the last id");
    // After the cut only database a (offset 1: odd tickets) served, many blocks of it.
    let blocks_after: HashSet<u64> =
        seen.iter().filter(|id| **id >= high_water_at_cut).map(|id| id / 50).collect();
    assert!(blocks_after.len() >= 100, "{} blocks after the cut", blocks_after.len());
    assert!(blocks_after.iter().all(|b| b % 2 == 1), "database b served after the cut");
    assert_eq!(segments.status(&tag).unwrap().refill_failures, 0, "a refill failed");
    segments.shutdown().await;
}
