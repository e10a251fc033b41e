//! The node's snowflake generator and its cached ring once they run, or why they do not (yet):
//! [`SnowflakeSlot`] (an [`EngineSlot`]), read by every snowflake request without a lock, and the start that fills
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

use std::sync::Arc;
use std::time::Duration;

use idmint_store::{StoreError, StoreUrl, WorkerStore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::{Feature, NodeError};
use super::slot::{Absence, EngineSlot, Slotted};
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

/// Why the node serves no snowflake ids (yet): a start refused for a reason only the operator
/// ends (every worker id taken, the layout's time run out, a damaged marks file) carries the
/// generator's error.
pub(crate) type NotServed = Absence<SnowflakeError>;

/// The node's snowflake engines once they run, or why they do not: filled once, by the
/// node's start or by its retry loop.
pub(crate) type SnowflakeSlot = EngineSlot<SnowflakeEngines>;

impl Slotted for SnowflakeEngines {
    type Failure = SnowflakeError;

    fn refusal(standing: &NotServed) -> NodeError {
        match standing {
            Absence::NotConfigured(reason) => {
                NodeError::NotConfigured { feature: Feature::Snowflake, reason: reason.clone() }
            }
            Absence::Failed(error) => NodeError::Snowflake(error.clone()),
            Absence::Starting(reason) => NodeError::SnowflakeNotRunning(reason.clone()),
            Absence::ShutDown => NodeError::Segment(Error::ShuttingDown),
        }
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
        Err(reason) => return Attempt::Final(Absence::NotConfigured(reason)),
    };
    let store = match (snowflake.worker.clone(), workers) {
        (WorkerIdSource::Static(_) | WorkerIdSource::Ordinal, _) => None,
        (_, Some(workers)) => Some(workers),
        _ => match idmint_store::open_workers(store).await {
            Ok(workers) => Some(workers),
            // The store cannot hold worker leases at all (Flicker, several databases, a
            // backend this build lacks): a configuration to change, not a failure to retry.
            Err(StoreError::BadUrl { reason: why, .. }) => {
                return Attempt::Final(Absence::NotConfigured(format!(
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
            Ok(Absence::NotConfigured(format!(
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
        | SnowflakeError::LocalState(_) => Ok(Absence::Failed(error)),
        other => Err(other),
    }
}

/// The refusal while the start is retried: the last failure, and that it passes by itself.
pub(crate) fn retrying(reason: &str) -> NotServed {
    Absence::Starting(format!(
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
        Attempt::Final(Absence::NotConfigured(reason)) if configured => {
            tracing::warn!(%reason, "snowflake ids not served");
        }
        Attempt::Final(Absence::NotConfigured(reason)) => {
            tracing::info!(%reason, "snowflake ids not served");
        }
        Attempt::Final(Absence::Failed(error)) => {
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
            () = cancel.cancelled() => return slot.set(Absence::ShutDown),
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
                return slot.set(not_served);
            }
            Attempt::Failed(reason) => {
                log.failed(reason);
                slot.set(retrying(&log.reason));
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
            return slot.set(Absence::Failed(error));
        }
        started => started.and_then(Result::ok),
    };
    if cancel.is_cancelled() {
        if let Some(ring) = &ring {
            ring.shutdown().await;
        }
        generator.shutdown().await;
        return slot.set(Absence::ShutDown);
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
            Absence::NotConfigured(reason) | Absence::Starting(reason) => f.write_str(reason),
            Absence::Failed(error) => write!(f, "{error}"),
            Absence::ShutDown => f.write_str("the node shut down"),
        }
    }
}
