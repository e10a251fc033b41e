//! Sequence counters across a fail-back to a copy that was behind, on a private primary and
//! replica of the test's own: the replica is cut off while the counter advances on the
//! primary, then promoted; the old primary resyncs from it in full (taking its older data)
//! and is promoted again. The server answering keeps its `run_id`, so only the replication
//! history (`master_replid`) the counter records tells that its data went back.

use std::time::{Duration, Instant};

use idmint_core::Tag;
use idmint_store::redis::{RedisCounters, RedisUrl};
use idmint_store::{CounterKey, CounterStore, Take};
use idmint_testkit::servers::{PrivateRedis, free_port, installed};

/// The counter's hash.
const HASH: &str = "failback:seq:{orders}:";
/// How long a replica may take to receive a write.
const REPLICATION_WAIT: Duration = Duration::from_secs(10);

/// Both servers start a full sync at once (the default waits 5 s for more replicas).
const FAST_SYNC: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// A primary and its replica, in sync; `None` (skip recorded) without `redis-server`.
fn primary_and_replica() -> Option<(PrivateRedis, PrivateRedis)> {
    if installed::redis().is_none() {
        idmint_testkit::skip(idmint_testkit::skip::NO_REDIS);
        return None;
    }
    let primary = PrivateRedis::start_with(free_port().unwrap(), None, &FAST_SYNC).unwrap();
    let port = primary.port().to_string();
    let mut args = FAST_SYNC.to_vec();
    args.extend(["--replicaof", "127.0.0.1", &port]);
    let replica = PrivateRedis::start_with(free_port().unwrap(), None, &args).unwrap();
    replica.wait_in_sync().unwrap();
    Some((primary, replica))
}

#[tokio::test]
async fn a_counter_is_not_trusted_after_a_fail_back_to_a_lagging_copy() {
    let Some((primary, replica)) = primary_and_replica() else { return };
    let url = RedisUrl::parse(&primary.url()).unwrap().with_prefix("failback:").unwrap();
    let counters = RedisCounters::connect(&url).await.unwrap();
    let key = CounterKey { name: Tag::parse("orders").unwrap(), period: String::new() };
    assert_eq!(counters.take(&key, 1, 1).await.unwrap(), Take::NeedsSeed);
    counters.seed(&key, 0, 10_000).await.unwrap();
    assert_eq!(counters.take(&key, 100, 1).await.unwrap(), Take::Taken { last: 100 });
    // The replica has the counter at 100, and a replica in sync changes nothing.
    replicated(&replica, "100");
    assert_eq!(counters.take(&key, 100, 1).await.unwrap(), Take::Taken { last: 200 });
    replicated(&replica, "200");

    // Cut off at 200; 201..=700 are served from the primary alone.
    replica.cut_off().unwrap();
    assert_eq!(counters.take(&key, 500, 2).await.unwrap(), Take::Taken { last: 700 });

    // The fail-back: the lagging copy promoted, the old primary resynced from it (a full
    // resync: its history went further) and promoted again.
    replica.promote().unwrap();
    primary.replicate(replica.port()).unwrap();
    primary.wait_in_sync().unwrap();
    primary.promote().unwrap();
    assert_eq!(primary.cli(&["HGET", HASH, "cur"]).unwrap().trim(), "200", "no fail-back");

    // Same server, same run_id, older data: 201..=700 must not be served again.
    assert_eq!(counters.take(&key, 1, 3).await.unwrap(), Take::NeedsSeed);
    let state = counters.state(&key, 3).await.unwrap().unwrap();
    assert!(!state.current_run, "the counter counts as this data set's: {state:?}");
    assert!(!counters.raise_max(&key, 20_000).await.unwrap(), "a raise trusted it");
    // Reseeded (as the engine does, above its ceiling), the counter is trusted again.
    counters.seed(&key, 10_000, 20_000).await.unwrap();
    assert_eq!(counters.take(&key, 1, 3).await.unwrap(), Take::Taken { last: 10_001 });
    assert!(counters.state(&key, 3).await.unwrap().unwrap().current_run);
}

/// Waits until the replica's copy of the counter reads `cur` (`WAIT` would not do: it counts
/// the writes of its own connection, and redis-cli's has none).
fn replicated(replica: &PrivateRedis, cur: &str) {
    let started = Instant::now();
    while replica.cli(&["HGET", HASH, "cur"]).unwrap().trim() != cur {
        assert!(started.elapsed() < REPLICATION_WAIT, "the replica never got cur = {cur}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
