//! Authorisation follows the route a request resolves to, never a header the client picks
//! (issue 20, items 4 and 5): a gRPC content type on an HTTP route is refused and never
//! skips the token check; a percent-encoded tag name is checked as the handler reads it.
//! Also: `/v1/decode` of an unknown tag is 404 like every other tag route.

use std::sync::Arc;

use idmint::SegmentConfig;
use idmint_core::{Description, StartId, Step, Tag};
use idmint_server::{Auth, Client, HttpLimits, Token};
use idmint_store::{SegmentStore, TagSpec};

use crate::support::{TestServer, assert_error};

const ADMIN: &str = "admin-token-0123456789";
const SHOP: &str = "shop-client-token-0001";
const OTHER: &str = "other-client-token-002";

/// The admin token, client `shop` for tag `fmt` and client `other` for tag `elsewhere`.
pub(crate) fn guarded_auth(guarded: &[&str]) -> Auth {
    let token = |text: &str| Token::parse(text).unwrap();
    let tags = guarded.iter().map(|t| Tag::parse(t).unwrap()).collect();
    let shop = Client { name: "shop".into(), token: token(SHOP), tags };
    let other = Client {
        name: "other".into(),
        token: token(OTHER),
        tags: vec![Tag::parse("elsewhere").unwrap()],
    };
    Auth::new(Some(token(ADMIN)), vec![shop, other])
}

/// A memory store holding `tags`, served with [`guarded_auth`] guarding `fmt`.
async fn server_with(tags: &[&str]) -> TestServer {
    let store = Arc::new(idmint_store::MemoryStore::new());
    for tag in tags {
        let spec = TagSpec {
            tag: Tag::parse(tag).unwrap(),
            step: Step::DEFAULT,
            start: StartId::DEFAULT,
            description: Description::default(),
        };
        store.create_tag(&spec).await.unwrap();
    }
    let auth = guarded_auth(&["fmt"]);
    TestServer::with_auth_and_limits(store, auth, HttpLimits::default(), SegmentConfig::default())
        .await
}

/// Sends `method path` with `content_type` and `body`, no token.
async fn anonymous(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: &str,
) -> reqwest::Response {
    let request = server.client.request(method, server.url(path));
    let request = request.header("content-type", content_type).body(body.to_string());
    request.send().await.unwrap()
}

#[tokio::test]
async fn a_grpc_content_type_neither_skips_the_token_check_nor_reaches_an_http_route() {
    let server = server_with(&["x", "fmt"]).await;
    let (delete, post, patch, get) = (
        reqwest::Method::DELETE,
        reqwest::Method::POST,
        reqwest::Method::PATCH,
        reqwest::Method::GET,
    );
    for content_type in
        ["application/grpc", "application/grpc+json", "application/grpc+proto", "APPLICATION/gRPC"]
    {
        let cases = [
            (delete.clone(), "/v1/tags/x", ""),
            (post.clone(), "/v1/tags", r#"{"tag":"made"}"#),
            (patch.clone(), "/v1/tags/x", r#"{"step":7}"#),
            (get.clone(), "/v1/segment/fmt", ""),
            (get.clone(), "/api/segment/get/fmt", ""),
            (get.clone(), "/v1/decode?tag=fmt&id=1", ""),
        ];
        for (method, path, body) in cases {
            let answer = anonymous(&server, method.clone(), path, content_type, body).await;
            let context = format!("{method} {path} as {content_type}");
            assert!(!answer.status().is_success(), "{context}: {}", answer.status());
            assert_error(answer, 415, "unsupported_media_type").await;
        }
    }
    // Nothing changed: tag x is still there with its step, no tag `made` was created.
    let tags: serde_json::Value = server
        .client
        .get(server.url("/v1/tags"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> =
        tags["tags"].as_array().unwrap().iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2, "{tags}");
    assert!(names.contains(&"x") && names.contains(&"fmt"), "{tags}");
    let x = tags["tags"].as_array().unwrap().iter().find(|t| t["tag"] == "x").unwrap();
    assert_eq!(x["step"], Step::DEFAULT.get(), "{tags}");
    // The HTTP routes still answer their own content types: the admin token deletes x.
    let deleted =
        server.client.delete(server.url("/v1/tags/x")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    server.stop().await;
}

#[tokio::test]
async fn a_percent_encoded_tag_is_checked_as_the_handler_reads_it() {
    let server = server_with(&["fmt"]).await;
    let get = reqwest::Method::GET;
    for path in [
        "/v1/decode?tag=%66mt&id=1",
        "/v1/decode?tag=%66%6D%74&id=1",
        "/v1/decode?id=1&tag=f%6dt",
        "/v1/decode?%74ag=fmt&id=1",
        "/v1/segment/%66mt",
        "/v1/segment/%66%6d%74?count=2",
        "/api/segment/get/f%6Dt",
        "/v1/tags/fm%74",
        "/v1/segment/%66mt/ranges",
    ] {
        let none = anonymous(&server, get.clone(), path, "text/plain", "").await;
        assert_eq!(none.status(), 401, "{path} without a token");
        let other = server.client.get(server.url(path)).bearer_auth(OTHER).send().await.unwrap();
        assert_eq!(other.status(), 403, "{path} with another client's token");
        let shop = server.client.get(server.url(path)).bearer_auth(SHOP).send().await.unwrap();
        assert!(shop.status().is_success(), "{path} with its token: {}", shop.status());
    }
    server.stop().await;
}

#[tokio::test]
async fn decoding_with_an_unknown_tag_is_404_unknown_tag() {
    let server = server_with(&["order"]).await;
    let answer = server.get("/v1/decode?tag=nosuchtag&id=1").await;
    let message = assert_error(answer, 404, "unknown_tag").await;
    assert!(message.contains("nosuchtag"), "{message}");
    // A tag that exists decodes (plain decimal without a [format.TAG] section).
    let known = server.get("/v1/decode?tag=order&id=12").await;
    assert_eq!(known.status(), 200);
    let body: serde_json::Value = known.json().await.unwrap();
    assert_eq!(body["id"], 12, "{body}");
    server.stop().await;
}
