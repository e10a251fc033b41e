//! gRPC for operators, end to end over tonic on `127.0.0.1:0`: the standard health service
//! (`grpc.health.v1`: Check and Watch follow `/ready`, per service name and the empty name,
//! without a token), server reflection (v1 and v1alpha: the services listed, `idmint.proto`
//! described), the per-method gRPC metrics with the status each call answered, and a
//! feature the node is not configured for answering FAILED_PRECONDITION, not UNAVAILABLE.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use idmint_proto::v1::id_mint_client::IdMintClient;
use idmint_proto::v1::{
    NextIdsRequest, NextSequenceIdsRequest, NextSnowflakeIdsRequest, StreamIdsRequest,
};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

use crate::ops::{scrape, value};
use crate::support::TestServer;

async fn channel(base: &str) -> Channel {
    let endpoint = tonic::transport::Endpoint::from_shared(base.to_string()).unwrap();
    endpoint.connect().await.expect("gRPC connects")
}

async fn check(health: &mut HealthClient<Channel>, service: &str) -> Result<i32, tonic::Status> {
    let request = HealthCheckRequest { service: service.to_string() };
    health.check(request).await.map(|answer| answer.into_inner().status)
}

/// A node serving snowflake ids on a manual clock (static worker id 3), guarded by an admin
/// token and a client token: its readiness can be broken by stepping the clock back a day.
async fn clocked_server(space: &str) -> (TestServer, Arc<idmint::clock::ManualClock>, Channel) {
    let clock = Arc::new(idmint::clock::ManualClock::at_system_time());
    let memory = Arc::new(idmint_store::MemoryStore::with_clock(clock.clone()));
    let workers: Arc<dyn idmint_store::WorkerStore> = memory.clone();
    let layout = idmint_core::snowflake::Layout::preset("snowflake").unwrap();
    let mut config = idmint::snowflake::SnowflakeConfig::new(space, layout);
    config.worker = idmint::snowflake::WorkerIdSource::Static(3);
    let generator = idmint::Snowflake::start(
        Some(workers),
        config,
        Arc::clone(&clock) as Arc<dyn idmint::Clock>,
    )
    .await
    .unwrap();
    let server = TestServer::setup()
        .store(memory)
        .snowflake(generator)
        .auth(crate::auth::guarded_auth(&["order"]))
        .start()
        .await;
    let channel = channel(&server.base).await;
    (server, clock, channel)
}

const DAY_MS: u64 = 86_400_000;

/// A node whose readiness waits for segments alone, its snowflake generator unable to issue
/// (a clock stepped back a day): the node (`""`, `/ready`) is SERVING, the engine
/// `snowflake` NOT_SERVING as `/ready?engine=snowflake` answers 503, `segment` SERVING, an
/// engine the node does not run NOT_SERVING, and a name that is no engine NOT_FOUND.
#[tokio::test]
async fn the_health_service_answers_per_engine() {
    let clock = Arc::new(idmint::clock::ManualClock::at_system_time());
    let memory = Arc::new(idmint_store::MemoryStore::with_clock(clock.clone()));
    let workers: Arc<dyn idmint_store::WorkerStore> = memory.clone();
    let layout = idmint_core::snowflake::Layout::preset("snowflake").unwrap();
    let mut config = idmint::snowflake::SnowflakeConfig::new("health_engines", layout);
    config.worker = idmint::snowflake::WorkerIdSource::Static(3);
    let clocked = Arc::clone(&clock) as Arc<dyn idmint::Clock>;
    let generator = idmint::Snowflake::start(Some(workers), config, clocked).await.unwrap();
    let server = TestServer::setup()
        .store(memory)
        .snowflake(generator)
        .ready_engines(&[idmint::node::Engine::Segment])
        .start()
        .await;
    let mut health = HealthClient::new(channel(&server.base).await);
    clock.advance(DAY_MS);
    assert_eq!(server.get("/v1/snowflake").await.status(), 200);
    clock.step_back(DAY_MS);

    let (serving, not_serving) = (ServingStatus::Serving as i32, ServingStatus::NotServing as i32);
    assert_eq!(server.get("/ready").await.status(), 200);
    let probe = server.get("/ready?engine=snowflake").await;
    crate::support::assert_error(probe, 503, "clock_behind").await;
    for (service, status) in [
        ("", serving),
        (idmint_proto::SERVICE_NAME, serving),
        ("segment", serving),
        ("snowflake", not_serving),
        ("sequences", not_serving),
    ] {
        assert_eq!(check(&mut health, service).await.unwrap(), status, "{service:?}");
    }
    let unknown = check(&mut health, "dns").await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    assert!(unknown.message().contains("snowflake"), "{unknown:?}");
    server.stop().await;
}

/// The next message of a health `Watch`, within 10 s.
async fn next(watch: &mut tonic::Streaming<HealthCheckResponse>) -> i32 {
    let message = tokio::time::timeout(Duration::from_secs(10), watch.next()).await;
    message.expect("a Watch message within 10 s").unwrap().unwrap().status
}

/// Kubernetes' gRPC probe and grpc_health_probe send `Check` without a token: SERVING while
/// `/ready` answers 200, NOT_SERVING while it answers 503, for the node (`""`) and for
/// `idmint.v1.IdMint`; another name is NOT_FOUND. `Watch` sends the status, then each change.
#[tokio::test]
async fn the_health_service_follows_the_readiness_without_a_token() {
    let (server, clock, channel) = clocked_server("health_follows").await;
    let mut health = HealthClient::new(channel);
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;
    assert_eq!(server.get("/ready").await.status(), 200);
    for service in idmint_server::HEALTH_SERVICES {
        assert_eq!(check(&mut health, service).await.unwrap(), serving, "{service:?}");
    }
    let unknown = check(&mut health, "grpc.nope.Nope").await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    assert!(unknown.message().contains("idmint.v1.IdMint"), "{unknown:?}");

    let request = HealthCheckRequest { service: String::new() };
    let mut watch = health.watch(request).await.unwrap().into_inner();
    assert_eq!(next(&mut watch).await, serving);

    // The clock jumped a day ahead, an id was issued there, and the clock was corrected:
    // the generator cannot issue, /ready is 503, and so is the health of both names.
    clock.advance(DAY_MS);
    assert_eq!(server.get("/v1/snowflake").await.status(), 200);
    clock.step_back(DAY_MS);
    assert_eq!(server.get("/ready").await.status(), 503);
    for service in idmint_server::HEALTH_SERVICES {
        assert_eq!(check(&mut health, service).await.unwrap(), not_serving, "{service:?}");
    }
    assert_eq!(next(&mut watch).await, not_serving);

    clock.advance(DAY_MS + 10_000);
    assert_eq!(server.get("/ready").await.status(), 200);
    assert_eq!(check(&mut health, "").await.unwrap(), serving);
    assert_eq!(next(&mut watch).await, serving);

    // A Watch of an unknown name: SERVICE_UNKNOWN, and the call stays open.
    let request = HealthCheckRequest { service: "grpc.nope.Nope".to_string() };
    let mut unknown = health.watch(request).await.unwrap().into_inner();
    assert_eq!(next(&mut unknown).await, ServingStatus::ServiceUnknown as i32);
    let more = tokio::time::timeout(Duration::from_millis(300), unknown.next()).await;
    assert!(more.is_err(), "the Watch of an unknown name ended: {more:?}");

    // SIGTERM: the drain begins; watchers hear NOT_SERVING, their streams end, and they do
    // not hold the drain open (it would wait for them).
    let began = std::time::Instant::now();
    let stopping = tokio::spawn(server.stop());
    assert_eq!(next(&mut watch).await, not_serving);
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert!(matches!(ended, Ok(None)), "the Watch did not end: {ended:?}");
    let ended = tokio::time::timeout(Duration::from_secs(5), unknown.next()).await;
    assert!(matches!(ended, Ok(None)), "the unknown Watch did not end: {ended:?}");
    tokio::time::timeout(Duration::from_secs(5), stopping).await.unwrap().unwrap();
    assert!(began.elapsed() < Duration::from_secs(5), "the drain took {:?}", began.elapsed());
}

/// One reflection request on a v1 stream, and its answer.
async fn reflect(
    channel: &Channel,
    request: MessageRequest,
) -> Result<MessageResponse, tonic::Status> {
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let request = ServerReflectionRequest { host: String::new(), message_request: Some(request) };
    let outbound = futures_util::stream::iter([request]);
    let mut answers = reflection.server_reflection_info(outbound).await.unwrap().into_inner();
    let answer: ServerReflectionResponse = answers.next().await.unwrap()?;
    Ok(answer.message_response.expect("an answer"))
}

/// grpcurl `list` and `describe` (reflection v1, then v1alpha for older tools), without a
/// token on a node that guards tags: every service is listed and idmint.proto is served
/// with its methods.
#[tokio::test]
async fn reflection_lists_and_describes_the_services_without_a_token() {
    let (server, _clock, channel) = clocked_server("reflection_lists").await;
    let MessageResponse::ListServicesResponse(list) =
        reflect(&channel, MessageRequest::ListServices(String::new())).await.unwrap()
    else {
        panic!("not a list");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in
        ["idmint.v1.IdMint", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"]
    {
        assert!(names.contains(&expected), "{expected} not in {names:?}");
    }
    let symbol = MessageRequest::FileContainingSymbol("idmint.v1.IdMint".to_string());
    let MessageResponse::FileDescriptorResponse(files) = reflect(&channel, symbol).await.unwrap()
    else {
        panic!("not a file");
    };
    let file = files.file_descriptor_proto.concat();
    for expected in ["idmint/v1/idmint.proto", "NextIds", "StreamIds", "NextRangeRequest"] {
        let found = file.windows(expected.len()).any(|w| w == expected.as_bytes());
        assert!(found, "{expected} not in the descriptor");
    }
    let unknown = MessageRequest::FileContainingSymbol("idmint.v1.Nope".to_string());
    let unknown = reflect(&channel, unknown).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");

    // v1alpha, which older grpcurl asks.
    use tonic_reflection::pb::v1alpha as alpha;
    let mut old = alpha::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let request = alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(alpha::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut answers = old
        .server_reflection_info(futures_util::stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.next().await.unwrap().unwrap();
    let listed = format!("{:?}", answer.message_response);
    assert!(listed.contains("idmint.v1.IdMint"), "{listed}");
    server.stop().await;
}

/// Each call is counted by method with the status it answered (read from the trailers of a
/// call that sent a message, from the headers of one that failed at once), and timed; the
/// HTTP series no longer count gRPC calls as HTTP 200s.
#[tokio::test]
async fn grpc_metrics_count_each_method_with_its_status() {
    let (server, _clock, channel) = clocked_server("grpc_metrics").await;
    let mut grpc = IdMintClient::new(channel.clone());
    let labels =
        |method, code| [("service", "idmint.v1.IdMint"), ("method", method), ("code", code)];
    let count = |samples: &[_], method, code| {
        value(samples, "idmint_grpc_requests_total", &labels(method, code)).unwrap_or(0.0)
    };
    let before = scrape(&server).await;
    // A success, a failure before any message (no token for the guarded tag), a failure of
    // an unknown tag, and a failure of the not configured sequences.
    let ok = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 2 }).await.unwrap();
    assert_eq!(ok.into_inner().ids.len(), 2);
    let guarded = NextIdsRequest { tag: "order".to_string(), count: 1 };
    let refused = grpc.next_ids(guarded).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let sequence = NextSequenceIdsRequest { name: "invoice".to_string(), count: 1 };
    let precondition = grpc.next_sequence_ids(sequence).await.unwrap_err();
    assert_eq!(precondition.code(), Code::FailedPrecondition, "{precondition:?}");
    let mut health = HealthClient::new(channel);
    check(&mut health, "").await.unwrap();

    // A stream that fails after its headers: the status is in the trailers.
    let stream = StreamIdsRequest { tag: "metrics_nope".to_string(), count: 5, chunk: 0 };
    let mut messages = grpc.stream_ids(stream).await.unwrap().into_inner();
    let ended = messages.next().await.unwrap().unwrap_err();
    assert_eq!(ended.code(), Code::NotFound, "{ended:?}");

    // Other tests of this binary call too (the recorder is process-wide): counts only grow.
    let after = scrape(&server).await;
    let moved = |method, code| count(&after, method, code) - count(&before, method, code);
    assert!(moved("NextSnowflakeIds", "OK") >= 1.0);
    assert!(moved("NextIds", "UNAUTHENTICATED") >= 1.0);
    assert!(moved("NextSequenceIds", "FAILED_PRECONDITION") >= 1.0);
    assert!(moved("StreamIds", "NOT_FOUND") >= 1.0);
    let health_labels = [("service", "grpc.health.v1.Health"), ("method", "Check"), ("code", "OK")];
    assert!(value(&after, "idmint_grpc_requests_total", &health_labels).unwrap() >= 1.0);
    let timed = [("service", "idmint.v1.IdMint"), ("method", "NextSnowflakeIds")];
    let timed = value(&after, "idmint_grpc_request_duration_seconds_count", &timed).unwrap();
    assert!(timed >= 1.0, "{timed}");
    // gRPC calls are not HTTP requests any more (they were all counted as 200).
    let http = after.iter().filter(|(name, _, _)| name == "idmint_http_requests_total");
    assert!(
        !http.clone().any(|(_, l, _)| l.iter().any(|(_, v)| v.starts_with("/idmint.v1"))),
        "{:?}",
        http.collect::<Vec<_>>()
    );
    // The process series, under their standard names.
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(value(&after, name, &[]).is_some_and(|v| v > 0.0), "{name}");
    }
    server.stop().await;
}

/// Sequences on a node without Redis, and snowflake ids on a node without a generator, are
/// final conditions: gRPC FAILED_PRECONDITION and HTTP 501 with the `*_not_configured`
/// code and how to configure it, never the retryable UNAVAILABLE / 503.
#[tokio::test]
async fn a_feature_not_configured_is_a_precondition_not_unavailable() {
    let server = TestServer::memory().await;
    let mut grpc = IdMintClient::new(channel(&server.base).await);
    let sequence = NextSequenceIdsRequest { name: "invoice".to_string(), count: 1 };
    let status = grpc.next_sequence_ids(sequence).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let code = status.metadata().get(idmint_server::GRPC_CODE_KEY).unwrap().to_str().unwrap();
    assert_eq!(code, "sequences_not_configured");
    let status = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 1 }).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    for (path, code) in [
        ("/v1/seq/invoice", "sequences_not_configured"),
        ("/v1/snowflake", "snowflake_not_configured"),
        ("/api/snowflake/get/x", "snowflake_not_configured"),
    ] {
        let message = crate::support::assert_error(server.get(path).await, 501, code).await;
        assert!(message.contains("not started in this test"), "{path}: {message}");
    }
    server.stop().await;
}

/// Issue 31: a node whose clock runs 5 s ahead of its store's, with a lease margin of 1 s,
/// measures the offset at start and exports it (`idmint_clock_offset_seconds`); it refuses
/// snowflake ids with the final 501 `clock_skew` (gRPC FAILED_PRECONDITION) naming the offset
/// and the fix, `/ready` says the same, and the metrics name the cause. A node whose clock
/// agrees with its store's exports an offset near 0 and serves.
#[tokio::test]
async fn a_clock_off_the_stores_is_exported_and_refused_as_final() {
    let layout = idmint_core::snowflake::Layout::preset("snowflake").unwrap();
    // Both clocks stand still, so every measurement finds the same offset.
    let store_clock = Arc::new(idmint::clock::ManualClock::at_system_time());
    let memory = Arc::new(idmint_store::MemoryStore::with_clock(store_clock.clone()));
    let workers: Arc<dyn idmint_store::WorkerStore> = memory.clone();
    let clock =
        Arc::new(idmint::clock::ManualClock::new(idmint::Clock::now_ms(&*store_clock) + 5_000));
    // A space no other test uses: the metrics recorder is process-wide.
    let mut config = idmint::snowflake::SnowflakeConfig::new("skewed", layout);
    config.lease_margin_ms = 1_000;
    config.time_window_ms = 1_000;
    let generator =
        idmint::Snowflake::start(Some(workers), config, clock as Arc<dyn idmint::Clock>)
            .await
            .unwrap();
    let server = TestServer::setup().store(memory).snowflake(generator).start().await;
    for route in ["/v1/snowflake", "/api/snowflake/get/a", "/ready"] {
        let message =
            crate::support::assert_error(server.get(route).await, 501, "clock_skew").await;
        assert!(message.contains("lease_margin_ms (1000 ms)"), "{message}");
        assert!(message.contains("time sync"), "{message}");
    }
    let mut grpc = IdMintClient::new(channel(&server.base).await);
    let status = grpc.next_snowflake_ids(NextSnowflakeIdsRequest { count: 1 }).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let samples = scrape(&server).await;
    let offset = value(&samples, "idmint_clock_offset_seconds", &[("space", "skewed")]);
    assert_eq!(offset, Some(5.0));
    let cause = [("space", "skewed"), ("cause", "clock_skew")];
    assert_eq!(value(&samples, "idmint_snowflake_not_ready", &cause), Some(1.0));
    let status: serde_json::Value = server.get("/v1/status").await.json().await.unwrap();
    assert_eq!(status["snowflake"]["clock_offset_ms"], 5_000, "{status}");
    server.stop().await;

    let server = TestServer::with_snowflake().await;
    assert_eq!(server.get("/v1/snowflake").await.status(), 200);
    let samples = scrape(&server).await;
    let offset = value(&samples, "idmint_clock_offset_seconds", &[("space", "snowflake")]);
    assert!(offset.is_some_and(|o| o.abs() < 0.5), "offset {offset:?}");
    server.stop().await;
}
