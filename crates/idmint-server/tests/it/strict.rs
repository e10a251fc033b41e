//! Strict tags through the server, two nodes on one store reaching each other over their real
//! gRPC API (`GrpcPeerLink`): created with `"strict": true`, listed and shown as `kind`
//! `strict`, their ids increasing across the nodes on the Leaf route, `/v1` and gRPC, and
//! refused as ranges (`409 strict_tag`).

use std::sync::Arc;

use idmint::node::Peer;
use idmint::strict::StrictConfig;
use idmint::{NodeBuilder, NodeConfig};
use idmint_server::{AppState, GrpcPeerLink};
use idmint_store::{MemoryStore, StoreUrl};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// A node on `store` serving HTTP and gRPC on a free loopback port, its peers told that
/// address; the base URL, and what stops it.
async fn node(store: &Arc<MemoryStore>) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.snowflake = Err("not started in this test".to_string());
    config.strict = Some(StrictConfig::new(Peer { grpc_url: base.clone() }));
    let node = NodeBuilder::new(config)
        .stores(Arc::clone(store))
        .peer_link(Arc::new(GrpcPeerLink::new(None)))
        .start()
        .await
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let state = AppState::new(Arc::new(node));
    tokio::spawn(idmint_server::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    (base, stop)
}

async fn leaf_id(http: &reqwest::Client, base: &str) -> u64 {
    let answer = http.get(format!("{base}/api/segment/get/chat")).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    answer.text().await.unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_strict_tag_increases_across_two_servers() {
    let store = Arc::new(MemoryStore::new());
    let ((a, _stop_a), (b, _stop_b)) = (node(&store).await, node(&store).await);
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{a}/v1/tags"))
        .json(&json!({"tag": "chat", "strict": true, "start": 100}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let body: Value = created.json().await.unwrap();
    assert_eq!((body["kind"].as_str(), body["step"].as_u64()), (Some("strict"), Some(0)));

    let mut last = 99;
    for round in 0..60 {
        let base = if round % 2 == 0 { &a } else { &b };
        let id = leaf_id(&http, base).await;
        assert!(id > last, "round {round}: {id} after {last}");
        last = id;
    }
    let batch: Value = http
        .get(format!("{b}/v1/segment/chat?count=3"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<u64> =
        batch["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(ids, vec![last + 1, last + 2, last + 3], "{batch}");

    let listed: Value =
        http.get(format!("{b}/v1/tags")).send().await.unwrap().json().await.unwrap();
    let chat = listed["tags"].as_array().unwrap().iter().find(|t| t["tag"] == "chat").cloned();
    assert_eq!(chat.unwrap()["kind"], "strict", "{listed}");
    let shown: Value =
        http.get(format!("{b}/v1/tags/chat")).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["kind"], "strict", "{shown}");

    let ranges = http.get(format!("{b}/v1/segment/chat/ranges?count=1")).send().await.unwrap();
    assert_eq!(ranges.status().as_u16(), 409);
    let refused: Value = ranges.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "strict_tag", "{refused}");
}
