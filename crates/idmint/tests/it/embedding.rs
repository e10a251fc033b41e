//! Embedding: a service generates ids in-process on the database it already has, handing the
//! library its own sqlx pool (no second pool, no idmint server). Runs on the test kit's
//! MariaDB and PostgreSQL (`IDMINT_TEST_MYSQL_URL` / `IDMINT_TEST_POSTGRES_URL`, else private
//! servers) in a fresh database per test; skipped, and reported, when neither is there.

#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::collections::HashSet;
use std::sync::Arc;

use idmint::segment::{Count, SegmentConfig};
use idmint::{Segments, Tag};

/// Ids each test takes.
const IDS: u64 = 20_000;

/// Takes `IDS` ids of a new tag through `segments` in batches and singles; all unique.
async fn take_ids(store: Arc<dyn idmint::store::SegmentStore>) {
    let tag = Tag::parse("embedded").unwrap();
    let spec = idmint::store::TagSpec {
        tag: tag.clone(),
        step: idmint_core::Step::new(500).unwrap(),
        start: Some(idmint_core::StartId::new(1_000).unwrap()),
        force: false,
        description: Default::default(),
    };
    store.create_tag(&spec).await.unwrap();
    let segments = Segments::start(store, SegmentConfig::default()).unwrap();
    let mut seen = HashSet::new();
    let mut first = None;
    while (seen.len() as u64) < IDS {
        for range in segments.next_ids(&tag, Count::new(37).unwrap()).await.unwrap() {
            for id in range.ids() {
                first.get_or_insert(id);
                assert!(seen.insert(id), "id {id} twice");
            }
        }
        assert!(seen.insert(segments.next_id(&tag).await.unwrap()));
    }
    assert_eq!(first, Some(1_000), "the tag's start id");
    segments.shutdown().await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_hands_its_own_mysql_pool_to_the_library() {
    let Some(url) = idmint_testkit::mysql::fresh_database("pool").await else {
        return;
    };
    // The application's pool, made the application's way.
    let pool = sqlx::mysql::MySqlPoolOptions::new().max_connections(3).connect(&url).await.unwrap();
    let store =
        idmint::store::MySqlStore::from_pool(pool.clone(), Default::default()).await.unwrap();
    take_ids(Arc::new(store)).await;
    // The library borrowed the pool; the application still uses it.
    let one: i64 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.unwrap();
    assert_eq!(one, 1);
    assert!(!pool.is_closed());
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_hands_its_own_postgres_pool_to_the_library() {
    let Some(url) = idmint_testkit::postgres::fresh_database("pool").await else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(3).connect(&url).await.unwrap();
    let store = idmint::store::PgStore::from_pool(pool.clone(), Default::default()).await.unwrap();
    take_ids(Arc::new(store)).await;
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.unwrap();
    assert_eq!(one, 1);
    assert!(!pool.is_closed());
}
