//! One tag's generator: its double buffer and the single-flight refill that feeds it.
//!
//! The per-id path is `DoubleBuffer::take`: an atomic step, no lock, no await, no log line.
//! When a take crosses the preload point (or comes up short) the generator spawns at most one
//! refill task; a request that finds both segments spent waits for that refill, bounded by
//! `refill_wait`, and fails with [`Error::Unavailable`] rather than guess.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::limits::{REFILL_RETRY_MS_MAX, REFILL_RETRY_MS_MIN};
use idmint_core::{BufferSnapshot, Count, DoubleBuffer, IdRange, InstallError, Tag, Take};
use idmint_store::{SegmentStore, StoreError};
use tokio::sync::Notify;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{Error, SegmentConfig};

/// What every generator of one [`crate::Segments`] shares.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn SegmentStore>,
    pub(crate) config: SegmentConfig,
    pub(crate) tracker: TaskTracker,
    pub(crate) cancel: CancellationToken,
}

/// Serves one tag's ids from its double buffer.
pub struct TagGenerator {
    tag: Tag,
    buffer: DoubleBuffer,
    refill_in_flight: AtomicBool,
    /// Woken after every refill attempt, successful or not.
    refilled: Notify,
    /// Bumped after every failed refill attempt; waiters compare it to fail fast.
    failures: AtomicU64,
    last_failure: Mutex<Option<Error>>,
    shared: Arc<Shared>,
}

impl TagGenerator {
    pub(crate) fn new(tag: Tag, shared: Arc<Shared>) -> TagGenerator {
        TagGenerator {
            buffer: DoubleBuffer::new(shared.config.preload_ratio()),
            tag,
            refill_in_flight: AtomicBool::new(false),
            refilled: Notify::new(),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            shared,
        }
    }

    /// The tag this generator serves.
    pub fn tag(&self) -> &Tag {
        &self.tag
    }

    /// The next id of the tag. Waits (bounded) only when both segments are spent.
    pub async fn next_id(self: &Arc<Self>) -> Result<u64, Error> {
        match self.try_take_one() {
            Some(id) => Ok(id),
            // Boxed so the waiting machinery (timers, notifications) is not part of every
            // call's future: the fast path stays small and allocation-free.
            None => Ok(Box::pin(self.wait_for(Count::ONE, Vec::new())).await?[0].start()),
        }
    }

    /// `count` ids of the tag as increasing, non-adjacent ranges (contiguous ids merged).
    pub async fn next_ids(self: &Arc<Self>, count: Count) -> Result<Vec<IdRange>, Error> {
        let take = self.try_take(count);
        let ranges: Vec<IdRange> = take.ranges().collect();
        if take.count() == count.get() {
            return Ok(merge(ranges));
        }
        Box::pin(self.wait_for(count, ranges)).await
    }

    /// Both segments as they are now.
    pub fn snapshot(&self) -> BufferSnapshot {
        self.buffer.snapshot()
    }

    /// The fast path: take from the buffer and start a refill if it says so.
    #[inline]
    pub(crate) fn try_take(self: &Arc<Self>, count: Count) -> Take {
        let take = self.buffer.take(count);
        if take.refill_needed() {
            self.ensure_refill();
        }
        take
    }

    /// The single-id fast path.
    #[inline]
    pub(crate) fn try_take_one(self: &Arc<Self>) -> Option<u64> {
        let (id, refill_needed) = self.buffer.take_one();
        if refill_needed {
            self.ensure_refill();
        }
        id
    }

    /// The slow path: both segments ran out before `count` ids were taken. Waits for refills
    /// until the ids are there, a refill fails, or `refill_wait` passes. On failure the ids
    /// already taken are dropped: wasted, never handed out twice.
    async fn wait_for(
        self: &Arc<Self>,
        count: Count,
        mut ranges: Vec<IdRange>,
    ) -> Result<Vec<IdRange>, Error> {
        let wait = self.shared.config.refill_wait();
        let deadline = Instant::now() + wait;
        let mut got: u64 = ranges.iter().map(IdRange::len).sum();
        while got < count.get() {
            let notified = self.refilled.notified();
            tokio::pin!(notified);
            // Registered before looking, so a refill finishing in between still wakes us.
            notified.as_mut().enable();
            let failures_seen = self.failures.load(Ordering::Acquire);
            // Cannot fail: 1 <= count - got <= count, and count is a valid Count.
            let wanted = Count::new(count.get() - got).map_err(|e| self.unavailable(e))?;
            let take = self.try_take(wanted);
            got += take.count();
            ranges.extend(take.ranges());
            if got == count.get() {
                break;
            }
            if self.shared.cancel.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            self.ensure_refill();
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(self.unavailable(format_args!(
                        "no new segment arrived within {} ms", wait.as_millis()
                    )));
                }
                () = self.shared.cancel.cancelled() => return Err(Error::ShuttingDown),
            }
            if self.failures.load(Ordering::Acquire) != failures_seen {
                return Err(self.last_failure());
            }
        }
        Ok(merge(ranges))
    }

    /// Starts the refill task unless one runs or none is due.
    fn ensure_refill(self: &Arc<Self>) {
        if self.shared.cancel.is_cancelled() || !self.buffer.refill_due() {
            return;
        }
        if self.refill_in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::clone(self);
        self.shared.tracker.spawn(async move { this.refill().await });
    }

    /// Allocates a range and installs it. Retries with backoff while the buffer still has
    /// ids to serve; once it is spent, waiting requests drive the retries instead, so an
    /// outage answers fast errors rather than queueing.
    async fn refill(self: Arc<Self>) {
        let mut retry_ms = REFILL_RETRY_MS_MIN;
        let installed = loop {
            let failure = match self.allocate_and_install().await {
                Ok(()) => break true,
                Err(failure) => failure,
            };
            if matches!(failure, Error::UnknownTag(_)) {
                // A client asked for a tag that does not exist: its 404 says so; no alarm.
                tracing::debug!(tag = %self.tag, "tag not in the store");
            } else {
                tracing::warn!(tag = %self.tag, error = %failure, "segment refill failed");
            }
            let keep_trying = !matches!(failure, Error::UnknownTag(_) | Error::ShuttingDown)
                && self.buffer.remaining() > 0;
            self.publish_failure(failure);
            if !keep_trying {
                break false;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(retry_ms)) => {}
                () = self.shared.cancel.cancelled() => break false,
            }
            retry_ms = (retry_ms * 2).min(REFILL_RETRY_MS_MAX);
        };
        self.refill_in_flight.store(false, Ordering::Release);
        self.refilled.notify_waiters();
        if installed {
            // A preload signal that arrived while this refill ran was dropped; honour it.
            self.ensure_refill();
        }
    }

    async fn allocate_and_install(&self) -> Result<(), Error> {
        let timeout = self.shared.config.store_call_timeout();
        let allocation = tokio::select! {
            () = self.shared.cancel.cancelled() => return Err(Error::ShuttingDown),
            allocation = tokio::time::timeout(timeout, self.shared.store.allocate(&self.tag)) => allocation,
        };
        let range = match allocation {
            Ok(Ok(range)) => range,
            Ok(Err(StoreError::TagNotFound(tag))) => return Err(Error::UnknownTag(tag)),
            Ok(Err(e)) => return Err(self.unavailable(e)),
            Err(_elapsed) => {
                return Err(self.unavailable(format_args!(
                    "the store did not answer within {} ms",
                    timeout.as_millis()
                )));
            }
        };
        match self.buffer.install(range) {
            Ok(()) => {
                tracing::debug!(tag = %self.tag, start = range.start(), end = range.end(), "segment loaded");
                Ok(())
            }
            // Another path filled the slot meanwhile; the range is stranded, not reused.
            Err(InstallError::Full) => Ok(()),
            Err(InstallError::Regression { range, high_water }) => {
                Err(self.unavailable(format_args!(
                    "the store returned [{}, {}) below ids this node already served (up to {}); \
                     refused to avoid repeating ids (was the store restored from a backup?)",
                    range.start(),
                    range.end(),
                    high_water
                )))
            }
            Err(e) => Err(self.unavailable(format_args!("segment not installed: {e:?}"))),
        }
    }

    fn publish_failure(&self, failure: Error) {
        *self.last_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(failure);
        self.failures.fetch_add(1, Ordering::Release);
    }

    fn last_failure(&self) -> Error {
        let last = self.last_failure.lock().unwrap_or_else(PoisonError::into_inner).clone();
        last.unwrap_or_else(|| self.unavailable("a refill failed"))
    }

    fn unavailable(&self, reason: impl std::fmt::Display) -> Error {
        Error::Unavailable { tag: self.tag.clone(), reason: reason.to_string() }
    }
}

/// Joins ranges that continue each other, so a batch spanning nothing but a cursor step is
/// one range.
fn merge(ranges: Vec<IdRange>) -> Vec<IdRange> {
    let mut merged: Vec<IdRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        let joined = merged
            .last()
            .filter(|last| last.end() == range.start())
            .and_then(|last| IdRange::new(last.start(), range.end()));
        match (joined, merged.last_mut()) {
            (Some(joined), Some(last)) => *last = joined,
            _ => merged.push(range),
        }
    }
    merged
}
