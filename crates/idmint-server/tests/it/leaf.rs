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
    let id = next_id(&server, "order").await;

    let db = server.get("/db").await;
    assert_eq!(db.status(), 200);
    assert_eq!(db.headers()["content-type"], "text/html; charset=utf-8");
    let html = db.text().await.unwrap();
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"), "{html}");
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
    let order = buffers.iter().find(|b| b["tag"] == "order").expect("order's buffer");
    assert_eq!(order["init"], true, "{order}");
    assert_eq!(order["current"]["value"], json!(id + 1), "{order}");
    let (max, step) = (order["current"]["max"].as_u64().unwrap(), order["current"]["step"].clone());
    assert!(max > id && step.as_u64().unwrap() >= 100, "{order}");
    // `idle` has no buffer here: this node never served it.
    assert!(buffers.iter().all(|b| b["tag"] != "idle"), "{cache}");
    let html = server.get("/cache").await.text().await.unwrap();
    assert!(html.contains("<td>order</td><td>true</td>"), "{html}");

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
