//! Leaf's surface (issue 22, item 2): Leaf's routes answer every method Leaf's clients may
//! use (Leaf maps them without one), a HEAD never takes an id on any route that hands ids
//! out, OPTIONS answers the methods, and Leaf's monitor pages `/cache` and `/db` show the
//! buffers and the rows, HTML-escaped, as JSON on request, behind the admin token.

use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint_server::HttpLimits;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::TestServer;

const ADMIN: &str = "admin-token-0123456789";
const SHOP: &str = "shop-client-token-0001";

/// The next id of `tag` through Leaf's route.
async fn next_id(server: &TestServer, tag: &str) -> u64 {
    let response = server.get(&format!("/api/segment/get/{tag}")).await;
    assert_eq!(response.status(), 200);
    response.text().await.unwrap().parse().unwrap()
}

#[tokio::test]
async fn leaf_routes_answer_every_method_leaf_clients_use() {
    let server = TestServer::with_snowflake().await;
    server.create_tag(json!({"tag": "order", "step": 100})).await;
    let first = next_id(&server, "order").await;
    let mut expected = first + 1;
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::GET] {
        let url = server.url("/api/segment/get/order");
        let response = server.client.request(method.clone(), url).send().await.unwrap();
        assert_eq!(response.status(), 200, "{method}");
        assert_eq!(response.text().await.unwrap(), expected.to_string(), "{method}");
        expected += 1;
        let url = server.url("/api/snowflake/get/any");
        let response = server.client.request(method.clone(), url).send().await.unwrap();
        assert_eq!(response.status(), 200, "{method} snowflake");
        let id: u64 = response.text().await.unwrap().parse().unwrap();
        let url = server.url(&format!("/decodeSnowflakeId?snowflakeId={id}"));
        let response = server.client.request(method.clone(), url).send().await.unwrap();
        let decoded: Value = response.json().await.unwrap();
        assert!(decoded["workerId"].is_string(), "{method} decode: {decoded}");
    }
    for route in ["/api/segment/get/order", "/api/snowflake/get/k", "/decodeSnowflakeId", "/db"] {
        let response =
            server.client.request(Method::OPTIONS, server.url(route)).send().await.unwrap();
        assert_eq!(response.status(), 204, "OPTIONS {route}");
        let allow = response.headers()["allow"].to_str().unwrap().to_string();
        assert_eq!(allow, "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", "{route}");
        let trace = Method::from_bytes(b"TRACE").unwrap();
        let response = server.client.request(trace, server.url(route)).send().await.unwrap();
        assert_eq!(response.status(), 405, "TRACE {route}");
    }
    // OPTIONS and TRACE took no id.
    assert_eq!(next_id(&server, "order").await, expected);
    // Native routes keep their methods.
    let response = server.client.post(server.url("/v1/segment/order")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    server.stop().await;
}

/// HEAD on every route that hands out ids takes none: the ids before and after are
/// consecutive, and the answer carries none of the GET handler's headers (it never ran).
#[tokio::test]
async fn head_never_consumes_an_id() {
    let server = TestServer::with_cached_snowflake(1 << 14).await;
    server.create_tag(json!({"tag": "order", "step": 100})).await;
    let before = next_id(&server, "order").await;
    let id_routes = [
        "/api/segment/get/order",
        "/v1/segment/order?count=50",
        "/v1/segment/order/ranges?count=50",
        "/api/snowflake/get/k",
        "/v1/snowflake?count=10",
        "/v1/uuid",
        "/v1/ulid",
    ];
    for route in id_routes {
        for _ in 0..3 {
            let response = server.client.head(server.url(route)).send().await.unwrap();
            assert_eq!(response.status(), 200, "HEAD {route}");
            assert!(response.headers().get("content-type").is_none(), "HEAD {route} ran GET");
            assert_eq!(response.headers()["cache-control"], "no-store", "HEAD {route}");
        }
    }
    // A route with no GET refuses HEAD as it refuses any method it does not take.
    let response = server.client.head(server.url("/v1/segment/order/return")).send().await.unwrap();
    assert_eq!(response.status(), 405, "HEAD on a POST-only route");
    assert_eq!(next_id(&server, "order").await, before + 1, "a HEAD took segment ids");
    // A read route still runs its handler under HEAD (headers as GET's, no body).
    let response = server.client.head(server.url("/v1/tags/order")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    server.stop().await;
}

/// A HEAD is checked like a GET: a guarded tag's id route without its token is 401, and
/// HEAD with the token takes no id either.
#[tokio::test]
async fn head_is_token_checked_and_takes_no_id() {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let auth = crate::auth::guarded_auth(&["fmt"]);
    let server = TestServer::with_auth_and_limits(
        store,
        auth,
        HttpLimits::default(),
        SegmentConfig::default(),
    )
    .await;
    let response = server
        .client
        .post(server.url("/v1/tags"))
        .bearer_auth(ADMIN)
        .json(&json!({"tag": "fmt"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let get = |method: Method, token: Option<&str>| {
        let mut request = server.client.request(method, server.url("/api/segment/get/fmt"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    assert_eq!(get(Method::HEAD, None).await.unwrap().status(), 401);
    assert_eq!(get(Method::POST, None).await.unwrap().status(), 401);
    assert_eq!(get(Method::OPTIONS, None).await.unwrap().status(), 401);
    let first: u64 =
        get(Method::GET, Some(SHOP)).await.unwrap().text().await.unwrap().parse().unwrap();
    assert_eq!(get(Method::HEAD, Some(SHOP)).await.unwrap().status(), 200);
    let second: u64 =
        get(Method::POST, Some(SHOP)).await.unwrap().text().await.unwrap().parse().unwrap();
    assert_eq!(second, first + 1);
    server.stop().await;
}

/// `/cache` and `/db`: the buffers and the rows, HTML by default with every store text
/// escaped, JSON with `?format=json` or `Accept: application/json`, a bad format refused.
#[tokio::test]
async fn monitor_pages_show_buffers_and_rows_escaped() {
    let server = TestServer::memory().await;
    let description = r#"<script>alert("x")</script> & co"#;
    let created =
        server.create_tag(json!({"tag": "order", "step": 100, "description": description})).await;
    assert_eq!(created.status(), 201);
    server.create_tag(json!({"tag": "idle", "step": 10})).await;
    // A tag may hold markup characters: both pages escape it.
    assert_eq!(server.create_tag(json!({"tag": "<i>x&y</i>"})).await.status(), 201);
    let id = next_id(&server, "order").await;

    let db = server.get("/db").await;
    assert_eq!(db.status(), 200);
    assert_eq!(db.headers()["content-type"], "text/html; charset=utf-8");
    let html = db.text().await.unwrap();
    assert!(!html.contains("<i>"), "{html}");
    assert!(html.contains("<td>&lt;i&gt;x&amp;y&lt;/i&gt;</td>"), "{html}");
    assert!(html.contains("<td>order</td>") && html.contains("<td>idle</td>"), "{html}");

    let rows: Value = server.get("/db?format=json").await.json().await.unwrap();
    let order = rows["rows"].as_array().unwrap().iter().find(|r| r["biz_tag"] == "order");
    let order = order.expect("order's row");
    assert_eq!((&order["step"], &order["description"]), (&json!(100), &json!(description)));
    assert!(order["max_id"].as_u64().unwrap() > id, "{order}");
    assert!(order["update_time"].as_str().unwrap().ends_with('Z'), "{order}");

    let cache: Value = server
        .client
        .get(server.url("/cache"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let buffers = cache["buffers"].as_array().unwrap();
    let order = buffers.iter().find(|b| b["name"] == "order").expect("order's buffer");
    assert_eq!((&order["init"], &order["pos"]), (&json!(true), &json!(0)), "{order}");
    assert_eq!(order["value0"], json!(id + 1), "{order}");
    let (max, step) = (order["max0"].as_u64().unwrap(), order["step0"].as_u64().unwrap());
    assert!(max > id && step >= 100, "{order}");
    // `idle` is listed though this node never served it, as Leaf lists an unloaded row.
    let idle = buffers.iter().find(|b| b["name"] == "idle").expect("idle's row");
    assert_eq!((&idle["init"], &idle["value0"]), (&json!(false), &json!(0)), "{cache}");
    let html = server.get("/cache").await.text().await.unwrap();
    assert!(html.contains("<td>order</td><td>true</td>"), "{html}");
    assert!(
        html.contains("<td>&lt;i&gt;x&amp;y&lt;/i&gt;</td>") && !html.contains("<i>"),
        "{html}"
    );

    let refused = server.get("/cache?format=xml").await;
    crate::support::assert_error(refused, 400, "bad_query").await;
    // POST, as Leaf allows, answers the same page.
    let posted = server.client.post(server.url("/db?format=json")).send().await.unwrap();
    assert_eq!(posted.status(), 200);
    server.stop().await;
}

/// With an admin token, the monitor pages need it under every method: none is 401, a
/// client token (which names some tags, while the pages show all) 403, the admin's 200.
#[tokio::test]
async fn monitor_pages_need_the_admin_token() {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let auth = crate::auth::guarded_auth(&["fmt"]);
    let server = TestServer::with_auth_and_limits(
        store,
        auth,
        HttpLimits::default(),
        SegmentConfig::default(),
    )
    .await;
    for route in ["/cache", "/db"] {
        for method in [Method::GET, Method::POST, Method::HEAD, Method::DELETE] {
            let send = |token: Option<&str>| {
                let mut request = server.client.request(method.clone(), server.url(route));
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                request.send()
            };
            assert_eq!(send(None).await.unwrap().status(), 401, "{method} {route}");
            assert_eq!(send(Some(SHOP)).await.unwrap().status(), 403, "{method} {route}");
            assert_eq!(send(Some(ADMIN)).await.unwrap().status(), 200, "{method} {route}");
        }
    }
    server.stop().await;
}

/// The cells of every data row of a monitor page (Leaf's empty rows between them skipped),
/// and its header cells.
fn table(html: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let head = html.split_once("<thead>").unwrap().1.split_once("</thead>").unwrap().0;
    let header = head.split("<th>").skip(1).map(|c| c.split_once("</th>").unwrap().0.to_string());
    let body = html.split_once("<tbody>").unwrap().1;
    let rows = body
        .split("<tr>")
        .skip(1)
        .map(|row| {
            let row = row.split_once("</tr>").unwrap().0;
            row.split("<td>")
                .skip(1)
                .map(|c| c.split_once("</td>").unwrap().0.to_string())
                .collect()
        })
        .filter(|cells: &Vec<String>| !cells.is_empty())
        .collect();
    (header.collect(), rows)
}

/// Leaf's `/cache` as its users' scripts read it: Leaf's ten columns in Leaf's order, every
/// row of the table whether this node loaded it or not (unloaded: `false, false, 0` and
/// zeros, as Leaf shows a buffer it has not initialised), numbers grouped by thousands as
/// Leaf's template writes them, each row followed by an empty one, and the current segment
/// in Leaf's slot: 0 first, 1 after a switch.
#[tokio::test]
async fn cache_has_leafs_columns_slots_and_every_row_loaded_or_not() {
    let server = TestServer::memory().await;
    for body in [
        json!({"tag": "c_order", "step": 100}),
        json!({"tag": "c_big", "step": 1000, "start": 1_234_567}),
        json!({"tag": "c_unloaded", "step": 10}),
    ] {
        assert_eq!(server.create_tag(body).await.status(), 201);
    }
    assert_eq!(next_id(&server, "c_order").await, 1);
    assert_eq!(next_id(&server, "c_big").await, 1_234_567);
    let html = server.get("/cache").await.text().await.unwrap();
    let (header, rows) = table(&html);
    let columns =
        ["name", "init", "next", "pos", "value0", "max0", "step0", "value1", "max1", "step1"];
    assert_eq!(header, columns, "{html}");
    // Leaf follows every row with an empty one: a script stepping over it steps here too.
    assert_eq!(html.matches("<tr></tr>").count(), 3, "{html}");
    let row = |name: &str| rows.iter().find(|r| r[0] == name).cloned().unwrap_or_default();
    assert_eq!(
        row("c_unloaded"),
        ["c_unloaded", "false", "false", "0", "0", "0", "0", "0", "0", "0"]
    );
    assert_eq!(
        row("c_big")[..7],
        ["c_big", "true", "false", "0", "1,234,568", "1,235,567", "1,000"]
    );
    assert_eq!(row("c_order")[..7], ["c_order", "true", "false", "0", "2", "101", "100"]);
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["c_big", "c_order", "c_unloaded"], "every row, sorted");
    // Past the first segment the buffer switches to Leaf's other slot.
    assert_eq!(server.get("/v1/segment/c_order?count=149").await.status(), 200);
    let (_, rows) = table(&server.get("/cache").await.text().await.unwrap());
    let order = rows.iter().find(|r| r[0] == "c_order").unwrap();
    assert_eq!(
        (order[1].as_str(), order[3].as_str(), order[7].as_str()),
        ("true", "1", "151"),
        "{order:?}"
    );
    server.stop().await;
}

/// Leaf's `/db`: its four columns, and the row's `update_time` as the database writes it as
/// text; a store whose time has no text of its own writes it as MySQL would, in UTC.
#[tokio::test]
async fn db_has_leafs_four_columns_and_the_databases_time_text() {
    let server = TestServer::memory().await;
    assert_eq!(
        server.create_tag(json!({"tag": "d_big", "step": 2000, "start": 1_234_567})).await.status(),
        201
    );
    let html = server.get("/db").await.text().await.unwrap();
    let (header, rows) = table(&html);
    assert_eq!(header, ["tag", "max", "step", "update"], "{html}");
    assert_eq!(rows[0][..3], ["d_big", "1,234,567", "2,000"]);
    let update = &rows[0][3];
    let bytes = update.as_bytes();
    assert!(update.len() == 19 && bytes[10] == b' ' && bytes[13] == b':', "{update}");
    server.stop().await;

    // MariaDB: the server's own text of the column, in its own time zone, whatever the
    // session idmint's pool reads in. Milliseconds (a `timestamp(3)` column) tell that text
    // from idmint's own rendering of the time.
    use sqlx::Connection;
    let Some(url) = idmint_testkit::mysql::fresh_database("leafdbtime").await else { return };
    let mut raw = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', \
         max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, \
         description varchar(256) DEFAULT NULL, update_time timestamp(3) NOT NULL \
         DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3), PRIMARY KEY (biz_tag)) \
         ENGINE=InnoDB; \
         SET time_zone = @@global.time_zone; \
         INSERT INTO leaf_alloc (biz_tag, max_id, step, update_time) \
         VALUES ('d_order', 1, 1000, '2019-09-06 09:35:00.250')",
    )
    .execute(&mut raw)
    .await
    .unwrap();
    let idmint_store::StoreUrl::Mysql(sql) = idmint_store::StoreUrl::parse(&url).unwrap() else {
        panic!("{url}")
    };
    let store = Arc::new(idmint_store::MySqlStore::connect(&sql).await.unwrap());
    let server = TestServer::start(store).await;
    let html = server.get("/db").await.text().await.unwrap();
    let (_, rows) = table(&html);
    assert_eq!(rows, [["d_order", "1", "1,000", "2019-09-06 09:35:00.250"]], "{html}");
    server.stop().await;
}

/// `/decodeSnowflakeId` with a `snowflakeId` that is not a number answers as Leaf does: `200`
/// with `errorMsg` alone (a script checks for it); no `snowflakeId` at all is a 400, as
/// Leaf's framework answers a missing parameter.
#[tokio::test]
async fn decode_of_a_non_number_answers_as_leaf_does() {
    let server = TestServer::with_snowflake().await;
    for text in ["abc", "", "-1", "9223372036854775808"] {
        let answer = server.get(&format!("/decodeSnowflakeId?snowflakeId={text}")).await;
        assert_eq!(answer.status(), 200, "{text:?}");
        let body: Value = answer.json().await.unwrap();
        let object = body.as_object().unwrap();
        assert_eq!(object.keys().collect::<Vec<_>>(), ["errorMsg"], "{text:?}: {body}");
        assert!(body["errorMsg"].as_str().unwrap().contains("not a number"), "{body}");
    }
    crate::support::assert_error(server.get("/decodeSnowflakeId").await, 400, "bad_query").await;
    let decoded: Value =
        server.get("/decodeSnowflakeId?snowflakeId=42").await.json().await.unwrap();
    assert_eq!((&decoded["workerId"], &decoded["sequenceId"]), (&json!("0"), &json!("42")));
    server.stop().await;
}
