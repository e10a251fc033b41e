//! Tag names over the transports (issue 22, items 1 and 7): every tag a Leaf table holds,
//! percent-encoded in paths and queries on the Leaf route and `/v1`, served as itself; and
//! idmint's internal rows (the key guard `idmint.key.TAG`) hidden from every listing and
//! refused on every route, HTTP and gRPC.

use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint::sequence::time_zone;
use idmint::{IdFormat, Tag};
use idmint_core::permute::{Permutation, PermuteKey};
use idmint_proto::v1::NextIdsRequest;
use idmint_proto::v1::id_mint_client::IdMintClient;
use idmint_store::RangeStore;
use serde_json::{Value, json};
use tonic::Code;

use crate::support::{TestServer, assert_error};

/// Percent-encodes every byte outside `A-Z a-z 0-9 - . _ ~`, as a client library would.
fn encode(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn leaf_and_v1_routes_serve_percent_encoded_tags() {
    let server = TestServer::memory().await;
    let names = ["order@v2", "user/login", "订单", "🚀", "a b", "a+b", "100%", "it's", "q?x#y"];
    for (i, name) in names.iter().enumerate() {
        let start = 1000 * (i as u64 + 1);
        let created = server.create_tag(json!({"tag": name, "step": 10, "start": start})).await;
        assert_eq!(created.status().as_u16(), 201, "{name:?}");
    }
    for (i, name) in names.iter().enumerate() {
        let start = 1000 * (i as u64 + 1);
        let path = encode(name);
        let leaf = server.get(&format!("/api/segment/get/{path}")).await;
        assert_eq!(leaf.status().as_u16(), 200, "{name:?} as {path}");
        assert_eq!(leaf.text().await.unwrap(), start.to_string(), "{name:?}");
        let batch: Value =
            server.get(&format!("/v1/segment/{path}?count=2")).await.json().await.unwrap();
        assert_eq!(batch["tag"], *name);
        assert_eq!(batch["ids"], json!([start + 1, start + 2]), "{name:?}");
        let view: Value = server.get(&format!("/v1/tags/{path}")).await.json().await.unwrap();
        assert_eq!(view["tag"], *name, "{view}");
    }
    // Lower-case hex and a partly encoded name decode to the same tag.
    let mixed = server.get("/api/segment/get/order%40v2").await.text().await.unwrap();
    let lower = server.get("/api/segment/get/%e8%ae%a2%e5%8d%95").await.text().await.unwrap();
    assert_eq!((mixed.as_str(), lower.as_str()), ("1003", "3003"));
    // An encoded `/` is one tag, never two path segments.
    assert_eq!(server.get("/api/segment/get/user%2Flogin").await.status(), 200);
    assert_eq!(server.get("/api/segment/get/user/login").await.status(), 404);
    let tags: Value = server.get("/v1/tags").await.json().await.unwrap();
    let listed: Vec<&str> =
        tags["tags"].as_array().unwrap().iter().map(|t| t["tag"].as_str().unwrap()).collect();
    for name in names {
        assert!(listed.contains(&name), "{name:?} not in {listed:?}");
    }
    // Refused, with the reason: a control character, edge whitespace, over 128 bytes.
    for (bad, says) in [("a%00b", "\\u{0}"), ("a%0Ab", "\\u{a}"), ("%20lead", "whitespace")] {
        let message =
            assert_error(server.get(&format!("/v1/segment/{bad}")).await, 400, "bad_tag").await;
        assert!(message.contains(says), "{bad}: {message}");
    }
    let long = encode(&"订".repeat(43));
    let message =
        assert_error(server.get(&format!("/v1/segment/{long}")).await, 400, "bad_tag").await;
    assert!(message.contains("129 bytes"), "{message}");
    // A name that is not UTF-8 once decoded is refused, not served lossily.
    assert_eq!(server.get("/api/segment/get/%FF%FE").await.status().as_u16(), 400);
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("tag=\"订单\""), "the label is the tag");
    assert!(metrics.contains("tag=\"it's\""));
    server.stop().await;
}

#[tokio::test]
async fn internal_rows_are_hidden_and_refused_on_every_route() {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let mut formats = idmint::node::TagFormats::new();
    let key = PermuteKey::parse_hex("0f1e2d3c4b5a69788796a5b4c3d2e1f0").unwrap();
    let permutation = Permutation::new(&key, 32).unwrap();
    let format = IdFormat::new("{id}", time_zone("UTC").unwrap(), Some(permutation)).unwrap();
    formats.insert(Tag::parse("user").unwrap(), format);
    let server = TestServer::setup()
        .store(store.clone())
        .segment_config(SegmentConfig::default())
        .formats(formats)
        .start()
        .await;
    assert_eq!(server.create_tag(json!({"tag": "user"})).await.status().as_u16(), 201);
    // The guard row is in the store: the refusals below are about it, not a missing row.
    let rows = store.list_tags().await.unwrap();
    assert!(rows.iter().any(|r| r.tag.as_str() == "idmint.key.user"), "{rows:?}");

    let tags: Value = server.get("/v1/tags").await.json().await.unwrap();
    assert_eq!(tags["tags"].as_array().unwrap().len(), 1, "{tags}");
    let status = server.get("/v1/status").await.text().await.unwrap();
    assert!(!status.contains("idmint.key"), "{status}");
    let client = reqwest::Client::new();
    for name in ["idmint.key.user", "IDMINT.KEY.user", "idmint%2Ekey%2Euser"] {
        for path in [
            format!("/api/segment/get/{name}"),
            format!("/v1/segment/{name}"),
            format!("/v1/tags/{name}"),
            format!("/v1/decode?id=1&tag={name}"),
        ] {
            let message = assert_error(server.get(&path).await, 400, "bad_tag").await;
            assert!(message.contains("internal rows"), "{path}: {message}");
        }
        let url = server.url(&format!("/v1/tags/{name}"));
        let deleted = client.delete(&url).send().await.unwrap();
        assert_error(deleted, 400, "bad_tag").await;
        let patched = client.patch(&url).json(&json!({"step": 5})).send().await.unwrap();
        assert_error(patched, 400, "bad_tag").await;
    }
    let created = server.create_tag(json!({"tag": "idmint.key.other"})).await;
    assert_error(created, 400, "bad_tag").await;
    let mut grpc = IdMintClient::new(
        tonic::transport::Endpoint::from_shared(server.base.clone())
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let refused = grpc
        .next_ids(NextIdsRequest { tag: "idmint.key.user".to_string(), count: 1 })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("internal rows"), "{refused:?}");
    // The guard row is untouched, and the keyed tag still serves.
    assert!(store.list_tags().await.unwrap().iter().any(|r| r.tag.as_str() == "idmint.key.user"));
    assert_eq!(server.get("/api/segment/get/user").await.status(), 200);
    server.stop().await;
}

/// The dashboard writes data into the page as text only: no HTML sink anywhere in it, tags
/// set with `textContent` (through `el`) and put in URLs with `encodeURIComponent`. A tag
/// `<img src=x onerror=alert(1)>` therefore shows as those characters.
#[test]
fn the_dashboard_never_writes_html_from_data() {
    let page = include_str!("../../src/dashboard.html");
    for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
        assert!(!page.contains(sink), "the dashboard uses {sink}");
    }
    assert!(page.contains("node.textContent = String(text)"));
    assert!(!page.contains("\"/v1/tags/\" + tag"), "a tag in a URL must be encoded");
}
