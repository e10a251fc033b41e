//! The snowflake routes: Leaf's (`/api/snowflake/get/{key}` as `text/plain`,
//! `/decodeSnowflakeId` with Leaf's string fields) and the native ones (`/v1/snowflake`,
//! `/v1/snowflake/{id}`), their errors, and a server without a generator answering the final
//! 501.

use std::sync::Arc;

use crate::support::{TestServer, assert_error};

#[tokio::test]
async fn leaf_routes_serve_and_decode_snowflake_ids() {
    let server = TestServer::with_snowflake().await;
    let response = server.get("/api/snowflake/get/anykey").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/plain; charset=utf-8");
    let first: u64 = response.text().await.unwrap().parse().unwrap();
    let second: u64 =
        server.get("/api/snowflake/get/other").await.text().await.unwrap().parse().unwrap();
    assert!(second > first);

    let decoded: serde_json::Value =
        server.get(&format!("/decodeSnowflakeId?snowflakeId={first}")).await.json().await.unwrap();
    let timestamp = decoded["timestamp"].as_str().unwrap();
    let (ms, text) = timestamp.split_once('(').unwrap();
    let ms: u64 = ms.parse().unwrap();
    let now = idmint::Clock::now_ms(&idmint::SystemClock);
    assert!(ms <= now && now - ms < 60_000, "{timestamp}");
    assert!(text.ends_with(')') && text.len() == "2026-11-22 07:41:05.390)".len(), "{text}");
    assert_eq!(decoded["workerId"], "0");
    assert!(decoded["sequenceId"].as_str().unwrap().parse::<u64>().is_ok());
    // Not a number: Leaf's answer, `200` with `errorMsg` (`leaf.rs` checks it).
    let answer = server.get("/decodeSnowflakeId?snowflakeId=abc").await;
    assert_eq!(answer.status(), 200);
    server.stop().await;
}

#[tokio::test]
async fn native_routes_batch_and_decode_under_any_preset() {
    let server = TestServer::with_snowflake().await;
    let body: serde_json::Value = server.get("/v1/snowflake?count=500").await.json().await.unwrap();
    let ids: Vec<u64> =
        body["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 500);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let parts: serde_json::Value =
        server.get(&format!("/v1/snowflake/{}", ids[0])).await.json().await.unwrap();
    assert_eq!(parts["layout"], "snowflake");
    assert_eq!(parts["worker"], body["worker"]);
    // Any preset decodes any id; a known Baidu uid-generator id decodes to its parts.
    let uid: serde_json::Value =
        server.get("/v1/snowflake/42?layout=uid").await.json().await.unwrap();
    assert_eq!((uid["sequence"].as_u64(), uid["worker"].as_u64()), (Some(42), Some(0)));
    assert_error(server.get("/v1/snowflake/1?layout=nope").await, 400, "bad_layout").await;
    assert_error(server.get("/v1/snowflake/-1").await, 400, "bad_id").await;
    assert_error(server.get("/v1/snowflake?count=0").await, 400, "bad_count").await;
    server.stop().await;
}

#[tokio::test]
async fn without_a_generator_the_routes_say_why() {
    let server = TestServer::memory().await;
    let message =
        assert_error(server.get("/api/snowflake/get/x").await, 501, "snowflake_not_configured")
            .await;
    assert!(message.contains("not started in this test"), "{message}");
    // Decoding without a layout needs the node's: final too, and the document says so (it
    // listed a 503 `snowflake_not_running` the decode routes no longer answer).
    for route in ["/decodeSnowflakeId?snowflakeId=42", "/v1/snowflake/42"] {
        assert_error(server.get(route).await, 501, "snowflake_not_configured").await;
    }
    let parts: serde_json::Value =
        server.get("/v1/snowflake/42?layout=uid").await.json().await.unwrap();
    assert_eq!(parts["sequence"], 42);
    let doc: serde_json::Value = server.get("/openapi.json").await.json().await.unwrap();
    for path in ["/decodeSnowflakeId", "/v1/snowflake/{id}"] {
        let responses = doc["paths"][path]["get"]["responses"].as_object().unwrap();
        assert!(responses.contains_key("501"), "{path}: no 501");
        assert!(!responses.contains_key("503"), "{path} documents a 503 it never answers");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_cached_node_serves_both_routes_from_its_ring_uniquely() {
    // A ring of 8 192 ids: requests of 20 000 drain it several times each, so takes also
    // fill units in place.
    let server = std::sync::Arc::new(TestServer::with_cached_snowflake(8_192).await);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let server = std::sync::Arc::clone(&server);
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..5 {
                    let body: serde_json::Value =
                        server.get("/v1/snowflake?count=20000").await.json().await.unwrap();
                    let batch: Vec<u64> = body["ids"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap())
                        .collect();
                    assert_eq!(batch.len(), 20_000);
                    assert!(batch.windows(2).all(|w| w[0] < w[1]), "a batch is increasing");
                    ids.extend(batch);
                    let leaf = server.get("/api/snowflake/get/k").await.text().await.unwrap();
                    ids.push(leaf.parse().unwrap());
                }
                ids
            })
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    for task in tasks {
        for id in task.await.unwrap() {
            assert!(seen.insert(id), "id {id} twice");
        }
    }
    assert_eq!(seen.len(), 4 * 5 * 20_001);
    let any = *seen.iter().next().unwrap();
    let parts: serde_json::Value =
        server.get(&format!("/v1/snowflake/{any}")).await.json().await.unwrap();
    assert_eq!(parts["worker"], 0);
}

/// Issue 22 item 12: a layout set bit by bit in the configuration (CosId-style: 31 bits of
/// seconds / 9 worker / 13 sequence from this year) is what the node serves and what both
/// decode routes read by default; `layout=custom` names it, a preset still decodes by name.
#[tokio::test]
async fn a_custom_layout_is_served_and_decoded_by_default() {
    let now_ms = idmint::Clock::now_ms(&idmint::SystemClock);
    let year = idmint::snowflake::UtcMs(now_ms).start_of_year();
    let toml = format!(
        "[snowflake]\ntime_bits = 31\nworker_bits = 9\nsequence_bits = 13\ntime_unit = \"s\"\n\
         epoch = \"{}\"\nworker = \"static:300\"\n",
        &year.to_string()[..10]
    );
    let path = std::env::temp_dir().join(format!("idmint-custom-{}.toml", std::process::id()));
    std::fs::write(&path, toml).unwrap();
    let settings =
        idmint_server::Settings::load(Some(&path), &|_| None, &idmint_server::Overrides::default())
            .unwrap();
    std::fs::remove_file(&path).unwrap();
    let config = settings.snowflake.unwrap();
    assert_eq!(config.space, "custom");
    let generator =
        idmint::Snowflake::start(None, config, std::sync::Arc::new(idmint::SystemClock))
            .await
            .unwrap();
    let server = TestServer::setup().snowflake(generator).start().await;
    let id: u64 = server.get("/api/snowflake/get/x").await.text().await.unwrap().parse().unwrap();
    let (seconds, worker, sequence) = (id >> 22, (id >> 13) & 511, id & 8_191);
    assert_eq!(worker, 300);
    let time_ms = year.0 + seconds * 1_000;
    assert!(time_ms <= now_ms + 60_000 && now_ms <= time_ms + 60_000, "{time_ms} vs {now_ms}");
    for path in [format!("/v1/snowflake/{id}"), format!("/v1/snowflake/{id}?layout=custom")] {
        let parts: serde_json::Value = server.get(&path).await.json().await.unwrap();
        assert_eq!(parts["layout"], "custom", "{path}");
        assert_eq!(
            (parts["worker"].as_u64(), parts["sequence"].as_u64()),
            (Some(300), Some(sequence))
        );
        assert_eq!(parts["timestamp_ms"].as_u64(), Some(time_ms), "{parts}");
    }
    let leaf: serde_json::Value =
        server.get(&format!("/decodeSnowflakeId?snowflakeId={id}")).await.json().await.unwrap();
    assert_eq!(
        (leaf["workerId"].as_str(), leaf["sequenceId"].as_str()),
        (Some("300"), Some(sequence.to_string().as_str()))
    );
    assert!(leaf["timestamp"].as_str().unwrap().starts_with(&format!("{time_ms}(")), "{leaf}");
    // A preset by name reads the same bits its own way; an unknown name lists this node's.
    let preset: serde_json::Value =
        server.get(&format!("/v1/snowflake/{id}?layout=snowflake")).await.json().await.unwrap();
    assert_eq!(preset["worker"].as_u64(), Some((id >> 12) & 1_023));
    let message =
        assert_error(server.get("/v1/snowflake/1?layout=cosid").await, 400, "bad_layout").await;
    assert!(message.contains("or custom (this node's)"), "{message}");
    server.stop().await;
}

/// A worker store that refuses every acquisition while `down` (a database not reachable).
struct DownWorkers {
    inner: idmint_store::MemoryStore,
    down: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl idmint_store::WorkerStore for DownWorkers {
    async fn assign_worker(
        &self,
        req: &idmint_store::AssignRequest,
    ) -> Result<u64, idmint_store::StoreError> {
        self.inner.assign_worker(req).await
    }
}

#[async_trait::async_trait]
impl idmint_store::LeaseStore for DownWorkers {
    async fn acquire_lease(
        &self,
        req: &idmint_store::LeaseRequest,
    ) -> Result<idmint_store::Lease, idmint_store::StoreError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(idmint_store::StoreError::Unavailable("connection refused (test)".into()));
        }
        self.inner.acquire_lease(req).await
    }
    async fn renew_lease(
        &self,
        lease: &idmint_store::Lease,
        ttl_ms: u64,
    ) -> Result<idmint_store::Lease, idmint_store::StoreError> {
        self.inner.renew_lease(lease, ttl_ms).await
    }
    async fn release_lease(
        &self,
        lease: &idmint_store::Lease,
    ) -> Result<(), idmint_store::StoreError> {
        self.inner.release_lease(lease).await
    }
    async fn raise_mark(
        &self,
        lease: &idmint_store::Lease,
        mark_ms: u64,
    ) -> Result<(), idmint_store::StoreError> {
        self.inner.raise_mark(lease, mark_ms).await
    }
    async fn list_leases(
        &self,
        space: &idmint_store::WorkerSpace,
    ) -> Result<Vec<idmint_store::LeaseRecord>, idmint_store::StoreError> {
        self.inner.list_leases(space).await
    }
    async fn now_ms(&self) -> Result<u64, idmint_store::StoreError> {
        self.inner.now_ms().await
    }
}

/// Issue 31: a node whose worker store did not answer at start answered 503
/// `snowflake_not_running` forever. Now Leaf's route, the native route, gRPC (`UNAVAILABLE`)
/// and `/ready` answer 503 `snowflake_not_running` with the store's failure and that the start is retried, the
/// metrics name the cause `starting`; once the store answers, the node serves snowflake ids
/// from its cached ring without a restart.
#[tokio::test]
async fn a_node_whose_worker_store_was_down_at_start_serves_once_it_answers() {
    use crate::ops::{scrape, value};
    let workers = Arc::new(DownWorkers {
        inner: idmint_store::MemoryStore::new(),
        down: std::sync::atomic::AtomicBool::new(true),
    });
    let layout = idmint_core::snowflake::Layout::preset("snowflake").unwrap();
    // A space no other test uses: the metrics recorder is process-wide.
    let mut config = idmint::snowflake::SnowflakeConfig::new("start_retried", layout);
    config.time_window_ms = 100;
    config.lease_margin_ms = 100;
    let server =
        TestServer::setup().snowflake_config(config, workers.clone()).cached(1 << 12).start().await;
    for route in ["/api/snowflake/get/x", "/v1/snowflake?count=2", "/ready"] {
        let message = assert_error(server.get(route).await, 503, "snowflake_not_running").await;
        assert!(message.contains("connection refused (test)"), "{route}: {message}");
        assert!(message.contains("retried"), "{route}: {message}");
    }
    let channel = tonic::transport::Endpoint::from_shared(server.base.clone()).unwrap();
    let mut grpc = idmint_proto::v1::id_mint_client::IdMintClient::new(
        channel.connect().await.expect("gRPC connects"),
    );
    let request = idmint_proto::v1::NextSnowflakeIdsRequest { count: 1 };
    let status = grpc.next_snowflake_ids(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let code = status.metadata().get(idmint_server::GRPC_CODE_KEY).unwrap();
    assert_eq!(code.to_str().unwrap(), "snowflake_not_running", "{status:?}");
    let starting = [("space", "start_retried"), ("cause", "starting")];
    let samples = scrape(&server).await;
    assert_eq!(value(&samples, "idmint_snowflake_not_ready", &starting), Some(1.0));
    assert_eq!(value(&samples, "idmint_snowflake_up", &[]), Some(0.0));
    let status: serde_json::Value = server.get("/v1/status").await.json().await.unwrap();
    assert_eq!(status["snowflake"]["running"], false, "{status}");
    assert!(status["snowflake"]["reason"].as_str().unwrap().contains("retried"), "{status}");

    workers.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let response = server.get("/api/snowflake/get/x").await;
        if response.status() == 200 {
            break;
        }
        let body = response.text().await.unwrap();
        assert!(std::time::Instant::now() < deadline, "never served: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let body: serde_json::Value = server.get("/v1/snowflake?count=100").await.json().await.unwrap();
    let ids: Vec<u64> =
        body["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(ids.len() == 100 && ids.windows(2).all(|w| w[0] < w[1]), "{body}");
    let request = idmint_proto::v1::NextSnowflakeIdsRequest { count: 10 };
    let answer = grpc.next_snowflake_ids(request).await.unwrap().into_inner();
    assert_eq!(answer.ids.len(), 10);
    let status: serde_json::Value = server.get("/v1/status").await.json().await.unwrap();
    assert_eq!(status["snowflake"]["running"], true, "{status}");
    assert!(status["snowflake"]["ring_ids"].is_u64(), "the ring did not start: {status}");
    let samples = scrape(&server).await;
    assert_eq!(value(&samples, "idmint_snowflake_not_ready", &starting), Some(0.0));
    assert_eq!(value(&samples, "idmint_snowflake_up", &[]), Some(1.0));
    server.stop().await;
}

/// The same on a real database: a private MariaDB stopped when the node starts (the worker
/// store does not open), started a moment later; the node serves snowflake ids without a
/// restart, its lease in the database's `idmint_workers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_while_its_mariadb_is_down_serves_once_it_is_up() {
    use idmint_testkit::servers::PrivateMariaDb;
    let mut db = match tokio::task::spawn_blocking(PrivateMariaDb::start).await.unwrap() {
        Ok(db) => db,
        Err(error) => return idmint_testkit::skip(&format!("no private MariaDB: {error:#}")),
    };
    db.sql("mysql", "CREATE DATABASE idmint_retry").unwrap();
    let url = db.url("idmint_retry");
    db.stop().unwrap();
    let layout = idmint_core::snowflake::Layout::preset("snowflake").unwrap();
    let mut config = idmint::snowflake::SnowflakeConfig::new("snowflake", layout);
    config.time_window_ms = 100;
    config.lease_margin_ms = 100;
    let store = idmint_store::StoreUrl::parse(&url).unwrap();
    let server = TestServer::setup().snowflake_on(config, store).start().await;
    let message =
        assert_error(server.get("/api/snowflake/get/x").await, 503, "snowflake_not_running").await;
    assert!(message.contains("did not open") && message.contains("retried"), "{message}");

    let mut db = tokio::task::spawn_blocking(move || {
        let mut db = db;
        db.launch().map(|()| db)
    })
    .await
    .unwrap()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let response = server.get("/v1/snowflake?count=10").await;
        if response.status() == 200 {
            break;
        }
        let body = response.text().await.unwrap();
        assert!(std::time::Instant::now() < deadline, "never served: {body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let leases = db.sql("idmint_retry", "SELECT COUNT(*) FROM idmint_workers").unwrap();
    assert_eq!(leases.trim(), "1", "{leases}");
    server.stop().await;
    db.stop().unwrap();
}
