//! A node without an admin token answers only what a local program sends, never a web page
//! in the operator's browser (issue 31, item 2): a request addressed to a host that is not
//! loopback (DNS rebinding: a page whose name now resolves to 127.0.0.1) is refused, and so
//! is a state-changing request whose `Origin` is another site's. With an admin token
//! nothing changes. The dashboard in headless Chromium (`dashboard.rs`) checks the node's
//! own pages from `http://127.0.0.1:PORT` and `http://localhost:PORT`.

use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint_proto::v1::NextIdsRequest;
use idmint_proto::v1::id_mint_client::IdMintClient;
use idmint_server::{Auth, HttpLimits, Token};
use reqwest::Method;
use serde_json::json;

use crate::support::{TestServer, assert_error};

const ADMIN: &str = "admin-token-0123456789";
const ATTACKER: &str = "attacker.example";

/// A memory store holding tag `order`, served with `auth`.
async fn server(auth: Auth) -> TestServer {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let server = TestServer::with_auth_and_limits(
        store,
        auth,
        HttpLimits::default(),
        SegmentConfig::default(),
    )
    .await;
    let created = server
        .client
        .post(server.url("/v1/tags"))
        .bearer_auth(ADMIN)
        .json(&json!({"tag": "order"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    server
}

/// The port the server listens on.
fn port(server: &TestServer) -> &str {
    server.base.rsplit_once(':').unwrap().1
}

/// `method path` with the `Host` and `Origin` headers given (none when `None`) and `body`.
async fn send(
    server: &TestServer,
    method: Method,
    path: &str,
    host: Option<&str>,
    origin: Option<&str>,
    body: Option<serde_json::Value>,
) -> reqwest::Response {
    let mut request = server.client.request(method, server.url(path));
    if let Some(host) = host {
        request = request.header("host", host);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

/// The attack's requests: a delete and a forced create at start 1.
fn attack() -> [(Method, &'static str, Option<serde_json::Value>); 2] {
    [
        (Method::DELETE, "/v1/tags/order", None),
        (Method::POST, "/v1/tags", Some(json!({"tag": "forced", "start": 1, "force": true}))),
    ]
}

/// The names of the tags the store holds.
async fn tags(server: &TestServer) -> Vec<String> {
    let tags: serde_json::Value =
        send(server, Method::GET, "/v1/tags", None, None, None).await.json().await.unwrap();
    tags["tags"].as_array().unwrap().iter().map(|t| t["tag"].as_str().unwrap().into()).collect()
}

#[tokio::test]
async fn without_an_admin_token_a_foreign_host_or_origin_is_refused() {
    let server = server(Auth::open()).await;
    let port = port(&server).to_string();
    let foreign = format!("{ATTACKER}:{port}");
    let attacker_origin = format!("http://{ATTACKER}:{port}");
    // DNS rebinding: the page's own name, resolved to 127.0.0.1, in Host and Origin.
    for (method, path, body) in attack() {
        let answer =
            send(&server, method, path, Some(&foreign), Some(&attacker_origin), body).await;
        assert_error(answer, 403, "host_not_allowed").await;
    }
    // Reads are refused too under a foreign host (the page could read them: same origin).
    for path in ["/v1/status", "/v1/tags", "/api/segment/get/order", "/"] {
        let answer = send(&server, Method::GET, path, Some(ATTACKER), None, None).await;
        assert_error(answer, 403, "host_not_allowed").await;
    }
    // A cross-site request to 127.0.0.1 itself: the Origin is not the node's.
    let local = format!("127.0.0.1:{port}");
    for origin in ["http://attacker.example", "null", &format!("http://localhost:{port}")] {
        for (method, path, body) in attack() {
            let answer = send(&server, method, path, Some(&local), Some(origin), body).await;
            assert_error(answer, 403, "origin_not_allowed").await;
        }
    }
    assert_eq!(tags(&server).await, ["order"], "nothing changed");
    // Reads from another origin pass (the browser keeps their answers from the page).
    let read =
        send(&server, Method::GET, "/api/segment/get/order", Some(&local), Some(ATTACKER), None);
    assert_eq!(read.await.status(), 200);

    // The node's own pages and local programs: loopback names with the node's own origin,
    // or no origin at all.
    for host in
        [format!("localhost:{port}"), format!("[::1]:{port}"), format!("app.localhost:{port}")]
    {
        let answer = send(&server, Method::GET, "/api/segment/get/order", Some(&host), None, None);
        assert_eq!(answer.await.status(), 200, "{host}");
    }
    let own = format!("http://localhost:{port}");
    let host = format!("localhost:{port}");
    let patch = Some(json!({"step": 500}));
    let patched =
        send(&server, Method::PATCH, "/v1/tags/order", Some(&host), Some(&own), patch).await;
    assert_eq!(patched.status(), 200);
    let own = format!("http://127.0.0.1:{port}");
    for (method, path, body) in attack() {
        let answer = send(&server, method.clone(), path, Some(&local), Some(&own), body).await;
        assert!(answer.status().is_success(), "{method} {path}: {}", answer.status());
    }
    assert_eq!(tags(&server).await, ["forced"]);
    server.stop().await;
}

#[tokio::test]
async fn without_an_admin_token_grpc_calls_to_a_foreign_authority_are_refused() {
    let server = server(Auth::open()).await;
    let foreign = format!("http://{ATTACKER}:{}", port(&server));
    let channel = tonic::transport::Endpoint::from_shared(server.base.clone())
        .unwrap()
        .origin(foreign.parse().unwrap())
        .connect()
        .await
        .unwrap();
    let request = NextIdsRequest { tag: "order".into(), count: 1 };
    let refused = IdMintClient::new(channel).next_ids(request.clone()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let code = refused.metadata().get(idmint_server::GRPC_CODE_KEY).unwrap();
    assert_eq!(code.to_str().unwrap(), "host_not_allowed");
    let channel = tonic::transport::Endpoint::from_shared(server.base.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let answer = IdMintClient::new(channel).next_ids(request).await.unwrap();
    assert_eq!(answer.into_inner().ids.len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn with_an_admin_token_host_and_origin_change_nothing() {
    let auth = Auth::new(Some(Token::parse(ADMIN).unwrap()), Vec::new());
    let server = server(auth).await;
    let origin = format!("http://{ATTACKER}");
    for (method, path, body) in attack() {
        let answer =
            send(&server, method.clone(), path, Some(ATTACKER), Some(&origin), body.clone()).await;
        assert_error(answer, 401, "unauthorized").await;
        let mut request = server.client.request(method.clone(), server.url(path));
        request = request.header("host", ATTACKER).header("origin", &origin).bearer_auth(ADMIN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.unwrap();
        assert!(answer.status().is_success(), "{method} {path}: {}", answer.status());
    }
    let read = send(&server, Method::GET, "/api/segment/get/forced", Some(ATTACKER), None, None);
    assert_eq!(read.await.text().await.unwrap(), "1");
    server.stop().await;
}
