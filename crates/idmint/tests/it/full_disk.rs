//! A full disk under load, for real: the SQLite store and the node's marks on a 2 MiB tmpfs
//! (mounted by the test; needs root, as in CI), batches of 10 ids at a fixed step of 1 000,
//! the disk filled up while the node serves. Every id served is recorded; the node is killed
//! on the full disk, the space freed, and the node started again; then the disk fills once
//! more under the running node and is freed, and the node must serve again by itself. No
//! id may be served twice, because a range is served only after the store committed it and
//! its mark is on disk.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idmint::segment::{Count, SegmentConfig};
use idmint::{Error, Segments, Tag};
use idmint_store::SqliteStore;

use crate::test_store::create_tag;
use crate::tmpfs::Tmpfs;

/// Ids asked for before the disk fills: 20 ranges, a few dozen KiB of write-ahead log.
const IDS_BEFORE_FULL: usize = 20_000;
/// How long the node is loaded on the full disk.
const LOAD_ON_FULL_DISK: Duration = Duration::from_secs(3);
/// Longest the running node may take to serve again once space is freed: the refill's
/// longest backoff (`REFILL_RETRY_MS_MAX`, 2 s) and then some.
const RECOVERY_MAX: Duration = Duration::from_secs(5);

#[test]
fn a_full_disk_under_load_never_serves_an_id_twice_across_a_restart() {
    let Some(disk) = Tmpfs::mount(2 * 1024) else { return };
    let db = disk.path().join("ids.db");
    let config = SegmentConfig::default()
        .with_adaptive_step(false)
        .with_state_dir(disk.path().join("state"));
    let mut served = Vec::new();

    let node1 = runtime();
    let (tag, failed) = node1.block_on(async {
        let store = sqlite(&db).await;
        let tag = create_tag(&*store, "disk", 1_000).await;
        let segments = Segments::start(store, config.clone()).unwrap();
        let failed = load_ids(&segments, &tag, IDS_BEFORE_FULL, &mut served).await;
        assert_eq!(failed, 0, "requests failed before the disk was full");
        let filled = disk.fill();
        eprintln!("disk filled with {filled} bytes after {} ids", served.len());
        let failed = load_for(&segments, &tag, LOAD_ON_FULL_DISK, &mut served).await;
        (tag, failed)
    });
    assert!(failed > 0, "no request failed on the full disk: it did not fill");
    // kill -9 on the full disk: no shutdown, no give-back.
    drop(node1);
    disk.free();

    let node2 = runtime();
    node2.block_on(async {
        let segments = Segments::start(sqlite(&db).await, config.clone()).unwrap();
        let failed = load_ids(&segments, &tag, IDS_BEFORE_FULL, &mut served).await;
        assert_eq!(failed, 0, "requests failed after the restart with space freed");

        // Full again under the running node, then freed: it serves again by itself.
        disk.fill();
        let failed = load_for(&segments, &tag, LOAD_ON_FULL_DISK, &mut served).await;
        assert!(failed > 0, "no request failed on the second full disk");
        disk.free();
        let freed = Instant::now();
        let before = served.len();
        while served.len() == before {
            assert!(freed.elapsed() < RECOVERY_MAX, "no id within {RECOVERY_MAX:?} of space");
            load_for(&segments, &tag, Duration::from_millis(100), &mut served).await;
        }
        segments.shutdown().await;
    });

    let total = served.len();
    served.sort_unstable();
    let repeated: Vec<u64> = served.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
    assert!(
        repeated.is_empty(),
        "{} of {total} ids served twice, from {:?} to {:?}",
        repeated.len(),
        repeated.first(),
        repeated.last()
    );
}

/// Asks for batches of 10 until `ids` ids were served; returns the failed requests.
async fn load_ids(segments: &Segments, tag: &Tag, ids: usize, served: &mut Vec<u64>) -> u64 {
    let target = served.len() + ids;
    let mut failed = 0;
    while served.len() < target {
        failed += batch(segments, tag, served).await;
        assert!(failed < 1_000, "{failed} requests failed");
    }
    failed
}

/// Asks for batches of 10 for `duration`; returns the failed requests.
async fn load_for(
    segments: &Segments,
    tag: &Tag,
    duration: Duration,
    served: &mut Vec<u64>,
) -> u64 {
    let deadline = Instant::now() + duration;
    let mut failed = 0;
    while Instant::now() < deadline {
        failed += batch(segments, tag, served).await;
    }
    failed
}

/// One batch of 10, recorded; 1 if it failed (503: the store or the marks could not be
/// written), after a short pause so a failing node is not asked in a busy loop.
async fn batch(segments: &Segments, tag: &Tag, served: &mut Vec<u64>) -> u64 {
    match segments.next_ids(tag, Count::new(10).unwrap()).await {
        Ok(ranges) => {
            for range in ranges {
                served.extend(range.start()..range.end());
            }
            0
        }
        Err(Error::Unavailable { .. }) => {
            tokio::time::sleep(Duration::from_millis(5)).await;
            1
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn sqlite(path: &Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(path).await.unwrap())
}
