//! Public id formats over HTTP: a keyed numeric tag answers permuted numbers, a templated
//! tag strings, `ids_as=string` turns numbers into strings on every JSON id route, and
//! `/v1/decode` maps public ids back (by tag or by encoding) and refuses what is not one.

use std::collections::HashSet;

use idmint::sequence::time_zone;
use idmint::{IdFormat, Tag};
use idmint_core::permute::{Permutation, PermuteKey};
use serde_json::{Value, json};

use crate::support::{TestServer, assert_error};

fn keyed(template: &str, bits: u32) -> IdFormat {
    let key = PermuteKey::parse_hex("0f1e2d3c4b5a69788796a5b4c3d2e1f0").unwrap();
    let permutation = Permutation::new(&key, bits).unwrap();
    IdFormat::new(template, time_zone("UTC").unwrap(), Some(permutation)).unwrap()
}

async fn server() -> TestServer {
    let mut formats = idmint::node::TagFormats::new();
    formats.insert(Tag::parse("user").unwrap(), keyed("{id}", 32));
    formats.insert(Tag::parse("code").unwrap(), keyed("C{id:crockford32:7}", 35));
    let server = TestServer::with_formats(formats).await;
    for tag in ["user", "code", "plain"] {
        let created = server.create_tag(json!({"tag": tag, "step": 50})).await;
        assert_eq!(created.status().as_u16(), 201);
    }
    server
}

async fn ids(server: &TestServer, path: &str) -> Vec<Value> {
    let response = server.get(path).await;
    assert_eq!(response.status().as_u16(), 200, "{path}");
    let body: Value = response.json().await.unwrap();
    body["ids"].as_array().unwrap().clone()
}

#[tokio::test]
async fn keyed_and_templated_tags_answer_public_ids_that_decode_back() {
    let server = server().await;
    let users = ids(&server, "/v1/segment/user?count=1000").await;
    let numbers: Vec<u64> = users.iter().map(|v| v.as_u64().expect("a number")).collect();
    assert_eq!(numbers.iter().collect::<HashSet<_>>().len(), 1000);
    assert!(numbers.iter().all(|n| (1..1 << 32).contains(n)));
    assert!(numbers.windows(2).any(|w| w[1] < w[0]), "permuted ids came out in order");
    assert_ne!(numbers[..3], [1, 2, 3]);
    let strings = ids(&server, "/v1/segment/user?count=2&ids_as=string").await;
    assert!(strings.iter().all(Value::is_string), "{strings:?}");
    let status: Value = server.get("/v1/tags/user").await.json().await.unwrap();
    assert_eq!(status["format"]["bits"], 32);
    assert_eq!(status["format"]["key_fingerprint"].as_str().map(str::len), Some(16));
    assert!(!status.to_string().contains("0f1e2d3c4b5a6978"), "the key is shown: {status}");
    let plain: Value = server.get("/v1/tags/plain").await.json().await.unwrap();
    assert!(plain.get("format").is_none(), "{plain}");

    let decoded: Value =
        server.get(&format!("/v1/decode?tag=user&id={}", numbers[4])).await.json().await.unwrap();
    assert_eq!(decoded["id"], 5);
    assert_eq!(decoded["public_id"], numbers[4]);

    let codes = ids(&server, "/v1/segment/code?count=3").await;
    let leaf = server.get("/api/segment/get/code").await.text().await.unwrap();
    for (n, code) in codes.iter().map(|c| c.as_str().unwrap().to_string()).chain([leaf]).enumerate()
    {
        assert!(code.starts_with('C') && code.len() == 8, "{code}");
        let path = format!("/v1/decode?tag=code&id={code}");
        let decoded: Value = server.get(&path).await.json().await.unwrap();
        assert_eq!(decoded["id"], n as u64 + 1, "{code}: {decoded}");
        assert_eq!(decoded["template"], "C{id:crockford32:7}");
    }
    server.stop().await;
}

#[tokio::test]
async fn plain_tags_answer_numbers_or_strings_and_bad_queries_are_refused() {
    let server = server().await;
    assert_eq!(ids(&server, "/v1/segment/plain?count=2").await, [json!(1), json!(2)]);
    let strings = ids(&server, "/v1/segment/plain?count=2&ids_as=string").await;
    assert_eq!(strings, [json!("3"), json!("4")]);
    assert_eq!(server.get("/api/segment/get/plain").await.text().await.unwrap(), "5");
    let decoded: Value = server.get("/v1/decode?id=zz&encoding=base36").await.json().await.unwrap();
    assert_eq!(decoded["id"], 1295);
    let decoded: Value = server.get("/v1/decode?id=17&tag=plain").await.json().await.unwrap();
    assert_eq!(decoded["id"], 17);

    for (path, code) in [
        ("/v1/segment/plain?ids_as=text", "bad_ids_as"),
        ("/v1/decode?tag=code", "bad_query"),
        ("/v1/decode?id=1&tag=code&encoding=base36", "bad_query"),
        ("/v1/decode?id=1", "bad_query"),
        ("/v1/decode?id=1&encoding=base64", "bad_encoding"),
        ("/v1/decode?id=C0000001X&tag=code", "not_an_id"),
        ("/v1/decode?id=X0000001&tag=code", "not_an_id"),
        ("/v1/decode?id=C000000!&tag=code", "not_an_id"),
        ("/v1/decode?id=0&tag=user", "not_an_id"),
        ("/v1/decode?id=4294967296&tag=user", "not_an_id"),
        ("/v1/decode?id=1&tag=bad%09tag", "bad_tag"),
        ("/v1/decode?id=1&tag=code&colour=red", "bad_query"),
    ] {
        assert_error(server.get(path).await, 400, code).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn snowflake_ids_can_be_strings() {
    let server = TestServer::with_snowflake().await;
    let numbers = ids(&server, "/v1/snowflake?count=3").await;
    assert!(numbers.iter().all(Value::is_u64));
    let strings = ids(&server, "/v1/snowflake?count=3&ids_as=string").await;
    let parsed: Vec<u64> = strings.iter().map(|s| s.as_str().unwrap().parse().unwrap()).collect();
    assert!(parsed[0] > numbers[2].as_u64().unwrap());
    server.stop().await;
}
