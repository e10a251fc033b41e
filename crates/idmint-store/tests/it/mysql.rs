//! The MySQL / MariaDB backend against the server the test kit gives
//! (`IDMINT_TEST_MYSQL_URL`'s, else a private `mariadbd`; skipped when neither is there): the
//! conformance suite in both allocation modes, and what only this backend can show: a table
//! made by Meituan Leaf is served as is and never altered, an allocation is one round trip,
//! the pool stays within `pool_max`, an application's own pool is left open, and no error
//! shows a password.
//!
//! Every run makes its own database (the kit's `fresh_database`, which also drops those of
//! runs older than two hours) and every check its own table in it (`?table=alloc_N`), so runs
//! and checks never see each other's rows; nothing else on the server is touched. Round trips and connections are counted by a TCP relay
//! between the store and the server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use idmint_core::StartId;
use idmint_core::limits::{STEP_MAX, TAG_COUNT_MAX};
use idmint_store::{
    AllocMode, Allocation, MySqlStore, RangeStore, SegmentStore, SqlOptions, SqlUrl, StoreError,
    StoreUrl, TableName,
};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OnceCell;

use crate::conformance::{
    Subject, allocate_concurrently, allocate_concurrently_with_steps, assert_tiles, create, range,
    record, requested, spec, tag,
};

/// Meituan Leaf's table as its README creates it (all columns nullable, no defaults).
const LEAF_COLUMNS: &str = "(biz_tag varchar(128) primary key, max_id bigint, step int, \
                            description varchar(256), update_time timestamp)";

/// The conformance suite with the default `alloc=update`, opened through `idmint_store::open`.
mod update {
    use crate::conformance::{Subject, conformance_suite};

    async fn fresh() -> Option<Subject> {
        super::fresh(super::AllocMode::Update).await
    }

    conformance_suite!(fresh);
}

/// The conformance suite with `alloc=cas`: read, then compare-and-set.
mod cas {
    use crate::conformance::{Subject, conformance_suite};

    async fn fresh() -> Option<Subject> {
        super::fresh(super::AllocMode::Cas).await
    }

    conformance_suite!(fresh);
}

async fn fresh(alloc: AllocMode) -> Option<Subject> {
    let mode = match alloc {
        AllocMode::Update => "update",
        AllocMode::Cas => "cas",
    };
    let url = table_url(&fresh_table("alloc"), &format!("alloc={mode}")).await?;
    let store: Arc<dyn SegmentStore> = match alloc {
        AllocMode::Update => idmint_store::open(&StoreUrl::Mysql(url)).await.unwrap(),
        AllocMode::Cas => Arc::new(MySqlStore::connect(&url).await.unwrap()),
    };
    Some(Subject::new(store))
}

#[tokio::test]
async fn a_leaf_table_is_served_as_is_and_never_altered() {
    let Some(base) = database_url().await else { return };
    let table = fresh_table("leaf_alloc");
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    execute(&mut raw, &format!("CREATE TABLE {table} {LEAF_COLUMNS}")).await;
    execute(
        &mut raw,
        &format!(
            "INSERT INTO {table} (biz_tag, max_id, step, description) VALUES \
             ('leaf-segment-test', 1000, 2000, 'Test leaf Segment Mode Get Id'), \
             ('leaf-one', 1, 1, NULL), ('leaf-big', 3000000000, 1000000, 'x')"
        ),
    )
    .await;
    let layout = show_create_table(&mut raw, &table).await;

    let url = table_url(&table, "").await.unwrap();
    let store: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
    let listed: Vec<_> = store
        .list_tags()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.tag.to_string(), r.max_id, r.step, r.description))
        .collect();
    assert_eq!(
        listed,
        [
            ("leaf-big".into(), 3_000_000_000, 1_000_000, "x".into()),
            ("leaf-one".into(), 1, 1, String::new()),
            ("leaf-segment-test".into(), 1000, 2000, "Test leaf Segment Mode Get Id".into()),
        ]
    );

    let leaf = tag("leaf-segment-test");
    assert_eq!(store.allocate(&leaf, None).await.unwrap().range, range(1000, 3000));
    assert_eq!(store.allocate(&leaf, None).await.unwrap().range, range(3000, 5000));
    let one = tag("leaf-one");
    assert_eq!(store.allocate(&one, None).await.unwrap().range, range(1, 2));
    assert_eq!(store.allocate(&one, None).await.unwrap().range, range(2, 3));
    let big = tag("leaf-big");
    let got = store.allocate(&big, None).await.unwrap().range;
    assert_eq!(got, range(3_000_000_000, 3_001_000_000));
    let row = record(&store, &leaf).await;
    assert_eq!((row.max_id, row.step), (5000, 2000));
    assert!(row.update_time_s > 0, "an allocation must stamp update_time");

    // A Leaf node sharing the table runs Leaf's own statements; the ranges stay disjoint.
    execute(
        &mut raw,
        &format!("UPDATE {table} SET max_id = max_id + step WHERE biz_tag = 'leaf-segment-test'"),
    )
    .await;
    assert_eq!(store.allocate(&leaf, None).await.unwrap().range, range(7000, 9000));
    // A tag idmint creates in Leaf's table is a row Leaf reads with its own query.
    store.create_tag(&spec("made-by-idmint", 10, 5, "")).await.unwrap();
    assert_eq!(store.allocate(&tag("made-by-idmint"), None).await.unwrap().range, range(10, 15));
    let leafs_view: (String, i64, i32) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT biz_tag, max_id, step FROM {table} WHERE biz_tag = 'made-by-idmint'"
    )))
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(leafs_view, ("made-by-idmint".to_string(), 15, 5));

    assert_eq!(show_create_table(&mut raw, &table).await, layout, "the Leaf table was altered");
}

#[tokio::test]
async fn the_table_made_is_leafs() {
    let Some(base) = database_url().await else { return };
    let table = fresh_table("made");
    let url = table_url(&table, "").await.unwrap();
    let store = MySqlStore::connect(&url).await.unwrap();
    assert_eq!(store.describe(), format!("{}?table={table}", sql_url(&base).redacted()));
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    let columns: Vec<(String, String, String, Option<String>)> = sqlx::query(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(&table)
    .fetch_all(&mut raw)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect();
    let column = |name: &str, ty: &str, nullable: &str, key: &str| {
        (name.to_string(), ty.to_string(), nullable.to_string(), Some(key.to_string()))
    };
    assert_eq!(
        columns,
        [
            column("biz_tag", "varchar(128)", "NO", "PRI"),
            column("max_id", "bigint(20)", "NO", ""),
            column("step", "int(11)", "NO", ""),
            column("description", "varchar(256)", "YES", ""),
            column("update_time", "timestamp", "NO", ""),
        ]
    );
    // Opening again uses the table as it is.
    let layout = show_create_table(&mut raw, &table).await;
    MySqlStore::connect(&table_url(&table, "").await.unwrap()).await.unwrap();
    assert_eq!(show_create_table(&mut raw, &table).await, layout);
}

#[tokio::test]
async fn an_allocation_is_one_round_trip() {
    let Some(base) = database_url().await else { return };
    let relay = Relay::start(&base).await;
    let table = fresh_table("trips");
    let url = relay.url(&base, &format!("table={table}&pool_max=1"));
    let store: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
    let counted = create(&store, "counted", 1, 10).await;
    let full = create(&store, "full", StartId::MAX, STEP_MAX).await;
    store.allocate(&full, None).await.unwrap();

    // sqlx pings every connection as it goes back to the pool, after the caller has its
    // answer: that ping is counted apart from the requests the caller waits for.
    let one_request = Trips { requests: 1, pings: 1 };
    let served = relay.trips_of(store.allocate(&counted, None)).await;
    let allocated = |start, end| Ok(Allocation { range: range(start, end), tag_step: 10 });
    assert_eq!(served, (one_request, allocated(1, 11)), "allocation with the tag's step");
    let served = relay.trips_of(store.allocate(&counted, requested(25))).await;
    assert_eq!(served, (one_request, allocated(11, 36)), "allocation with a raised step");
    // A tag's step, once seen, is named in the UPDATE: when the row no longer matches, the
    // full statement runs and explains the refusal, one request more.
    let (trips, refused) = relay.trips_of(store.allocate(&full, None)).await;
    assert!(matches!(refused, Err(StoreError::Exhausted { .. })), "{refused:?}");
    assert_eq!(trips, Trips { requests: 2, pings: 2 }, "first refusal after a success");
    // Refusals are then explained from the same round trip.
    let (trips, refused) = relay.trips_of(store.allocate(&full, None)).await;
    assert!(matches!(refused, Err(StoreError::Exhausted { .. })), "{refused:?}");
    assert_eq!(trips, one_request, "refused allocation");
    let never = tag("never-created");
    let (trips, refused) = relay.trips_of(store.allocate(&never, None)).await;
    assert_eq!((trips, refused), (one_request, Err(StoreError::TagNotFound(never))));
    // The stale LAST_INSERT_ID() the refusals left on the connection is not reused.
    assert_eq!(store.allocate(&counted, None).await.unwrap().range, range(36, 46));

    // alloc=cas reads, then writes: two requests once its statements are prepared.
    let url = relay.url(&base, &format!("table={table}&pool_max=1&alloc=cas"));
    let cas: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
    cas.allocate(&counted, None).await.unwrap();
    let served = relay.trips_of(cas.allocate(&counted, None)).await;
    let two_requests = Trips { requests: 2, pings: 1 };
    assert_eq!(served, (two_requests, allocated(56, 66)), "uncontended cas allocation");
}

/// The step an allocation names in its UPDATE is only a hint: a row whose step another
/// writer changed (a Leaf console, another node) is read again, never reserved with the old
/// step, and the range reported is the one the row's new step reserved.
#[tokio::test]
async fn a_step_changed_elsewhere_is_used_from_the_next_allocation() {
    let Some(base) = database_url().await else { return };
    let table = fresh_table("restepped");
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    let store: Arc<dyn SegmentStore> =
        Arc::new(MySqlStore::connect(&table_url(&table, "").await.unwrap()).await.unwrap());
    let tag = create(&store, "restepped", 1, 10).await;
    let allocated = |start, end, tag_step| Ok(Allocation { range: range(start, end), tag_step });
    assert_eq!(store.allocate(&tag, None).await, allocated(1, 11, 10));
    assert_eq!(store.allocate(&tag, None).await, allocated(11, 21, 10));
    for (step, want) in [(3, allocated(21, 24, 3)), (40, allocated(24, 64, 40))] {
        execute(&mut raw, &format!("UPDATE {table} SET step = {step} WHERE biz_tag = 'restepped'"))
            .await;
        assert_eq!(store.allocate(&tag, None).await, want, "step {step}");
    }
    assert_eq!(store.allocate(&tag, requested(50)).await, allocated(64, 114, 40));
    assert_eq!(record(&store, &tag).await.max_id, 114);
}

/// The connection of an allocation whose answer was read is kept for the next one, which
/// so costs no release ping; one whose future is dropped while its UPDATE waits is never
/// kept, and every allocation after it gets its own answer (its range ends at the row's
/// `max_id`), not the one the dropped call left on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_kept_only_after_its_answer_was_read() {
    let Some(base) = database_url().await else { return };
    let relay = Relay::start(&base).await;
    let table = fresh_table("parked");
    let url = relay.url(&base, &format!("table={table}&pool_max=2"));
    let store: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
    let tag = create(&store, "parked", 1, 10).await;
    store.allocate(&tag, None).await.unwrap();
    let (trips, served) = relay.trips_of(store.allocate(&tag, None)).await;
    assert_eq!((trips, served.unwrap().range), (Trips { requests: 1, pings: 0 }, range(11, 21)));

    let mut locker = MySqlConnection::connect(&base).await.unwrap();
    execute(&mut locker, "BEGIN").await;
    execute(&mut locker, &format!("SELECT max_id FROM {table} FOR UPDATE")).await;
    // Sent on the kept connection, then left waiting for the row lock: dropped unanswered.
    let (trips, dropped) = relay
        .trips_of(async {
            let wait = Duration::from_millis(300);
            let dropped = tokio::time::timeout(wait, store.allocate(&tag, None)).await;
            execute(&mut locker, "COMMIT").await;
            dropped
        })
        .await;
    assert!(dropped.is_err(), "the allocation did not wait for the row lock");
    // Its connection went back through sqlx's release, which reads the late answer.
    assert_eq!(trips, Trips { requests: 1, pings: 1 }, "the dropped call's connection was kept");
    let mut end = 21;
    for _ in 0..6 {
        let served = store.allocate(&tag, None).await.unwrap().range;
        let max_id = record(&store, &tag).await.max_id;
        assert_eq!(served.end(), max_id, "{served:?} is not this allocation's answer");
        assert!(served.start() >= end, "{served:?} overlaps ids up to {end}");
        end = served.end();
    }
}

/// A store dropped after its runtime (an embedder's last handle, kept past shutdown) closes
/// the connections it kept, rather than panic in their release, which needs a runtime.
#[test]
fn a_store_dropped_outside_a_runtime_closes_its_kept_connections() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(async {
        database_url().await?;
        let url = table_url(&fresh_table("outlived"), "pool_max=4").await.unwrap();
        let store: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
        let tag = create(&store, "outlived", 1, 10).await;
        store.allocate(&tag, None).await.unwrap();
        store.allocate(&tag, None).await.unwrap();
        Some(store)
    });
    drop(runtime);
    drop(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_two_serves_eight_concurrent_allocators() {
    const TASK_COUNT: usize = 8;
    const ALLOCATIONS_PER_TASK: usize = 25;
    let Some(base) = database_url().await else { return };
    let relay = Relay::start(&base).await;
    let table = fresh_table("pooled");
    let url = relay.url(&base, &format!("table={table}&pool_max=2"));
    let store: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
    let shared = create(&store, "shared", 5, 3).await;

    let stores = vec![Arc::clone(&store); TASK_COUNT];
    let ranges: Vec<_> = allocate_concurrently(&stores, &shared, ALLOCATIONS_PER_TASK)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(ranges.len(), TASK_COUNT * ALLOCATIONS_PER_TASK);
    let max_id = record(&store, &shared).await.max_id;
    assert_eq!(max_id, 5 + 3 * ranges.len() as u64);
    assert_tiles(ranges, 5, max_id);
    let open_max = relay.stats.open_max.load(Ordering::SeqCst);
    assert!((1..=2).contains(&open_max), "{open_max} connections were open at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_in_either_mode_share_a_table_without_overlap() {
    const ALLOCATIONS_PER_TASK: usize = 30;
    let Some(_) = database_url().await else { return };
    let table = fresh_table("shared");
    // Three nodes, each with its own pool: two compare-and-set against each other (two
    // tasks each, which queue within the node) and against one allocating with Leaf's
    // atomic update. A compare-and-set needs the row to stay still for two round trips, so
    // against more than one tireless updater it would often give up as contended.
    let mut callers: Vec<(Arc<dyn SegmentStore>, _)> = Vec::new();
    for (alloc, tasks) in [("cas", 2), ("cas", 2), ("update", 1)] {
        let url = table_url(&table, &format!("alloc={alloc}")).await.unwrap();
        let node: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
        callers.extend(vec![(node, requested(15)); tasks]);
    }
    let shared = create(&callers[0].0, "shared", 1, 10).await;
    let ranges: Vec<_> = allocate_concurrently_with_steps(&callers, &shared, ALLOCATIONS_PER_TASK)
        .await
        .into_iter()
        .flatten()
        .map(|allocation| allocation.range)
        .collect();
    assert_eq!(ranges.len(), callers.len() * ALLOCATIONS_PER_TASK);
    let max_id = record(&callers[4].0, &shared).await.max_id;
    assert_eq!(max_id, 1 + 15 * ranges.len() as u64);
    assert_tiles(ranges, 1, max_id);
}

#[tokio::test]
async fn rows_idmint_cannot_serve_are_refused_and_left_unchanged() {
    let Some(base) = database_url().await else { return };
    let table = fresh_table("leaf_alloc");
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    execute(&mut raw, &format!("CREATE TABLE {table} {LEAF_COLUMNS}")).await;
    execute(
        &mut raw,
        &format!(
            "INSERT INTO {table} (biz_tag, max_id, step) VALUES ('zero-step', 7, 0), \
             ('negative', -100, 10), ('null-step', 5, NULL), ('null-max', NULL, 10), \
             (CONCAT('has', CHAR(9), 'tab'), 1, 10), ('', 1, 10), ('valid', 1, 10)"
        ),
    )
    .await;
    let rows_before = all_rows(&mut raw, &table).await;
    for alloc in ["update", "cas"] {
        let url = table_url(&table, &format!("alloc={alloc}")).await.unwrap();
        let store = MySqlStore::connect(&url).await.unwrap();
        for name in ["zero-step", "negative", "null-step", "null-max"] {
            let refused = store.allocate(&tag(name), None).await;
            assert!(
                matches!(&refused, Err(StoreError::Corrupt { tag, .. }) if tag == name),
                "alloc={alloc}: {name}: {refused:?}"
            );
        }
        assert_eq!(all_rows(&mut raw, &table).await, rows_before, "alloc={alloc}");
        let listed: Vec<_> =
            store.list_tags().await.unwrap().into_iter().map(|r| r.tag.to_string()).collect();
        assert_eq!(
            listed,
            ["valid", "zero-step"],
            "alloc={alloc}: rows with an invalid tag, negative or NULL values are skipped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_stop_exactly_at_the_tag_count_limit() {
    const RACER_COUNT: usize = 8;
    const ROOM: usize = 2;
    let Some(base) = database_url().await else { return };
    let table = fresh_table("full");
    let url = table_url(&table, "").await.unwrap();
    let store: Arc<dyn SegmentStore> = Arc::new(MySqlStore::connect(&url).await.unwrap());
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    let rows: Vec<String> =
        (0..TAG_COUNT_MAX - ROOM).map(|i| format!("('t{i:05}', 1, 1)")).collect();
    let insert = format!("INSERT INTO {table} (biz_tag, max_id, step) VALUES {}", rows.join(","));
    execute(&mut raw, &insert).await;

    let racers: Vec<_> = (0..RACER_COUNT)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(
                async move { store.create_tag(&spec(&format!("racer-{i}"), 1, 1, "")).await },
            )
        })
        .collect();
    let mut created = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(_) => created += 1,
            Err(refused) => assert_eq!(refused, StoreError::TooManyTags),
        }
    }
    assert_eq!(created, ROOM, "exactly the room left is created");
    assert_eq!(store.list_tags().await.map(|rows| rows.len()), Ok(TAG_COUNT_MAX));
    assert_eq!(
        store.create_tag(&spec("one-too-many", 1, 1, "")).await,
        Err(StoreError::TooManyTags)
    );
    assert_eq!(store.get_tag(&tag("one-too-many")).await, Ok(None));
}

#[tokio::test]
async fn an_applications_pool_is_used_and_left_open() {
    let Some(base) = database_url().await else { return };
    let pool = MySqlPoolOptions::new().max_connections(2).connect(&base).await.unwrap();
    let table = fresh_table("embedded");
    let options = SqlOptions {
        table: TableName::new(&table).unwrap(),
        alloc: AllocMode::Update,
        pool_max: 50,
        // The run's database holds other checks' tables, all Leaf-shaped.
        create_tables: idmint_store::CreateTables::Always,
        ..SqlOptions::default()
    };
    let store = MySqlStore::from_pool(pool.clone(), options).await.unwrap();
    assert!(store.describe().ends_with(&format!("?table={table}")), "{}", store.describe());
    let embedded = store.create_tag(&spec("embedded", 1, 10, "")).await.unwrap().tag;
    assert_eq!(store.allocate(&embedded, None).await.unwrap().range, range(1, 11));
    drop(store);

    assert!(!pool.is_closed(), "the store closed the application's pool");
    let max_id: i64 = sqlx::query(AssertSqlSafe(format!("SELECT max_id FROM {table}")))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(max_id, 11);
}

#[tokio::test]
async fn connection_errors_never_show_the_password() {
    const SECRET: &str = "s3cret-Pw";
    // A port nobody listens on (connections are refused until the acquire timeout), and a
    // server that hangs up at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let rude = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rude_port = rude.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = rude.accept().await {
            drop(socket);
        }
    });
    for port in [closed, rude_port] {
        let url = sql_url(&format!("mysql://idmint:{SECRET}@127.0.0.1:{port}/ids?pool_max=1"));
        let refused = MySqlStore::connect(&url).await.unwrap_err();
        let text = format!("{refused} {refused:?}");
        assert!(matches!(refused, StoreError::Unavailable(_)), "{text}");
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains(&format!("idmint:***@127.0.0.1:{port}")), "{text}");
    }
}

/// Counts, between a store and the server, the connections open and the round trips: a
/// round trip begins each time the client speaks after the server did, and is a ping when
/// its first packet is `COM_PING`.
struct Relay {
    addr: SocketAddr,
    stats: Arc<RelayStats>,
}

#[derive(Default)]
struct RelayStats {
    requests: AtomicU64,
    pings: AtomicU64,
    open: AtomicUsize,
    open_max: AtomicUsize,
    /// The next query starting with these bytes gets its answer this much later.
    stall: std::sync::Mutex<Option<(Vec<u8>, Duration)>>,
}

/// Round trips counted by a [`Relay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Trips {
    requests: u64,
    pings: u64,
}

/// The command byte of a MySQL packet that checks the connection is alive.
const COM_PING: u8 = 0x0e;
/// The command byte of a MySQL packet that runs a query given as text.
const COM_QUERY: u8 = 0x03;

impl Relay {
    /// Relays to the server of `url`.
    async fn start(url: &str) -> Relay {
        let upstream = authority(url).1.to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(RelayStats::default());
        let shared = Arc::clone(&stats);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(relay_connection(client, server, Arc::clone(&shared)));
            }
        });
        Relay { addr, stats }
    }

    /// The store URL of the server at `url`, reached through the relay, in plain text so
    /// packets can be told apart, with more idmint parameters.
    fn url(&self, url: &str, params: &str) -> SqlUrl {
        let (user, host) = authority(url);
        let relayed = url.replacen(&format!("{user}{host}"), &format!("{user}{}", self.addr), 1);
        sql_url(&join_params(&relayed, &format!("ssl-mode=disabled&{params}")))
    }

    /// Holds back the answer to the next query that starts with `text` by `delay`.
    fn stall_answer_to(&self, text: &str, delay: Duration) {
        *self.stats.stall.lock().unwrap() = Some((text.as_bytes().to_vec(), delay));
    }

    /// Awaits `call` and returns the round trips it caused, background ones included, with
    /// its result.
    async fn trips_of<T>(&self, call: impl Future<Output = T>) -> (Trips, T) {
        let before = self.settled().await;
        let result = call.await;
        let after = self.settled().await;
        let trips =
            Trips { requests: after.requests - before.requests, pings: after.pings - before.pings };
        (trips, result)
    }

    /// The counts once no round trip has begun for a while.
    async fn settled(&self) -> Trips {
        let read = || Trips {
            requests: self.stats.requests.load(Ordering::SeqCst),
            pings: self.stats.pings.load(Ordering::SeqCst),
        };
        let mut last = read();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = read();
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

async fn relay_connection(client: TcpStream, server: TcpStream, stats: Arc<RelayStats>) {
    let open = stats.open.fetch_add(1, Ordering::SeqCst) + 1;
    stats.open_max.fetch_max(open, Ordering::SeqCst);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let client_spoke_last = AtomicBool::new(false);
    // The delay of the answer to a request the stall matched, taken by the next answer.
    let held: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    // Each side records who spoke before forwarding, so the client's next request, which
    // follows the reply it received, always sees the server's mark.
    let up = async {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
            if !client_spoke_last.swap(true, Ordering::SeqCst) {
                // A packet: 3 bytes of length, 1 of sequence, then the command.
                let counter =
                    if n > 4 && buffer[4] == COM_PING { &stats.pings } else { &stats.requests };
                counter.fetch_add(1, Ordering::SeqCst);
                if n > 4 && buffer[4] == COM_QUERY {
                    let mut stall = stats.stall.lock().unwrap();
                    if let Some((text, delay)) = stall.take_if(|(t, _)| buffer[5..n].starts_with(t))
                    {
                        drop(text);
                        *held.lock().unwrap() = Some(delay);
                    }
                }
            }
            if server_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
            let delay = held.lock().unwrap().take();
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            client_spoke_last.store(false, Ordering::SeqCst);
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
    stats.open.fetch_sub(1, Ordering::SeqCst);
}

/// This run's database URL, the database made on first use (on the server the test kit
/// gives: `IDMINT_TEST_MYSQL_URL`'s or a private one); `None` once the kit recorded the skip.
pub(crate) async fn database_url() -> Option<String> {
    static DATABASE_URL: OnceCell<String> = OnceCell::const_new();
    idmint_testkit::mysql::server_url()?;
    let made = DATABASE_URL.get_or_init(|| async {
        idmint_testkit::mysql::fresh_database("store").await.expect("the server answered before")
    });
    Some(made.await.clone())
}

/// A table name no other check uses.
pub(crate) fn fresh_table(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// The store URL of `table` in this run's database, with more idmint parameters.
async fn table_url(table: &str, params: &str) -> Option<SqlUrl> {
    let base = database_url().await?;
    let params = [format!("table={table}"), params.to_string()];
    Some(sql_url(&join_params(&base, params.join("&").trim_end_matches('&'))))
}

/// `url` parsed; with `create_tables=true` unless it says otherwise, as the checks share one
/// database whose other tables are Leaf-shaped (idmint refuses, by default, to create a
/// segment table beside them: see `a_mistyped_table_is_refused_naming_the_leaf_table`).
fn sql_url(url: &str) -> SqlUrl {
    let url = if url.contains("create_tables=") {
        url.to_string()
    } else {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}create_tables=true")
    };
    let url = url.as_str();
    match StoreUrl::parse(url) {
        Ok(StoreUrl::Mysql(url)) => url,
        other => panic!("{url} is not a MySQL URL: {other:?}"),
    }
}

fn join_params(url: &str, params: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{params}")
}

/// The `user@` part (possibly empty) and the `host:port` of `url`.
fn authority(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split(['/', '?']).next().unwrap();
    match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    }
}

async fn execute(conn: &mut MySqlConnection, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn show_create_table(conn: &mut MySqlConnection, table: &str) -> String {
    sqlx::query(AssertSqlSafe(format!("SHOW CREATE TABLE {table}")))
        .fetch_one(conn)
        .await
        .unwrap()
        .get(1)
}

/// Every row of `table` as `(biz_tag, max_id, step)`, ordered by tag.
async fn all_rows(
    conn: &mut MySqlConnection,
    table: &str,
) -> Vec<(String, Option<i64>, Option<i32>)> {
    sqlx::query(AssertSqlSafe(format!(
        "SELECT biz_tag, max_id, step FROM {table} ORDER BY biz_tag"
    )))
    .fetch_all(conn)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

#[test]
fn authority_splits_the_user_from_the_host() {
    assert_eq!(authority("mysql://u:p@h:1/db?x=1"), ("u:p@", "h:1"));
    assert_eq!(authority("mysql://h:1/db"), ("", "h:1"));
}

/// The run's database with a segment table of a suite's own and a pool of `pool_max`.
pub(crate) async fn suite_url(table: &str, pool_max: u32) -> Option<idmint_store::StoreUrl> {
    let db = database_url().await?;
    let separator = if db.contains('?') { '&' } else { '?' };
    let url = format!("{db}{separator}table={table}&pool_max={pool_max}&create_tables=true");
    Some(idmint_store::StoreUrl::parse(&url).unwrap())
}

/// Asserts that each table is InnoDB with a binary collation: names compare byte for byte,
/// as in every other backend.
pub(crate) async fn assert_tables_compare_bytes(tables: &[&str]) {
    let db = database_url().await.unwrap();
    let mut raw = MySqlConnection::connect(&db).await.unwrap();
    for table in tables {
        let layout: String = sqlx::query(AssertSqlSafe(format!("SHOW CREATE TABLE {table}")))
            .fetch_one(&mut raw)
            .await
            .unwrap()
            .get(1);
        assert!(layout.contains("utf8mb4_bin"), "{layout}");
        assert!(layout.contains("InnoDB"), "{layout}");
    }
    raw.close().await.unwrap();
}

/// `workers_table=` and `worker_node_table=` name the worker tables idmint creates in the
/// database (beside Leaf's): leases and assignments land there, and a store with the default
/// names sees none of them.
#[tokio::test]
async fn worker_tables_take_the_names_the_url_gives() {
    use idmint_store::{LeaseStore, WorkerSpace, WorkerStore};
    let (workers, nodes) = (fresh_table("leases_named"), fresh_table("nodes_named"));
    let params = format!("workers_table={workers}&worker_node_table={nodes}");
    let Some(url) = table_url(&fresh_table("alloc"), &params).await else { return };
    let store = MySqlStore::connect(&url).await.unwrap();
    let space = WorkerSpace::parse("named-tables").unwrap();
    let lease = store.acquire_lease(&crate::workers::request(&space, 3, "n")).await.unwrap();
    store.assign_worker(&crate::workers::assign(&space, 1_000, 1)).await.unwrap();
    let mut conn = MySqlConnection::connect(&database_url().await.unwrap()).await.unwrap();
    for table in [&workers, &nodes] {
        let sql = format!("SELECT count(*) FROM {table} WHERE space = 'named-tables'");
        let count: i64 = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut conn).await.unwrap();
        assert_eq!(count, 1, "{table}");
    }
    let default_url = table_url(&fresh_table("alloc"), "").await.unwrap();
    let default_names = MySqlStore::connect(&default_url).await.unwrap();
    assert_eq!(default_names.list_leases(&space).await.unwrap(), Vec::new());
    assert_eq!(store.list_leases(&space).await.unwrap()[0].worker_id, lease.worker_id);
}

/// A call dropped while its transaction's `BEGIN` waits for the answer (cut off by a bound)
/// leaves no transaction open on a pooled connection: the next caller's write on the pool
/// commits and is seen by every other session. Checked for a lease renewal and a give-back,
/// whose writes begin a transaction on the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_while_begin_waits_leaves_no_transaction_open() {
    use idmint_store::{LeaseStore, WorkerSpace};
    let Some(base) = database_url().await else { return };
    let relay = Relay::start(&base).await;
    let workers = fresh_table("leases_cut");
    let params = format!("table={}&workers_table={workers}&pool_max=1", fresh_table("alloc"));
    let store = MySqlStore::connect(&relay.url(&base, &params)).await.unwrap();
    let space = WorkerSpace::parse("begin-cut").unwrap();
    let lease = store.acquire_lease(&crate::workers::request(&space, 3, "n")).await.unwrap();
    let mut other = MySqlConnection::connect(&base).await.unwrap();

    relay.stall_answer_to("BEGIN", Duration::from_millis(600));
    let cut = Duration::from_millis(200);
    let renewal = tokio::time::timeout(cut, store.renew_lease(&lease, 10_000)).await;
    assert!(renewal.is_err(), "the renewal did not wait for BEGIN's answer");
    // Written without a transaction of its own, on the pool's one connection.
    store.raise_mark(&lease, 1_234).await.unwrap();
    let sql = format!("SELECT time_mark FROM {workers} WHERE space = 'begin-cut'");
    let mark: i64 = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut other).await.unwrap();
    assert_eq!(mark, 1_234, "the raised mark is not committed");

    // A give-back's compare-and-set, then an allocation on the same connection.
    let table = fresh_table("alloc_cut");
    let params = format!("table={table}&pool_max=1");
    let store: Arc<dyn SegmentStore> =
        Arc::new(MySqlStore::connect(&relay.url(&base, &params)).await.unwrap());
    let tag = create(&store, "cut", 1, 10).await;
    let served = store.allocate(&tag, None).await.unwrap().range;
    relay.stall_answer_to("BEGIN", Duration::from_millis(600));
    let give_back = [idmint_store::MaxIdChange {
        tag: tag.clone(),
        expected: served.end(),
        new: served.start(),
    }];
    let cut_back = tokio::time::timeout(cut, store.compare_and_set_max_ids(&give_back)).await;
    assert!(cut_back.is_err(), "the give-back did not wait for BEGIN's answer");
    let next = store.allocate(&tag, None).await.unwrap().range;
    let sql = format!("SELECT max_id FROM {table} WHERE biz_tag = 'cut'");
    let max_id: i64 = sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut other).await.unwrap();
    assert_eq!(max_id as u64, next.end(), "the allocation is not committed");
}

/// Leaf's own DDL (`leaf_alloc` as its scripts create it: `utf8`, the server's
/// case-insensitive collation) with rows in any characters: served unchanged, each exactly
/// (a case-folded or accent-folded name is another, unknown tag, never the row), in both
/// allocation modes; what a `utf8` column cannot hold (an emoji) is refused with the fix.
#[tokio::test]
async fn a_leaf_table_in_utf8_serves_rows_in_any_characters_exactly() {
    let Some(base) = database_url().await else { return };
    let table = fresh_table("leaf_alloc");
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    execute(
        &mut raw,
        &format!(
            "CREATE TABLE {table} (\
             `biz_tag` varchar(128) NOT NULL DEFAULT '', \
             `max_id` bigint(20) NOT NULL DEFAULT '1', \
             `step` int(11) NOT NULL, \
             `description` varchar(256) DEFAULT NULL, \
             `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP \
             ON UPDATE CURRENT_TIMESTAMP, \
             PRIMARY KEY (`biz_tag`)) ENGINE=InnoDB DEFAULT CHARSET=utf8"
        ),
    )
    .await;
    let rows = ["order@v2", "user/login", "订单", "a b", "it's", "100%_x", "order", "café"];
    for (i, name) in rows.iter().enumerate() {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (biz_tag, max_id, step, description) VALUES (?, ?, 10, ?)"
        )))
        .bind(name)
        .bind(1000 * (i as i64 + 1))
        .bind(format!("Leaf row {name}"))
        .execute(&mut raw)
        .await
        .unwrap();
    }
    for alloc in ["update", "cas"] {
        let url = table_url(&table, &format!("alloc={alloc}")).await.unwrap();
        let store = MySqlStore::connect(&url).await.unwrap();
        let mut listed: Vec<String> =
            store.list_tags().await.unwrap().into_iter().map(|r| r.tag.to_string()).collect();
        listed.sort();
        let mut want: Vec<String> = rows.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(listed, want, "alloc={alloc}");
        for name in rows {
            let t = tag(name);
            let before = store.get_tag(&t).await.unwrap().unwrap();
            assert_eq!(before.description, format!("Leaf row {name}"));
            let got = store.allocate(&t, None).await.unwrap().range;
            assert_eq!(got.start(), before.max_id, "alloc={alloc} {name:?}");
        }
        // The collation folds these onto `order` and `café`; idmint never does.
        for folded in ["Order", "ORDER", "cafe", "CAFÉ"] {
            assert!(store.get_tag(&tag(folded)).await.unwrap().is_none(), "{folded}");
            let refused = store.allocate(&tag(folded), None).await;
            assert!(matches!(refused, Err(StoreError::TagNotFound(_))), "{folded}: {refused:?}");
            assert!(matches!(
                store.delete_tag(&tag(folded)).await,
                Err(StoreError::TagNotFound(_))
            ));
        }
        // Every call naming a tag the column cannot hold is refused alike, before any
        // statement (comparing it with the column fails on MariaDB), with the fix.
        let emoji = tag("🚀");
        let fix = format!("ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4");
        let not_storable = |what: &str, refused: StoreError| {
            let text = refused.to_string();
            assert!(matches!(refused, StoreError::TagNotStorable { .. }), "{what}: {text}");
            assert!(text.contains(&fix) && text.contains("utf8"), "{what}: {text}");
        };
        not_storable("allocate", store.allocate(&emoji, None).await.unwrap_err());
        not_storable("create", store.create_tag(&spec("🚀", 1, 10, "")).await.unwrap_err());
        not_storable("get", store.get_tag(&emoji).await.unwrap_err());
        let step = idmint_core::Step::new(5).unwrap();
        not_storable("set_step", store.set_step(&emoji, step).await.unwrap_err());
        not_storable("delete", store.delete_tag(&emoji).await.unwrap_err());
        let cas = store.compare_and_set_max_id(&emoji, 1, 2).await.unwrap_err();
        not_storable("compare_and_set", cas);
    }
    // Both modes took one step of each row, and `order` is still there.
    let order: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT max_id FROM {table} WHERE biz_tag = 'order'"
    )))
    .fetch_one(&mut raw)
    .await
    .unwrap();
    assert_eq!(order, 7000 + 20);
}

/// Leaf servers and idmint nodes side by side on one Leaf table (issue 22's "done when"):
/// tasks running Leaf's own transaction (`UPDATE … SET max_id = max_id + step`, or its
/// dynamic-step form `max_id + ?`, then `SELECT`, then `COMMIT`: the range is
/// `[max_id - step, max_id)`) race idmint's allocations in both modes on rows in any
/// characters; every range from either lies apart, and together they tile the row from its
/// start to its final `max_id`.
#[tokio::test]
async fn leaf_servers_and_idmint_nodes_side_by_side_never_share_a_range() {
    let Some(base) = database_url().await else { return };
    let table = fresh_table("leaf_alloc");
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    execute(
        &mut raw,
        &format!(
            "CREATE TABLE {table} (`biz_tag` varchar(128) NOT NULL DEFAULT '', \
             `max_id` bigint(20) NOT NULL DEFAULT '1', `step` int(11) NOT NULL, \
             `description` varchar(256) DEFAULT NULL, `update_time` timestamp NOT NULL \
             DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (`biz_tag`)) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        ),
    )
    .await;
    let names = ["订单", "order@v2", "user/login", "🚀"];
    for name in names {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (biz_tag, max_id, step, description) VALUES (?, 1000, 50, 'x')"
        )))
        .bind(name)
        .execute(&mut raw)
        .await
        .unwrap();
    }
    let mut stores: Vec<Arc<dyn SegmentStore>> = Vec::new();
    for alloc in ["update", "cas"] {
        let url = table_url(&table, &format!("alloc={alloc}")).await.unwrap();
        stores.push(Arc::new(MySqlStore::connect(&url).await.unwrap()));
    }
    let pool = MySqlPoolOptions::new().max_connections(4).connect(&base).await.unwrap();
    for name in names {
        let mut tasks = Vec::new();
        // Two Leaf servers: one with the row's step, one with its dynamic step.
        for dynamic in [None, Some(70_i64)] {
            let (pool, table) = (pool.clone(), table.clone());
            tasks.push(tokio::spawn(async move {
                let mut ranges = Vec::new();
                for _ in 0..30 {
                    let mut tx = pool.begin().await.unwrap();
                    let update = match dynamic {
                        None => sqlx::query(AssertSqlSafe(format!(
                            "UPDATE {table} SET max_id = max_id + step WHERE biz_tag = ?"
                        )))
                        .bind(name),
                        Some(step) => sqlx::query(AssertSqlSafe(format!(
                            "UPDATE {table} SET max_id = max_id + ? WHERE biz_tag = ?"
                        )))
                        .bind(step)
                        .bind(name),
                    };
                    update.execute(&mut *tx).await.unwrap();
                    let (max_id, step): (i64, i32) = sqlx::query_as(AssertSqlSafe(format!(
                        "SELECT max_id, step FROM {table} WHERE biz_tag = ?"
                    )))
                    .bind(name)
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                    tx.commit().await.unwrap();
                    let taken = dynamic.unwrap_or(i64::from(step));
                    ranges.push(range((max_id - taken) as u64, max_id as u64));
                }
                ranges
            }));
        }
        let idmint = {
            let stores = stores.clone();
            tokio::spawn(async move { allocate_concurrently(&stores, &tag(name), 30).await })
        };
        let mut all: Vec<_> = idmint.await.unwrap().into_iter().flatten().collect();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        assert_eq!(all.len(), 4 * 30, "{name}");
        let end: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT max_id FROM {table} WHERE biz_tag = ?"
        )))
        .bind(name)
        .fetch_one(&mut raw)
        .await
        .unwrap();
        assert_tiles(all, 1000, end as u64);
    }
}
