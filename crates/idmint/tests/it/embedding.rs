//! Embedding: a service generates ids in-process on the database it already has, handing the
//! library its own sqlx pool (no second pool, no idmint server). Runs against the servers
//! named by `IDMINT_TEST_MYSQL_URL` / `IDMINT_TEST_POSTGRES_URL` in a fresh database per run;
//! skipped with a note when unset (or when the library is built without the feature).

#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use idmint::segment::{Count, SegmentConfig};
use idmint::{Segments, Tag};
use sqlx::Connection;

/// Ids each test takes.
const IDS: u64 = 20_000;

/// Creates `idmint_em{secs}_{pid}_{kind}_{purpose}` on the server of `admin` (`kind`:
/// `mysql` or `postgres`); returns its URL.
pub(crate) async fn fresh_database(admin: &str, kind: &str, purpose: &str) -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let name = format!("idmint_em{secs}_{}_{kind}_{purpose}", std::process::id());
    let create = format!("CREATE DATABASE {name}");
    if kind == "mysql" {
        let mut conn = sqlx::MySqlConnection::connect(admin).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(create.clone())).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(create.clone())).execute(&mut conn).await.unwrap();
    }
    let (base, _query) = admin.split_once('?').unwrap_or((admin, ""));
    let server = base.rsplit_once('/').map_or(base, |(server, _db)| server);
    format!("{server}/{name}")
}

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
    let Ok(admin) = std::env::var("IDMINT_TEST_MYSQL_URL") else {
        eprintln!("skipped: IDMINT_TEST_MYSQL_URL is not set");
        return;
    };
    let url = fresh_database(&admin, "mysql", "pool").await;
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
    let Ok(admin) = std::env::var("IDMINT_TEST_POSTGRES_URL") else {
        eprintln!("skipped: IDMINT_TEST_POSTGRES_URL is not set");
        return;
    };
    let url = fresh_database(&admin, "postgres", "pool").await;
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(3).connect(&url).await.unwrap();
    let store = idmint::store::PgStore::from_pool(pool.clone(), Default::default()).await.unwrap();
    take_ids(Arc::new(store)).await;
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await.unwrap();
    assert_eq!(one, 1);
    assert!(!pool.is_closed());
}
