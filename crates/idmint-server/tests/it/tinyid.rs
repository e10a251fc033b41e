//! Didi Tinyid's routes on Tinyid's own tables (its `db.sql`, sample rows included), on
//! MariaDB, a fresh database per test: Tinyid's answer shapes, its tokens, ids above
//! `max_id` with `id % delta == remainder`, and a seeded simulation of Tinyid servers (its
//! exact SQL: read the row, compare-and-set on `max_id` and `version`, retry) allocating
//! beside idmint nodes from the same rows, with no id handed out twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use idmint::tinyid::TinyidConfig;
use idmint_core::Count;
use idmint_store::{StoreUrl, TinyidMySqlStore, TinyidStore};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, MySqlPool, Row};

use crate::support::{TestServer, assert_error};

/// Tinyid's `tinyid-server/db.sql`, as Tinyid ships it (the test kit's fixture).
const TINYID_DB_SQL: &str = idmint_testkit::fixtures::TINYID_DB_SQL;

/// The sample rows' token (it opens `test` and `test_odd`).
const TOKEN: &str = "0f673adf80504e2eaa552f5d791b644c";

/// A fresh database holding Tinyid's tables and sample rows, and a pool on it; `None` when
/// no MariaDB is there (the skip is recorded).
async fn tinyid_database(purpose: &str) -> Option<(String, MySqlPool)> {
    let url = idmint_testkit::mysql::fresh_database(purpose).await?;
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(TINYID_DB_SQL).execute(&mut conn).await.unwrap();
    let pool = MySqlPool::connect(&url).await.unwrap();
    Some((url, pool))
}

async fn store(url: &str) -> Arc<dyn TinyidStore> {
    let StoreUrl::Mysql(sql) = StoreUrl::parse(url).unwrap() else { panic!("{url}") };
    Arc::new(TinyidMySqlStore::connect(&sql).await.unwrap())
}

async fn server(url: &str, config: TinyidConfig) -> TestServer {
    TestServer::setup().tinyid(store(url).await, config).start().await
}

async fn text(server: &TestServer, path: &str) -> String {
    let answer = server.get(path).await;
    assert_eq!(answer.status(), 200, "{path}");
    answer.text().await.unwrap()
}

async fn text_of(answer: reqwest::Response) -> String {
    answer.text().await.unwrap()
}

async fn sql(pool: &MySqlPool, statement: &str) {
    sqlx::raw_sql(AssertSqlSafe(statement.to_string())).execute(pool).await.unwrap();
}

#[tokio::test]
async fn tinyid_sample_rows_are_served_with_tinyids_answers() {
    let Some((url, pool)) = tinyid_database("tinyidshape").await else { return };
    let server = server(&url, TinyidConfig::default()).await;
    // Tinyid's JSON answer, field for field; ids continue above max_id 1.
    let answer: Value = server
        .get(&format!("/tinyid/id/nextId?bizType=test&token={TOKEN}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer, json!({"data": [2], "code": 200, "message": ""}));
    let ids =
        text(&server, &format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}&batchSize=3"))
            .await;
    assert_eq!(ids, "3,4,5");
    // delta 2, remainder 1 from max_id 1: 3, 5, 7 (Tinyid's SegmentId.init skips 1 itself).
    let odd = text(
        &server,
        &format!("/tinyid/id/nextIdSimple?bizType=test_odd&token={TOKEN}&batchSize=3"),
    )
    .await;
    assert_eq!(odd, "3,5,7");
    // Every method Tinyid maps the routes to; POST is what Tinyid's Java client sends.
    let posted = server
        .client
        .post(server.url(&format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.text().await.unwrap(), "6");
    // HEAD takes no id.
    let head = server
        .client
        .head(server.url(&format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        text(&server, &format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}")).await,
        "7"
    );
    // A segment for a Tinyid client: Tinyid's SegmentId fields, and the client's ids from it
    // are new.
    let raw =
        text(&server, &format!("/tinyid/id/nextSegmentId?bizType=test_odd&token={TOKEN}")).await;
    // Tinyid's field order (Jackson writes the fields as declared).
    let order = [
        "\"data\"",
        "\"maxId\"",
        "\"loadingId\"",
        "\"currentId\"",
        "\"delta\"",
        "\"remainder\"",
        "\"code\"",
        "\"message\"",
    ];
    let at: Vec<usize> = order.iter().map(|key| raw.find(key).expect(key)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{raw}");
    let segment: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(segment["code"], 200);
    assert_eq!(segment["message"], "");
    assert_eq!(segment["data"].as_object().unwrap().len(), 5, "{raw}");
    let data = &segment["data"];
    let client = tinyid_client_ids(
        data["currentId"].as_u64().unwrap(),
        data["maxId"].as_u64().unwrap(),
        data["delta"].as_u64().unwrap(),
        data["remainder"].as_u64().unwrap(),
    );
    assert!(!client.is_empty() && client[0] > 7, "{client:?}");
    // As long as Tinyid's: the row's step of 100 000 at delta 2.
    assert_eq!(client.len(), 50_000, "{raw}");
    assert!(client.iter().all(|id| id % 2 == 1));
    let simple =
        text(&server, &format!("/tinyid/id/nextSegmentIdSimple?bizType=test_odd&token={TOKEN}"))
            .await;
    let parts: Vec<u64> = simple.split(',').map(|p| p.parse().unwrap()).collect();
    assert_eq!(parts.len(), 5, "{simple}");
    assert!(parts[0] >= *client.last().unwrap(), "segments overlap: {simple} after {client:?}");
    assert!(parts[0] <= parts[1] && parts[1] <= parts[2] && parts[3] == 2 && parts[4] == 1);
    // The rows moved by Tinyid's compare-and-set: version bumped.
    let version: i64 = sqlx::query("SELECT version FROM tiny_id_info WHERE biz_type = 'test'")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert!(version > 1, "version {version}");
    server.stop().await;
}

#[tokio::test]
async fn tinyid_tokens_open_only_their_biz_type_and_bad_input_takes_nothing() {
    let Some((url, pool)) = tinyid_database("tinyidtoken").await else { return };
    sql(&pool, "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('other', 1, 1, 10, 1, 0, 0)").await;
    sql(
        &pool,
        "INSERT INTO tiny_id_token (token, biz_type) VALUES ('token-of-other-only', 'other')",
    )
    .await;
    let config = TinyidConfig { token_refresh_ms: 1_000, ..TinyidConfig::default() };
    let server = server(&url, config).await;
    let token_error = json!({"data": null, "code": 5, "message": "token is error"});
    let raw = text_of(server.get("/tinyid/id/nextId?bizType=test&token=nope").await).await;
    assert_eq!(raw, r#"{"data":null,"code":5,"message":"token is error"}"#);
    for (path, status) in [
        ("/tinyid/id/nextId?bizType=test", 401),
        ("/tinyid/id/nextId?bizType=test&token=", 401),
        ("/tinyid/id/nextId?bizType=test&token=0f673adf80504e2eaa552f5d791b644d", 403),
        // A token of another biz_type never opens this one.
        ("/tinyid/id/nextId?bizType=test&token=token-of-other-only", 403),
        ("/tinyid/id/nextSegmentId?bizType=other&token=0f673adf80504e2eaa552f5d791b644c", 403),
    ] {
        let answer = server.get(path).await;
        assert_eq!(answer.status(), status, "{path}");
        assert_eq!(answer.json::<Value>().await.unwrap(), token_error, "{path}");
    }
    assert_error(
        server.get("/tinyid/id/nextIdSimple?bizType=test&token=nope").await,
        403,
        "forbidden",
    )
    .await;
    // Bad input: a clear answer, no id taken.
    for (path, status, code) in [
        ("/tinyid/id/nextIdSimple?token=x", 400, "bad_query"),
        ("/tinyid/id/nextIdSimple?bizType=a%09b&token=x", 400, "bad_tag"),
        (
            "/tinyid/id/nextIdSimple?bizType=test&token=0f673adf80504e2eaa552f5d791b644c&batchSize=0",
            400,
            "bad_count",
        ),
        (
            "/tinyid/id/nextIdSimple?bizType=test&token=0f673adf80504e2eaa552f5d791b644c&batchSize=-3",
            400,
            "bad_count",
        ),
        (
            "/tinyid/id/nextIdSimple?bizType=test&token=0f673adf80504e2eaa552f5d791b644c&batchSize=ten",
            400,
            "bad_count",
        ),
    ] {
        let message = assert_error(server.get(path).await, status, code).await;
        assert!(!message.contains(TOKEN), "{message}");
    }
    let bad: Value = server
        .get(&format!("/tinyid/id/nextId?bizType=test&token={TOKEN}&batchSize=x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(bad["code"], 6);
    assert!(bad["message"].as_str().unwrap().contains("batchSize"), "{bad}");
    assert_eq!(
        text(&server, &format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}")).await,
        "2"
    );
    // A batch above batch_size_max is cut to it, as Tinyid's batch.size.max does.
    let many = text(
        &server,
        &format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}&batchSize=99999999"),
    )
    .await;
    assert_eq!(many.split(',').count(), 10_000);
    // A token added to the table opens its biz_type after the refresh, and only it.
    sql(&pool, "INSERT INTO tiny_id_token (token, biz_type) VALUES ('fresh-token', 'test')").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let fresh = text(&server, "/tinyid/id/nextIdSimple?bizType=test&token=fresh-token").await;
    assert!(fresh.parse::<u64>().is_ok(), "{fresh}");
    assert_eq!(
        server.get("/tinyid/id/nextIdSimple?bizType=other&token=fresh-token").await.status(),
        403
    );
    // A biz_type with a token and no row: Tinyid's code 6 under a 404.
    sql(&pool, "INSERT INTO tiny_id_token (token, biz_type) VALUES ('ghost-token', 'ghost')").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // The message names Tinyid's table, never idmint's own create route.
    let ghost = server.get("/tinyid/id/nextId?bizType=ghost&token=ghost-token").await;
    assert_eq!(ghost.status(), 404);
    let body = ghost.json::<Value>().await.unwrap();
    assert_eq!(body["code"], 6);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("tiny_id_info") && !message.contains("/v1/tags"), "{body}");
    let simple = server.get("/tinyid/id/nextSegmentIdSimple?bizType=ghost&token=ghost-token");
    let message = assert_error(simple.await, 404, "unknown_tag").await;
    assert!(message.contains("tiny_id_info") && !message.contains("/v1/tags"), "{message}");
    server.stop().await;
}

#[tokio::test]
async fn tinyid_ids_continue_above_max_id_with_delta_and_remainder() {
    let Some((url, pool)) = tinyid_database("tinyidstride").await else { return };
    sql(&pool, "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('stride', 1000, 1000, 25, 3, 2, 7)").await;
    sql(&pool, "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('bad', 1, 1, 10, 2, 2, 0)").await;
    sql(&pool, "INSERT INTO tiny_id_token (token, biz_type) VALUES ('stride-token', 'stride'), ('bad-token', 'bad')").await;
    let server = server(&url, TinyidConfig::default()).await;
    // A client segment before any other request of its biz_type is as long as the row's
    // step (25 ids at delta 3: 8 of them), as Tinyid's.
    let first =
        text(&server, "/tinyid/id/nextSegmentIdSimple?bizType=stride&token=stride-token").await;
    let parts: Vec<u64> = first.split(',').map(|p| p.parse().unwrap()).collect();
    let client = tinyid_client_ids(parts[0], parts[2], parts[3], parts[4]);
    assert_eq!(client, [1001, 1004, 1007, 1010, 1013, 1016, 1019, 1022], "{first}");
    let mut all = Vec::new();
    for batch in [1, 7, 30, 2] {
        let ids = text(
            &server,
            &format!("/tinyid/id/nextIdSimple?bizType=stride&token=stride-token&batchSize={batch}"),
        )
        .await;
        all.extend(ids.split(',').map(|id| id.parse::<u64>().unwrap()));
    }
    assert_eq!(all[0], 1025, "the first aligned id above the client's segment");
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    assert!(all.iter().all(|id| id % 3 == 2 && *id > 1022), "{all:?}");
    // One node alone loses nothing between its segments: consecutive aligned ids.
    assert!(all.windows(2).all(|w| w[1] - w[0] == 3), "{all:?}");
    // A row no id satisfies is refused with the reason (code 6; the final 500, never a
    // retryable 503), and takes nothing.
    let bad = server.get("/tinyid/id/nextId?bizType=bad&token=bad-token").await;
    assert_eq!(bad.status(), 500);
    let body: Value = bad.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("remainder"), "{body}");
    let max: i64 = sqlx::query("SELECT max_id FROM tiny_id_info WHERE biz_type = 'bad'")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    assert_eq!(max, 1);
    server.stop().await;
}

/// Tinyid's own table compares `biz_type` in its `utf8` collation, case- and
/// accent-insensitively; idmint never does. A token row for `TEST` or `tést` (the token table
/// has no unique key) takes no id of the row `test`, on any route, and moves nothing.
#[tokio::test]
async fn tinyid_rows_are_matched_by_their_exact_name() {
    let Some((url, pool)) = tinyid_database("tinyidexact").await else { return };
    sql(&pool, "INSERT INTO tiny_id_token (token, biz_type) VALUES ('folded', 'TEST'), ('folded', 'tést'), ('folded', 'Test_Odd')").await;
    let server = server(&url, TinyidConfig::default()).await;
    for biz_type in ["TEST", "t%C3%A9st", "Test_Odd"] {
        for route in ["nextIdSimple", "nextSegmentIdSimple"] {
            let path = format!("/tinyid/id/{route}?bizType={biz_type}&token=folded&batchSize=5");
            assert_error(server.get(&path).await, 404, "unknown_tag").await;
        }
        for route in ["nextId", "nextSegmentId"] {
            let path = format!("/tinyid/id/{route}?bizType={biz_type}&token=folded");
            let answer = server.get(&path).await;
            assert_eq!(answer.status(), 404, "{path}");
            assert_eq!(answer.json::<Value>().await.unwrap()["code"], 6, "{path}");
        }
    }
    // The sample rows were not touched: no allocation, no version bump.
    let rows: Vec<(i64, i64)> =
        sqlx::query_as("SELECT max_id, version FROM tiny_id_info ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(rows, [(1, 1), (1, 3)]);
    assert_eq!(
        text(&server, &format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}")).await,
        "2"
    );
    server.stop().await;
}

/// Rows idmint cannot serve answer the final 500 (`store_row_invalid`; Tinyid's code 6 on the
/// JSON routes) naming the row and what is wrong with it, on every route and every time:
/// never the retryable 503, and never a 404 saying the row does not exist.
#[tokio::test]
async fn tinyid_rows_idmint_cannot_serve_answer_a_final_500_on_every_route() {
    let Some((url, pool)) = tinyid_database("tinyidbadrows").await else { return };
    let rows = [
        ("zero_delta", 1, 10, 0, 0, "delta is 0"),
        ("negative_delta", 1, 10, -2, 0, "delta is -2"),
        ("remainder_is_delta", 1, 10, 2, 2, "remainder is 2"),
        ("negative_remainder", 1, 10, 2, -1, "remainder is -1"),
        ("step_below_delta", 1, 2, 3, 0, "step is 2"),
        ("negative_max_id", -5, 10, 1, 0, "max_id is negative"),
    ];
    for (name, max_id, step, delta, remainder, _) in rows {
        sql(&pool, &format!("INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('{name}', 1, {max_id}, {step}, {delta}, {remainder}, 0)")).await;
        sql(
            &pool,
            &format!("INSERT INTO tiny_id_token (token, biz_type) VALUES ('bad-token', '{name}')"),
        )
        .await;
    }
    let server = server(&url, TinyidConfig::default()).await;
    for round in 0..2 {
        for (name, _, _, _, _, fault) in rows {
            for route in ["nextIdSimple", "nextSegmentIdSimple"] {
                let path = format!("/tinyid/id/{route}?bizType={name}&token=bad-token");
                let message = assert_error(server.get(&path).await, 500, "store_row_invalid").await;
                assert!(message.contains(name) && message.contains(fault), "{path}: {message}");
            }
            for route in ["nextId", "nextSegmentId"] {
                let path = format!("/tinyid/id/{route}?bizType={name}&token=bad-token");
                let answer = server.get(&path).await;
                assert_eq!(answer.status(), 500, "round {round}: {path}");
                let body: Value = answer.json().await.unwrap();
                let message = body["message"].as_str().unwrap();
                assert_eq!(body["code"], 6, "{path}: {body}");
                assert!(message.contains(name) && message.contains(fault), "{path}: {body}");
            }
        }
    }
    let moved: i64 =
        sqlx::query("SELECT CAST(SUM(version) AS SIGNED) FROM tiny_id_info WHERE id > 2")
            .fetch_one(&pool)
            .await
            .unwrap()
            .get(0);
    assert_eq!(moved, 0, "a row idmint cannot serve was changed");
    server.stop().await;
}

/// A valid row whose next segment of its step holds only the id `remainder` itself (index 0,
/// which idmint never serves) is moved past it by the compare-and-set, in the same round, to
/// the next id it serves; never stuck at 503.
#[tokio::test]
async fn a_tinyid_segment_holding_only_the_remainder_is_moved_past_it() {
    let Some((url, pool)) = tinyid_database("tinyidindex0").await else { return };
    // (0, 3] and (1, 4] hold only the id 2 at delta 3, remainder 2.
    sql(&pool, "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('from_zero', 0, 0, 3, 3, 2, 0), ('from_one', 1, 1, 3, 3, 2, 0)").await;
    sql(
        &pool,
        "INSERT INTO tiny_id_token (token, biz_type) VALUES ('t', 'from_zero'), ('t', 'from_one')",
    )
    .await;
    let server = server(&url, TinyidConfig::default()).await;
    let ids = text(&server, "/tinyid/id/nextIdSimple?bizType=from_zero&token=t&batchSize=3").await;
    assert_eq!(ids, "5,8,11");
    let segment = text(&server, "/tinyid/id/nextSegmentIdSimple?bizType=from_one&token=t").await;
    let parts: Vec<u64> = segment.split(',').map(|p| p.parse().unwrap()).collect();
    assert_eq!(tinyid_client_ids(parts[0], parts[2], parts[3], parts[4]), [5], "{segment}");
    let ids = text(&server, "/tinyid/id/nextIdSimple?bizType=from_one&token=t&batchSize=2").await;
    assert_eq!(ids, "8,11");
    server.stop().await;
}

/// What Tinyid's `SegmentId` hands out of `(current, max]`: `init()` aligns the cursor to
/// `id % delta == remainder`, then `nextId()` adds `delta` until past `max`.
fn tinyid_client_ids(current: u64, max: u64, delta: u64, remainder: u64) -> Vec<u64> {
    let mut id = current as i64;
    let (delta_i, remainder_i) = (delta as i64, remainder as i64);
    if id % delta_i != remainder_i {
        for _ in 0..=delta {
            id += 1;
            if id % delta_i == remainder_i {
                id -= delta_i;
                break;
            }
        }
    }
    let mut ids = Vec::new();
    loop {
        id += delta_i;
        if id > max as i64 {
            return ids;
        }
        ids.push(id as u64);
    }
}

/// One segment as a Tinyid server takes it: Tinyid's `queryByBizType`, then its
/// `updateMaxId` compare-and-set, retried; `None` when every round lost.
async fn tinyid_server_segment(pool: &MySqlPool, biz_type: &str) -> Option<Vec<u64>> {
    for _ in 0..3 {
        let row = sqlx::query(
            "select id, biz_type, begin_id, max_id, step, delta, remainder, create_time, \
             update_time, version from tiny_id_info where biz_type = ?",
        )
        .bind(biz_type)
        .fetch_one(pool)
        .await
        .unwrap();
        let (id, max_id, step, delta, remainder, version): (u64, i64, i32, i32, i32, i64) =
            (row.get(0), row.get(3), row.get(4), row.get(5), row.get(6), row.get(9));
        let new_max = max_id + i64::from(step);
        let done = sqlx::query(
            "update tiny_id_info set max_id= ?, update_time=now(), version=version+1 \
             where id=? and max_id=? and version=? and biz_type=?",
        )
        .bind(new_max)
        .bind(id)
        .bind(max_id)
        .bind(version)
        .bind(biz_type)
        .execute(pool)
        .await
        .unwrap();
        if done.rows_affected() == 1 {
            return Some(tinyid_client_ids(
                max_id as u64,
                new_max as u64,
                delta as u64,
                remainder as u64,
            ));
        }
    }
    None
}

/// A small seeded generator (xorshift64*): the simulation's choices replay from the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

#[tokio::test]
async fn tinyid_servers_and_idmint_nodes_side_by_side_never_repeat_an_id() {
    let Some((url, pool)) = tinyid_database("tinyidside").await else { return };
    // Small steps: many segments, many compare-and-set races.
    sql(&pool, "UPDATE tiny_id_info SET step = 40").await;
    let seed = std::env::var("IDMINT_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64 * 0x9E37_79B9 + 1);
    println!("tinyid side-by-side simulation: IDMINT_SIM_SEED={seed}");
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let node =
            TestServer::setup().tinyid(store(&url).await, TinyidConfig::default()).node().await;
        nodes.push(node);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..6u64 {
        let pool = pool.clone();
        let node = Arc::clone(&nodes[(worker % 2) as usize]);
        let mut rng = Rng(seed.wrapping_add(worker.wrapping_mul(0x1234_5677)) | 1);
        tasks.spawn(async move {
            let mut ids: Vec<(String, u64)> = Vec::new();
            for _ in 0..60 {
                let biz = if rng.below(2) == 0 { "test" } else { "test_odd" };
                let tag = idmint_core::Tag::parse(biz).unwrap();
                match (worker, rng.below(3)) {
                    // Workers 0 and 1 are Tinyid servers.
                    (0 | 1, _) => {
                        if let Some(segment) = tinyid_server_segment(&pool, biz).await {
                            ids.extend(segment.into_iter().map(|id| (biz.to_string(), id)));
                        }
                    }
                    (_, 0) => {
                        let s = node.tinyid_segment(&tag).await.unwrap();
                        let got = tinyid_client_ids(s.current_id, s.max_id, s.delta, s.remainder);
                        ids.extend(got.into_iter().map(|id| (biz.to_string(), id)));
                    }
                    _ => {
                        let count = Count::new(1 + rng.below(50)).unwrap();
                        let got = node.tinyid_ids(&tag, count).await.unwrap();
                        ids.extend(got.into_iter().map(|id| (biz.to_string(), id)));
                    }
                }
            }
            ids
        });
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    while let Some(ids) = tasks.join_next().await {
        for (biz, id) in ids.unwrap() {
            total += 1;
            if biz == "test_odd" {
                assert_eq!(id % 2, 1, "seed {seed}: {id} of test_odd is even");
            }
            assert!(seen.insert((biz.clone(), id)), "seed {seed}: {biz} id {id} handed out twice");
        }
    }
    assert!(total > 1_000, "seed {seed}: only {total} ids");
    let cas: i64 = sqlx::query("SELECT CAST(SUM(version) AS SIGNED) FROM tiny_id_info")
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    println!("seed {seed}: {total} ids, none twice; the rows' versions add up to {cas}");
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test]
async fn tinyid_row_restored_from_an_older_backup_repeats_no_id_of_this_node() {
    let Some((url, pool)) = tinyid_database("tinyidrestore").await else { return };
    sql(&pool, "UPDATE tiny_id_info SET step = 20").await;
    let dir = tempfile::tempdir().unwrap();
    let segment = idmint::segment::SegmentConfig::default()
        .with_state_dir(dir.path())
        .with_adaptive_step(false);
    let config = TinyidConfig { segment, ..TinyidConfig::default() };
    let tag = idmint_core::Tag::parse("test_odd").unwrap();
    let mut seen = HashSet::new();
    let node = TestServer::setup().tinyid(store(&url).await, config.clone()).node().await;
    for _ in 0..10 {
        for id in node.tinyid_ids(&tag, Count::new(7).unwrap()).await.unwrap() {
            assert!(seen.insert(id), "{id} twice");
        }
    }
    // The row goes back to the sample's values, as a restore from an old backup would.
    sql(&pool, "UPDATE tiny_id_info SET max_id = 1, version = 3 WHERE biz_type = 'test_odd'").await;
    for _ in 0..10 {
        for id in node.tinyid_ids(&tag, Count::new(7).unwrap()).await.unwrap() {
            assert!(seen.insert(id), "{id} handed out again after the row went back");
        }
    }
    node.shutdown().await;
    drop(node);
    // And after a restart on the same data directory.
    sql(&pool, "UPDATE tiny_id_info SET max_id = 1, version = 3 WHERE biz_type = 'test_odd'").await;
    let node = TestServer::setup().tinyid(store(&url).await, config).node().await;
    for _ in 0..10 {
        for id in node.tinyid_ids(&tag, Count::new(7).unwrap()).await.unwrap() {
            assert!(seen.insert(id), "{id} handed out again after a restart");
        }
    }
    node.shutdown().await;
}

/// `text` percent-encoded byte for byte, hex in upper or lower case.
fn percent(text: &str, upper: bool) -> String {
    text.bytes().map(|b| if upper { format!("%{b:02X}") } else { format!("%{b:02x}") }).collect()
}

#[tokio::test]
async fn tinyid_routes_fuzz_no_wrong_token_takes_an_id() {
    let Some((url, pool)) = tinyid_database("tinyidfuzz").await else { return };
    sql(&pool, "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) VALUES ('other', 1, 1, 100, 1, 0, 0)").await;
    sql(
        &pool,
        "INSERT INTO tiny_id_token (token, biz_type) VALUES ('token-of-other-only', 'other')",
    )
    .await;
    let server = server(&url, TinyidConfig::default()).await;
    let routes = ["nextId", "nextIdSimple", "nextSegmentId", "nextSegmentIdSimple"];
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
    let names = [
        "bizType=test".to_string(),
        format!("bizType={}", percent("test", true)),
        format!("bizType={}", percent("test", false)),
        format!("{}=test", percent("bizType", false)),
    ];
    let wrong = [
        String::new(),
        "&token=".to_string(),
        "&token=0F673ADF80504E2EAA552F5D791B644C".to_string(),
        "&token=0f673adf80504e2eaa552f5d791b644".to_string(),
        "&token=0f673adf80504e2eaa552f5d791b644c%00".to_string(),
        "&token=token-of-other-only".to_string(),
        "&token=0f673adf80504e2eaa552f5d791b644c&token=x".to_string(),
        "&Token=0f673adf80504e2eaa552f5d791b644c".to_string(),
    ];
    let (mut sent, mut failures) = (0, Vec::new());
    for route in routes {
        for method in methods {
            for name in &names {
                for token in &wrong {
                    let uri = server.url(&format!("/tinyid/id/{route}?{name}{token}"));
                    let mut request = server.client.request(method.parse().unwrap(), &uri);
                    if token.is_empty() {
                        // The right token where these routes do not read one.
                        request = request.header("authorization", format!("Bearer {TOKEN}"));
                    }
                    let status = request.send().await.unwrap().status();
                    sent += 1;
                    if status.is_success() {
                        failures.push(format!("{method} {uri}: {status}"));
                    }
                }
                // The control: the right token works on every method Tinyid maps.
                let uri = server.url(&format!("/tinyid/id/{route}?{name}&token={TOKEN}"));
                let status = server
                    .client
                    .request(method.parse().unwrap(), &uri)
                    .send()
                    .await
                    .unwrap()
                    .status();
                assert_eq!(status.is_success(), method != "OPTIONS", "{method} {uri}: {status}");
            }
        }
    }
    assert!(failures.is_empty(), "{} of {sent} passed:\n{}", failures.len(), failures.join("\n"));
    server.stop().await;
}

/// Tinyid's `biz_type`s are shown like tags (issue 32, item 5): in `/v1/status` with
/// `kind` `tinyid`, their row (`max_id`, `step`, `delta`, `remainder`) and this node's
/// segments in ids; on `GET /v1/tags/{name}` when no tag has that name (a tag of the same
/// name wins there, and both are in the status); in the per-tag metrics under their name
/// with `source="tinyid"`, ranked with the tags under the same bound. A name that is
/// neither names both ways to make it.
#[tokio::test]
async fn tinyid_biz_types_show_like_tags_in_status_tags_and_metrics() {
    let Some((url, _pool)) = tinyid_database("tinyidvisible").await else { return };
    let limits = idmint_server::HttpLimits { metrics_tags_max: 3, ..Default::default() };
    let server = TestServer::setup()
        .tinyid(store(&url).await, TinyidConfig::default())
        .limits(limits)
        .start()
        .await;
    // A tag of the segment store named like the biz_type `test`, and another tag.
    for tag in ["test", "plain"] {
        assert_eq!(server.create_tag(json!({"tag": tag, "step": 10})).await.status(), 201);
        assert_eq!(text(&server, &format!("/api/segment/get/{tag}")).await, "1");
    }
    let odd = "/tinyid/id/nextIdSimple?bizType=test_odd&batchSize=3&token=";
    assert_eq!(text(&server, &format!("{odd}{TOKEN}")).await, "3,5,7");

    let status: Value = server.get("/v1/status").await.json().await.unwrap();
    assert_eq!(status["tinyid"]["up"], true, "{status}");
    let tags = status["tags"].as_array().unwrap();
    let find = |name: &str, kind: &str| {
        tags.iter().find(|t| t["tag"] == name && t["kind"] == kind).cloned().unwrap_or_default()
    };
    assert_eq!(find("test", "segment")["segments"]["ids_issued"], 1, "{status}");
    let row = find("test", "tinyid");
    let stride = (&row["delta"], &row["remainder"], &row["step"]);
    assert_eq!(stride, (&json!(1), &json!(0), &json!(100000)), "{row}");
    assert!(row.get("segments").is_none(), "not served here yet: {row}");
    let odd_status = find("test_odd", "tinyid");
    let segments = &odd_status["segments"];
    let stride = (&odd_status["delta"], &odd_status["remainder"]);
    assert_eq!(stride, (&json!(2), &json!(1)), "{odd_status}");
    assert_eq!(odd_status["max_id"], 100_001, "the row's max_id as Tinyid keeps it");
    // Ids, not the engine's indices: (1, 100001] holds 3, 5, …, 100001.
    let current = json!({"start": 3, "end": 100_003, "next_id": 9, "remaining": 49_997});
    assert_eq!(segments["current"], current, "{odd_status}");
    assert_eq!((&segments["ids_issued"], &segments["remaining"]), (&json!(3), &json!(49_997)));

    let by_name: Value = server.get("/v1/tags/test_odd").await.json().await.unwrap();
    assert_eq!((&by_name["kind"], &by_name["segments"]["current"]), (&json!("tinyid"), &current));
    let tag: Value = server.get("/v1/tags/test").await.json().await.unwrap();
    assert_eq!(tag["kind"], "segment", "the tag of that name wins: {tag}");
    let neither = assert_error(server.get("/v1/tags/neither").await, 404, "unknown_tag").await;
    let both = neither.contains("POST /v1/tags") && neither.contains("/tinyid/id/nextId");
    assert!(both, "{neither}");
    // Tag admin on a biz_type's name says what it is, never "create it".
    let url = server.url("/v1/tags/test_odd");
    for request in [server.client.delete(&url), server.client.patch(&url).json(&json!({"step": 5}))]
    {
        let refused = assert_error(request.send().await.unwrap(), 404, "unknown_tag").await;
        assert!(refused.contains("Tinyid's SQL") && !refused.contains("create"), "{refused}");
    }

    // Metrics: biz_types under their names with source="tinyid", ranked with the tags under
    // the one bound (3): four names served, three shown, one summed into (other).
    let simple = format!("/tinyid/id/nextIdSimple?bizType=test&token={TOKEN}");
    assert_eq!(text(&server, &simple).await, "2");
    let body = text(&server, "/metrics").await;
    let lines: Vec<&str> =
        body.lines().filter(|l| l.starts_with("idmint_segment_ids_issued_total{")).collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(lines.iter().filter(|l| l.contains(r#"tag="(other)""#)).count(), 1, "{lines:#?}");
    let value = |l: &&str| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
    assert_eq!(lines.iter().map(value).sum::<f64>(), 6.0, "the series add up: {lines:#?}");
    let odd_line = r#"idmint_segment_ids_issued_total{tag="test_odd",source="tinyid"} 3"#;
    let odd_other = lines.iter().any(|l| l.contains(r#"tag="(other)",source="tinyid""#));
    assert!(lines.contains(&odd_line) || odd_other, "{lines:#?}");
    assert!(lines.iter().all(|l| !l.contains(r#"tag="test_odd""#) || l.contains("source")));
    let refills = "idmint_segment_refill_duration_seconds_count{tag=";
    let tinyid_refills =
        body.lines().any(|l| l.starts_with(refills) && l.contains(r#"source="tinyid""#));
    assert!(tinyid_refills, "{body}");
    server.stop().await;
}
