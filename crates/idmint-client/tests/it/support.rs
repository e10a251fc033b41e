//! Servers for the client tests, each on its own tokio runtime (so killing one drops its
//! tasks and connections at once, like `kill -9`: nothing is given back), and stand-ins for
//! broken servers: a dead port, a black hole, an HTTP/1-only proxy.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idmint::Tag;
use idmint_core::{Description, StartId, Step};
use idmint_store::{SegmentStore, TagSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// An idmint server (HTTP and gRPC on one port) on its own runtime.
pub struct Node {
    runtime: Option<Runtime>,
    pub url: String,
    /// The node the server serves, for what a test reads or does beside its requests.
    pub node: Arc<idmint::Node>,
    stop: Option<oneshot::Sender<()>>,
    stopped: Option<oneshot::Receiver<()>>,
}

/// What a node serves besides its segments.
#[derive(Default)]
pub struct Extras {
    pub formats: idmint::node::TagFormats,
    pub snowflake: bool,
    pub auth: Option<idmint_server::Auth>,
    /// Serve strict tags, on this store (for leases and tag metadata too) rather than the
    /// segment store given.
    pub strict: Option<Arc<idmint_store::MemoryStore>>,
}

impl Node {
    /// A node over `store`, which other nodes of the test share (several nodes on one
    /// store). Call outside any runtime.
    pub fn shared(store: &Arc<idmint_store::MemoryStore>) -> Node {
        let store = Arc::clone(store);
        Node::start(move || async move { store as Arc<dyn SegmentStore> }, Extras::default())
    }

    /// A node over a fresh memory store. Call outside any runtime.
    pub fn memory() -> Node {
        Node::memory_with(Extras::default())
    }

    /// A node over a fresh memory store, with public id formats or a snowflake generator.
    pub fn memory_with(extras: Extras) -> Node {
        Node::start(
            || async { Arc::new(idmint_store::MemoryStore::new()) as Arc<dyn SegmentStore> },
            extras,
        )
    }

    fn start<F, Fut>(store: F, extras: Extras) -> Node
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Arc<dyn SegmentStore>>,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("server runtime");
        let (node, listener) = runtime.block_on(async {
            let store = store().await;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let mut config = idmint::NodeConfig::new(idmint_store::StoreUrl::Memory);
            config.formats = extras
                .formats
                .into_iter()
                .map(|(tag, format)| idmint::node::FormatConfig {
                    tag,
                    format,
                    force_key_change: false,
                })
                .collect();
            let url = format!("http://{}", listener.local_addr().expect("address"));
            let peer = idmint::node::Peer { grpc_url: url };
            let mut strict = idmint::strict::StrictConfig::new(peer);
            // Long enough that no strict tag moves home during a test.
            strict.lease_ttl_ms = 60_000;
            config.strict = Some(strict);
            let mut builder = match extras.strict {
                Some(memory) => idmint::NodeBuilder::new(config)
                    .stores(memory)
                    .peer_link(Arc::new(idmint_server::GrpcPeerLink::new(None))),
                None => idmint::NodeBuilder::new(config).segment_store(store),
            };
            if extras.snowflake {
                builder = builder.snowflake(snowflake().await);
            }
            let node = Box::pin(builder.start()).await.expect("node");
            (Arc::new(node), listener)
        });
        let handle = Arc::clone(&node);
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let mut state = idmint_server::AppState::new(node);
        if let Some(auth) = extras.auth {
            state.auth = Arc::new(auth);
        }
        let (stop, stop_received) = oneshot::channel::<()>();
        let (stopped_sender, stopped) = oneshot::channel::<()>();
        runtime.spawn(async move {
            let shutdown = async move {
                let _ = stop_received.await;
            };
            idmint_server::serve(listener, state, shutdown).await.expect("serve");
            let _ = stopped_sender.send(());
        });
        Node { runtime: Some(runtime), url, node: handle, stop: Some(stop), stopped: Some(stopped) }
    }

    /// Runs `future` on the node's runtime (from any runtime) and waits for it.
    pub async fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> T {
        let runtime = self.runtime.as_ref().expect("node is running");
        runtime.spawn(future).await.expect("task on the node")
    }

    /// Creates `tag` with `step` in the node's store.
    pub async fn create_tag(&self, tag: &str, step: u64) {
        let node = Arc::clone(&self.node);
        let spec = TagSpec {
            tag: Tag::parse(tag).expect("tag"),
            step: Step::new(step).expect("step"),
            start: Some(StartId::DEFAULT),
            force: false,
            description: Description::new("").expect("description"),
        };
        self.run(async move { node.create_tag(&spec).await.expect("create tag") }).await;
    }

    /// The node's own next id of `tag` (as a request served by it would get).
    pub async fn next_id(&self, tag: &str) -> u64 {
        let node = Arc::clone(&self.node);
        let tag = tag.to_string();
        let text = self
            .run(async move { node.next_public_text_by_name(&tag).await.map(|t| t.to_string()) });
        text.await.expect("server id").parse().expect("a decimal id")
    }

    /// Ids the node handed out of `tag` so far (0 when it never served it).
    pub fn handed_out(&self, tag: &str) -> u64 {
        let tag = Tag::parse(tag).expect("tag");
        self.node.segment_status(&tag).map_or(0, |s| s.buffer.handed_out)
    }

    /// The range of the node's current segment of `tag`, if it serves the tag.
    pub fn current_segment(&self, tag: &str) -> Option<idmint::segment::IdRange> {
        let tag = Tag::parse(tag).expect("tag");
        self.node.segment_status(&tag)?.buffer.current.map(|c| c.range)
    }

    /// Stops the node as `kill -9` would: its tasks and connections are dropped, nothing is
    /// given back. Callable from inside another runtime.
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// Stops the node gracefully (drain, give back) and waits for it.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(stopped) = self.stopped.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), stopped).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A snowflake generator leasing its worker id from a memory store, ready to issue: with a
/// 100 ms time window and lease margin its start-up delay (docs/operations.md) is 200 ms.
async fn snowflake() -> Arc<idmint::Snowflake> {
    let workers: Arc<dyn idmint_store::WorkerStore> = Arc::new(idmint_store::MemoryStore::new());
    let layout = idmint_core::snowflake::Layout::preset("snowflake").expect("layout");
    let mut config = idmint::snowflake::SnowflakeConfig::new("snowflake", layout);
    config.time_window_ms = 100;
    config.lease_margin_ms = 100;
    let generator = idmint::Snowflake::start(Some(workers), config, Arc::new(idmint::SystemClock))
        .await
        .expect("snowflake");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(error) = generator.readiness() {
        assert!(std::time::Instant::now() < deadline, "never ready: {error}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    generator
}

/// The URL of a loopback port nothing listens on (bound, then freed).
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{addr}")
}

/// A server that accepts connections and never answers; counts the connections.
pub struct BlackHole {
    pub url: String,
    pub accepted: Arc<AtomicU64>,
}

impl BlackHole {
    /// Starts on the current runtime.
    pub async fn start() -> BlackHole {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::Relaxed);
                held.push(socket);
            }
        });
        BlackHole { url, accepted }
    }
}

/// A proxy that speaks HTTP/1 only: an HTTP/2 connection preface (gRPC) is answered with an
/// HTTP/1.1 error, anything else is forwarded to `target`. Counts both.
pub struct Http1Proxy {
    pub url: String,
    pub h2_refused: Arc<AtomicU64>,
    pub forwarded: Arc<AtomicU64>,
}

impl Http1Proxy {
    /// Starts on the current runtime.
    pub async fn start(target: &str) -> Http1Proxy {
        let target: SocketAddr =
            target.trim_start_matches("http://").parse().expect("target address");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let (h2_refused, forwarded) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (refused, passed) = (Arc::clone(&h2_refused), Arc::clone(&forwarded));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (refused, passed) = (Arc::clone(&refused), Arc::clone(&passed));
                tokio::spawn(async move {
                    let mut head = [0u8; 3];
                    if socket.peek(&mut head).await.is_err() {
                        return;
                    }
                    if &head == b"PRI" {
                        refused.fetch_add(1, Ordering::Relaxed);
                        let mut preface = [0u8; 24];
                        let _ = socket.read_exact(&mut preface).await;
                        let answer = "HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                        let _ = socket.write_all(answer.as_bytes()).await;
                        let _ = socket.shutdown().await;
                        return;
                    }
                    passed.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut socket, &mut upstream).await;
                    }
                });
            }
        });
        Http1Proxy { url, h2_refused, forwarded }
    }
}

/// A proxy passing every byte to `target`, counting those sent to it (requests), so a test
/// sees whether a client still talks to the server behind it.
pub struct CountingProxy {
    pub url: String,
    pub sent: Arc<AtomicU64>,
}

impl CountingProxy {
    /// Starts on the current runtime.
    pub async fn start(target: &str) -> CountingProxy {
        let target: SocketAddr =
            target.trim_start_matches("http://").parse().expect("target address");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let Ok(upstream) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let ((mut from_client, mut to_client), (mut from_up, mut to_up)) =
                        (socket.into_split(), upstream.into_split());
                    let answers = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_up, &mut to_client).await;
                    });
                    let mut buffer = vec![0u8; 16 * 1024];
                    while let Ok(read) = from_client.read(&mut buffer).await {
                        if read == 0 || to_up.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                        counter.fetch_add(read as u64, Ordering::Relaxed);
                    }
                    answers.abort();
                });
            }
        });
        CountingProxy { url, sent }
    }
}

/// A multi-thread runtime for the client side of a test.
pub fn client_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("client runtime")
}

/// Asserts `ids` strictly increase.
pub fn assert_increasing(ids: &[u64], what: &str) {
    if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
        panic!("{what}: ids did not increase: {} then {}", w[0], w[1]);
    }
}

/// Asserts no id repeats across `lists`; returns how many ids there were.
pub fn assert_unique(lists: &[Vec<u64>]) -> usize {
    let mut all: Vec<u64> = lists.iter().flatten().copied().collect();
    all.sort_unstable();
    if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
        panic!("id {} was handed out twice", w[0]);
    }
    all.len()
}
