//! The HTTP contract: Leaf's route, the batch route, tag admin, health, errors.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::{TestServer, assert_error};

#[tokio::test]
async fn leaf_route_answers_plain_decimal_ids_that_increase() {
    let server = TestServer::memory().await;
    let created = server.create_tag(json!({"tag": "order", "step": 3, "start": 100})).await;
    assert_eq!(created.status().as_u16(), 201);
    let mut last = 0;
    for expected in 100..110 {
        let response = server.get("/api/segment/get/order").await;
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
        assert_eq!(content_type, "text/plain; charset=utf-8");
        assert_eq!(response.headers()["content-length"], expected.to_string().len().to_string());
        let id: u64 = response.text().await.unwrap().parse().expect("a decimal id");
        assert_eq!(id, expected);
        assert!(id > last);
        last = id;
    }
    server.stop().await;
}

#[tokio::test]
async fn batch_route_returns_exactly_count_ids_and_bounds_count() {
    let server = TestServer::memory().await;
    server.create_tag(json!({"tag": "batch", "step": 7})).await;
    let body: Value = server.get("/v1/segment/batch?count=20").await.json().await.unwrap();
    let ids: Vec<u64> = serde_json::from_value(body["ids"].clone()).unwrap();
    assert_eq!(ids, (1..=20).collect::<Vec<u64>>());
    assert_eq!(body["tag"], "batch");
    let one: Value = server.get("/v1/segment/batch").await.json().await.unwrap();
    assert_eq!(one["ids"], json!([21]));
    let full: Value = server.get("/v1/segment/batch?count=100000").await.json().await.unwrap();
    assert_eq!(full["ids"].as_array().unwrap().len(), 100_000);
    for bad in ["0", "100001", "abc", "-1", ""] {
        let message = assert_error(
            server.get(&format!("/v1/segment/batch?count={bad}")).await,
            400,
            "bad_count",
        )
        .await;
        assert!(message.contains("100000"), "{message}");
    }
    server.stop().await;
}

#[tokio::test]
async fn unknown_and_bad_tags_are_named() {
    let server = TestServer::memory().await;
    let message = assert_error(server.get("/api/segment/get/nope").await, 404, "unknown_tag").await;
    assert!(message.contains("nope") && message.contains("tag create"), "{message}");
    assert_error(server.get("/v1/segment/nope?count=2").await, 404, "unknown_tag").await;
    let message = assert_error(server.get("/api/segment/get/a%09b").await, 400, "bad_tag").await;
    assert!(message.contains("control"), "{message}");
    let long = "x".repeat(129);
    assert_error(server.get(&format!("/v1/segment/{long}")).await, 400, "bad_tag").await;
    assert_error(server.get("/no/such/route").await, 404, "no_route").await;
    server.stop().await;
}

#[tokio::test]
async fn tags_are_created_listed_changed_and_deleted() {
    let server = TestServer::memory().await;
    let created: Value = server
        .create_tag(json!({"tag": "user", "step": 50, "start": 1000, "description": "users"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!((created["max_id"].as_u64(), created["step"].as_u64()), (Some(1000), Some(50)));
    assert_error(server.create_tag(json!({"tag": "user"})).await, 409, "tag_exists").await;
    assert_error(server.create_tag(json!({"tag": "bad tag "})).await, 400, "bad_tag").await;
    assert_error(server.create_tag(json!({"tag": "s", "step": 0})).await, 400, "bad_value").await;
    assert_error(server.create_tag(json!({"tag": "s", "stp": 5})).await, 400, "bad_body").await;
    server.create_tag(json!({"tag": "another"})).await;

    let list: Value = server.get("/v1/tags").await.json().await.unwrap();
    let names: Vec<&str> =
        list["tags"].as_array().unwrap().iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert_eq!(names, ["another", "user"]);

    assert_eq!(server.get("/api/segment/get/user").await.text().await.unwrap(), "1000");
    let shown: Value = server.get("/v1/tags/user").await.json().await.unwrap();
    // One id taken of 50: the preload starts at 10 % used, so only the current segment is
    // reserved.
    assert_eq!(shown["max_id"], 1050, "{shown}");
    assert_eq!(shown["segments"]["current"]["next_id"], 1001, "{shown}");
    assert_eq!(shown["segments"]["next"], Value::Null, "{shown}");

    let url = server.url("/v1/tags/user");
    let changed = server.client.patch(&url).json(&json!({"step": 9})).send().await.unwrap();
    assert_eq!(changed.json::<Value>().await.unwrap()["step"], 9);
    let bad = server.client.patch(&url).json(&json!({"step": 2_000_000})).send().await.unwrap();
    assert_error(bad, 400, "bad_value").await;
    let deleted = server.client.delete(&url).send().await.unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    assert_error(server.client.delete(&url).send().await.unwrap(), 404, "unknown_tag").await;
    assert_error(server.get("/api/segment/get/user").await, 404, "unknown_tag").await;
    server.stop().await;
}

/// Issue 20 item 3: over HTTP, a tag deleted and created again continues above its issued
/// ids; `start` below them is refused (409 `start_below_issued`) unless `force`, whose answer
/// carries a `warning`.
#[tokio::test]
async fn a_tag_created_again_over_http_never_repeats_its_ids_unless_forced() {
    let server = TestServer::memory().await;
    server.create_tag(json!({"tag": "reborn", "step": 10})).await;
    let mut served = Vec::new();
    for _ in 0..25 {
        served.push(server.get("/api/segment/get/reborn").await.text().await.unwrap());
    }
    let url = server.url("/v1/tags/reborn");
    assert_eq!(server.client.delete(&url).send().await.unwrap().status().as_u16(), 204);
    let again: Value =
        server.create_tag(json!({"tag": "reborn", "step": 10})).await.json().await.unwrap();
    assert!(again["max_id"].as_u64().unwrap() > 25, "{again}");
    assert_eq!(again.get("warning"), None, "{again}");
    let next = server.get("/api/segment/get/reborn").await.text().await.unwrap();
    assert!(!served.contains(&next), "id {next} handed out again");

    assert_eq!(server.client.delete(&url).send().await.unwrap().status().as_u16(), 204);
    let refused = server.create_tag(json!({"tag": "reborn", "start": 1})).await;
    let message = assert_error(refused, 409, "start_below_issued").await;
    assert!(message.contains("force"), "{message}");
    assert_error(server.get("/v1/tags/reborn").await, 404, "unknown_tag").await;
    let forced: Value = server
        .create_tag(json!({"tag": "reborn", "start": 1, "force": true}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(forced["max_id"], 1, "{forced}");
    assert!(forced["warning"].as_str().is_some_and(|w| w.contains("forced")), "{forced}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_get_distinct_ids_each_increasing() {
    let server = TestServer::memory().await;
    server.create_tag(json!({"tag": "order", "step": 100})).await;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (reqwest::Client::new(), server.url("/api/segment/get/order"));
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(2000);
                for _ in 0..2000 {
                    let text = client.get(&url).send().await.unwrap().text().await.unwrap();
                    ids.push(text.parse::<u64>().expect("an id"));
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for client in clients {
        let ids = client.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a client's ids did not increase");
        all.extend(ids);
    }
    assert_eq!(all.len(), 16_000);
    server.stop().await;
}

#[tokio::test]
async fn health_ready_and_an_openapi_document_covering_every_route() {
    let server = TestServer::memory().await;
    let health: Value = server.get("/health").await.json().await.unwrap();
    assert_eq!(
        (health["status"].as_str(), health["store"].as_str()),
        (Some("ok"), Some("memory://"))
    );
    assert_eq!(server.get("/ready").await.status().as_u16(), 200);
    let doc: Value = server.get("/openapi.json").await.json().await.unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for route in [
        "/api/segment/get/{tag}",
        "/v1/segment/{tag}",
        "/v1/tags",
        "/v1/tags/{tag}",
        "/api/snowflake/get/{key}",
        "/decodeSnowflakeId",
        "/v1/snowflake",
        "/v1/snowflake/{id}",
        "/v1/decode",
        "/v1/seq/{name}",
        "/v1/seqs",
        "/v1/seqs/{name}",
        "/health",
        "/ready",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(route), "{route} missing from /openapi.json");
    }
    server.stop().await;
}
