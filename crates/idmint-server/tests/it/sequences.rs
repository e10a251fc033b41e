//! The sequence routes against the test kit's Redis (`IDMINT_TEST_REDIS_URL`'s, else a
//! private one; a fresh key prefix per run; skipped and reported without `redis-server`): create, take plain and formatted ids, status,
//! delete, and the errors; a new sequence counts no reseed; a node without Redis answers 501
//! saying how to start it.

use crate::support::{TestServer, assert_error};

#[tokio::test]
async fn sequences_are_created_served_described_and_deleted_over_http() {
    // None: no Redis here, and the test kit recorded the skip for the run's summary.
    let Some(server) = TestServer::with_sequences().await else { return };
    let post =
        |body: serde_json::Value| server.client.post(server.url("/v1/seqs")).json(&body).send();
    assert_eq!(post(serde_json::json!({"name": "orders"})).await.unwrap().status(), 201);
    let daily = post(serde_json::json!({"name": "invoices", "daily": true, "time_zone": "+08:00"}));
    let daily: serde_json::Value = daily.await.unwrap().json().await.unwrap();
    assert_eq!(daily["format"], idmint::sequence::limits::DAILY_FORMAT_DEFAULT);

    let body: serde_json::Value = server.get("/v1/seq/orders?count=3").await.json().await.unwrap();
    assert_eq!(body["ids"], serde_json::json!([1, 2, 3]));
    assert!(body.get("period").is_none());
    let body: serde_json::Value = server.get("/v1/seq/invoices").await.json().await.unwrap();
    let id = body["ids"][0].as_str().unwrap();
    let period = body["period"].as_str().unwrap();
    assert_eq!(id, format!("{period}000001"));

    let status: serde_json::Value = server.get("/v1/seqs/orders").await.json().await.unwrap();
    assert_eq!(status["counter"]["cur"], 3);
    assert_eq!(status["counter"]["max"], idmint::sequence::limits::SEQ_RAISE_MIN);
    let list: serde_json::Value = server.get("/v1/seqs").await.json().await.unwrap();
    assert_eq!(list["sequences"].as_array().unwrap().len(), 2);
    // Two new sequences seeded their counters: a first seed is not a reseed (the dashboard
    // showed 2 reseeds here).
    let node: serde_json::Value = server.get("/v1/status").await.json().await.unwrap();
    assert_eq!(node["sequences"]["reseeds"], 0, "{}", node["sequences"]);

    assert_error(server.get("/v1/seq/nope").await, 404, "unknown_sequence").await;
    assert_error(server.get("/v1/seq/orders?count=0").await, 400, "bad_count").await;
    assert_error(server.get("/v1/seq/bad%09name").await, 400, "bad_tag").await;
    let bad = post(serde_json::json!({"name": "d", "daily": true, "format": "{seq}"}));
    assert_error(bad.await.unwrap(), 400, "bad_sequence").await;
    let twice = post(serde_json::json!({"name": "orders"})).await.unwrap();
    let message = assert_error(twice, 400, "bad_sequence").await;
    assert!(message.contains("already exists"), "{message}");

    let deleted = server.client.delete(server.url("/v1/seqs/orders")).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_error(server.get("/v1/seq/orders").await, 404, "unknown_sequence").await;
    server.stop().await;
}

#[tokio::test]
async fn without_redis_the_sequence_routes_say_why() {
    let server = TestServer::memory().await;
    let message =
        assert_error(server.get("/v1/seq/orders").await, 501, "sequences_not_configured").await;
    assert!(message.contains("not started in this test"), "{message}");
    server.stop().await;
}
