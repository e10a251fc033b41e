//! The fence: one generator's lease of a slot in a keyed lease space, and the gate that
//! stops the generator before anyone else can hold the slot.
//!
//! What every holder relies on, kept here once:
//! - The gate is open until one TTL after the last successful acquisition or renewal was
//!   *asked* for, on this node's clock; the store counts its expiry from later, by its own
//!   clock, so the gate closes first however far apart the clocks are.
//! - A lease the store no longer proves (a renewal or a mark raise answers
//!   [`StoreError::LeaseLost`]: the row was taken over, deleted or restored) closes the gate
//!   at once and stops the holder, in one step under the fence's lock; a newer lease is never
//!   closed by an older one's loss.
//! - A lease acquired at `t` settles: its floor is `t + settle_ms`, read when the store
//!   answered, so a slow store never eats into the margin an earlier holder may still use.
//! - A holding is named by its lease's fence token ([`Lease::fence_token`]), which is never
//!   reused, not even when the row is deleted or restored: a loss reported for another
//!   holding never closes this one.
//! - Marks are raised under the held lease's token. A mark is a `u64` the store keeps
//!   monotone and hands to the next holder; the fence does not say what it measures (the
//!   snowflake generator's is a time).
//!
//! The holder keeps its own state under the fence's lock (`Fence<T>`), so a loss, an
//! installation and a shutdown are each one step with the holder's change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idmint_store::{Lease, LeaseRequest, LeaseStore, StoreError};

use crate::clock::Clock;

/// A lease and its gate, with the holder's state `T` under the same lock.
pub(crate) struct Fence<T> {
    store: Option<Arc<dyn LeaseStore>>,
    /// What the lease is, in log lines (`worker lease`: operators' alerts name its lines).
    what: &'static str,
    /// The lease space, in log lines.
    space: String,
    ttl_ms: u64,
    settle_ms: u64,
    /// The clock (ms) from which the lease is no longer proven: `u64::MAX` while no lease is
    /// needed, 0 once the lease is lost or the fence closed.
    until_ms: AtomicU64,
    /// Leases lost so far.
    losses: AtomicU64,
    state: Mutex<Fenced<T>>,
}

/// What the fence's lock guards.
#[derive(Debug, Clone)]
pub(crate) struct Fenced<T> {
    /// The lease held; `None` without one (not needed, lost, or released).
    pub(crate) lease: Option<Lease>,
    /// Why the gate closed, for the holder's refusal; empty while it is open.
    pub(crate) reason: String,
    /// When the current lease was acquired and the floor it set (ms): `(0, 0)` without one.
    pub(crate) acquired_ms: u64,
    pub(crate) floor_ms: u64,
    /// The holder's own state.
    pub(crate) holder: T,
}

/// A lease renewed or acquired by [`Fence::renew`], to install with [`Fence::install`].
pub(crate) struct Renewal {
    pub(crate) lease: Lease,
    /// When the store answered: a new lease's floor counts from here.
    pub(crate) answered_ms: u64,
    /// One TTL after it was asked for: the gate's new end.
    pub(crate) until_ms: u64,
}

impl<T> Fence<T> {
    /// Asks `store` for a lease by `request`, for [`Fence::leased`] (the holder checks it
    /// first: the slot it got must suit it).
    pub(crate) async fn acquire(
        store: &dyn LeaseStore,
        request: &LeaseRequest,
    ) -> Result<Lease, StoreError> {
        store.acquire_lease(request).await
    }

    /// A fence whose holder needs no lease: open until [`Fence::close`].
    pub(crate) fn unleased(holder: T) -> Fence<T> {
        Fence::new(None, None, ("lease", String::new()), (0, 0, u64::MAX), holder)
    }

    /// A fence holding `lease` of `store` (`what` in log lines), asked for at `asked_ms`: open
    /// for `ttl_ms` from then; [`Fence::settle`] sets its floor once the answer's time is
    /// known.
    pub(crate) fn leased(
        (store, what): (Arc<dyn LeaseStore>, &'static str),
        lease: Lease,
        (ttl_ms, settle_ms, asked_ms): (u64, u64, u64),
        holder: T,
    ) -> Fence<T> {
        let until_ms = asked_ms.saturating_add(ttl_ms);
        let space = lease.space.to_string();
        Fence::new(Some(store), Some(lease), (what, space), (ttl_ms, settle_ms, until_ms), holder)
    }

    fn new(
        store: Option<Arc<dyn LeaseStore>>,
        lease: Option<Lease>,
        (what, space): (&'static str, String),
        (ttl_ms, settle_ms, until_ms): (u64, u64, u64),
        holder: T,
    ) -> Fence<T> {
        Fence {
            store,
            what,
            space,
            ttl_ms,
            settle_ms,
            until_ms: AtomicU64::new(until_ms),
            losses: AtomicU64::new(0),
            state: Mutex::new(Fenced {
                lease,
                reason: String::new(),
                acquired_ms: 0,
                floor_ms: 0,
                holder,
            }),
        }
    }

    /// The lease, the floor and the holder's state.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Fenced<T>> {
        // Each field is whole whatever panicked elsewhere.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the gate is open at `now_ms`: one load.
    #[inline]
    pub(crate) fn open_at(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.load(Ordering::Acquire)
    }

    /// Until when the lease is proven (ms), while one is held.
    pub(crate) fn until_ms(&self, state: &Fenced<T>) -> Option<u64> {
        state.lease.as_ref().map(|_| self.until_ms.load(Ordering::Acquire))
    }

    /// Why the gate is closed.
    pub(crate) fn reason(state: &Fenced<T>) -> String {
        if state.reason.is_empty() {
            "the lease was not renewed in time".into()
        } else {
            state.reason.clone()
        }
    }

    /// How many leases this fence has lost.
    pub(crate) fn losses(&self) -> u64 {
        self.losses.load(Ordering::Acquire)
    }

    /// Sets the floor of a lease the store granted at `answered_ms`: `settle_ms` above it.
    pub(crate) fn settle(&self, state: &mut Fenced<T>, answered_ms: u64) {
        state.acquired_ms = answered_ms;
        state.floor_ms = answered_ms.saturating_add(self.settle_ms);
    }

    /// Closes the gate for good with `reason` and hands back the lease, to release.
    pub(crate) fn close(&self, state: &mut Fenced<T>, reason: &str) -> Option<Lease> {
        self.until_ms.store(0, Ordering::Release);
        state.reason = reason.into();
        state.lease.take()
    }

    /// Gives `lease` back to the store (its mark stays); a failure is logged, and the lease
    /// then expires on its own.
    pub(crate) async fn release(&self, lease: Lease) {
        let Some(store) = &self.store else { return };
        if let Err(error) = store.release_lease(&lease).await {
            tracing::warn!(%error, space = %lease.space, worker = lease.worker_id, "{} not released; it expires on its own", self.what);
        }
    }

    /// Closes the gate at once on `lease`, which the store no longer proves, and runs `stop`
    /// on the holder's state in the same step. A lease already replaced by a newer one is
    /// left alone. Whether it closed.
    pub(crate) fn lose(&self, lease: &Lease, stop: impl FnOnce(&mut T)) -> bool {
        let mut state = self.lock();
        let same = |held: &Lease| held.fence_token() == lease.fence_token();
        if !state.lease.as_ref().is_some_and(same) {
            return false;
        }
        self.until_ms.store(0, Ordering::Release);
        stop(&mut state.holder);
        state.reason = "the lease was lost: its row was taken over by another node, deleted or \
                        restored from a backup"
            .into();
        state.lease = None;
        self.losses.fetch_add(1, Ordering::AcqRel);
        tracing::error!(space = %lease.space, worker = lease.worker_id, "{} lost; ids stop until a lease is held again", self.what);
        true
    }

    /// Raises the space's mark of `lease` to `mark` under its token; a lease the store no
    /// longer proves is lost ([`Fence::lose`] with `stop`).
    pub(crate) async fn raise(
        &self,
        lease: &Lease,
        mark: u64,
        stop: impl FnOnce(&mut T),
    ) -> Result<(), StoreError> {
        let Some(store) = &self.store else { return Ok(()) };
        let raised = store.raise_mark(lease, mark).await;
        if let Err(StoreError::LeaseLost { .. }) = &raised {
            self.lose(lease, stop);
        }
        raised
    }

    /// One renewal of the lease held, or an acquisition by `request` when none is: the lease
    /// to [`Fence::install`]. A loss closes the gate at once ([`Fence::lose`] with `stop`);
    /// another failure leaves the gate where the store last confirmed it.
    pub(crate) async fn renew(
        &self,
        request: impl FnOnce(u64) -> LeaseRequest,
        clock: &dyn Clock,
        stop: impl FnOnce(&mut T),
    ) -> Option<Renewal> {
        let store = self.store.as_ref()?;
        let lease = self.lock().lease.clone();
        let asked_ms = clock.now_ms();
        let result = match &lease {
            Some(lease) => store.renew_lease(lease, self.ttl_ms).await,
            None => store.acquire_lease(&request(asked_ms)).await,
        };
        match result {
            // The floor counts from the answer, the gate from the question.
            Ok(renewed) => Some(Renewal {
                lease: renewed,
                answered_ms: clock.now_ms().max(asked_ms),
                until_ms: asked_ms.saturating_add(self.ttl_ms),
            }),
            Err(StoreError::LeaseLost { .. }) => {
                if let Some(lease) = &lease {
                    self.lose(lease, stop);
                }
                None
            }
            Err(error) => {
                tracing::warn!(space = %self.space, %error, "{} not renewed", self.what);
                None
            }
        }
    }

    /// Holds `lease` (renewed or newly acquired) and opens the gate until `until_ms`.
    pub(crate) fn install(&self, state: &mut Fenced<T>, lease: Lease, until_ms: u64) {
        self.until_ms.store(until_ms, Ordering::Release);
        state.reason.clear();
        state.lease = Some(lease);
    }
}

#[cfg(test)]
mod tests {
    use idmint_store::{MemoryStore, WorkerSpace};

    use super::*;
    use crate::clock::ManualClock;

    fn request(space: &WorkerSpace, now_ms: u64) -> LeaseRequest {
        LeaseRequest {
            space: space.clone(),
            min_worker: 0,
            max_worker: 0,
            holder: "test".into(),
            ttl_ms: 1_000,
            margin_ms: 100,
            mark_max: now_ms + 10_000,
        }
    }

    /// Two holders of one slot: the first's renewal finds the loss, closes and stops it, and a stale loss never
    /// closes a newer lease.
    #[tokio::test]
    async fn a_lost_lease_closes_the_gate_and_stops_the_holder_once() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let clock = ManualClock::new(1_000_000);
        let space = WorkerSpace::parse("fence").unwrap();
        // Expiring in 5 ms by the store's clock (the memory store's is the machine's).
        let mut short = request(&space, clock.now_ms());
        (short.ttl_ms, short.margin_ms) = (5, 0);
        let lease = store.acquire_lease(&short).await.unwrap();
        let asked = clock.now_ms();
        let fence =
            Fence::leased((Arc::clone(&store), "lease"), lease.clone(), (1_000, 500, asked), 0_u32);
        fence.settle(&mut fence.lock(), asked + 5);
        let state = fence.lock().clone();
        assert_eq!((state.acquired_ms, state.floor_ms), (asked + 5, asked + 505));
        assert!(fence.open_at(asked + 999) && !fence.open_at(asked + 1_000));

        // Past the store's expiry the other holder takes the slot.
        clock.advance(5_000);
        assert!(!fence.open_at(clock.now_ms()));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let other = store.acquire_lease(&short).await.unwrap();
        assert_eq!(other.worker_id, lease.worker_id);
        assert!(other.token > lease.token, "{other:?} after {lease:?}");

        let renewal = fence.renew(|now| request(&space, now), &clock, |stops| *stops += 1).await;
        assert!(renewal.is_none());
        assert_eq!((fence.lock().holder, fence.losses()), (1, 1));
        assert!(fence.lock().lease.is_none() && !fence.open_at(0));
        assert!(Fence::reason(&fence.lock()).contains("lost"));

        // A new lease installed, then the old one's loss reported late: ignored.
        fence.install(&mut fence.lock(), other.clone(), clock.now_ms() + 1_000);
        assert!(!fence.lose(&lease, |stops| *stops += 1));
        assert!(fence.open_at(clock.now_ms()) && fence.lock().holder == 1);
        assert!(fence.lose(&other, |stops| *stops += 1));
        assert_eq!((fence.lock().holder, fence.losses()), (2, 2));
    }

    /// A mark raised under a lease the store no longer proves loses it; one the store
    /// proves is raised.
    #[tokio::test]
    async fn a_mark_raised_under_a_lost_lease_closes_the_gate() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let space = WorkerSpace::parse("fence-mark").unwrap();
        let lease = store.acquire_lease(&request(&space, 0)).await.unwrap();
        let fence =
            Fence::leased((Arc::clone(&store), "lease"), lease.clone(), (60_000, 0, 0), false);
        fence.raise(&lease, 7, |stopped| *stopped = true).await.unwrap();
        assert_eq!(store.list_leases(&space).await.unwrap()[0].mark, 7);
        let forged = Lease { token: lease.token + 1, ..lease.clone() };
        fence.install(&mut fence.lock(), forged.clone(), u64::MAX - 1);
        let lost = fence.raise(&forged, 9, |stopped| *stopped = true).await;
        assert!(matches!(lost, Err(StoreError::LeaseLost { .. })), "{lost:?}");
        assert!(fence.lock().holder && !fence.open_at(0));
    }

    /// A fence without a lease is open until closed, and closing hands back no lease.
    #[test]
    fn an_unleased_fence_is_open_until_closed() {
        let fence = Fence::unleased(());
        assert!(fence.open_at(u64::MAX - 1));
        assert_eq!(fence.until_ms(&fence.lock()), None);
        assert_eq!(fence.close(&mut fence.lock(), "stopping"), None);
        assert!(!fence.open_at(0));
        assert_eq!(Fence::reason(&fence.lock()), "stopping");
    }
}
