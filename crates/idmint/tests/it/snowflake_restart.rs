//! How soon a snowflake node serves, and what it never gives up for it: a static worker
//! stopped gracefully serves again at once after a restart (its local mark brought down to
//! the last id), one killed waits out its window; a fresh node leasing its worker id serves
//! within 3 s with the default keys; and a node whose readiness waits for segments alone is
//! ready while its generator settles, the generator's own probe saying why it is not; and a
//! cached ring killed after borrowing ahead never repeats a borrowed id after a restart.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idmint::clock::{Clock, ManualClock};
use idmint::node::{Engine, NodeError};
use idmint::segment::Count;
use idmint::snowflake::limits::{
    FIRST_ID_MS_DEFAULT_MAX, SETTLE_MS_DEFAULT, TIME_WINDOW_MS_DEFAULT, TOLERANCE_MS_DEFAULT,
};
use idmint::snowflake::{SnowflakeConfig, SnowflakeError, WorkerIdSource};
use idmint::store::MemoryStore;
use idmint::{NodeBuilder, NodeConfig, Snowflake};
use idmint_core::snowflake::Layout;
use idmint_store::{StoreUrl, WorkerStore};

/// The default keys, worker id 7 from the configuration, marks in `dir`.
fn static_config(dir: &std::path::Path) -> SnowflakeConfig {
    let mut config = SnowflakeConfig::new("snowflake", Layout::preset("snowflake").unwrap());
    config.worker = WorkerIdSource::Static(7);
    config.state_dir = Some(dir.to_path_buf());
    config
}

/// A static-worker generator on `clock` with its marks in `dir`.
async fn start_static(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Arc<Snowflake> {
    let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let clock = Arc::clone(clock) as Arc<dyn Clock>;
    Snowflake::start(Some(store), static_config(dir), clock).await.unwrap()
}

/// Issues ids a millisecond apart for one and a half windows (so the mark was written ahead
/// of the clock on the way), and returns them.
async fn issue(generator: &Snowflake, clock: &ManualClock) -> Vec<u64> {
    let mut ids = Vec::new();
    for _ in 0..TIME_WINDOW_MS_DEFAULT * 3 / 2 {
        ids.push(generator.next_id().await.unwrap());
        clock.advance(1);
    }
    ids
}

/// Issue ids, stop gracefully, start again a millisecond later: the generator issues at
/// once (its mark was one window ahead of the clock, and a restart used to wait for the
/// clock to pass it), and every id is distinct and above the ones before.
#[tokio::test]
async fn a_static_worker_stopped_gracefully_serves_at_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::at_system_time());
    let before = start_static(dir.path(), &clock).await;
    let mut ids = issue(&before, &clock).await;
    before.shutdown().await;
    drop(before);

    let after = start_static(dir.path(), &clock).await;
    assert!(after.readiness().is_ok(), "not ready at once: {:?}", after.readiness());
    let first = after.try_next_id().expect("no refusal").expect("an id without waiting");
    assert!(first > *ids.last().unwrap(), "{first} after {}", ids.last().unwrap());
    ids.push(first);
    clock.advance(1);
    ids.extend(issue(&after, &clock).await);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "the ids do not increase");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len(), "an id repeats");
    after.shutdown().await;
}

/// The same with a `kill -9` (no graceful stop): the window mark stays, and the restart
/// refuses until the clock has passed it, then issues above everything issued before.
#[tokio::test]
async fn a_static_worker_killed_waits_out_its_window_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::at_system_time());
    let before = start_static(dir.path(), &clock).await;
    let ids = issue(&before, &clock).await;
    drop(before);

    let after = start_static(dir.path(), &clock).await;
    assert!(matches!(after.readiness(), Err(SnowflakeError::ClockBehind { .. })));
    assert!(matches!(after.try_next_id(), Err(SnowflakeError::ClockBehind { .. })));
    clock.advance(TIME_WINDOW_MS_DEFAULT + TOLERANCE_MS_DEFAULT + 1);
    let next = after.next_id().await.unwrap();
    assert!(next > *ids.last().unwrap());
}

/// A fresh node with the default keys leasing its worker id (memory store, real clock)
/// serves its first snowflake id within [`FIRST_ID_MS_DEFAULT_MAX`] of its start, and not
/// before its start-up delay: the floor above any earlier holder's ids is kept.
#[tokio::test]
async fn a_fresh_lease_node_serves_its_first_snowflake_id_within_3_s_by_default() {
    let layout = Layout::preset("snowflake").unwrap();
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.snowflake = Ok(SnowflakeConfig::new("snowflake", layout));
    let started = Instant::now();
    let node = NodeBuilder::new(config).start().await.unwrap();
    let deadline = started + Duration::from_secs(15);
    let first = loop {
        match node.next_snowflake_ids(Count::ONE).await {
            Ok(ids) => break ids[0],
            Err(NodeError::Snowflake(SnowflakeError::LeaseSettling { .. })) => {}
            Err(other) => panic!("not a settling refusal: {other}"),
        }
        assert!(Instant::now() < deadline, "no snowflake id within 15 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let elapsed_ms = started.elapsed().as_millis() as u64;
    println!("first snowflake id {first} after {elapsed_ms} ms (default keys, lease)");
    assert!(elapsed_ms <= FIRST_ID_MS_DEFAULT_MAX, "first id after {elapsed_ms} ms");
    assert!(elapsed_ms >= SETTLE_MS_DEFAULT, "first id after {elapsed_ms} ms: below the floor");
    node.shutdown().await;
}

/// A node whose readiness waits for segments alone (`ready_engines`) is ready while its
/// generator settles; the generator's own probe answers why it is not, and the readiness
/// report lists it as not gating. Waiting for snowflake too, the node is not ready.
#[tokio::test]
async fn readiness_waits_for_the_engines_the_deployment_uses() {
    for (engines, ready) in [(vec![Engine::Segment], true), (Engine::ALL.to_vec(), false)] {
        let layout = Layout::preset("snowflake").unwrap();
        let mut config = NodeConfig::new(StoreUrl::Memory);
        config.snowflake = Ok(SnowflakeConfig::new("snowflake", layout));
        config.ready_engines = engines.clone();
        let node = NodeBuilder::new(config).start().await.unwrap();
        assert_eq!(node.ready().await.is_ok(), ready, "{engines:?}: {:?}", node.ready().await);
        let settling = node.engine_ready(Engine::Snowflake).await;
        assert!(
            matches!(settling, Err(NodeError::Snowflake(SnowflakeError::LeaseSettling { .. }))),
            "{settling:?}"
        );
        assert!(node.engine_ready(Engine::Segment).await.is_ok());
        let unused = node.engine_ready(Engine::Sequences).await;
        assert!(matches!(unused, Err(NodeError::NotConfigured { .. })), "{unused:?}");
        let report = node.readiness().await;
        let listed: Vec<(Engine, bool, bool)> =
            report.iter().map(|r| (r.engine, r.gates, r.state.is_ok())).collect();
        let gates = !ready;
        assert_eq!(
            listed,
            [(Engine::Segment, true, true), (Engine::Snowflake, gates, false)],
            "an engine the node does not run is not listed"
        );
        node.shutdown().await;
    }
}

/// A cached ring borrows ahead of a clock that stands still until the time mark stops it (its
/// own lead, 2 s, is longer than the mark's 1 s window), then the node is killed (no graceful
/// stop) and restarted on the same data directory: it issues nothing until the clock passes
/// the mark, then only ids above every borrowed one, from the generator and from a new ring.
#[tokio::test]
async fn a_cached_ring_killed_never_repeats_its_borrowed_ids_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::at_system_time());
    // 16 ids a unit, so borrowing a whole window is 16 000 ids.
    let layout = Layout::new(41, 10, 4, idmint_core::TimeUnit::Millis, 1_288_834_974_657).unwrap();
    let start = || {
        let mut config = static_config(dir.path());
        config.layout = layout;
        config.max_vibration = 0;
        let store: Arc<dyn WorkerStore> = Arc::new(MemoryStore::with_clock(clock.clone()));
        Snowflake::start(Some(store), config, Arc::clone(&clock) as Arc<dyn Clock>)
    };
    let before = start().await.unwrap();
    let ring = idmint::CachedSnowflake::start(Arc::clone(&before), 1_024, 2_000).unwrap();
    let mut borrowed = Vec::new();
    while let Ok(ids) = ring.next_ids(16).await {
        borrowed.extend(ids);
        assert!(borrowed.len() < 2_001 * 16, "borrowing ran past the lead");
    }
    let now_ms = clock.now_ms();
    let time_ms = |id: u64| layout.decode(id).unwrap().timestamp_ms;
    let latest = *borrowed.iter().max().unwrap();
    assert!(
        time_ms(latest) >= now_ms + TIME_WINDOW_MS_DEFAULT * 9 / 10,
        "the ring did not borrow up to the mark: {} ms ahead",
        time_ms(latest) - now_ms
    );
    assert!(time_ms(latest) <= now_ms + TIME_WINDOW_MS_DEFAULT, "borrowed past the mark");
    // Killed: no shutdown, the tasks end with the last handle.
    drop(ring);
    drop(before);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let after = start().await.unwrap();
    assert!(!matches!(after.try_next_id(), Ok(Some(_))), "an id below the mark after a restart");
    clock.advance(TIME_WINDOW_MS_DEFAULT + TOLERANCE_MS_DEFAULT + 1);
    let next = after.next_id().await.unwrap();
    assert!(next > latest, "{next} at or below a borrowed id {latest}");
    let ring = idmint::CachedSnowflake::start(Arc::clone(&after), 1_024, 2_000).unwrap();
    let from_ring = ring.next_ids(64).await.unwrap();
    assert!(from_ring.iter().all(|&id| id > next), "the new ring went below the generator");
    ring.shutdown().await;
    after.shutdown().await;
}
