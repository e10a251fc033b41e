//! A snowflake generator that could not start: a node whose worker store fails for a while
//! starts it again by itself (the cached ring too), answering a retryable refusal with the
//! reason meanwhile; a shutdown during the retry leaves no lease held and no task running;
//! conditions that do not pass by themselves (no worker id free, a configuration that
//! cannot run) are answered as final and never retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use idmint::node::NodeError;
use idmint::segment::Count;
use idmint::snowflake::{CachedConfig, SnowflakeConfig, SnowflakeError, WorkerIdSource};
use idmint::store::{MemoryStore, StoreError};
use idmint::{Node, NodeBuilder, NodeConfig};
use idmint_core::snowflake::{Layout, TimeUnit};
use idmint_store::{
    AssignRequest, Lease, LeaseRecord, LeaseRequest, LeaseStore, SegmentStore, StoreUrl,
    WorkerSpace, WorkerStore,
};
use tokio::sync::Semaphore;

/// A worker store that fails its first acquisitions and time mark writes (a database not
/// reachable yet), may hold acquisitions at a gate, and counts its calls.
struct Workers {
    inner: MemoryStore,
    acquire_failures: AtomicU64,
    mark_failures: AtomicU64,
    acquires: AtomicU64,
    assigns: AtomicU64,
    /// Acquisitions past the failures wait here while `gated`.
    gated: AtomicBool,
    gate: Semaphore,
    at_gate: AtomicBool,
}

impl Workers {
    fn new(acquire_failures: u64, mark_failures: u64) -> Arc<Workers> {
        Arc::new(Workers {
            inner: MemoryStore::new(),
            acquire_failures: AtomicU64::new(acquire_failures),
            mark_failures: AtomicU64::new(mark_failures),
            acquires: AtomicU64::new(0),
            assigns: AtomicU64::new(0),
            gated: AtomicBool::new(false),
            gate: Semaphore::new(0),
            at_gate: AtomicBool::new(false),
        })
    }

    /// Leases of `space` held now, by the store's clock.
    async fn held(&self, space: &str) -> Vec<LeaseRecord> {
        let now_ms = self.inner.now_ms().await.unwrap();
        let rows = self.inner.list_leases(&WorkerSpace::parse(space).unwrap()).await.unwrap();
        rows.into_iter().filter(|row| row.expires_ms > now_ms).collect()
    }
}

/// Takes one from `counter` if it is above zero.
fn take_one(counter: &AtomicU64) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

fn unreachable() -> StoreError {
    StoreError::Unavailable("connection refused (test)".into())
}

#[async_trait]
impl LeaseStore for Workers {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.acquire_failures) {
            return Err(unreachable());
        }
        if self.gated.load(Ordering::SeqCst) {
            self.at_gate.store(true, Ordering::SeqCst);
            let _permit = self.gate.acquire().await.unwrap();
        }
        self.inner.acquire_lease(req).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: u64) -> Result<Lease, StoreError> {
        self.inner.renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release_lease(lease).await
    }
    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        if take_one(&self.mark_failures) {
            return Err(unreachable());
        }
        self.inner.raise_mark(lease, mark_ms).await
    }
    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        self.inner.list_leases(space).await
    }
    async fn now_ms(&self) -> Result<u64, StoreError> {
        self.inner.now_ms().await
    }
}

#[async_trait]
impl WorkerStore for Workers {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        self.assigns.fetch_add(1, Ordering::SeqCst);
        self.inner.assign_worker(req).await
    }
}

/// The snowflake preset leasing its worker id, with a 100 ms window and margin (a new holder
/// issues 200 ms after its lease).
fn leased() -> SnowflakeConfig {
    let mut config = SnowflakeConfig::new("snowflake", Layout::preset("snowflake").unwrap());
    config.time_window_ms = 100;
    config.lease_margin_ms = 100;
    config
}

async fn start(snowflake: SnowflakeConfig, ring: bool, workers: &Arc<Workers>) -> Node {
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.snowflake = Ok(snowflake);
    config.snowflake_cached = ring.then(|| CachedConfig::new(1 << 12, 1_000));
    let segments: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let workers: Arc<dyn WorkerStore> = workers.clone();
    NodeBuilder::new(config).segment_store(segments).worker_store(workers).start().await.unwrap()
}

/// Waits (at most 20 s) until `node` serves a snowflake id, returning the refusals seen.
async fn until_served(node: &Node) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut refusals = Vec::new();
    loop {
        match node.snowflake_ids(Count::ONE).await {
            Ok(_) => return refusals,
            Err(error) => refusals.push(error.to_string()),
        }
        let last = refusals.last().cloned().unwrap_or_default();
        assert!(tokio::time::Instant::now() < deadline, "never served: {last}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 31: a worker store that did not answer at start left the node answering
/// `snowflake_not_running` forever. Now the node answers a retryable refusal naming the
/// store's failure and the retry, is not ready meanwhile, and once the store answers serves
/// snowflake ids from its ring without a restart. The attempt whose time mark write failed
/// gave its lease back: one lease is held at the end, the node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snowflake_start_that_failed_is_retried_until_ids_are_served() {
    let workers = Workers::new(2, 1);
    let node = start(leased(), true, &workers).await;
    let refused = node.snowflake_ids(Count::ONE).await.unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("connection refused (test)"), "{message}");
    assert!(message.contains("retried"), "{message}");
    assert!(node.snowflake_ring().is_none(), "a ring before its generator");
    let not_ready = node.ready().await.expect_err("ready while the start is retried");
    assert!(not_ready.to_string().contains("retried"), "{not_ready}");
    assert!(node.status().await.snowflake.is_err());

    until_served(&node).await;
    assert!(node.snowflake_ring().is_some(), "the ring did not start with the generator");
    let ids = node.snowflake_ids(Count::new(100).unwrap()).await.unwrap().ids;
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // The generator's own readiness now (a ring borrowing ahead may make it `ClockBehind`).
    let ready = node.ready().await;
    assert!(!matches!(ready, Err(NodeError::SnowflakeNotRunning(_))), "{ready:?}");
    assert!(node.status().await.snowflake.is_ok());
    assert_eq!(workers.acquires.load(Ordering::SeqCst), 4, "one acquisition per attempt");
    let held = workers.held("snowflake").await;
    assert_eq!(held.len(), 1, "a failed attempt kept its lease: {held:?}");
    node.shutdown().await;
    assert!(workers.held("snowflake").await.is_empty(), "the lease outlived the shutdown");
}

/// A shutdown while the start is retried stops the loop at once (no acquisition after it);
/// one that begins while an attempt is under way waits for it, and the generator that
/// attempt started gives its lease back before the shutdown returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_the_retry_leaves_no_lease_held_and_no_task_running() {
    let workers = Workers::new(u64::MAX, 0);
    let node = start(leased(), false, &workers).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(workers.acquires.load(Ordering::SeqCst) >= 2, "the start was not retried");
    let begun = std::time::Instant::now();
    node.shutdown().await;
    assert!(begun.elapsed() < Duration::from_millis(500), "{:?}", begun.elapsed());
    let after = workers.acquires.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(workers.acquires.load(Ordering::SeqCst), after, "the loop ran on");

    let workers = Workers::new(1, 0);
    workers.gated.store(true, Ordering::SeqCst);
    let node = Arc::new(start(leased(), true, &workers).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !workers.at_gate.load(Ordering::SeqCst) {
        assert!(tokio::time::Instant::now() < deadline, "the start was not retried");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopping = Arc::clone(&node);
    let shutdown = tokio::spawn(async move { stopping.shutdown().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!shutdown.is_finished(), "the shutdown did not wait for the attempt under way");
    workers.gate.add_permits(1);
    tokio::time::timeout(Duration::from_secs(10), shutdown).await.unwrap().unwrap();
    assert_eq!(workers.acquires.load(Ordering::SeqCst), 2);
    let held = workers.held("snowflake").await;
    assert!(held.is_empty(), "a generator started during the shutdown kept its lease: {held:?}");
    assert!(node.snowflake().is_err(), "a generator started during the shutdown was served");
}

/// No worker id free (every store-assigned id of a 2-bit layout taken): final, answered as
/// `WorkersExhausted` and never retried; the node stays ready for what it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_worker_ids_are_final_and_not_retried() {
    let layout = Layout::new(41, 2, 12, TimeUnit::Millis, 1_288_834_974_657).unwrap();
    let workers = Workers::new(0, 0);
    let space = WorkerSpace::parse("tiny").unwrap();
    for port in 1..=layout.max_worker() {
        let request = AssignRequest {
            space: space.clone(),
            max_worker: layout.max_worker(),
            host: "earlier".to_string(),
            port: port as u16,
            launch_ms: 1,
        };
        workers.inner.assign_worker(&request).await.unwrap();
    }
    let mut config = SnowflakeConfig::new("tiny", layout);
    config.worker = WorkerIdSource::StoreAssigned;
    let node = start(config, false, &workers).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(workers.assigns.load(Ordering::SeqCst), 1, "exhausted worker ids were retried");
    let refused = node.snowflake_ids(Count::ONE).await.unwrap_err();
    assert!(
        matches!(
            refused,
            NodeError::Snowflake(SnowflakeError::Store(StoreError::WorkersExhausted { .. }))
        ),
        "{refused}"
    );
    node.ready().await.unwrap();
    node.shutdown().await;
}

/// A configuration the generator cannot run (a static worker id past the layout's worker
/// bits) is final: answered as not configured, with the reason, never as a retryable
/// "not running".
#[tokio::test]
async fn a_configuration_that_cannot_run_is_final() {
    let workers = Workers::new(0, 0);
    let mut config = leased();
    config.worker = WorkerIdSource::Static(5_000);
    let node = start(config, false, &workers).await;
    let refused = node.snowflake_ids(Count::ONE).await.unwrap_err();
    assert!(matches!(refused, NodeError::NotConfigured { .. }), "{refused:?}");
    assert!(refused.to_string().contains("5000"), "{refused}");
    node.ready().await.unwrap();
    node.shutdown().await;
}
