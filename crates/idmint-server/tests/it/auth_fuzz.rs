//! The auth fuzz (issue 20): every route of the router (its own route table, so a new route
//! is covered without editing this file) × every method × content types (none, JSON, the
//! gRPC variants, form, text) × percent-encodings of the tag names (non-ASCII, with `/`,
//! space and `+`) in the path and the query (plain, fully encoded in upper and lower case hex, partly encoded in mixed case,
//! the query key too) × no token and a wrong one (seeded pick of: a wrong token, a
//! malformed header, another client's token, and on admin routes the guarded tag's own
//! client token). No guarded route (an admin route, or any route naming the guarded tag or
//! sequence) may answer 2xx; a gRPC method naming the guarded tag may not answer
//! `grpc-status: 0`.
//!
//! In-process (the axum router driven with `oneshot`), seeded and replayable: the seed of
//! the partial encodings is printed; `IDMINT_AUTH_FUZZ_SEED=N` replays it. A control pass
//! with the right tokens shows the same requests do succeed when allowed, so the fuzz
//! cannot pass by never reaching a handler.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use idmint_server::{GRPC_ROUTE, GRPC_ROUTES, HttpLimits, admin_routes, monitor_routes};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::openapi::{MemoryCounters, memory_state, router_paths};
use crate::support::TestServer;

const ADMIN: &str = "admin-token-0123456789";
const SHOP: &str = "shop-client-token-0001";
const OTHER: &str = "other-client-token-002";
const WRONG: &str = "wrong-token-0123456789";
/// Not a token: the marker of a request carrying `SHOP` in its query string instead.
const QUERY_TOKEN: &str = "(shop's token in the query string)";

/// The tag and the sequence client `shop` guards: names Leaf tables hold (a slash, a space,
/// `@`, `+` (a space in a query string unless encoded), CJK and an emoji), so every
/// encoding below also crosses multi-byte UTF-8 and the characters that end a path segment.
const GUARDED_TAG: &str = "guarded/订单 @v2+🚀";
const GUARDED_SEQ: &str = "gseq/序列+é";

const METHODS: [Method; 8] = [
    Method::TRACE,
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::OPTIONS,
];

const CONTENT_TYPES: [Option<&str>; 8] = [
    None,
    Some("application/json"),
    Some("application/grpc"),
    Some("application/grpc+json"),
    Some("application/grpc+proto"),
    Some("application/grpc-web"),
    Some("application/x-www-form-urlencoded"),
    Some("text/plain"),
];

/// The gRPC methods that name a tag or sequence (field 1 or 2 of their request).
const GRPC_METHODS: [&str; 6] =
    ["NextIds", "NextRange", "ReturnRange", "NextSequenceIds", "StreamIds", "DecodeId"];

/// Most seconds the fuzz may take in a debug build on a busy two-core machine: it must stay
/// quick enough for every CI run.
const FUZZ_SECONDS_MAX: u64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_guarded_route_answers_2xx_without_its_token() {
    let seed: u64 = match std::env::var("IDMINT_AUTH_FUZZ_SEED") {
        Ok(seed) => seed.parse().expect("IDMINT_AUTH_FUZZ_SEED is a number"),
        Err(_) => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        }
    };
    println!("auth fuzz seed {seed} (replay with IDMINT_AUTH_FUZZ_SEED={seed})");
    let rng = &mut Rng(seed | 1);
    let router = guarded_router().await;
    let doc: Value = serde_json::from_slice(&call(&router, get("/openapi.json", None)).await.1)
        .expect("the OpenAPI document");
    let routes = router_paths(memory_state().await);
    assert!(routes.len() > 20 && routes.contains(GRPC_ROUTE), "{routes:?}");
    let started = Instant::now();
    let mut failures = Vec::new();
    let (mut sent, mut guarded_sent) = (0_u64, 0_u64);
    // Every gRPC service of the router is in GRPC_ROUTES (the middleware's table), so none
    // is taken for an HTTP route, nor an HTTP route for a gRPC one.
    let grpc_like: BTreeSet<&str> =
        routes.iter().map(String::as_str).filter(|r| r.ends_with("/{*method}")).collect();
    let table: BTreeSet<&str> = GRPC_ROUTES.iter().map(|(route, _)| *route).collect();
    assert_eq!(grpc_like, table, "the router's gRPC routes and GRPC_ROUTES differ");
    for route in &routes {
        if table.contains(route.as_str()) {
            continue;
        }
        let queries = query_params(&doc, route);
        for method in &METHODS {
            let admin = is_admin(&doc, method, route);
            let guarded = admin || names_a_tag(route, &queries);
            for variant in 0..ENCODINGS {
                let uri = fill(route, &queries, variant, rng);
                for content_type in CONTENT_TYPES {
                    for token in tokens(admin, rng) {
                        let request = build(method, &uri, content_type, token, body_for(route));
                        let (status, _) = call(&router, request).await;
                        sent += 1;
                        if guarded {
                            guarded_sent += 1;
                            if status.is_success() {
                                failures.push(format!(
                                    "{method} {uri} content-type {content_type:?} token \
                                     {token:?}: {status}"
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    let grpc_sent = grpc_calls(&router, rng, &mut failures).await;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "auth fuzz: {sent} HTTP requests ({guarded_sent} to guarded routes) and {grpc_sent} \
         gRPC calls in {seconds:.1} s; {} passed a token check",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "seed {seed}: {} requests passed a token check, e.g.:\n{}",
        failures.len(),
        failures.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(guarded_sent > 3_000, "too few guarded requests: {guarded_sent}");
    assert!(seconds < FUZZ_SECONDS_MAX as f64, "the fuzz took {seconds:.1} s");
    control(&router, &routes, &doc, rng).await;
}

/// The same requests with the right token and JSON: each guarded route's read answers 2xx
/// (so the fuzz reaches the handlers), whatever the encoding of the name.
async fn control(router: &Router, routes: &BTreeSet<String>, doc: &Value, rng: &mut Rng) {
    let mut reached = 0;
    for route in routes.iter().filter(|r| r.as_str() != GRPC_ROUTE) {
        let queries = query_params(doc, route);
        // Tinyid's routes need a Tinyid database: their control pass is `tinyid.rs`'s.
        if !names_a_tag(route, &queries)
            || route.ends_with("/return")
            || route.starts_with("/tinyid/")
        {
            continue;
        }
        for variant in 0..ENCODINGS {
            let uri = fill(route, &queries, variant, rng);
            let request = build(&Method::GET, &uri, Some("application/json"), Some(SHOP), "");
            let (status, body) = call(router, request).await;
            assert!(status.is_success(), "GET {uri} with its token: {status} {body:?}");
            reached += 1;
        }
    }
    // The seven guarded reads: Leaf's segment route, ids, ranges, the tag, decode, and the
    // sequence's ids and definition.
    assert!(reached >= 7 * ENCODINGS, "only {reached} guarded reads reached");
    // Leaf's routes answer every method Leaf's clients use, with the right token; its
    // monitor pages with the admin token.
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        let uri = format!("/api/segment/get/{}", encode(GUARDED_TAG, 1, rng));
        let (status, body) = call(router, build(&method, &uri, None, Some(SHOP), "")).await;
        assert!(status.is_success(), "{method} {uri} with its token: {status} {body:?}");
        for route in monitor_routes() {
            let (status, body) = call(router, build(&method, route, None, Some(ADMIN), "")).await;
            assert!(
                status.is_success(),
                "{method} {route} with the admin token: {status} {body:?}"
            );
        }
    }
    // The gRPC frame is a real call: with the client's token it answers ids.
    let mut request =
        build(&Method::POST, "/idmint.v1.IdMint/NextIds", Some("application/grpc"), Some(SHOP), "");
    *request.body_mut() = Body::from(grpc_frame("NextIds"));
    let response = router.clone().oneshot(request).await.unwrap();
    let collected = response.into_body().collect().await.unwrap();
    let grpc_status = collected.trailers().and_then(|t| t.get("grpc-status")).cloned();
    assert_eq!(grpc_status.as_ref().map(|v| v.as_bytes()), Some(&b"0"[..]), "NextIds");
    // The open gRPC routes (GRPC_ROUTES' `false`: health, which probes call without a
    // token, and reflection) answer without one, whatever token is sent.
    for token in [None, Some(WRONG)] {
        let mut request = build(
            &Method::POST,
            "/grpc.health.v1.Health/Check",
            Some("application/grpc"),
            token,
            "",
        );
        // HealthCheckRequest { service: "" }: an empty message.
        *request.body_mut() = Body::from(vec![0, 0, 0, 0, 0]);
        let response = router.clone().oneshot(request).await.unwrap();
        let collected = response.into_body().collect().await.unwrap();
        let grpc_status = collected.trailers().and_then(|t| t.get("grpc-status")).cloned();
        assert_eq!(grpc_status.as_ref().map(|v| v.as_bytes()), Some(&b"0"[..]), "{token:?}");
    }
    let open: Vec<&str> =
        GRPC_ROUTES.iter().filter(|(_, guarded)| !guarded).map(|(route, _)| *route).collect();
    assert!(open.iter().all(|r| r.starts_with("/grpc.")), "only standard services are open");
}

/// A router over a memory store with the guarded tag, an open tag, and on in-memory
/// counters the guarded sequence; the admin token and two clients.
async fn guarded_router() -> Router {
    let store = Arc::new(idmint_store::MemoryStore::new());
    let clock = Arc::new(idmint::SystemClock);
    let counters = Arc::new(MemoryCounters::default());
    let engine =
        idmint::Sequences::start(store.clone(), counters, clock, Default::default()).unwrap();
    let state = TestServer::setup()
        .store(store)
        .sequences(engine)
        .auth(crate::auth::guarded_auth(&[GUARDED_TAG, GUARDED_SEQ]))
        .limits(HttpLimits::default())
        .state()
        .await;
    let router = idmint_server::router(state);
    for (path, body) in [
        ("/v1/tags", json!({"tag": GUARDED_TAG})),
        ("/v1/tags", json!({"tag": "open"})),
        ("/v1/seqs", json!({"name": GUARDED_SEQ})),
    ] {
        let request = build(&Method::POST, path, Some("application/json"), Some(ADMIN), "");
        let request = request.map(|_| Body::from(body.to_string()));
        let (status, answer) = call(&router, request).await;
        assert_eq!(status, StatusCode::CREATED, "{path} {body}: {answer:?}");
    }
    router
}

/// Admin: in `admin_routes()` or `monitor_routes()` (Leaf's monitor pages, under every
/// method), or documented as needing the bearer token.
fn is_admin(doc: &Value, method: &Method, route: &str) -> bool {
    let listed = admin_routes().iter().any(|(m, r)| m == method && *r == route)
        || monitor_routes().contains(&route);
    let operation = &doc["paths"][route][method.as_str().to_ascii_lowercase()];
    listed || operation["security"] == json!([{"bearer": []}])
}

/// Whether a request to `route` names the guarded tag or sequence: a `{tag}` or `{name}`
/// path parameter, or a documented `tag` (or Tinyid's `bizType`) query parameter.
fn names_a_tag(route: &str, queries: &BTreeSet<String>) -> bool {
    route.contains("{tag}")
        || route.contains("{name}")
        || queries.contains("tag")
        || queries.contains("bizType")
}

/// The query parameters any operation of `route` documents.
fn query_params(doc: &Value, route: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, operation) in doc["paths"][route].as_object().into_iter().flatten() {
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            if parameter["in"] == "query" {
                names.insert(parameter["name"].as_str().unwrap().to_string());
            }
        }
    }
    names
}

/// How many ways a name is written: plain, upper hex, lower hex, partly in mixed case.
const ENCODINGS: usize = 4;

/// `name` written the `variant`th way. A byte a URI cannot carry plain (beyond ASCII, or
/// one that ends a segment or means something in a query: `/ ? # % + &` and space) is
/// always encoded; the variants differ in the rest.
fn encode(name: &str, variant: usize, rng: &mut Rng) -> String {
    let hex = |b: u8, upper: bool| if upper { format!("%{b:02X}") } else { format!("%{b:02x}") };
    name.bytes()
        .map(|b| match variant {
            _ if !b.is_ascii_graphic() || b"/?#%+&=".contains(&b) => {
                hex(b, variant == 2 || rng.next().is_multiple_of(2))
            }
            0 => (b as char).to_string(),
            1 => hex(b, true),
            2 => hex(b, false),
            _ if rng.next().is_multiple_of(2) => (b as char).to_string(),
            _ => hex(b, rng.next().is_multiple_of(2)),
        })
        .collect()
}

/// A concrete URI for `route`: tag names encoded the `variant`th way, the documented query
/// parameters filled in (the `tag` key encoded too in the partial variant).
fn fill(route: &str, queries: &BTreeSet<String>, variant: usize, rng: &mut Rng) -> String {
    let path = route
        .replace("{tag}", &encode(GUARDED_TAG, variant, rng))
        .replace("{name}", &encode(GUARDED_SEQ, variant, rng))
        .replace("{key}", "k")
        .replace("{id}", "1");
    let pairs: Vec<String> = queries
        .iter()
        .filter_map(|name| match name.as_str() {
            "tag" | "bizType" => {
                let key = if variant == 3 { encode(name, 3, rng) } else { name.to_string() };
                Some(format!("{key}={}", encode(GUARDED_TAG, variant, rng)))
            }
            "id" | "count" | "batchSize" => Some(format!("{name}=1")),
            _ => None,
        })
        .collect();
    if pairs.is_empty() { path } else { format!("{path}?{}", pairs.join("&")) }
}

/// The tokens sent: none, and one of the wrong ones picked by `rng` (a wrong token, a
/// malformed header, another client's, the right client token in the query string, where
/// only Tinyid's routes read a token and only Tinyid's table's; on admin routes also the
/// guarded tag's own client token, which is not the admin's). One pick per case keeps the run a few seconds; every
/// case is still tried without a token and each wrong kind is met thousands of times.
fn tokens(admin: bool, rng: &mut Rng) -> [Option<&'static str>; 2] {
    let wrong = [WRONG, "Basic YWRtaW46YWRtaW4=", OTHER, QUERY_TOKEN, SHOP];
    let kinds = if admin { wrong.len() } else { wrong.len() - 1 };
    [None, Some(wrong[(rng.next() % kinds as u64) as usize])]
}

/// A body each route would accept, so a request that passed the check would succeed.
fn body_for(route: &str) -> &'static str {
    match route {
        "/v1/tags" => r#"{"tag":"fuzzmade"}"#,
        "/v1/tags/{tag}" => r#"{"step":7}"#,
        "/v1/seqs" => r#"{"name":"fuzzseq"}"#,
        "/v1/segment/{tag}/return" => r#"{"start":1,"end":2,"leases":[]}"#,
        _ => "",
    }
}

fn build(
    method: &Method,
    uri: &str,
    content_type: Option<&str>,
    token: Option<&str>,
    body: &str,
) -> Request<Body> {
    let uri = match token {
        Some(QUERY_TOKEN) => {
            let separator = if uri.contains('?') { '&' } else { '?' };
            format!("{uri}{separator}token={SHOP}&access_token={SHOP}")
        }
        _ => uri.to_string(),
    };
    let mut request = Request::builder().method(method.clone()).uri(uri);
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    match token {
        Some(basic) if basic.starts_with("Basic ") => {
            request = request.header("authorization", basic)
        }
        Some(QUERY_TOKEN) => {}
        Some(token) => request = request.header("authorization", format!("Bearer {token}")),
        None => {}
    }
    request.body(Body::from(body.to_string())).unwrap()
}

fn get(uri: &str, token: Option<&str>) -> Request<Body> {
    build(&Method::GET, uri, None, token, "")
}

/// Sends `request` through the router: the status and the body.
async fn call(router: &Router, request: Request<Body>) -> (StatusCode, Vec<u8>) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.map(|c| c.to_bytes().to_vec());
    (status, body.unwrap_or_default())
}

/// Every gRPC method naming the guarded tag or sequence, framed as gRPC, under every HTTP
/// method, content type, spelling of the method's path and token but the right one: none
/// may answer `grpc-status: 0`. Returns how many calls were sent.
async fn grpc_calls(router: &Router, rng: &mut Rng, failures: &mut Vec<String>) -> u64 {
    let mut sent = 0;
    for name in GRPC_METHODS {
        let frame = grpc_frame(name);
        for method in &METHODS {
            for variant in 0..ENCODINGS {
                let uri = format!("/idmint.v1.IdMint/{}", encode(name, variant, rng));
                for content_type in CONTENT_TYPES {
                    for token in tokens(false, rng) {
                        let mut request = build(method, &uri, content_type, token, "");
                        *request.body_mut() = Body::from(frame.clone());
                        let response = router.clone().oneshot(request).await.unwrap();
                        let status = response.status();
                        let mut grpc_status =
                            response.headers().get("grpc-status").map(|v| v.as_bytes().to_vec());
                        let collected = response.into_body().collect().await.ok();
                        if let Some(trailers) = collected.as_ref().and_then(|c| c.trailers()) {
                            grpc_status = grpc_status.or_else(|| {
                                trailers.get("grpc-status").map(|v| v.as_bytes().to_vec())
                            });
                        }
                        sent += 1;
                        let ok =
                            status.is_success() && grpc_status.as_deref().is_none_or(|s| s == b"0");
                        if ok {
                            failures.push(format!(
                                "gRPC {method} {uri} content-type {content_type:?} token \
                                 {token:?}: {status} grpc-status {grpc_status:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    sent
}

/// A length-prefixed gRPC message for `method` naming the guarded tag (or sequence), with
/// `count` 1 where the message has one.
fn grpc_frame(method: &str) -> Vec<u8> {
    let string = |field: u8, text: &str| {
        let mut bytes = vec![field << 3 | 2, text.len() as u8];
        bytes.extend_from_slice(text.as_bytes());
        bytes
    };
    let varint = |field: u8, value: u8| vec![field << 3, value];
    let message: Vec<u8> = match method {
        "NextSequenceIds" => [string(1, GUARDED_SEQ), varint(2, 1)].concat(),
        "DecodeId" => [string(1, "1"), string(2, GUARDED_TAG)].concat(),
        "ReturnRange" => [string(1, GUARDED_TAG), varint(2, 1), varint(3, 2)].concat(),
        _ => [string(1, GUARDED_TAG), varint(2, 1)].concat(),
    };
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

/// xorshift64: the partial encodings, replayable from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
