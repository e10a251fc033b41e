//! `Node`: built from a typed configuration, its operations hold the shared rules (a
//! formatted tag is not leased, leases given back are checked), and its shutdown stops
//! everything it started, the Redis retry loop included.

use std::sync::Arc;

use idmint::node::{FormatConfig, LeaseParts, NodeError, NodeStartError};
use idmint::segment::Count;
use idmint::sequence::time_zone;
use idmint::{IdFormat, Node, NodeBuilder, NodeConfig};
use idmint_store::{MemoryStore, SegmentStore, StoreUrl};

use crate::test_store::create_tag;

#[tokio::test]
async fn a_node_serves_plain_and_public_ids_and_refuses_to_lease_a_formatted_tag() {
    let store = Arc::new(MemoryStore::new());
    let plain = create_tag(&*store, "plain", 100).await;
    let code = create_tag(&*store, "code", 100).await;
    let mut config = NodeConfig::new(StoreUrl::Memory);
    let format = IdFormat::new("C-{id}", time_zone("UTC").unwrap(), None).unwrap();
    config.formats = vec![FormatConfig { tag: code.clone(), format, force_key_change: false }];
    let node = start(config, store).await;
    assert_eq!(node.next_public_text_by_name("plain").await.unwrap(), "1");
    assert_eq!(node.next_public_text_by_name("code").await.unwrap(), "C-1");
    let refused = node.lease(&code, Count::ONE).await.unwrap_err();
    assert!(matches!(refused, NodeError::FormattedTag(ref tag) if *tag == code), "{refused}");
    let leases = node.lease(&plain, Count::new(10).unwrap()).await.unwrap();
    let lease = leases[0];
    let parts = |lease: idmint::segment::RangeLease| LeaseParts {
        start: lease.range.start(),
        end: lease.range.end(),
        proof: lease.proof,
    };
    let too_many = vec![parts(lease); idmint::node::RETURN_LEASES_MAX + 1];
    let refused = node.take_back(&plain, 2, 12, &too_many).unwrap_err();
    assert!(matches!(refused, NodeError::BadLease(_)), "{refused}");
    let returned = node.take_back(&plain, 2, 12, &[parts(lease)]).unwrap();
    assert_eq!(returned, 10, "the whole unused lease comes back");
    let without = node.snowflake_ids(Count::ONE).await.unwrap_err();
    assert!(without.to_string().contains("not configured"), "{without}");
    node.shutdown().await;
}

/// A tag's policy is the store's, not one node's: a node that serves a tag's format records
/// it, and a later node on the same store without that format refuses the tag on every take
/// and lease, final and naming the fix, taking nothing from the store, while it serves its
/// other tags; a policy value this version does not know is refused the same way.
#[tokio::test]
async fn a_node_without_a_recorded_format_refuses_the_tag() {
    use idmint::node::{Feature, POLICY_NAME};
    use idmint_store::{RangeStore, TagMetaStore};

    let store = Arc::new(MemoryStore::new());
    create_tag(&*store, "plain", 100).await;
    let code = create_tag(&*store, "code", 100).await;
    let later = create_tag(&*store, "later", 100).await;
    store.compare_and_set_meta(&later, POLICY_NAME, None, "future").await.unwrap();
    let mut config = NodeConfig::new(StoreUrl::Memory);
    let format = IdFormat::new("C-{id}", time_zone("UTC").unwrap(), None).unwrap();
    config.formats = vec![FormatConfig { tag: code.clone(), format, force_key_change: false }];
    let formatted = start(config, Arc::clone(&store)).await;
    assert_eq!(formatted.next_public_text_by_name("code").await.unwrap(), "C-1");
    formatted.shutdown().await;

    let node = start(NodeConfig::new(StoreUrl::Memory), Arc::clone(&store)).await;
    let max_id = store.get_tag(&code).await.unwrap().unwrap().max_id;
    let refused = |error: NodeError, value: &str| match error {
        NodeError::NotConfigured { feature: Feature::TagPolicy, reason } => {
            assert!(reason.contains(value), "{reason}");
        }
        other => panic!("{other}"),
    };
    refused(node.next_public_text_by_name("code").await.unwrap_err(), "[format.code]");
    assert!(node.try_public_text_by_name("code").is_none());
    refused(node.next_public_ids(&code, Count::ONE).await.unwrap_err(), "[format.code]");
    refused(node.lease(&code, Count::ONE).await.unwrap_err(), "[format.code]");
    refused(node.next_public_text_by_name("later").await.unwrap_err(), "`future`");
    assert_eq!(store.get_tag(&code).await.unwrap().unwrap().max_id, max_id, "nothing taken");
    assert_eq!(node.next_public_text_by_name("plain").await.unwrap(), "1");
    node.shutdown().await;
}

/// A Redis that refuses every connection: the node keeps retrying, on its own tracker, and
/// stops at shutdown (no connection attempt after it, and the shutdown does not wait out
/// the 2 s retry pause).
#[cfg(feature = "redis")]
#[tokio::test]
async fn the_redis_retry_loop_is_the_nodes_and_stops_at_shutdown() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let attempts = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&attempts);
    let refuser = tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(connection);
        }
    });
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.sequences = Ok(idmint::node::SequencesConfig {
        redis: format!("redis://{addr}"),
        engine: idmint::sequence::SequenceConfig::default(),
    });
    let node = start(config, Arc::new(MemoryStore::new())).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let refusal = node.sequences().expect_err("no engine without Redis");
        // Retryable: Redis may come up without anything else changing.
        assert!(matches!(refusal, NodeError::SequencesNotRunning(_)), "{refusal:?}");
        let reason = refusal.to_string();
        if reason.contains("not reachable yet") && attempts.load(Ordering::SeqCst) > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the node never failed over: {reason}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = std::time::Instant::now();
    node.shutdown().await;
    assert!(started.elapsed() < Duration::from_millis(1_500), "{:?}", started.elapsed());
    // Said as a shutdown, not as a Redis still being retried.
    let refusal = node.sequences().expect_err("no engine after shutdown");
    assert!(matches!(refusal, NodeError::Segment(idmint::Error::ShuttingDown)), "{refusal:?}");
    let after = attempts.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(idmint::node::REDIS_RETRY_MS + 1_000)).await;
    assert_eq!(attempts.load(Ordering::SeqCst), after, "the loop ran on after shutdown");
    refuser.abort();
}

/// A damaged sequence marks file refuses the node's start, before anything starts (Redis is
/// never asked), naming the file and the fix.
#[tokio::test]
async fn a_damaged_sequence_marks_file_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(idmint::sequence::SEQUENCE_MARKS_FILE);
    std::fs::write(&file, "orders 12\n").unwrap();
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.sequences = Ok(idmint::node::SequencesConfig {
        redis: "redis://127.0.0.1:1".to_string(),
        engine: idmint::sequence::SequenceConfig {
            state_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        },
    });
    let refused = NodeBuilder::new(config).stores(Arc::new(MemoryStore::new())).start().await;
    let Err(NodeStartError::Sequences(error)) = refused else {
        panic!("a damaged marks file was accepted: {:?}", refused.map(|_| ()))
    };
    let message = error.to_string();
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(message.contains("is damaged") && message.contains("Restore it"), "{message}");
}

async fn start(config: NodeConfig, store: Arc<MemoryStore>) -> Node {
    NodeBuilder::new(config).stores(store).start().await.unwrap()
}

/// A segment store handed to the builder while `config.store` is `memory://` would leave the
/// worker leases to a second, private in-memory store: two such nodes sharing one store would
/// both lease worker id 0. The builder refuses, saying how to hand the store in; with the
/// store handed in for every part, two nodes lease different worker ids.
#[tokio::test]
async fn a_node_never_splits_its_stores() {
    let store = Arc::new(MemoryStore::new());
    let layout = idmint::snowflake::Layout::preset("snowflake").unwrap();
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.snowflake = Ok(idmint::snowflake::SnowflakeConfig::new("snowflake", layout));
    let segments: Arc<dyn SegmentStore> = store.clone();
    let refused = NodeBuilder::new(config.clone()).segment_store(segments).start().await;
    let Err(NodeStartError::Parts(reason)) = refused else {
        panic!("a split store was accepted: {:?}", refused.map(|_| ()))
    };
    assert!(reason.contains("NodeBuilder::stores"), "{reason}");

    let first = NodeBuilder::new(config.clone()).stores(store.clone()).start().await.unwrap();
    let second = NodeBuilder::new(config).stores(store).start().await.unwrap();
    let worker = |node: &Node| node.snowflake().expect("a generator").status().worker;
    assert_ne!(worker(&first), worker(&second), "two nodes leased one worker id");
    first.shutdown().await;
    second.shutdown().await;
}

/// A node opens its store URL once: with `pool_max=1` it holds one connection to its
/// database, though its segments, worker-id lease and sequence ceilings all use it (each
/// opened its own pool once, three connections).
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holds_one_mysql_connection_with_pool_max_1() {
    let Some(url) = idmint_testkit::mysql::fresh_database("onepool").await else { return };
    let node = node_on_one_pool(&url).await;
    let admin = idmint_testkit::mysql::server_url().unwrap();
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&admin).await.unwrap();
    let connections: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = ?")
            .bind(database_of(&url))
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(connections, 1, "connections of one node with pool_max=1");
    node.shutdown().await;
}

/// The same on PostgreSQL.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holds_one_postgres_connection_with_pool_max_1() {
    let Some(url) = idmint_testkit::postgres::fresh_database("onepool").await else { return };
    let node = node_on_one_pool(&url).await;
    let admin = idmint_testkit::postgres::server_url().unwrap();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await.unwrap();
    let connections: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1")
            .bind(database_of(&url))
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(connections, 1, "connections of one node with pool_max=1");
    node.shutdown().await;
}

/// A node on `url` with `pool_max=1` that has used every part of its store: a tag taken
/// from, a worker id leased, its sequences' ceiling store opened (their Redis need not
/// answer for that).
#[cfg(any(feature = "mysql", feature = "postgres"))]
async fn node_on_one_pool(url: &str) -> Node {
    let joiner = if url.contains('?') { '&' } else { '?' };
    let mut config = NodeConfig::new(StoreUrl::parse(&format!("{url}{joiner}pool_max=1")).unwrap());
    let layout = idmint::snowflake::Layout::preset("snowflake").unwrap();
    config.snowflake = Ok(idmint::snowflake::SnowflakeConfig::new("snowflake", layout));
    config.sequences = Ok(idmint::node::SequencesConfig {
        redis: "redis://127.0.0.1:1".to_string(),
        engine: idmint::sequence::SequenceConfig::default(),
    });
    let node = NodeBuilder::new(config).start().await.unwrap();
    node.create_tag(&idmint_store::TagSpec {
        tag: idmint::Tag::parse("order").unwrap(),
        step: idmint::segment::Step::new(10).unwrap(),
        start: None,
        description: Default::default(),
        force: false,
    })
    .await
    .unwrap();
    assert_eq!(node.next_public_text_by_name("order").await.unwrap(), "1");
    let generator = node.snowflake().expect("the snowflake generator started");
    assert!(generator.status().lease_until_ms.is_some(), "no worker id leased");
    node
}

/// The database a SQL URL names.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn database_of(url: &str) -> String {
    let path = url.rsplit_once('/').unwrap().1;
    path.split('?').next().unwrap().to_string()
}
