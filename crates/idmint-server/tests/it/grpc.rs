//! The gRPC API end to end on `127.0.0.1:0`: every call, its errors (status code and the
//! `idmint-code` metadata), tokens as metadata, leased ranges given back (and a replay or a
//! forged proof refused), StreamIds in chunks, and gRPC on its own port.

use std::collections::HashSet;
use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint::sequence::time_zone;
use idmint::{IdFormat, Tag};
use idmint_core::permute::{Permutation, PermuteKey};
use idmint_proto::v1::id_mint_client::IdMintClient;
use idmint_proto::v1::{
    DecodeIdRequest, DecodeSnowflakeRequest, NextIdsRequest, NextRangeRequest,
    NextSequenceIdsRequest, NextSnowflakeIdsRequest, Range, ReturnRangeRequest, StreamIdsRequest,
};
use idmint_server::{AppState, Auth, Client, Token};
use serde_json::json;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::support::{TestServer, assert_error};

type Grpc = IdMintClient<Channel>;

async fn connect(base: &str) -> Grpc {
    let channel = tonic::transport::Endpoint::from_shared(base.to_string()).unwrap();
    IdMintClient::new(channel.connect().await.expect("gRPC connects"))
}

/// A server on one port for HTTP and gRPC, with tags `order` (step 100), `user` (keyed
/// numeric format) and `code` (text format).
async fn server() -> (TestServer, Grpc) {
    let mut formats = idmint::node::TagFormats::new();
    let key = PermuteKey::parse_hex("0f1e2d3c4b5a69788796a5b4c3d2e1f0").unwrap();
    let keyed = |template: &str, bits| {
        let permutation = Permutation::new(&key, bits).unwrap();
        IdFormat::new(template, time_zone("UTC").unwrap(), Some(permutation)).unwrap()
    };
    formats.insert(Tag::parse("user").unwrap(), keyed("{id}", 32));
    formats.insert(Tag::parse("code").unwrap(), keyed("C{id:crockford32:7}", 35));
    let server = TestServer::with_formats(formats).await;
    for tag in ["order", "user", "code"] {
        let created = server.create_tag(json!({"tag": tag, "step": 100})).await;
        assert_eq!(created.status().as_u16(), 201);
    }
    let grpc = connect(&server.base).await;
    (server, grpc)
}

/// Asserts a gRPC error: its code, the HTTP API's error code in `idmint-code`, and a message
/// that is not a number.
fn assert_status(status: &Status, code: Code, idmint_code: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    let sent = status.metadata().get(idmint_server::GRPC_CODE_KEY).map(|v| v.to_str().unwrap());
    assert_eq!(sent, Some(idmint_code), "{status:?}");
    assert!(!status.message().is_empty() && status.message().parse::<i64>().is_err());
}

fn next_ids(tag: &str, count: u64) -> NextIdsRequest {
    NextIdsRequest { tag: tag.to_string(), count }
}

fn next_range(tag: &str, count: u64) -> NextRangeRequest {
    NextRangeRequest { tag: tag.to_string(), count }
}

#[tokio::test]
async fn next_ids_answers_increasing_ids_public_ids_and_typed_errors() {
    let (server, mut grpc) = server().await;
    let ids = grpc.next_ids(next_ids("order", 5)).await.unwrap().into_inner();
    assert_eq!(
        (ids.tag.as_str(), ids.ids.clone(), ids.texts.len()),
        ("order", vec![1, 2, 3, 4, 5], 0)
    );
    // HTTP and gRPC serve one buffer.
    let http: serde_json::Value =
        server.get("/v1/segment/order?count=1").await.json().await.unwrap();
    assert_eq!(http["ids"], json!([6]));
    let user = grpc.next_ids(next_ids("user", 3)).await.unwrap().into_inner();
    assert_eq!(user.ids.len(), 3);
    assert!(user.ids.iter().all(|id| *id > 3), "permuted, not internal: {:?}", user.ids);
    let code = grpc.next_ids(next_ids("code", 2)).await.unwrap().into_inner();
    assert!(code.ids.is_empty() && code.texts.iter().all(|t| t.starts_with('C')), "{code:?}");

    let cases: [(NextIdsRequest, Code, &str); 5] = [
        (next_ids("order", 0), Code::InvalidArgument, "bad_count"),
        (next_ids("order", 100_001), Code::InvalidArgument, "bad_count"),
        (next_ids("bad\ttag!", 1), Code::InvalidArgument, "bad_tag"),
        (next_ids("", 1), Code::InvalidArgument, "bad_tag"),
        (next_ids("nope", 1), Code::NotFound, "unknown_tag"),
    ];
    for (request, code, idmint_code) in cases {
        let status = grpc.next_ids(request).await.unwrap_err();
        assert_status(&status, code, idmint_code);
    }
    server.stop().await;
}

#[tokio::test]
async fn leased_ranges_come_back_once_and_only_with_this_nodes_proof() {
    let (server, mut grpc) = server().await;
    let leased = grpc.next_range(next_range("order", 40)).await.unwrap().into_inner();
    assert_eq!(leased.ranges.len(), 1);
    let lease = leased.ranges[0];
    assert_eq!((lease.start, lease.end), (1, 41));
    assert_ne!(lease.proof, 0);

    // Ids 31..41 unused: given back, and the node hands them out next.
    let give_back = |start, end, leases: Vec<Range>| ReturnRangeRequest {
        tag: "order".to_string(),
        start,
        end,
        leases,
    };
    let forged = Range { proof: lease.proof ^ 1, ..lease };
    let status = grpc.return_range(give_back(31, 41, vec![forged])).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_lease");
    let status = grpc.return_range(give_back(31, 42, vec![lease])).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_lease");
    let returned = grpc.return_range(give_back(31, 41, vec![lease])).await.unwrap().into_inner();
    assert_eq!(returned.returned, 10);
    let next = grpc.next_ids(next_ids("order", 10)).await.unwrap().into_inner();
    assert_eq!(next.ids, (31..41).collect::<Vec<_>>());
    // A replay (a retried call) must not give back ids another caller now holds.
    let replay = grpc.return_range(give_back(31, 41, vec![lease])).await.unwrap().into_inner();
    assert_eq!(replay.returned, 0);
    assert_eq!(grpc.next_ids(next_ids("order", 1)).await.unwrap().into_inner().ids, vec![41]);
    // Not the last ids handed out: nothing comes back, nothing changes.
    let second = grpc.next_range(next_range("order", 5)).await.unwrap().into_inner().ranges[0];
    grpc.next_ids(next_ids("order", 1)).await.unwrap();
    let late = grpc
        .return_range(give_back(second.start, second.end, vec![second]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(late.returned, 0);

    // Over HTTP too: the proof as 16 hex digits.
    let body: serde_json::Value =
        server.get("/v1/segment/order/ranges?count=7").await.json().await.unwrap();
    let range = &body["ranges"][0];
    let (start, end) = (range["start"].as_u64().unwrap(), range["end"].as_u64().unwrap());
    assert_eq!(end - start, 7);
    let returned: serde_json::Value = server
        .client
        .post(server.url("/v1/segment/order/return"))
        .json(&json!({"start": start, "end": end, "leases": [range]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(returned["returned"], 7);

    let status = grpc.next_range(next_range("user", 5)).await.unwrap_err();
    assert_status(&status, Code::FailedPrecondition, "formatted_tag");
    let status = grpc.next_range(next_range("order", 0)).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_count");
    let status = grpc.next_range(next_range("nope", 1)).await.unwrap_err();
    assert_status(&status, Code::NotFound, "unknown_tag");
    let too_many = give_back(1, 2, vec![lease; idmint::node::RETURN_LEASES_MAX + 1]);
    let status = grpc.return_range(too_many).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_lease");
    server.stop().await;
}

/// A lease may hold a whole segment of the largest step, ten batches, over gRPC and HTTP: its
/// answer is ranges, not ids. One id more is refused as a bad count, naming the bound.
#[tokio::test]
async fn a_lease_holds_up_to_a_segment_of_the_largest_step() {
    use idmint_core::limits::{BATCH_COUNT_MAX, LEASE_COUNT_MAX};
    let (server, mut grpc) = server().await;
    let created = server.create_tag(json!({"tag": "bulk", "step": LEASE_COUNT_MAX})).await;
    assert_eq!(created.status().as_u16(), 201);
    const _: () = assert!(LEASE_COUNT_MAX > BATCH_COUNT_MAX);
    let held = |ranges: &[Range]| ranges.iter().map(|r| r.end - r.start).sum::<u64>();
    let leased = grpc.next_range(next_range("bulk", LEASE_COUNT_MAX)).await.unwrap().into_inner();
    assert_eq!(held(&leased.ranges), LEASE_COUNT_MAX, "{:?}", leased.ranges);
    let status = grpc.next_range(next_range("bulk", LEASE_COUNT_MAX + 1)).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_count");
    assert!(status.message().contains("1 to 1000000"), "{status:?}");

    let path = format!("/v1/segment/bulk/ranges?count={LEASE_COUNT_MAX}");
    let body: serde_json::Value = server.get(&path).await.json().await.unwrap();
    let ranges = body["ranges"].as_array().unwrap();
    let lens = ranges.iter().map(|r| r["end"].as_u64().unwrap() - r["start"].as_u64().unwrap());
    assert_eq!(lens.sum::<u64>(), LEASE_COUNT_MAX, "{body}");
    let too_many = format!("/v1/segment/bulk/ranges?count={}", LEASE_COUNT_MAX + 1);
    let message = assert_error(server.get(&too_many).await, 400, "bad_count").await;
    assert!(message.contains("1 to 1000000"), "{message}");
    // A batch stays bounded by the batch limit.
    let status = grpc.next_ids(next_ids("bulk", BATCH_COUNT_MAX + 1)).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_count");
    server.stop().await;
}

#[tokio::test]
async fn stream_ids_sends_chunks_and_ends_with_the_error_as_its_status() {
    let (server, mut grpc) = server().await;
    let request = StreamIdsRequest { tag: "order".to_string(), count: 25_000, chunk: 10_000 };
    let mut stream = grpc.stream_ids(request).await.unwrap().into_inner();
    let mut sizes = Vec::new();
    let mut ids = Vec::new();
    while let Some(message) = stream.message().await.unwrap() {
        sizes.push(message.ids.len());
        ids.extend(message.ids);
    }
    assert_eq!(sizes, vec![10_000, 10_000, 5_000]);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing across the stream");
    // Past one batch: the stream's total is not bounded by the batch limit.
    let long = StreamIdsRequest { tag: "order".to_string(), count: 150_001, chunk: 0 };
    let mut stream = grpc.stream_ids(long).await.unwrap().into_inner();
    let mut streamed = 0;
    while let Some(message) = stream.message().await.unwrap() {
        streamed += message.ids.len();
    }
    assert_eq!(streamed, 150_001);
    let default_chunk = StreamIdsRequest { tag: "code".to_string(), count: 3, chunk: 0 };
    let mut stream = grpc.stream_ids(default_chunk).await.unwrap().into_inner();
    let message = stream.message().await.unwrap().unwrap();
    assert_eq!(message.texts.len(), 3);
    assert!(stream.message().await.unwrap().is_none());

    let bad = StreamIdsRequest { tag: "order".to_string(), count: 0, chunk: 0 };
    assert_status(&grpc.stream_ids(bad).await.unwrap_err(), Code::InvalidArgument, "bad_count");
    let bad = StreamIdsRequest { tag: "order".to_string(), count: 10, chunk: 100_001 };
    assert_status(&grpc.stream_ids(bad).await.unwrap_err(), Code::InvalidArgument, "bad_count");
    let too_long = idmint_server::STREAM_COUNT_MAX + 1;
    let bad = StreamIdsRequest { tag: "order".to_string(), count: too_long, chunk: 0 };
    assert_status(&grpc.stream_ids(bad).await.unwrap_err(), Code::InvalidArgument, "bad_count");
    let unknown = StreamIdsRequest { tag: "nope".to_string(), count: 10, chunk: 0 };
    let mut stream = grpc.stream_ids(unknown).await.unwrap().into_inner();
    assert_status(&stream.message().await.unwrap_err(), Code::NotFound, "unknown_tag");
    server.stop().await;
}

#[tokio::test]
async fn decode_calls_answer_parts_and_refuse_what_is_not_an_id() {
    let (server, mut grpc) = server().await;
    let decoded = grpc
        .decode_id(DecodeIdRequest {
            text: "zz".to_string(),
            tag: String::new(),
            encoding: "base36".to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((decoded.public_id, decoded.id), (1295, 1295));
    let code = grpc.next_ids(next_ids("code", 1)).await.unwrap().into_inner().texts.remove(0);
    let back = DecodeIdRequest { text: code, tag: "code".to_string(), encoding: String::new() };
    let decoded = grpc.decode_id(back).await.unwrap().into_inner();
    assert_eq!((decoded.template.as_str(), decoded.id), ("C{id:crockford32:7}", 1));
    let neither = DecodeIdRequest { text: "1".into(), tag: String::new(), encoding: String::new() };
    assert_status(&grpc.decode_id(neither).await.unwrap_err(), Code::InvalidArgument, "bad_query");
    let wrong = DecodeIdRequest { text: "C!".into(), tag: "code".into(), encoding: String::new() };
    assert_status(&grpc.decode_id(wrong).await.unwrap_err(), Code::InvalidArgument, "not_an_id");

    // Snowflake decode with a preset works on a node without a generator; without a preset
    // it says why not.
    let id = (1_000 << 22) | (3 << 12) | 7;
    let preset = DecodeSnowflakeRequest { id, layout: "snowflake".to_string() };
    let parts = grpc.decode_snowflake(preset).await.unwrap().into_inner();
    assert_eq!((parts.worker, parts.sequence, parts.layout.as_str()), (3, 7, "snowflake"));
    let node = DecodeSnowflakeRequest { id, layout: String::new() };
    let status = grpc.decode_snowflake(node).await.unwrap_err();
    assert_status(&status, Code::FailedPrecondition, "snowflake_not_configured");
    let nope = DecodeSnowflakeRequest { id, layout: "nope".to_string() };
    assert_status(
        &grpc.decode_snowflake(nope).await.unwrap_err(),
        Code::InvalidArgument,
        "bad_layout",
    );
    let past = DecodeSnowflakeRequest { id: u64::MAX, layout: "snowflake".to_string() };
    assert_status(&grpc.decode_snowflake(past).await.unwrap_err(), Code::InvalidArgument, "bad_id");
    let status = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 1 }).await.unwrap_err();
    assert_status(&status, Code::FailedPrecondition, "snowflake_not_configured");
    let seq = NextSequenceIdsRequest { name: "invoice".to_string(), count: 1 };
    let status = grpc.next_sequence_ids(seq).await.unwrap_err();
    assert_status(&status, Code::FailedPrecondition, "sequences_not_configured");
    let seq = NextSequenceIdsRequest { name: "bad\tname".to_string(), count: 1 };
    let status = grpc.next_sequence_ids(seq).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_tag");
    server.stop().await;
}

#[tokio::test]
async fn snowflake_ids_come_with_their_worker_and_decode_under_the_nodes_layout() {
    let server = TestServer::with_snowflake().await;
    let mut grpc = connect(&server.base).await;
    let ids = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 3 }).await.unwrap();
    let ids = ids.into_inner();
    assert_eq!(ids.ids.len(), 3);
    assert!(ids.ids.windows(2).all(|w| w[0] < w[1]));
    let parts = grpc
        .decode_snowflake(DecodeSnowflakeRequest { id: ids.ids[0], layout: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(parts.worker, ids.worker);
    let status = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 0 }).await.unwrap_err();
    assert_status(&status, Code::InvalidArgument, "bad_count");
    server.stop().await;
}

#[tokio::test]
async fn a_guarded_tag_needs_its_client_token_as_metadata() {
    let token = |text: &str| Token::parse(text).unwrap();
    let auth = Auth::new(
        Some(token("admin-admin-admin-1")),
        vec![Client {
            name: "shop".to_string(),
            token: token("shop-shop-shop-shop1"),
            tags: vec![Tag::parse("guarded").unwrap()],
        }],
    );
    let store = Arc::new(idmint_store::MemoryStore::new());
    let limits = idmint_server::HttpLimits::default();
    let server =
        TestServer::with_auth_and_limits(store, auth, limits, SegmentConfig::default()).await;
    for tag in ["guarded", "open"] {
        let created = server
            .client
            .post(server.url("/v1/tags"))
            .bearer_auth("admin-admin-admin-1")
            .json(&json!({"tag": tag}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status().as_u16(), 201);
    }
    let mut grpc = connect(&server.base).await;
    let with = |value: Option<&str>, tag: &str| {
        let mut request = tonic::Request::new(next_ids(tag, 1));
        if let Some(value) = value {
            request.metadata_mut().insert("authorization", value.parse().unwrap());
        }
        request
    };
    assert!(grpc.next_ids(with(None, "open")).await.is_ok());
    let status = grpc.next_ids(with(None, "guarded")).await.unwrap_err();
    assert_status(&status, Code::Unauthenticated, "unauthorized");
    let status = grpc.next_ids(with(Some("Bearer wrong-wrong-wrong-1"), "guarded")).await;
    assert_status(&status.unwrap_err(), Code::PermissionDenied, "forbidden");
    let ok = grpc.next_ids(with(Some("Bearer shop-shop-shop-shop1"), "guarded")).await;
    assert_eq!(ok.unwrap().into_inner().ids, vec![1]);
    let mut range = tonic::Request::new(next_range("guarded", 1));
    range.metadata_mut().insert("authorization", "Bearer wrong-wrong-wrong-1".parse().unwrap());
    assert_status(&grpc.next_range(range).await.unwrap_err(), Code::PermissionDenied, "forbidden");
    server.stop().await;
}

#[tokio::test]
async fn grpc_on_its_own_port_leaves_the_http_port_to_http() {
    let node = TestServer::setup().node().await;
    let spec = idmint_store::TagSpec {
        tag: Tag::parse("order").unwrap(),
        step: idmint_core::Step::new(10).unwrap(),
        start: Some(idmint_core::StartId::DEFAULT),
        force: false,
        description: idmint_core::Description::new("").unwrap(),
    };
    node.create_tag(&spec).await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (http_base, grpc_base) = (
        format!("http://{}", http.local_addr().unwrap()),
        format!("http://{}", grpc_listener.local_addr().unwrap()),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(idmint_server::serve_split(
        http,
        Some(grpc_listener),
        AppState::new(Arc::clone(&node)),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut grpc = connect(&grpc_base).await;
    assert_eq!(grpc.next_ids(next_ids("order", 2)).await.unwrap().into_inner().ids, vec![1, 2]);
    let mut wrong_port = connect(&http_base).await;
    assert_eq!(
        wrong_port.next_ids(next_ids("order", 1)).await.unwrap_err().code(),
        Code::Unimplemented
    );
    let http_answer = reqwest::get(format!("{http_base}/v1/segment/order?count=1")).await.unwrap();
    let body: serde_json::Value = http_answer.json().await.unwrap();
    assert_eq!(body["ids"], json!([3]));
    let on_grpc_port = reqwest::get(format!("{grpc_base}/v1/segment/order")).await.unwrap();
    assert_eq!(on_grpc_port.status().as_u16(), 404);
    stop.send(()).unwrap();
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn many_concurrent_calls_on_one_connection_never_share_an_id() {
    let (server, grpc) = server().await;
    let calls: Vec<_> = (0..32)
        .map(|_| {
            let mut grpc = grpc.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..20 {
                    ids.extend(
                        grpc.next_ids(next_ids("order", 50)).await.unwrap().into_inner().ids,
                    );
                    let ranges = grpc.next_range(next_range("order", 30)).await.unwrap();
                    ids.extend(ranges.into_inner().ranges.iter().flat_map(|r| r.start..r.end));
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for call in calls {
        all.extend(call.await.unwrap());
    }
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!((all.len(), unique.len()), (32 * 20 * 80, 32 * 20 * 80));
    server.stop().await;
}

#[tokio::test]
async fn ids_given_back_across_a_segment_switch_come_back_from_the_current_segment_only() {
    let (server, mut grpc) = server().await;
    // Step 100: the first lease empties the node's first segment, the second switches.
    let first = grpc.next_range(next_range("order", 100)).await.unwrap().into_inner().ranges;
    let second = grpc.next_range(next_range("order", 50)).await.unwrap().into_inner().ranges;
    assert_eq!((first[0].start, first[0].end), (1, 101));
    let second = second[0];
    assert_eq!(second.start, first[0].end, "the store's ranges are contiguous here");
    let request = ReturnRangeRequest {
        tag: "order".to_string(),
        start: 51,
        end: second.end,
        leases: vec![first[0], second],
    };
    let returned = grpc.return_range(request).await.unwrap().into_inner().returned;
    assert_eq!(returned, second.end - second.start, "only the current segment's part");
    let next = grpc.next_ids(next_ids("order", 1)).await.unwrap().into_inner().ids;
    assert_eq!(next, vec![second.start]);
    server.stop().await;
}

/// Issue 20 item 7: a spent tag answers the final 409 `tag_exhausted` (gRPC
/// `FailedPrecondition`) on every route, Leaf, /v1 and gRPC, and on every later call, never
/// the retryable 503 `unavailable`.
#[tokio::test]
async fn an_exhausted_tag_is_final_on_the_leaf_route_v1_and_grpc() {
    use idmint_store::{MemoryStore, RangeStore, SegmentStore};
    let store = Arc::new(MemoryStore::new());
    let tag = Tag::parse("spent").unwrap();
    let spec = idmint_store::TagSpec {
        tag: tag.clone(),
        step: idmint_core::Step::new(10).unwrap(),
        start: Some(idmint_core::StartId::DEFAULT),
        force: false,
        description: idmint_core::Description::default(),
    };
    store.create_tag(&spec).await.unwrap();
    // The next range of 10 would pass the largest id.
    assert!(store.compare_and_set_max_id(&tag, 1, idmint_core::limits::ID_MAX - 5).await.unwrap());
    let server = TestServer::start(store).await;
    let mut grpc = connect(&server.base).await;
    for _ in 0..2 {
        crate::support::assert_error(
            server.get("/api/segment/get/spent").await,
            409,
            "tag_exhausted",
        )
        .await;
        crate::support::assert_error(
            server.get("/v1/segment/spent?count=3").await,
            409,
            "tag_exhausted",
        )
        .await;
        let status = grpc.next_ids(next_ids("spent", 1)).await.unwrap_err();
        assert_status(&status, Code::FailedPrecondition, "tag_exhausted");
        let status = grpc.next_range(next_range("spent", 1)).await.unwrap_err();
        assert_status(&status, Code::FailedPrecondition, "tag_exhausted");
    }
    server.stop().await;
}

/// A tag with a 4-byte character (an emoji) on Leaf's own `utf8` (utf8mb3) table, which
/// cannot hold it: refused as final, `409 tag_not_storable` (gRPC `FailedPrecondition`) with
/// the `ALTER TABLE … CONVERT TO CHARACTER SET utf8mb4` that fixes it, on create, take, read,
/// change and delete, over the Leaf route, `/v1` and gRPC; never `500 internal` or `503`.
#[tokio::test]
async fn an_emoji_tag_on_a_utf8_leaf_table_is_refused_with_the_fix_everywhere() {
    use sqlx::Connection;
    let Some(url) = idmint_testkit::mysql::fresh_database("leafutf8").await else { return };
    let mut raw = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE `leaf_alloc` (`biz_tag` varchar(128) NOT NULL DEFAULT '', \
         `max_id` bigint(20) NOT NULL DEFAULT '1', `step` int(11) NOT NULL, \
         `description` varchar(256) DEFAULT NULL, `update_time` timestamp NOT NULL DEFAULT \
         CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (`biz_tag`)) \
         ENGINE=InnoDB DEFAULT CHARSET=utf8",
    )
    .execute(&mut raw)
    .await
    .unwrap();
    let idmint_store::StoreUrl::Mysql(sql) = idmint_store::StoreUrl::parse(&url).unwrap() else {
        panic!("{url}")
    };
    let store = Arc::new(idmint_store::MySqlStore::connect(&sql).await.unwrap());
    let server = TestServer::start(store).await;
    let mut grpc = connect(&server.base).await;
    let fix = "ALTER TABLE leaf_alloc CONVERT TO CHARACTER SET utf8mb4";
    let refused = |message: String| assert!(message.contains(fix), "{message}");
    for _ in 0..2 {
        let created = server.create_tag(json!({"tag": "rocket🚀", "step": 10})).await;
        refused(crate::support::assert_error(created, 409, "tag_not_storable").await);
        for path in [
            "/api/segment/get/rocket%F0%9F%9A%80",
            "/v1/segment/rocket%F0%9F%9A%80?count=3",
            "/v1/segment/rocket%F0%9F%9A%80/ranges?count=3",
            "/v1/tags/rocket%F0%9F%9A%80",
        ] {
            let answer = server.get(path).await;
            refused(crate::support::assert_error(answer, 409, "tag_not_storable").await);
        }
        let url = server.url("/v1/tags/rocket%F0%9F%9A%80");
        let answer = server.client.delete(&url).send().await.unwrap();
        refused(crate::support::assert_error(answer, 409, "tag_not_storable").await);
        let answer = server.client.patch(&url).json(&json!({"step": 20})).send().await.unwrap();
        refused(crate::support::assert_error(answer, 409, "tag_not_storable").await);
        let status = grpc.next_ids(next_ids("rocket🚀", 1)).await.unwrap_err();
        assert_status(&status, Code::FailedPrecondition, "tag_not_storable");
        refused(status.message().to_string());
        let status = grpc.next_range(next_range("rocket🚀", 1)).await.unwrap_err();
        assert_status(&status, Code::FailedPrecondition, "tag_not_storable");
    }
    // Tags the column holds are served as ever.
    let created = server.create_tag(json!({"tag": "订单", "step": 10})).await;
    assert_eq!(created.status(), 201);
    assert_eq!(server.get("/api/segment/get/%E8%AE%A2%E5%8D%95").await.status(), 200);
    server.stop().await;
}

/// A Leaf row idmint cannot serve (a step of 0, a negative `max_id`) answers the final
/// `500 store_row_invalid` (gRPC `Internal`) naming the fault, every time; never the
/// retryable `503`.
#[tokio::test]
async fn a_leaf_row_idmint_cannot_serve_is_a_final_500() {
    use sqlx::Connection;
    let Some(url) = idmint_testkit::mysql::fresh_database("leafbadrow").await else { return };
    let idmint_store::StoreUrl::Mysql(sql) = idmint_store::StoreUrl::parse(&url).unwrap() else {
        panic!("{url}")
    };
    let store = Arc::new(idmint_store::MySqlStore::connect(&sql).await.unwrap());
    let mut raw = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('zero_step', 1, 0), \
         ('negative', -7, 10)",
    )
    .execute(&mut raw)
    .await
    .unwrap();
    let server = TestServer::start(store).await;
    let mut grpc = connect(&server.base).await;
    for _ in 0..2 {
        for (tag, fault) in [("zero_step", "step is 0"), ("negative", "max_id is negative")] {
            let answer = server.get(&format!("/api/segment/get/{tag}")).await;
            let message = crate::support::assert_error(answer, 500, "store_row_invalid").await;
            assert!(message.contains(tag) && message.contains(fault), "{message}");
            let status = grpc.next_ids(next_ids(tag, 1)).await.unwrap_err();
            assert_status(&status, Code::Internal, "store_row_invalid");
        }
    }
    server.stop().await;
}

/// A layout of 2 worker bits whose store-assigned ids are all taken (ids are never reused):
/// the node cannot serve snowflake ids until its configuration changes, so Leaf's route, the
/// native route and gRPC answer the final 501 / `FAILED_PRECONDITION` naming what to do,
/// never a 503 that clients would retry forever.
#[tokio::test]
async fn exhausted_store_assigned_worker_ids_are_final_with_the_fix() {
    use idmint::snowflake::{SnowflakeConfig, WorkerIdSource};
    use idmint_store::{AssignRequest, MemoryStore, WorkerSpace, WorkerStore};
    let layout = idmint_core::snowflake::Layout::new(
        41,
        2,
        12,
        idmint_core::snowflake::TimeUnit::Millis,
        1_288_834_974_657,
    )
    .unwrap();
    let workers = Arc::new(MemoryStore::new());
    let space = WorkerSpace::parse("tiny").unwrap();
    for port in 1..=layout.max_worker() {
        let request = AssignRequest {
            space: space.clone(),
            max_worker: layout.max_worker(),
            host: "earlier".to_string(),
            port: port as u16,
            launch_ms: 1,
        };
        workers.assign_worker(&request).await.unwrap();
    }
    let mut config = SnowflakeConfig::new("tiny", layout);
    config.worker = WorkerIdSource::StoreAssigned;
    let server = TestServer::setup().snowflake_config(config, workers).start().await;
    let mut grpc = connect(&server.base).await;
    for route in ["/api/snowflake/get/x", "/v1/snowflake?count=2"] {
        let message =
            crate::support::assert_error(server.get(route).await, 501, "worker_ids_exhausted")
                .await;
        assert!(message.contains("more worker bits"), "{message}");
    }
    let status = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 1 }).await.unwrap_err();
    assert_status(&status, Code::FailedPrecondition, "worker_ids_exhausted");
    assert!(status.message().contains("more worker bits"), "{status:?}");
    server.stop().await;
}

/// The gRPC peer link takes ids on another node as that node serves them: its ids (a keyed
/// tag guarded by a client token included), with the admin token the nodes share; a peer's final refusal
/// is `Refused` with the peer's code (an unknown tag, a token that is not the peer's), a peer
/// that does not answer is `Unreachable`.
#[tokio::test]
async fn the_grpc_peer_link_takes_ids_on_a_peer() {
    use idmint::node::{Peer, PeerError, PeerLink, PublicIds};
    use idmint_core::Count;
    use idmint_server::GrpcPeerLink;

    let admin = Token::parse("peer-admin-token-0123456789abcdef").unwrap();
    let shop = Client {
        name: "shop".to_string(),
        token: Token::parse("shop-shop-shop-shop1").unwrap(),
        tags: vec![Tag::parse("order").unwrap()],
    };
    let auth = Auth::new(Some(admin.clone()), vec![shop]);
    let server = TestServer::setup().auth(auth).start().await;
    let created = reqwest::Client::new()
        .post(server.url("/v1/tags"))
        .bearer_auth("peer-admin-token-0123456789abcdef")
        .json(&json!({"tag": "order", "step": 100}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    let peer = Peer { grpc_url: server.base.clone() };
    let order = Tag::parse("order").unwrap();
    let three = Count::new(3).unwrap();

    let link = GrpcPeerLink::new(Some(admin));
    assert_eq!(
        link.next_ids(&peer, &order, three, None).await,
        Ok(PublicIds::Numbers(vec![1, 2, 3]))
    );
    assert_eq!(
        link.next_ids(&peer, &order, three, None).await,
        Ok(PublicIds::Numbers(vec![4, 5, 6]))
    );
    let unknown =
        link.next_ids(&peer, &Tag::parse("nope").unwrap(), three, None).await.unwrap_err();
    assert!(
        matches!(&unknown, PeerError::Refused { code, .. } if code == "unknown_tag"),
        "{unknown}"
    );

    // A forwarded take (with a fence token) is served only by a strict tag's owner: this
    // node serves no strict tags, so the plain tag's ids are never handed out that way.
    let fenced = link.next_ids(&peer, &order, three, Some(1)).await.unwrap_err();
    assert!(matches!(&fenced, PeerError::Refused { .. }), "{fenced}");

    let stranger = GrpcPeerLink::new(Some(Token::parse("not-the-admin-token-0123456789").unwrap()));
    let refused = stranger.next_ids(&peer, &order, three, None).await.unwrap_err();
    assert!(
        matches!(&refused, PeerError::Refused { code, .. } if code == "forbidden"),
        "{refused}"
    );

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = Peer { grpc_url: format!("http://{}", closed.local_addr().unwrap()) };
    drop(closed);
    let down = link.next_ids(&gone, &order, three, None).await.unwrap_err();
    assert!(matches!(down, PeerError::Unreachable { .. }), "{down}");
    let bad = link.next_ids(&Peer { grpc_url: "not a url".into() }, &order, three, None).await;
    assert!(matches!(bad, Err(PeerError::Unreachable { .. })), "{bad:?}");
}
