//! `/v1/uuid` and `/v1/ulid` over HTTP: both versions in both formats, defaults, ordering
//! across requests, and the 400s bad input gets.

use std::collections::HashSet;

use idmint_core::uuid::{UuidFormat, ulid_decode, uuid_is_rfc9562_variant, uuid_version};
use serde_json::Value;

use crate::support::{TestServer, assert_error};

/// The `ids` of a 200 answer to `path`.
async fn ids(server: &TestServer, path: &str) -> Vec<String> {
    let response = server.get(path).await;
    assert_eq!(response.status().as_u16(), 200, "{path}");
    let body: Value = response.json().await.unwrap();
    serde_json::from_value(body["ids"].clone()).unwrap()
}

#[tokio::test]
async fn uuid_route_answers_both_versions_in_both_formats() {
    let server = TestServer::memory().await;
    // The defaults: one UUID v4, standard form.
    let one = ids(&server, "/v1/uuid").await;
    assert_eq!(one.len(), 1);
    let id = UuidFormat::Standard.decode(&one[0]).unwrap();
    assert_eq!(uuid_version(id), 4);
    for (version, format) in [
        (4, UuidFormat::Standard),
        (4, UuidFormat::Hex),
        (7, UuidFormat::Standard),
        (7, UuidFormat::Hex),
    ] {
        let path = format!("/v1/uuid?count=500&version={version}&format={format}");
        let texts = ids(&server, &path).await;
        assert_eq!(texts.len(), 500, "{path}");
        let parsed: Vec<u128> = texts
            .iter()
            .map(|text| {
                assert_eq!(text.len(), format.text_len(), "{text}");
                assert_eq!(text, &text.to_lowercase());
                format.decode(text).unwrap()
            })
            .collect();
        assert!(
            parsed.iter().all(|&id| uuid_version(id) == version && uuid_is_rfc9562_variant(id))
        );
        assert_eq!(parsed.iter().collect::<HashSet<_>>().len(), 500, "{path}");
        if version == 7 {
            assert!(parsed.windows(2).all(|w| w[0] < w[1]), "{path}: v7 ids did not increase");
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn v7_ids_and_ulids_increase_across_requests() {
    let server = TestServer::memory().await;
    let (mut last_v7, mut last_ulid) = (0u128, 0u128);
    for _ in 0..20 {
        for text in ids(&server, "/v1/uuid?version=7&count=100").await {
            let id = UuidFormat::Standard.decode(&text).unwrap();
            assert!(id > last_v7);
            last_v7 = id;
        }
        for text in ids(&server, "/v1/ulid?count=100").await {
            assert_eq!(text.len(), 26);
            assert_eq!(text, text.to_uppercase());
            let id = ulid_decode(&text).unwrap();
            assert!(id > last_ulid);
            last_ulid = id;
        }
    }
    assert_eq!(ids(&server, "/v1/ulid").await.len(), 1);
    assert_eq!(ids(&server, "/v1/ulid?count=100000").await.len(), 100_000);
    server.stop().await;
}

#[tokio::test]
async fn bad_inputs_are_400s_that_name_what_is_accepted() {
    let server = TestServer::memory().await;
    for path in ["/v1/uuid?version=5", "/v1/uuid?version=", "/v1/uuid?version=v4"] {
        let message = assert_error(server.get(path).await, 400, "bad_version").await;
        assert!(message.contains("4") && message.contains("7"), "{message}");
    }
    for path in ["/v1/uuid?format=braced", "/v1/uuid?version=7&format=HEX"] {
        let message = assert_error(server.get(path).await, 400, "bad_format").await;
        assert!(message.contains("standard, hex"), "{message}");
    }
    for bad in ["0", "100001", "abc", "-1", ""] {
        for route in ["/v1/uuid", "/v1/ulid"] {
            let path = format!("{route}?count={bad}");
            let message = assert_error(server.get(&path).await, 400, "bad_count").await;
            assert!(message.contains("100000"), "{path}: {message}");
        }
    }
    for path in ["/v1/uuid?versoin=7", "/v1/ulid?format=hex"] {
        assert_error(server.get(path).await, 400, "bad_query").await;
    }
    server.stop().await;
}

#[tokio::test]
async fn the_openapi_document_describes_both_routes() {
    let server = TestServer::memory().await;
    let doc: Value = server.get("/openapi.json").await.json().await.unwrap();
    for route in ["/v1/uuid", "/v1/ulid"] {
        let get = &doc["paths"][route]["get"];
        assert!(
            get["responses"]["200"].is_object() && get["responses"]["400"].is_object(),
            "{route}"
        );
    }
    let parameters = doc["paths"]["/v1/uuid"]["get"]["parameters"].as_array().unwrap();
    let names: Vec<&str> = parameters.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["count", "version", "format"]);
    server.stop().await;
}
