//! Builds a node for a test ([`TestServer::setup`], the one builder of the server tests'
//! nodes and states), starts a server on a free loopback port over it, and stops it.

use std::net::SocketAddr;
use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint::{Node, NodeBuilder, NodeConfig};
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

/// The one way the server tests build a node and its state: a memory store, no snowflake
/// generator, no sequences, no formats, no tokens, the default limits, unless a method
/// below says otherwise. `start` serves it on a free loopback port; `node` and `state`
/// hand out the parts for tests that drive the router or `serve` themselves.
pub struct NodeSetup {
    store: Arc<dyn SegmentStore>,
    tinyid: Option<Arc<dyn idmint_store::TinyidStore>>,
    config: NodeConfig,
    snowflake: Option<Arc<idmint::Snowflake>>,
    workers: Option<Arc<dyn idmint_store::WorkerStore>>,
    tag_meta: Option<Arc<dyn idmint_store::TagMetaStore>>,
    sequences: Option<Arc<idmint::Sequences>>,
    auth: idmint_server::Auth,
    limits: idmint_server::HttpLimits,
    #[cfg(feature = "redis")]
    redis_keys: Option<crate::redis_keys::Cleanup>,
}

impl NodeSetup {
    /// Segments of `store`.
    pub fn store(mut self, store: Arc<dyn SegmentStore>) -> NodeSetup {
        self.store = store;
        self
    }

    /// Segment tunables.
    pub fn segment_config(mut self, config: SegmentConfig) -> NodeSetup {
        self.config.segment = config;
        self
    }

    /// Snowflake ids from `generator`.
    pub fn snowflake(mut self, generator: Arc<idmint::Snowflake>) -> NodeSetup {
        self.snowflake = Some(generator);
        self
    }

    /// Snowflake ids from a generator the node starts from `config`, its worker ids in
    /// `workers`.
    pub fn snowflake_config(
        mut self,
        config: idmint::snowflake::SnowflakeConfig,
        workers: Arc<dyn idmint_store::WorkerStore>,
    ) -> NodeSetup {
        self.config.snowflake = Ok(config);
        self.workers = Some(workers);
        self
    }

    /// Snowflake ids from a generator the node starts from `config`, its worker ids in the
    /// store `url` names, opened by the node (the segments stay in memory).
    pub fn snowflake_on(
        mut self,
        config: idmint::snowflake::SnowflakeConfig,
        url: idmint_store::StoreUrl,
    ) -> NodeSetup {
        self.config.snowflake = Ok(config);
        self.config.store = url;
        self.workers = None;
        self
    }

    /// The engines the node's readiness waits for (`ready_engines`).
    pub fn ready_engines(mut self, engines: &[idmint::node::Engine]) -> NodeSetup {
        self.config.ready_engines = engines.to_vec();
        self
    }

    /// Snowflake ids from a ring of `capacity` over the generator (10 s lead).
    pub fn cached(mut self, capacity: u64) -> NodeSetup {
        self.config.snowflake_cached = Some(idmint::snowflake::CachedConfig::new(capacity, 10_000));
        self
    }

    /// Sequences from `engine`.
    pub fn sequences(mut self, engine: Arc<idmint::Sequences>) -> NodeSetup {
        self.sequences = Some(engine);
        self
    }

    /// Strict tags, their leases and policies in `store` (the node's only peer itself).
    pub fn strict<S>(mut self, store: Arc<S>) -> NodeSetup
    where
        S: idmint_store::WorkerStore + idmint_store::TagMetaStore + 'static,
    {
        self.workers = Some(Arc::clone(&store) as Arc<dyn idmint_store::WorkerStore>);
        self.tag_meta = Some(store);
        let peer = idmint::node::Peer { grpc_url: "http://this-node".to_string() };
        self.config.strict = Some(idmint::strict::StrictConfig::new(peer));
        self
    }

    /// Public id formats (keys claimed at start).
    pub fn formats(mut self, formats: idmint::node::TagFormats) -> NodeSetup {
        self.config.formats = formats
            .into_iter()
            .map(|(tag, format)| idmint::node::FormatConfig {
                tag,
                format,
                force_key_change: false,
            })
            .collect();
        self
    }

    /// Tokens.
    pub fn auth(mut self, auth: idmint_server::Auth) -> NodeSetup {
        self.auth = auth;
        self
    }

    /// HTTP limits.
    pub fn limits(mut self, limits: idmint_server::HttpLimits) -> NodeSetup {
        self.limits = limits;
        self
    }

    /// Tinyid's routes over `store`, with `engine`'s tunables.
    pub fn tinyid(
        mut self,
        store: Arc<dyn idmint_store::TinyidStore>,
        engine: idmint::tinyid::TinyidConfig,
    ) -> NodeSetup {
        // The URL is not opened: the store is handed to the builder.
        self.config.tinyid =
            Some(idmint::node::TinyidNodeConfig { store: idmint_store::StoreUrl::Memory, engine });
        self.tinyid = Some(store);
        self
    }

    /// The node.
    pub async fn node(self) -> Arc<Node> {
        self.parts().await.0
    }

    /// The state a router serves.
    pub async fn state(self) -> AppState {
        self.parts().await.1
    }

    /// Serves the node on a free loopback port.
    #[allow(unused_mut, reason = "only the redis feature takes the keys out")]
    pub async fn start(mut self) -> TestServer {
        #[cfg(feature = "redis")]
        let redis_keys = self.redis_keys.take();
        let (_, state) = self.parts().await;
        #[allow(unused_mut)]
        let mut server = TestServer::serve(state).await;
        #[cfg(feature = "redis")]
        {
            server.redis_keys = redis_keys;
        }
        server
    }

    async fn parts(self) -> (Arc<Node>, AppState) {
        let mut builder = NodeBuilder::new(self.config).segment_store(self.store);
        if let Some(generator) = self.snowflake {
            builder = builder.snowflake(generator);
        }
        if let Some(workers) = self.workers {
            builder = builder.worker_store(workers);
        }
        if let Some(meta) = self.tag_meta {
            builder = builder.tag_meta_store(meta);
        }
        if let Some(engine) = self.sequences {
            builder = builder.sequences(engine);
        }
        if let Some(store) = self.tinyid {
            builder = builder.tinyid_store(store);
        }
        // Boxed: the start future is deep, and the tests nest it deeper still.
        let node = Arc::new(Box::pin(builder.start()).await.expect("the node starts"));
        let mut state = AppState::new(Arc::clone(&node));
        state.auth = Arc::new(self.auth);
        state.http_limits = self.limits;
        (node, state)
    }
}

impl TestServer {
    /// A node over a memory store, to be set up (see [`NodeSetup`]).
    pub fn setup() -> NodeSetup {
        let mut config = NodeConfig::new(idmint_store::StoreUrl::Memory);
        config.snowflake = Err("not started in this test".to_string());
        config.sequences = Err("not started in this test".to_string());
        NodeSetup {
            store: Arc::new(idmint_store::MemoryStore::new()),
            tinyid: None,
            config,
            snowflake: None,
            workers: None,
            tag_meta: None,
            sequences: None,
            auth: idmint_server::Auth::open(),
            limits: idmint_server::HttpLimits::default(),
            #[cfg(feature = "redis")]
            redis_keys: None,
        }
    }

    pub async fn start(store: Arc<dyn SegmentStore>) -> TestServer {
        TestServer::setup().store(store).start().await
    }

    pub async fn start_with(store: Arc<dyn SegmentStore>, config: SegmentConfig) -> TestServer {
        TestServer::setup().store(store).segment_config(config).start().await
    }

    /// A memory store for segments and a snowflake generator leasing its worker id there.
    pub async fn with_snowflake() -> TestServer {
        let (memory, generator) = memory_snowflake().await;
        TestServer::setup().store(memory).snowflake(generator).start().await
    }

    /// [`TestServer::with_snowflake`] serving its snowflake ids from a ring of `capacity`.
    pub async fn with_cached_snowflake(capacity: u64) -> TestServer {
        let (memory, generator) = memory_snowflake().await;
        TestServer::setup().store(memory).snowflake(generator).cached(capacity).start().await
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
        )
        .unwrap();
        let mut setup = TestServer::setup().store(memory).sequences(engine);
        setup.redis_keys = Some(cleanup);
        Some(setup.start().await)
    }

    /// A memory store whose tags have the public id `formats` given (keys claimed first).
    pub async fn with_formats(formats: idmint::node::TagFormats) -> TestServer {
        TestServer::setup().formats(formats).start().await
    }

    /// `store` served with `auth` and `limits`, no snowflake, no sequences.
    pub async fn with_auth_and_limits(
        store: Arc<dyn SegmentStore>,
        auth: idmint_server::Auth,
        limits: idmint_server::HttpLimits,
        config: SegmentConfig,
    ) -> TestServer {
        TestServer::setup()
            .store(store)
            .auth(auth)
            .limits(limits)
            .segment_config(config)
            .start()
            .await
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
