//! Starts a server on a free loopback port over a fresh store, and stops it.

use std::net::SocketAddr;
use std::sync::Arc;

use idmint::Segments;
use idmint::segment::SegmentConfig;
use idmint_server::AppState;
use idmint_store::SegmentStore;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    /// Deletes the server's Redis test keys when the server is dropped.
    #[cfg(feature = "redis")]
    redis_keys: Option<crate::redis_keys::Cleanup>,
}

impl TestServer {
    pub async fn start(store: Arc<dyn SegmentStore>) -> TestServer {
        TestServer::start_with(store, SegmentConfig::default()).await
    }

    pub async fn start_with(store: Arc<dyn SegmentStore>, config: SegmentConfig) -> TestServer {
        TestServer::start_full(store, config, Err("not started in this test".to_string())).await
    }

    /// A memory store for segments and a snowflake generator leasing its worker id there.
    pub async fn with_snowflake() -> TestServer {
        let (memory, generator) = memory_snowflake().await;
        TestServer::start_full(memory, SegmentConfig::default(), Ok(generator)).await
    }

    /// [`TestServer::with_snowflake`] serving its snowflake ids from a ring of `capacity`.
    pub async fn with_cached_snowflake(capacity: u64) -> TestServer {
        let (memory, generator) = memory_snowflake().await;
        let cached =
            idmint::CachedSnowflake::start(Arc::clone(&generator), capacity, 10_000).unwrap();
        let sequences = idmint_server::SequenceSlot::not_running("not started in this test");
        let config = SegmentConfig::default();
        TestServer::start_parts(memory, config, Ok(generator), Some(cached), sequences).await
    }

    pub async fn start_full(
        store: Arc<dyn SegmentStore>,
        config: SegmentConfig,
        snowflake: Result<Arc<idmint::Snowflake>, String>,
    ) -> TestServer {
        let sequences = idmint_server::SequenceSlot::not_running("not started in this test");
        TestServer::start_parts(store, config, snowflake, None, sequences).await
    }

    /// A memory store, and sequences served from the shared test Redis under a fresh key
    /// prefix (deleted when the server is dropped); `None` when that Redis is not set.
    #[cfg(feature = "redis")]
    pub async fn with_sequences() -> Option<TestServer> {
        let (url, cleanup) = crate::redis_keys::fresh_url()?;
        let memory = Arc::new(idmint_store::MemoryStore::new());
        let counters = idmint_store::redis::RedisCounters::connect(&url).await.unwrap();
        let engine = idmint::Sequences::start(
            memory.clone(),
            Arc::new(counters),
            Arc::new(idmint::SystemClock),
            idmint::sequence::SequenceConfig::default(),
        );
        let slot = idmint_server::SequenceSlot::default();
        slot.set(engine);
        let unused = Err("not started in this test".to_string());
        let mut server =
            TestServer::start_parts(memory, SegmentConfig::default(), unused, None, slot).await;
        server.redis_keys = Some(cleanup);
        Some(server)
    }

    pub async fn start_parts(
        store: Arc<dyn SegmentStore>,
        config: SegmentConfig,
        snowflake: Result<Arc<idmint::Snowflake>, String>,
        snowflake_cached: Option<Arc<idmint::CachedSnowflake>>,
        sequences: idmint_server::SequenceSlot,
    ) -> TestServer {
        let segments = Segments::start(store, config).unwrap();
        let state = AppState {
            segments,
            batch_count_max: idmint_core::limits::BATCH_COUNT_MAX,
            snowflake,
            snowflake_cached,
            sequences,
            formats: Default::default(),
            uuids: Arc::new(idmint::Uuids::new(Arc::new(idmint::SystemClock))),
            auth: Arc::new(idmint_server::Auth::open()),
            http_limits: idmint_server::HttpLimits::default(),
            clients: Arc::default(),
        };
        TestServer::serve(state).await
    }

    /// A memory store whose tags have the public id `formats` given (keys claimed first).
    pub async fn with_formats(formats: idmint_server::TagFormats) -> TestServer {
        let store = Arc::new(idmint_store::MemoryStore::new());
        let segments = Segments::start(store, SegmentConfig::default()).unwrap();
        for (tag, format) in &formats {
            if let Some(permutation) = format.permutation() {
                idmint::format::claim_key(&segments, tag, permutation, false).await.unwrap();
            }
        }
        let state = AppState {
            segments,
            batch_count_max: idmint_core::limits::BATCH_COUNT_MAX,
            snowflake: Err("not started in this test".to_string()),
            snowflake_cached: None,
            sequences: idmint_server::SequenceSlot::not_running("not started in this test"),
            formats: Arc::new(formats),
            uuids: Arc::new(idmint::Uuids::new(Arc::new(idmint::SystemClock))),
            auth: Arc::new(idmint_server::Auth::open()),
            http_limits: idmint_server::HttpLimits::default(),
            clients: Arc::default(),
        };
        TestServer::serve(state).await
    }

    /// `store` served with `auth` and `limits`, no snowflake, no sequences.
    pub async fn with_auth_and_limits(
        store: Arc<dyn SegmentStore>,
        auth: idmint_server::Auth,
        limits: idmint_server::HttpLimits,
        config: SegmentConfig,
    ) -> TestServer {
        let segments = Segments::start(store, config).unwrap();
        let state = AppState {
            segments,
            batch_count_max: idmint_core::limits::BATCH_COUNT_MAX,
            snowflake: Err("not started in this test".to_string()),
            snowflake_cached: None,
            sequences: idmint_server::SequenceSlot::not_running("not started in this test"),
            formats: Default::default(),
            uuids: Arc::new(idmint::Uuids::new(Arc::new(idmint::SystemClock))),
            auth: Arc::new(auth),
            http_limits: limits,
            clients: Arc::default(),
        };
        TestServer::serve(state).await
    }

    /// Serves `state` on a free loopback port.
    pub async fn serve(state: AppState) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(idmint_server::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        TestServer {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
            #[cfg(feature = "redis")]
            redis_keys: None,
        }
    }

    pub async fn memory() -> TestServer {
        TestServer::start(Arc::new(idmint_store::MemoryStore::new())).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    pub async fn create_tag(&self, body: serde_json::Value) -> reqwest::Response {
        self.client.post(self.url("/v1/tags")).json(&body).send().await.unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

/// Asserts an error answer: the status, a JSON body with the code, and a message.
pub async fn assert_error(response: reqwest::Response, status: u16, code: &str) -> String {
    assert_eq!(response.status().as_u16(), status);
    let body: serde_json::Value = response.json().await.expect("error bodies are JSON");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().expect("message").to_string();
    assert!(!message.is_empty() && message.parse::<i64>().is_err(), "{message}");
    message
}

/// A memory store and a snowflake generator leasing its worker id there, ready to issue: with
/// a 100 ms time window and lease margin, its start-up delay (docs/operations.md) is 200 ms.
async fn memory_snowflake() -> (Arc<idmint_store::MemoryStore>, Arc<idmint::Snowflake>) {
    let memory = Arc::new(idmint_store::MemoryStore::new());
    let workers: Arc<dyn idmint_store::WorkerStore> = memory.clone();
    let layout = idmint_core::snowflake::Layout::preset("snowflake").unwrap();
    let mut config = idmint::snowflake::SnowflakeConfig::new("snowflake", layout);
    config.time_window_ms = 100;
    config.lease_margin_ms = 100;
    let generator = idmint::Snowflake::start(Some(workers), config, Arc::new(idmint::SystemClock))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(error) = generator.readiness() {
        assert!(std::time::Instant::now() < deadline, "never ready: {error}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    (memory, generator)
}
