//! Authorisation follows the route a request resolves to, never a header the client picks
//! (issue 20, items 4 and 5): a gRPC content type on an HTTP route is refused and never
//! skips the token check; a percent-encoded tag name is checked as the handler reads it.
//! Also: `/v1/decode` of an unknown tag is 404 like every other tag route.

use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint_core::{Description, Step, Tag};
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
            start: None,
            force: false,
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

/// Sends `request` on a fresh connection and reads the answer until the server closes it
/// (or 5 s pass): the raw bytes as text.
async fn raw_exchange(server: &TestServer, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before it has read everything: a failed write is
    // fine, the answer is what is checked.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn requests_hyper_refuses_are_answered_with_json_bodies() {
    let server = server_with(&["order"]).await;
    let long_uri = format!("GET /v1/segment/{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let many_headers: String = (0..200).map(|i| format!("x-h{i}: v\r\n")).collect();
    let big_header = format!("x-big: {}\r\n", "b".repeat(500_000));
    let cases: [(&str, Vec<u8>, u16, &str); 5] = [
        ("malformed request line", b"GARBAGE\r\n\r\n".to_vec(), 400, "bad_request"),
        ("bad header", b"GET / HTTP/1.1\r\nHo st: x\r\n\r\n".to_vec(), 400, "bad_request"),
        ("URI too long", long_uri.into_bytes(), 414, "uri_too_long"),
        (
            "too many headers",
            format!("GET /health HTTP/1.1\r\nHost: x\r\n{many_headers}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "headers too large",
            format!("GET /health HTTP/1.1\r\nHost: x\r\n{big_header}\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
    ];
    for (what, request, status, code) in cases {
        let answer = raw_exchange(&server, &request).await;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{what}: {answer:?}");
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("content-type: application/json"), "{what}: {head:?}");
        assert!(lower.contains(&format!("content-length: {}", body.len())), "{what}: {answer:?}");
        let json: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body:?}"));
        assert_eq!(json["error"]["code"], code, "{what}: {json}");
        assert!(json["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{json}");
    }
    // The server still serves.
    assert_eq!(server.get("/health").await.status(), 200);
    server.stop().await;
}
