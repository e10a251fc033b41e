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

    // The dashboard's status lists it too, as strict.
    let status: Value =
        http.get(format!("{b}/v1/status")).send().await.unwrap().json().await.unwrap();
    let listed = status["tags"].as_array().unwrap().iter().find(|t| t["tag"] == "chat").cloned();
    assert_eq!(listed.map(|t| t["kind"].clone()), Some(json!("strict")), "{status}");

    let ranges = http.get(format!("{b}/v1/segment/chat/ranges?count=1")).send().await.unwrap();
    assert_eq!(ranges.status().as_u16(), 409);
    let refused: Value = ranges.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "strict_tag", "{refused}");
}

/// A batch of the oracle over HTTP: its first and last timestamps, checked against the
/// answer's own parts.
async fn tso(http: &reqwest::Client, base: &str, count: u64) -> (u64, u64) {
    let answer = http.get(format!("{base}/v1/tso?count={count}")).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let body: Value = answer.json().await.unwrap();
    let (first, last) = (body["first"].as_u64().unwrap(), body["last"].as_u64().unwrap());
    assert_eq!(last - first + 1, count, "{body}");
    assert_eq!(body["physical_ms"].as_u64(), Some(first >> 18), "{body}");
    assert_eq!(body["logical"].as_u64(), Some(first & 0x3FFFF), "{body}");
    (first, last)
}

/// The timestamp oracle on two servers: `GET /v1/tso` and gRPC `Tso` in turn on either node,
/// each asked after the last was answered, increase (the second node forwards over gRPC);
/// `ids_as=string`, the decode route and gRPC `DecodeTso` agree; a bad count or timestamp is
/// a 400.
#[tokio::test]
async fn the_oracle_increases_across_two_servers_over_http_and_grpc() {
    use idmint_proto::v1::id_mint_client::IdMintClient;
    use idmint_proto::v1::{DecodeTsoRequest, TsoRequest};

    let store = Arc::new(MemoryStore::new());
    let ((a, _stop_a), (b, _stop_b)) = (node(&store).await, node(&store).await);
    let http = reqwest::Client::new();
    let channel = tonic::transport::Endpoint::from_shared(b.clone()).unwrap();
    let mut grpc = IdMintClient::new(channel.connect().await.unwrap());
    let mut last = 0;
    for round in 0..90_u64 {
        let count = [1, 1_000, 3][(round % 3) as usize];
        let (first, end) = match round % 3 {
            0 => tso(&http, &a, count).await,
            1 => tso(&http, &b, count).await,
            _ => {
                let answer = grpc.tso(TsoRequest { count }).await.unwrap().into_inner();
                assert_eq!(answer.count, count);
                assert_eq!(
                    (answer.physical_ms, answer.logical),
                    (answer.first >> 18, answer.first & 0x3FFFF)
                );
                (answer.first, answer.first + count - 1)
            }
        };
        assert!(first > last, "round {round}: {first} after {last}");
        last = end;
    }
    let texts: Value =
        http.get(format!("{b}/v1/tso?ids_as=string")).send().await.unwrap().json().await.unwrap();
    let text = texts["first"].as_str().unwrap();
    assert!(text.parse::<u64>().unwrap() > last, "{texts}");

    let decoded: Value =
        http.get(format!("{a}/v1/tso/{text}")).send().await.unwrap().json().await.unwrap();
    let over_grpc = grpc
        .decode_tso(DecodeTsoRequest { timestamp: text.parse().unwrap() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decoded["physical_ms"].as_u64(), Some(over_grpc.physical_ms), "{decoded}");
    assert_eq!(decoded["logical"].as_u64(), Some(over_grpc.logical), "{decoded}");
    assert_eq!(decoded["time"].as_str(), Some(over_grpc.time.as_str()), "{decoded}");
    assert!(over_grpc.time.starts_with("20"), "{over_grpc:?}");

    for (path, code) in [
        ("/v1/tso?count=0", "bad_count"),
        ("/v1/tso?count=100001", "bad_count"),
        ("/v1/tso?ids_as=hex", "bad_ids_as"),
        ("/v1/tso/+5", "bad_id"),
        ("/v1/tso/18446744073709551616", "bad_id"),
    ] {
        let answer = http.get(format!("{a}{path}")).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 400, "{path}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{path}: {body}");
    }
    let refused = grpc.tso(TsoRequest { count: 0 }).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
}

/// The headers of a take over HTTP: `idmint-node` and `idmint-owner`.
fn named(answer: &reqwest::Response) -> (Option<String>, Option<String>) {
    let header =
        |key: &str| answer.headers().get(key).map(|v| v.to_str().expect("ASCII").to_string());
    (header("idmint-node"), header("idmint-owner"))
}

/// A strict tag's takes name the node that answered and the tag's owner (HTTP headers on the
/// Leaf route and `/v1/segment`, gRPC metadata on `NextIds`), so that a client can ask the
/// owner directly; both nodes name the same owner, which names itself. A plain tag's takes
/// carry neither.
#[tokio::test]
async fn a_strict_take_names_the_node_and_the_owner() {
    use idmint_proto::v1::NextIdsRequest;
    use idmint_proto::v1::id_mint_client::IdMintClient;

    let store = Arc::new(MemoryStore::new());
    let ((a, _stop_a), (b, _stop_b)) = (node(&store).await, node(&store).await);
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{a}/v1/tags"))
        .json(&json!({"tag": "chat", "strict": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let plain = http.post(format!("{a}/v1/tags")).json(&json!({"tag": "plain"})).send();
    assert_eq!(plain.await.unwrap().status().as_u16(), 201);
    // Ranges asked first of the node that has not met the tag: refused as strict (final, and
    // what tells a client to ask each id), not as unknown.
    let ranges = http.get(format!("{b}/v1/segment/chat/ranges?count=5")).send().await.unwrap();
    assert_eq!(ranges.status().as_u16(), 409);
    let refused: Value = ranges.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "strict_tag", "{refused}");

    let mut owners = Vec::new();
    for base in [&a, &b, &a, &b] {
        for path in ["/api/segment/get/chat", "/v1/segment/chat?count=2"] {
            let answer = http.get(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(answer.status().as_u16(), 200, "{path}");
            let (node, owner) = named(&answer);
            assert_eq!(node.as_deref(), Some(base.as_str()), "{path}");
            owners.push(owner.expect("an owner named"));
        }
        let channel = tonic::transport::Endpoint::from_shared(base.to_string()).unwrap();
        let mut grpc = IdMintClient::new(channel.connect().await.unwrap());
        let answer = grpc.next_ids(NextIdsRequest { tag: "chat".into(), count: 1 }).await.unwrap();
        let key = |k: &str| answer.metadata().get(k).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(key("idmint-node").as_deref(), Some(base.as_str()), "gRPC");
        owners.push(key("idmint-owner").expect("an owner named over gRPC"));
    }
    owners.dedup();
    assert_eq!(owners.len(), 1, "one owner named throughout: {owners:?}");
    assert!(owners[0] == a || owners[0] == b, "{owners:?}");

    for path in ["/api/segment/get/plain", "/v1/segment/plain?count=2"] {
        let answer = http.get(format!("{b}{path}")).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 200, "{path}");
        assert_eq!(named(&answer), (None, None), "{path}: a plain tag names no owner");
    }
}
