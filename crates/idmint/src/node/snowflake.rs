//! The node's snowflake generator and its cached ring once they run, or why they do not (yet):
//! [`SnowflakeSlot`], read by every snowflake request without a lock, and the start that fills
//! it: once during the node's start ([`attempt`]), then, while the failure is one that
//! passes by itself (the worker store unreachable or slow, a clock or a lease that settles),
//! again by a loop on the node's tracker ([`spawn_retry`]) with backoff, until it succeeds or
//! the node shuts down. Conditions that do not pass by themselves (not configured, a store that
//! cannot hold leases, no worker id free, a layout out of time, a configuration that cannot
//! run) are answered as final and never retried.
//!
//! The loop publishes a generator only while the node is not shutting down; one it started
//! after the shutdown began is stopped (its lease released) before the loop ends, and the
//! shutdown waits for the loop. Knows no HTTP or status code.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use idmint_store::{StoreError, StoreUrl, WorkerStore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::{Feature, NodeError};
use crate::clock::Clock;
use crate::segment::Error;
use crate::snowflake::{CachedConfig, SnowflakeConfig, SnowflakeError, WorkerIdSource};
use crate::snowflake::{CachedSnowflake, Snowflake};

/// First pause of the start's retry; each failure doubles it up to [`SNOWFLAKE_RETRY_MS_MAX`].
pub const SNOWFLAKE_RETRY_MS_MIN: u64 = 500;

/// Longest pause between two attempts to start the snowflake generator.
pub const SNOWFLAKE_RETRY_MS_MAX: u64 = 10_000;

/// Longest one attempt of the retry may take (opening the worker store, leasing, the first
/// time mark): a shutdown waits at most this for an attempt under way. An attempt cut off
/// is a failed one; a lease it took unseen expires after its TTL.
pub const SNOWFLAKE_START_ATTEMPT_MS_MAX: u64 = 10_000;

/// Failures of one reason logged at `warn` before the rest go to `debug`: a store down for
/// a day logs a few lines, not one per attempt.
const RETRY_LOGS_PER_REASON_MAX: u32 = 3;

const _: () = assert!(SNOWFLAKE_RETRY_MS_MIN <= SNOWFLAKE_RETRY_MS_MAX);

/// A running generator and the ring over it, published together: a request never sees the
/// generator of a node configured with a ring without its ring.
pub(crate) struct SnowflakeEngines {
    pub(crate) generator: Arc<Snowflake>,
    pub(crate) ring: Option<Arc<CachedSnowflake>>,
}

/// Why the node serves no snowflake ids (yet).
#[derive(Debug, Clone)]
pub(crate) enum NotServed {
    /// Disabled, a store that cannot hold worker leases, or a configuration that cannot run:
    /// final until the configuration changes.
    NotConfigured(String),
    /// A start refused for a reason only the operator ends (every worker id taken, the
    /// layout's time run out, a damaged marks file): every call answers this error, final.
    Refused(SnowflakeError),
    /// The last attempt failed for a reason that passes by itself: the start is retried.
    Retrying(String),
    /// The node shut down before a start succeeded.
    ShutDown,
}

/// The node's snowflake engines once they run, or why they do not: filled once, by the
/// node's start or by its retry loop. Reading a running generator is one acquire load.
#[derive(Clone)]
pub(crate) struct SnowflakeSlot {
    inner: Arc<SlotInner>,
}

struct SlotInner {
    engines: OnceLock<SnowflakeEngines>,
    /// Read only when there is no generator (a refusal), never on the per-id path.
    not_served: Mutex<NotServed>,
}

impl SnowflakeSlot {
    fn new(not_served: NotServed) -> SnowflakeSlot {
        let inner = SlotInner { engines: OnceLock::new(), not_served: Mutex::new(not_served) };
        SnowflakeSlot { inner: Arc::new(inner) }
    }

    /// A slot holding `engines`.
    pub(crate) fn running(engines: SnowflakeEngines) -> SnowflakeSlot {
        let slot = SnowflakeSlot::new(NotServed::ShutDown);
        slot.publish(engines);
        slot
    }

    fn publish(&self, engines: SnowflakeEngines) {
        // The slot is filled once: by the start or by the one loop, never both.
        let _ = self.inner.engines.set(engines);
    }

    fn set_not_served(&self, not_served: NotServed) {
        *self.inner.not_served.lock().unwrap_or_else(PoisonError::into_inner) = not_served;
    }

    /// The running engines, or the refusal that says why there are none: the one place
    /// that shapes "snowflake ids may not run" answers.
    pub(crate) fn get(&self) -> Result<&SnowflakeEngines, NodeError> {
        self.inner.engines.get().ok_or_else(|| self.refusal())
    }

    /// The running engines, if any.
    pub(crate) fn engines(&self) -> Option<&SnowflakeEngines> {
        self.inner.engines.get()
    }

    fn refusal(&self) -> NodeError {
        match &*self.inner.not_served.lock().unwrap_or_else(PoisonError::into_inner) {
            NotServed::NotConfigured(reason) => {
                NodeError::NotConfigured { feature: Feature::Snowflake, reason: reason.clone() }
            }
            NotServed::Refused(error) => NodeError::Snowflake(error.clone()),
            NotServed::Retrying(reason) => NodeError::SnowflakeNotRunning(reason.clone()),
            NotServed::ShutDown => NodeError::Segment(Error::ShuttingDown),
        }
    }

    /// Why there is no generator, as [`crate::node::NodeStatus`] shows it; `None` while one
    /// runs.
    pub(crate) fn reason(&self) -> Option<String> {
        self.engines().is_none().then(|| self.refusal().to_string())
    }

    /// Whether the start is being retried (no generator yet, for a reason that passes).
    pub(crate) fn retrying(&self) -> bool {
        self.engines().is_none()
            && matches!(
                *self.inner.not_served.lock().unwrap_or_else(PoisonError::into_inner),
                NotServed::Retrying(_)
            )
    }
}

/// What one attempt to start the generator came to.
pub(crate) enum Attempt {
    /// The generator runs.
    Started(Arc<Snowflake>),
    /// It does not, for a reason retrying does not end.
    Final(NotServed),
    /// It does not yet: the reason, for the refusals meanwhile.
    Failed(String),
}

/// Starts the generator as `config` says (or says why the node runs none), its worker ids
/// and time marks in `workers` or else in a store opened from `store`, once. Whatever happens
/// is logged by the caller: the node's start, or the retry loop (once per change).
pub(crate) async fn attempt(
    config: &Result<SnowflakeConfig, String>,
    store: &StoreUrl,
    workers: Option<Arc<dyn WorkerStore>>,
    clock: Arc<dyn Clock>,
) -> Attempt {
    let snowflake = match config.clone() {
        Ok(snowflake) => snowflake,
        Err(reason) => return Attempt::Final(NotServed::NotConfigured(reason)),
    };
    let store = match (snowflake.worker.clone(), workers) {
        (WorkerIdSource::Static(_) | WorkerIdSource::Ordinal, _) => None,
        (_, Some(workers)) => Some(workers),
        _ => match idmint_store::open_workers(store).await {
            Ok(workers) => Some(workers),
            // The store cannot hold worker leases at all (Flicker, several databases, a
            // backend this build lacks): a configuration to change, not a failure to retry.
            Err(StoreError::BadUrl { reason: why, .. }) => {
                return Attempt::Final(NotServed::NotConfigured(format!(
                    "snowflake ids are not served: worker-id leases cannot be kept on this \
                     store ({why}); set snowflake.worker = \"static:N\" or \"ordinal\" \
                     (no lease), or snowflake.enabled = false to say the node serves none"
                )));
            }
            Err(error) => {
                return Attempt::Failed(format!("the worker-id store did not open ({error})"));
            }
        },
    };
    match Snowflake::start(store, snowflake, clock).await {
        Ok(generator) => Attempt::Started(generator),
        Err(error) => match final_refusal(error) {
            Ok(not_served) => Attempt::Final(not_served),
            Err(error) => Attempt::Failed(error.to_string()),
        },
    }
}

/// How a failed start is answered when retrying cannot end it; `Err` (the error back) when
/// it passes by itself: the store unreachable or slow, a lease lost or settling, marks ahead
/// of the clock, a full disk.
fn final_refusal(error: SnowflakeError) -> Result<NotServed, SnowflakeError> {
    match error {
        SnowflakeError::Config(_)
        | SnowflakeError::Store(StoreError::InvalidValue(_) | StoreError::BadUrl { .. }) => {
            Ok(NotServed::NotConfigured(format!(
                "snowflake ids are not served: {error}; fix the configuration and restart the node"
            )))
        }
        SnowflakeError::Store(
            StoreError::WorkersExhausted { .. }
            | StoreError::NoWorkerIdInRange { .. }
            | StoreError::Denied { .. }
            | StoreError::MissingTable { .. },
        )
        | SnowflakeError::Exhausted(_)
        | SnowflakeError::LocalState(_) => Ok(NotServed::Refused(error)),
        other => Err(other),
    }
}

/// The refusal while the start is retried: the last failure, and that it passes by itself.
pub(crate) fn retrying(reason: &str) -> NotServed {
    NotServed::Retrying(format!(
        "snowflake ids are not served yet: the generator did not start ({reason}); the start \
         is retried in the background every {} to {} s until it succeeds",
        SNOWFLAKE_RETRY_MS_MIN as f64 / 1000.0,
        SNOWFLAKE_RETRY_MS_MAX / 1000
    ))
}

/// The slot after the node's first attempt: filled, final, or retrying (the caller then
/// spawns [`spawn_retry`]).
pub(crate) fn first_slot(outcome: Result<SnowflakeEngines, NotServed>) -> SnowflakeSlot {
    match outcome {
        Ok(engines) => SnowflakeSlot::running(engines),
        Err(not_served) => SnowflakeSlot::new(not_served),
    }
}

/// Logs the outcome of the node's first attempt once: a warning when the generator is
/// configured (`configured`) but cannot run as configured, information when it is disabled.
pub(crate) fn log_first(outcome: &Attempt, configured: bool) {
    match outcome {
        Attempt::Started(generator) => {
            let status = generator.status();
            tracing::info!(layout = %status.space, worker = status.worker, "snowflake ids served");
        }
        Attempt::Final(NotServed::NotConfigured(reason)) if configured => {
            tracing::warn!(%reason, "snowflake ids not served");
        }
        Attempt::Final(NotServed::NotConfigured(reason)) => {
            tracing::info!(%reason, "snowflake ids not served");
        }
        Attempt::Final(NotServed::Refused(error)) => {
            tracing::error!(%error, "snowflake ids not served (final until the node restarts)");
        }
        Attempt::Final(_) => {}
        Attempt::Failed(reason) => {
            tracing::warn!(%reason, "snowflake generator did not start; retried in the background");
        }
    }
}

/// Retries the start on the node's tracker until it succeeds, meets a final condition, or
/// `cancel` fires: with backoff from [`SNOWFLAKE_RETRY_MS_MIN`] to [`SNOWFLAKE_RETRY_MS_MAX`],
/// each attempt bounded by [`SNOWFLAKE_START_ATTEMPT_MS_MAX`], logged when the reason changes
/// (at most [`RETRY_LOGS_PER_REASON_MAX`] lines per reason). A generator started is
/// published with its ring, unless the node began shutting down meanwhile: then it is stopped
/// at once, its lease released, before the loop ends.
pub(crate) fn spawn_retry(
    slot: &SnowflakeSlot,
    start: RetryParts,
    first_reason: String,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    tasks.spawn(retry(slot.clone(), start, first_reason, cancel.clone()));
}

/// The loop of [`spawn_retry`].
async fn retry(
    slot: SnowflakeSlot,
    parts: RetryParts,
    first_reason: String,
    cancel: CancellationToken,
) {
    let mut log = RetryLog { reason: first_reason, logged: 1, attempts: 1 };
    let mut pause_ms = SNOWFLAKE_RETRY_MS_MIN;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return slot.set_not_served(NotServed::ShutDown),
            () = tokio::time::sleep(Duration::from_millis(pause_ms)) => {}
        }
        pause_ms = (pause_ms * 2).min(SNOWFLAKE_RETRY_MS_MAX);
        log.attempts += 1;
        // Not cancelled: an attempt cut off after its lease was taken would leave the lease
        // held; it ends within its bound, and a shutdown waits for it.
        let bound = Duration::from_millis(SNOWFLAKE_START_ATTEMPT_MS_MAX);
        let started =
            attempt(&parts.config, &parts.store, parts.workers.clone(), parts.clock.clone());
        let outcome = tokio::time::timeout(bound, started).await.unwrap_or_else(|_| {
            Attempt::Failed(format!("the start did not finish within {bound:?}"))
        });
        match outcome {
            Attempt::Started(generator) => {
                return install(&slot, generator, parts.ring, &cancel, log.attempts).await;
            }
            Attempt::Final(not_served) => {
                let reason = NotServedText(&not_served);
                tracing::error!(%reason, "snowflake ids not served (final)");
                return slot.set_not_served(not_served);
            }
            Attempt::Failed(reason) => {
                log.failed(reason);
                slot.set_not_served(retrying(&log.reason));
            }
        }
    }
}

/// Publishes a generator the retry started, with its ring; or, when the node began shutting
/// down during the attempt, stops both at once (the lease goes back now, not after its TTL).
async fn install(
    slot: &SnowflakeSlot,
    generator: Arc<Snowflake>,
    ring: Option<CachedConfig>,
    cancel: &CancellationToken,
    attempts: u64,
) {
    let ring = match ring.map(|ring| CachedSnowflake::start_with(Arc::clone(&generator), ring)) {
        Some(Err(error)) => {
            tracing::error!(%error, "the cached snowflake ring did not start (final)");
            generator.shutdown().await;
            return slot.set_not_served(NotServed::Refused(error));
        }
        started => started.and_then(Result::ok),
    };
    if cancel.is_cancelled() {
        if let Some(ring) = &ring {
            ring.shutdown().await;
        }
        generator.shutdown().await;
        return slot.set_not_served(NotServed::ShutDown);
    }
    let status = generator.status();
    let (space, worker, cached) = (status.space, status.worker, ring.is_some());
    tracing::info!(%space, worker, attempts, cached, "snowflake generator started; ids served");
    slot.publish(SnowflakeEngines { generator, ring });
}

/// What the retry has logged: a few lines per reason, then `debug` only.
struct RetryLog {
    reason: String,
    /// Lines logged at `warn` for `reason`.
    logged: u32,
    attempts: u64,
}

impl RetryLog {
    fn failed(&mut self, reason: String) {
        if reason != self.reason {
            (self.reason, self.logged) = (reason, 0);
        }
        let (reason, attempts) = (&self.reason, self.attempts);
        if self.logged < RETRY_LOGS_PER_REASON_MAX {
            self.logged += 1;
            tracing::warn!(%reason, attempts, "snowflake generator still not started; retrying");
        } else {
            tracing::debug!(%reason, attempts, "snowflake generator still not started");
        }
    }
}

/// What the retry loop needs to start the generator again.
pub(crate) struct RetryParts {
    /// The generator's configuration (`NodeConfig::snowflake`).
    pub(crate) config: Result<SnowflakeConfig, String>,
    /// The node's store, where worker ids are leased unless `workers` is given.
    pub(crate) store: StoreUrl,
    pub(crate) workers: Option<Arc<dyn WorkerStore>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) ring: Option<CachedConfig>,
}

/// A [`NotServed`] as a log line's reason.
struct NotServedText<'a>(&'a NotServed);

impl std::fmt::Display for NotServedText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            NotServed::NotConfigured(reason) | NotServed::Retrying(reason) => f.write_str(reason),
            NotServed::Refused(error) => write!(f, "{error}"),
            NotServed::ShutDown => f.write_str("the node shut down"),
        }
    }
}
