//! The PostgreSQL backend: the conformance suite in both allocation modes (`alloc=update`,
//! `alloc=cas`), and what only a server shows: a table made as Meituan Leaf's docs make it is
//! served and left as it was, foreign `update_time` types, nodes (pools) in either mode or
//! both sharing a tag, rows idmint cannot serve, the tag-count bound under concurrent
//! creates, an embedder's pool, the pool bound, and errors that never show a password.
//!
//! Runs on the server the test kit gives (`IDMINT_TEST_POSTGRES_URL`'s, else a private
//! PostgreSQL; skipped when neither is there). Each test process creates one database (the
//! kit's `fresh_database`, which also drops those of runs older than two hours) and gives
//! every check its own table in it (`?table=…`), so checks and runs never meet. Rows a foreign tool may have
//! written are inserted with plain SQL.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idmint_core::IdRange;
use idmint_core::limits::TAG_COUNT_MAX;
use idmint_store::{
    PgStore, RangeStore, SegmentStore, SqlOptions, SqlUrl, StoreError, StoreUrl, TableName,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::sync::OnceCell;

use crate::conformance::{
    Subject, allocate_concurrently, assert_tiles, create, range, record, requested, spec, tag,
};

/// Meituan Leaf's table as its docs would create it in PostgreSQL: every column but the key
/// nullable, no defaults. `{t}` is the table.
const LEAF_TABLE_SQL: &str = "CREATE TABLE {t} (biz_tag varchar(128) primary key, max_id bigint, \
                              step int, description varchar(256), update_time timestamp)";

mod update {
    use crate::conformance::{Subject, conformance_suite};

    async fn fresh() -> Option<Subject> {
        super::fresh("update").await
    }

    conformance_suite!(fresh);
}

mod cas {
    use crate::conformance::{Subject, conformance_suite};

    async fn fresh() -> Option<Subject> {
        super::fresh("cas").await
    }

    conformance_suite!(fresh);
}

/// A store on a table of its own, allocating in `mode`.
async fn fresh(mode: &str) -> Option<Subject> {
    let table = next_table("alloc");
    let url = store_url(&format!("table={table}&alloc={mode}")).await?;
    Some(Subject::new(Arc::new(PgStore::connect(&url).await.unwrap())))
}

#[tokio::test]
async fn a_leaf_table_is_served_as_is() {
    let Some(db) = database_url().await else { return };
    for mode in ["update", "cas"] {
        let t = next_table("leaf");
        raw(db, &LEAF_TABLE_SQL.replace("{t}", &t)).await;
        raw(
            db,
            &format!(
                "INSERT INTO {t} VALUES ('leaf-segment-test', 1000, 2000, NULL, now()), \
                 ('leaf-nulls', 5, 10, NULL, NULL), \
                 ('leaf-described', 1, 1, 'x', '2020-01-01 00:00:00')"
            ),
        )
        .await;
        let layout = columns(db, &t).await;

        let store = connect(&format!("table={t}&alloc={mode}")).await;
        let listed = store.list_tags().await.unwrap();
        let rows: Vec<_> = listed
            .iter()
            .map(|r| (r.tag.as_str(), r.max_id, r.step, r.description.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("leaf-described", 1, 1, "x"),
                ("leaf-nulls", 5, 10, ""),
                ("leaf-segment-test", 1000, 2000, "")
            ],
            "{mode}"
        );
        assert_eq!(listed[0].update_time_s, 1_577_836_800, "a timestamp reads as UTC seconds");
        assert_eq!(listed[1].update_time_s, 0, "a NULL time reads as 0");

        let leaf = tag("leaf-segment-test");
        assert_eq!(store.allocate(&leaf, None).await.unwrap().range, range(1000, 3000));
        assert_eq!(store.allocate(&leaf, requested(10)).await.unwrap().range, range(3000, 5000));
        let nulls = tag("leaf-nulls");
        assert_eq!(store.allocate(&nulls, None).await.unwrap().range, range(5, 15));
        let row = store.get_tag(&nulls).await.unwrap().unwrap();
        assert_eq!((row.max_id, row.step, row.description.as_str()), (15, 10, ""));
        assert!(row.update_time_s.abs_diff(now_s()) < 300, "not stamped in UTC: {row:?}");
        let added = store.create_tag(&spec("added", 7, 3, "mine")).await.unwrap().tag;
        assert_eq!(store.allocate(&added, None).await.unwrap().range, range(7, 10));
        assert_eq!(
            scalar_i64(db, &format!("SELECT max_id FROM {t} WHERE biz_tag = 'leaf-segment-test'"))
                .await,
            5000,
            "allocations must land in the Leaf table itself"
        );

        // Used as is: opening, allocating and creating neither replaced nor altered it.
        assert_eq!(columns(db, &t).await, layout, "{mode}");
    }
}

#[tokio::test]
async fn foreign_update_time_types_are_read_and_stamped() {
    let Some(db) = database_url().await else { return };
    let old_s = 1_577_836_800; // 2020-01-01T00:00:00Z
    for (column_type, old_value, stamped) in [
        ("timestamptz", "'2020-01-01 00:00:00+00'", true),
        ("bigint", "1577836800", true),
        ("integer", "1577836800", true),
        // Not a time idmint knows: read as 0 and left alone.
        ("text", "'last tuesday'", false),
    ] {
        let t = next_table("time");
        raw(
            db,
            &format!(
                "CREATE TABLE {t} (biz_tag varchar(128) primary key, max_id bigint, step int, \
                 description varchar(256), update_time {column_type}); \
                 INSERT INTO {t} VALUES ('timed', 1, 10, NULL, {old_value})"
            ),
        )
        .await;
        let timed = tag("timed");
        for mode in ["update", "cas"] {
            let store = connect(&format!("table={t}&alloc={mode}")).await;
            let before = store.get_tag(&timed).await.unwrap().unwrap().update_time_s;
            let allocated = store.allocate(&timed, None).await.unwrap().range;
            let after = store.get_tag(&timed).await.unwrap().unwrap();
            let context = format!("{column_type}, {mode}: {after:?}");
            assert_eq!(allocated.len(), 10, "{context}");
            if stamped {
                assert!(after.update_time_s.abs_diff(now_s()) < 300, "{context}");
            } else {
                assert_eq!((before, after.update_time_s), (0, 0), "{context}");
            }
            if mode == "update" && stamped {
                assert_eq!(before, old_s, "{context}");
            }
            let set = store.set_step(&timed, idmint_core::Step::new(10).unwrap()).await;
            assert!(set.is_ok(), "{context}: {set:?}");
        }
        if !stamped {
            let kept = scalar_text(db, &format!("SELECT update_time FROM {t}")).await;
            assert_eq!(kept, "last tuesday");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_a_tag_never_overlap_whatever_their_modes() {
    const TASKS_PER_NODE: usize = 3;
    const ALLOCATIONS_PER_TASK: usize = 25;
    const RAISED_STEP: u64 = 25;
    let Some(_) = database_url().await else { return };
    for (first_mode, second_mode) in [("update", "update"), ("cas", "cas"), ("update", "cas")] {
        let t = next_table("nodes");
        // Two pools are two nodes: nothing in this process orders their calls.
        let first: Arc<dyn SegmentStore> =
            Arc::new(connect(&format!("table={t}&alloc={first_mode}")).await);
        let second: Arc<dyn SegmentStore> =
            Arc::new(connect(&format!("table={t}&alloc={second_mode}")).await);
        let shared = create(&first, "shared", 1, 10).await;

        let mut callers = vec![(Arc::clone(&first), None); TASKS_PER_NODE];
        callers.extend(vec![(Arc::clone(&second), requested(RAISED_STEP)); TASKS_PER_NODE]);
        let tasks: Vec<_> = callers
            .into_iter()
            .enumerate()
            .map(|(i, (store, step))| {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let mut got = Vec::with_capacity(ALLOCATIONS_PER_TASK);
                    for j in 0..ALLOCATIONS_PER_TASK {
                        got.push(store.allocate(&shared, step).await.unwrap().range);
                        // Nodes refill now and then, not in a tight loop; a CAS node beside
                        // an update node that never pauses would only lose every round.
                        let pause_us = ((i * 7 + j * 13) % 10 * 100) as u64;
                        tokio::time::sleep(Duration::from_micros(pause_us)).await;
                    }
                    got
                })
            })
            .collect();
        let mut ranges: Vec<IdRange> = Vec::new();
        for task in tasks {
            ranges.extend(task.await.unwrap());
        }
        let count = TASKS_PER_NODE * ALLOCATIONS_PER_TASK;
        assert_eq!(ranges.len(), 2 * count);
        let max_id = record(&second, &shared).await.max_id;
        assert_eq!(max_id, 1 + (10 + RAISED_STEP) * count as u64, "{first_mode}/{second_mode}");
        assert_tiles(ranges, 1, max_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_bound_is_respected() {
    const POOL_MAX: i64 = 2;
    const TASK_COUNT: usize = 8;
    const ALLOCATIONS_PER_TASK: usize = 20;
    let Some(db) = database_url().await else { return };
    let t = next_table("pool");
    // The application name marks this store's connections in pg_stat_activity.
    let store: Arc<dyn SegmentStore> =
        Arc::new(connect(&format!("table={t}&pool_max={POOL_MAX}&application_name={t}")).await);
    let bounded = create(&store, "bounded", 1, 5).await;

    let stores = vec![Arc::clone(&store); TASK_COUNT];
    let ranges: Vec<IdRange> =
        allocate_concurrently(&stores, &bounded, ALLOCATIONS_PER_TASK).await.concat();
    assert_eq!(ranges.len(), TASK_COUNT * ALLOCATIONS_PER_TASK);
    assert_tiles(ranges, 1, 1 + 5 * (TASK_COUNT * ALLOCATIONS_PER_TASK) as u64);

    // Idle connections stay open, so the count shows how many the pool ever held.
    let opened = scalar_i64(
        db,
        &format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{t}'"),
    )
    .await;
    assert!((1..=POOL_MAX).contains(&opened), "{opened} connections for pool_max={POOL_MAX}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_beyond_the_tag_count_limit_is_refused_even_when_racing() {
    const RACER_COUNT: usize = 8;
    const RACE_WAIT_POLLS_MAX: usize = 500;
    let Some(db) = database_url().await else { return };
    let t = next_table("full");
    // The application name marks this store's connections in pg_stat_activity.
    let store: Arc<dyn SegmentStore> =
        Arc::new(connect(&format!("table={t}&application_name={t}")).await);
    raw(
        db,
        &format!(
            "INSERT INTO {t} (biz_tag, max_id, step) \
             SELECT 't' || lpad(i::text, 5, '0'), 1, 1 FROM generate_series(1, {}) AS i",
            TAG_COUNT_MAX - 1
        ),
    )
    .await;

    // One slot left: racing creates of different tags must fill it exactly once. A share
    // lock on the table holds every insert back until all racers wait, so any that counted
    // before another inserted would insert too.
    let mut blocker = PgConnection::connect(db).await.unwrap();
    let mut held = blocker.begin().await.unwrap();
    let lock = format!("LOCK TABLE {t} IN SHARE MODE");
    sqlx::raw_sql(AssertSqlSafe(lock)).execute(&mut *held).await.unwrap();
    let tasks: Vec<_> = (0..RACER_COUNT)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(
                async move { store.create_tag(&spec(&format!("racer{i}"), 1, 1, "")).await },
            )
        })
        .collect();
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{t}' \
         AND wait_event_type = 'Lock'"
    );
    for _ in 0..RACE_WAIT_POLLS_MAX {
        if scalar_i64(db, &waiting).await == RACER_COUNT as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(scalar_i64(db, &waiting).await, RACER_COUNT as i64, "the racers never met");
    held.rollback().await.unwrap();
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => created += 1,
            Err(e) => assert_eq!(e, StoreError::TooManyTags),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(scalar_i64(db, &format!("SELECT count(*) FROM {t}")).await, TAG_COUNT_MAX as i64);

    let refused = store.create_tag(&spec("one-too-many", 1, 1, "")).await;
    assert_eq!(refused, Err(StoreError::TooManyTags));
    assert_eq!(store.get_tag(&tag("one-too-many")).await, Ok(None));
    assert_eq!(store.list_tags().await.map(|rows| rows.len()), Ok(TAG_COUNT_MAX));
}

#[tokio::test]
async fn rows_idmint_cannot_serve_are_refused_and_left_unchanged() {
    let Some(db) = database_url().await else { return };
    let t = next_table("corrupt");
    raw(db, &LEAF_TABLE_SQL.replace("{t}", &t)).await;
    raw(
        db,
        &format!(
            "INSERT INTO {t} (biz_tag, max_id, step) VALUES ('zero-step', 7, 0), \
             ('negative', -100, 10), ('null-step', 5, NULL), ('null-max', NULL, 10), \
             ('valid', 1, 10), (E'has\\ttab', 1, 10), ('', 1, 10), (' lead', 1, 10)"
        ),
    )
    .await;
    let snapshot = format!(
        "SELECT string_agg(concat_ws(',', biz_tag, max_id, step), ';' \
                            ORDER BY biz_tag) FROM {t}"
    );
    let before = scalar_text(db, &snapshot).await;
    for mode in ["update", "cas"] {
        let store = connect(&format!("table={t}&alloc={mode}")).await;
        for name in ["zero-step", "negative", "null-step", "null-max"] {
            let refused = store.allocate(&tag(name), None).await;
            assert!(
                matches!(&refused, Err(StoreError::Corrupt { tag, .. }) if tag == name),
                "{mode}, {name}: {refused:?}"
            );
        }
        assert_eq!(scalar_text(db, &snapshot).await, before, "{mode}: a refusal changed a row");

        // Rows whose tag is invalid, or whose counters are, are left out of the list.
        let listed = store.list_tags().await.unwrap();
        let names: Vec<&str> = listed.iter().map(|r| r.tag.as_str()).collect();
        assert_eq!(names, ["valid", "zero-step"], "{mode}");
    }
}

#[tokio::test]
async fn from_pool_serves_an_application_pool_and_its_table() {
    let Some(db) = database_url().await else { return };
    let t = next_table("embedded");
    let pool = PgPoolOptions::new().max_connections(2).connect(db).await.unwrap();
    // The process's database holds other checks' tables, all Leaf-shaped.
    let options = SqlOptions {
        table: TableName::new(&t).unwrap(),
        create_tables: idmint_store::CreateTables::Always,
        ..SqlOptions::default()
    };
    let store = PgStore::from_pool(pool.clone(), options).await.unwrap();
    assert!(store.describe().contains(&t), "{}", store.describe());

    let embedded = store.create_tag(&spec("embedded", 1, 4, "")).await.unwrap().tag;
    assert_eq!(store.allocate(&embedded, None).await.unwrap().range, range(1, 5));
    assert_eq!(scalar_i64(db, &format!("SELECT max_id FROM {t}")).await, 5);
    // The configured table, not Leaf's default name, holds the row.
    assert_eq!(scalar_text(db, "SELECT coalesce(to_regclass('leaf_alloc')::text, '-')").await, "-");
    // The new table has idmint's layout: Leaf's columns, counters NOT NULL.
    let layout = columns(db, &t).await;
    let nullable: Vec<&str> =
        layout.iter().filter(|c| c.4 == "YES").map(|c| c.0.as_str()).collect();
    assert_eq!(nullable, ["description"], "{layout:?}");
    assert_eq!(
        layout.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["biz_tag", "max_id", "step", "description", "update_time"]
    );
}

#[tokio::test]
async fn errors_never_show_the_password() {
    let Some(db) = database_url().await else { return };
    let admin = idmint_testkit::postgres::server_url().unwrap();
    // Nothing listens on port 1.
    let secret = "hunter2-secret";
    let url = sql_url(&format!("postgres://postgres:{secret}@127.0.0.1:1/nowhere"));
    let refused = PgStore::connect(&url).await.unwrap_err();
    let text = refused.to_string();
    assert!(matches!(refused, StoreError::Unavailable(_)), "{text}");
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains("postgres:***@127.0.0.1:1"), "{text}");

    // The server names the missing database in its error; here that name is the password.
    let secret = format!("idmint_nodb_{}", std::process::id());
    let url = sql_url(&with_password(&with_database(&admin, &secret), &secret));
    let text = PgStore::connect(&url).await.unwrap_err().to_string();
    assert!(!text.contains(&secret), "{text}");
    assert!(text.contains("does not exist"), "{text}");

    // A store that did connect with a password shows it nowhere (trust authentication
    // accepts any password; a server that checks them gets its own).
    if password_of(&admin).is_none() {
        let secret = "hunter2-accepted";
        let url = sql_url(&format!("{}?table={}", with_password(db, secret), next_table("pw")));
        let store = PgStore::connect(&url).await.unwrap();
        assert!(!store.describe().contains(secret), "{}", store.describe());
        assert!(!format!("{store:?}").contains(secret), "{store:?}");
    }
}

/// The URL of this process's database, created on first use (on the server the test kit
/// gives: `IDMINT_TEST_POSTGRES_URL`'s or a private one); `None` once the kit recorded the
/// skip.
pub(crate) async fn database_url() -> Option<&'static str> {
    static DATABASE: OnceCell<String> = OnceCell::const_new();
    idmint_testkit::postgres::server_url()?;
    let made = DATABASE.get_or_init(|| async {
        idmint_testkit::postgres::fresh_database("store").await.expect("the server answered before")
    });
    Some(made.await.as_str())
}

/// A store on this process's database with idmint's URL parameters `params`.
async fn connect(params: &str) -> PgStore {
    let url = store_url(params).await.expect("the database is configured");
    PgStore::connect(&url).await.unwrap()
}

/// This process's database URL with idmint's (or the driver's) parameters `params`.
async fn store_url(params: &str) -> Option<SqlUrl> {
    let db = database_url().await?;
    let separator = if db.contains('?') { '&' } else { '?' };
    Some(sql_url(&format!("{db}{separator}{params}")))
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
        Ok(StoreUrl::Postgres(url)) => url,
        other => panic!("not a PostgreSQL URL: {other:?}"),
    }
}

/// A table name no other check uses.
fn next_table(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `sql` (one or more statements) on a connection of its own, as another tool would.
async fn raw(db: &str, sql: &str) {
    let mut conn = PgConnection::connect(db).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(sql.to_string())).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

async fn scalar_i64(db: &str, sql: &str) -> i64 {
    let mut conn = PgConnection::connect(db).await.unwrap();
    sqlx::query_scalar(AssertSqlSafe(sql.to_string())).fetch_one(&mut conn).await.unwrap()
}

async fn scalar_text(db: &str, sql: &str) -> String {
    let mut conn = PgConnection::connect(db).await.unwrap();
    sqlx::query_scalar(AssertSqlSafe(sql.to_string())).fetch_one(&mut conn).await.unwrap()
}

/// A column of `information_schema.columns`: name, position, type, length, nullable,
/// default.
type Column = (String, i32, String, Option<i32>, String, Option<String>);

/// The definition of `table`'s columns, in order.
async fn columns(db: &str, table: &str) -> Vec<Column> {
    let mut conn = PgConnection::connect(db).await.unwrap();
    sqlx::query_as(
        "SELECT column_name::text, ordinal_position::int4, data_type::text, \
         character_maximum_length::int4, is_nullable::text, column_default::text \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(&mut conn)
    .await
    .unwrap()
}

/// `url` naming the database `database` instead of its own.
fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (location, query) = match rest.split_once('?') {
        Some((location, query)) => (location, format!("?{query}")),
        None => (rest, String::new()),
    };
    let host = location.split_once('/').map_or(location, |(host, _)| host);
    format!("{scheme}://{host}/{database}{query}")
}

/// `url` with its password replaced by (or given) `password`.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, host) = rest.split_once('@').unwrap_or(("postgres", rest));
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    format!("{scheme}://{user}:{password}@{host}")
}

fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    rest.split_once('@')?.0.split_once(':').map(|(_, password)| password)
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The run's database with a segment table of a suite's own and a pool of `pool_max`.
pub(crate) async fn suite_url(table: &str, pool_max: u32) -> Option<idmint_store::StoreUrl> {
    let db = database_url().await?;
    let separator = if db.contains('?') { '&' } else { '?' };
    let url = format!("{db}{separator}table={table}&pool_max={pool_max}&create_tables=true");
    Some(idmint_store::StoreUrl::parse(&url).unwrap())
}

/// `workers_table=` and `worker_node_table=` name the worker tables idmint creates in the
/// database (beside Leaf's): leases and assignments land there, and a store with the default
/// names sees none of them.
#[tokio::test]
async fn worker_tables_take_the_names_the_url_gives() {
    use idmint_store::{LeaseStore, WorkerSpace, WorkerStore};
    let (workers, nodes) = (next_table("leases_named"), next_table("nodes_named"));
    let params = format!("workers_table={workers}&worker_node_table={nodes}");
    let Some(url) = store_url(&params).await else { return };
    let Some(db) = database_url().await else { return };
    let store = PgStore::connect(&url).await.unwrap();
    let space = WorkerSpace::parse("named-tables").unwrap();
    let lease = store.acquire_lease(&crate::workers::request(&space, 3, "n")).await.unwrap();
    store.assign_worker(&crate::workers::assign(&space, 1_000, 1)).await.unwrap();
    let count = |table: &str| format!("SELECT count(*) FROM {table} WHERE space = 'named-tables'");
    assert_eq!(scalar_i64(db, &count(&workers)).await, 1);
    assert_eq!(scalar_i64(db, &count(&nodes)).await, 1);
    let default_names = PgStore::connect(&store_url("").await.unwrap()).await.unwrap();
    assert_eq!(default_names.list_leases(&space).await.unwrap(), Vec::new());
    assert_eq!(store.list_leases(&space).await.unwrap()[0].worker_id, lease.worker_id);
}

/// An unknown name costs one statement, so one transaction, in both modes: the allocation's
/// `UPDATE` says in the same statement whether the row exists (issue 31: it cost two, 2.05
/// transactions per name on a server, against MariaDB's one). Counted on a database of the
/// test's own, which nothing else uses, by `pg_stat_database.xact_commit`, the store's one
/// session made to report its counts at once (`pg_stat_force_next_flush`, PostgreSQL 15).
#[tokio::test]
async fn an_unknown_tag_costs_one_transaction() {
    const NAMES: u64 = 50;
    let Some(db) = idmint_testkit::postgres::fresh_database("unknowncost").await else { return };
    let admin = idmint_testkit::postgres::server_url().unwrap();
    let name = db.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
    for mode in ["update", "cas"] {
        let pool = PgPoolOptions::new().max_connections(1).connect(&db).await.unwrap();
        let url = sql_url(&format!("{db}?table=unknown_{mode}&alloc={mode}"));
        let store = PgStore::from_pool(pool.clone(), url.options.clone()).await.unwrap();
        let known = store.create_tag(&spec("known", 1, 10, "")).await.unwrap().tag;
        // The statements' first use prepares them (a transaction of its own on the server).
        let warm = tag("warm-up");
        assert_eq!(store.allocate(&warm, None).await, Err(StoreError::TagNotFound(warm)));
        let before = reported_commits(&pool, &admin, &name).await;
        for n in 0..NAMES {
            let unknown = tag(&format!("unknown-{n}"));
            let refused = store.allocate(&unknown, None).await;
            assert_eq!(refused, Err(StoreError::TagNotFound(unknown)), "{mode}");
        }
        // Less the report's own transaction.
        let spent = reported_commits(&pool, &admin, &name).await - before - 1;
        // Autovacuum may visit the database meanwhile: a few transactions of slack, far
        // below the second statement per name this refuses.
        assert!(
            (NAMES..NAMES + 5).contains(&spent),
            "{mode}: {spent} transactions for {NAMES} unknown names"
        );
        // A known tag is still one allocation away.
        assert_eq!(store.allocate(&known, None).await.unwrap().range, range(1, 11), "{mode}");
    }
}

/// `xact_commit` of the database `name` with every transaction of `pool`'s one session
/// counted: the session is made to report at once, and the count read until it settles.
async fn reported_commits(pool: &sqlx::PgPool, admin: &str, name: &str) -> u64 {
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(pool).await.unwrap();
    let mut conn = PgConnection::connect(admin).await.unwrap();
    let mut last = None;
    for _ in 0..50 {
        let commits: i64 =
            sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
                .bind(name)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        if last == Some(commits) {
            return commits as u64;
        }
        last = Some(commits);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("xact_commit of {name} kept moving");
}

/// A call dropped while its transaction's `BEGIN` waits for the answer (a give-back cut off
/// by its bound) leaves no transaction open on a pooled connection: the next caller's write on
/// the pool commits and is seen by every other session. sqlx counts a transaction only once
/// `BEGIN` was answered, and its rollback guard queues nothing before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_while_begin_waits_leaves_no_transaction_open() {
    let Some(db) = database_url().await else { return };
    let stall = BeginStall::start(db).await;
    let table = next_table("alloc_cut");
    // In plain text, so the relay can read the queries.
    let relayed = stall.url(db);
    let separator = if relayed.contains('?') { '&' } else { '?' };
    let url = sql_url(&format!("{relayed}{separator}sslmode=disable&table={table}&pool_max=1"));
    let store: Arc<dyn SegmentStore> = Arc::new(PgStore::connect(&url).await.unwrap());
    let tag = crate::conformance::create(&store, "cut", 1, 10).await;
    let served = store.allocate(&tag, None).await.unwrap().range;
    stall.arm(Duration::from_millis(600));
    let give_back = [idmint_store::MaxIdChange {
        tag: tag.clone(),
        expected: served.end(),
        new: served.start(),
    }];
    let cut = Duration::from_millis(200);
    let cut_back = tokio::time::timeout(cut, store.compare_and_set_max_ids(&give_back)).await;
    assert!(cut_back.is_err(), "the give-back did not wait for BEGIN's answer");
    let next = store.allocate(&tag, None).await.unwrap().range;
    let max_id = scalar_i64(db, &format!("SELECT max_id FROM {table} WHERE biz_tag = 'cut'")).await;
    assert_eq!(max_id as u64, next.end(), "the allocation is not committed");
}

/// A TCP relay to a PostgreSQL server that, once armed, holds back the answer to the next
/// simple query starting with `BEGIN`.
struct BeginStall {
    addr: std::net::SocketAddr,
    armed: Arc<std::sync::Mutex<Option<Duration>>>,
}

impl BeginStall {
    /// Relays to the server of `url`.
    async fn start(url: &str) -> BeginStall {
        let upstream = authority(url).to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let armed: Arc<std::sync::Mutex<Option<Duration>>> = Arc::default();
        let shared = Arc::clone(&armed);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(stall_connection(client, server, Arc::clone(&shared)));
            }
        });
        BeginStall { addr, armed }
    }

    /// `url` with the relay in place of the server.
    fn url(&self, url: &str) -> String {
        url.replacen(authority(url), &self.addr.to_string(), 1)
    }

    /// Holds back the answer to the next `BEGIN` by `delay`.
    fn arm(&self, delay: Duration) {
        *self.armed.lock().unwrap() = Some(delay);
    }
}

/// The `host:port` of a `postgres://user@host:port/db` URL.
fn authority(url: &str) -> &str {
    let rest = &url[url.find("://").unwrap() + 3..];
    let rest = &rest[rest.find('@').map_or(0, |at| at + 1)..];
    &rest[..rest.find(['/', '?']).unwrap_or(rest.len())]
}

async fn stall_connection(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    armed: Arc<std::sync::Mutex<Option<Duration>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let held: std::sync::Mutex<Option<Duration>> = std::sync::Mutex::new(None);
    let up = async {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
            // A simple query: 'Q', 4 bytes of length, the text (maybe after other messages).
            let begin =
                buffer[..n].windows(10).any(|w| w[0] == b'Q' && w[5..].starts_with(b"BEGIN"));
            let delay = if begin { armed.lock().unwrap().take() } else { None };
            if delay.is_some() {
                *held.lock().unwrap() = delay;
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
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
