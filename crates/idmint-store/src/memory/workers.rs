//! The memory backend's [`WorkerStore`]: the reference the worker suite is written against.
//!
//! Lease rows live in a map behind one mutex, so every call is trivially atomic; the
//! acquisition is written out plainly (every id from 0 up) rather than through the database
//! backends' paged walk, so the suite checks that walk against an independent model. Assigned
//! ids keep only their sequence: nothing reads the rows back. Nothing persists. Expiry is
//! judged by the store's clock (`MemoryStore::with_clock`, by default the machine's), read
//! under the lock, never by a caller's.

use std::collections::BTreeMap;
use std::sync::{MutexGuard, PoisonError};

use async_trait::async_trait;

use super::MemoryStore;
use crate::worker::{
    check_assign_request, check_lease_request, check_renewal, check_time_ms, lease_lost,
    new_holder_id, next_token, none_free, reusable_below,
};
use crate::{
    AssignRequest, Lease, LeaseRecord, LeaseRequest, LeaseStore, StoreError, WorkerSpace,
    WorkerStore,
};

/// The worker state of one memory store.
#[derive(Debug, Default)]
pub(super) struct Workers {
    leases: BTreeMap<(WorkerSpace, u64), Row>,
    /// The last assigned id (0: none yet), shared by every space as a database sequence is.
    last_assigned: u64,
    /// The last lease token drawn: a token never repeats in this store, even when a test
    /// clock counts whole milliseconds and rows are deleted within one.
    last_token: u64,
}

/// One lease row: what operators see, and the holder id that fences it.
#[derive(Debug, Clone)]
struct Row {
    record: LeaseRecord,
    holder_id: u128,
}

/// Every lease row of a memory store at one moment, as a backup holds them: what
/// [`MemoryStore::restore_worker_rows`] brings back.
#[derive(Debug, Clone)]
pub struct WorkerRowsSnapshot(BTreeMap<(WorkerSpace, u64), Row>);

impl MemoryStore {
    /// Deletes every lease row of `space`, as an operator's `DELETE` would: for tests that
    /// the fence holds when rows vanish under a live holder.
    pub fn delete_worker_rows(&self, space: &WorkerSpace) {
        self.workers().leases.retain(|(row_space, _), _| row_space != space);
    }

    /// Every lease row as it stands, as a backup would keep them.
    pub fn snapshot_worker_rows(&self) -> WorkerRowsSnapshot {
        WorkerRowsSnapshot(self.workers().leases.clone())
    }

    /// Puts back the lease rows of `snapshot`, as restoring a backup would: for tests that
    /// the fence holds when older rows come back under a live holder.
    pub fn restore_worker_rows(&self, snapshot: &WorkerRowsSnapshot) {
        self.workers().leases.clone_from(&snapshot.0);
    }

    fn workers(&self) -> MutexGuard<'_, Workers> {
        // Every mutation below is a single assignment after its checks, so a poisoned map is
        // still consistent.
        self.workers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError> {
        check_lease_request(req)?;
        let holder_id = new_holder_id();
        let mut workers = self.workers();
        // Read under the lock: no other call of this store runs between the read and the
        // decision.
        let now_ms = self.clock_ms();
        let below = reusable_below(now_ms, req.margin_ms);
        let mut earliest_ahead: Option<u64> = None;
        for worker_id in req.min_worker..=req.max_worker {
            let key = (req.space.clone(), worker_id);
            let (previous, time_mark) = match workers.leases.get(&key).map(|row| &row.record) {
                None => (None, 0),
                Some(row) if below.is_some_and(|below| row.expires_ms < below) => {
                    if row.mark > req.mark_max {
                        let earliest = earliest_ahead.map_or(row.mark, |e| e.min(row.mark));
                        earliest_ahead = Some(earliest);
                        continue;
                    }
                    (Some(row.token), row.mark)
                }
                Some(_) => continue,
            };
            let token = next_token(previous.max(Some(workers.last_token)), self.clock.0.now_us());
            workers.last_token = token;
            let expires_ms = now_ms + req.ttl_ms;
            let record = LeaseRecord {
                worker_id,
                holder: req.holder.clone(),
                token,
                expires_ms,
                mark: time_mark,
            };
            workers.leases.insert(key, Row { record, holder_id });
            return Ok(Lease {
                space: req.space.clone(),
                worker_id,
                token,
                holder_id,
                expires_ms,
                mark: time_mark,
            });
        }
        Err(none_free(req, earliest_ahead))
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease, StoreError> {
        check_renewal(ttl_ms)?;
        let mut workers = self.workers();
        let now_ms = self.clock_ms();
        let row = held(&mut workers, lease).filter(|row| row.expires_ms >= now_ms);
        let row = row.ok_or_else(|| lease_lost(lease))?;
        row.expires_ms = row.expires_ms.max(now_ms + ttl_ms);
        Ok(Lease { expires_ms: row.expires_ms, mark: row.mark, ..lease.clone() })
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut workers = self.workers();
        let now_ms = self.clock_ms();
        let row = held(&mut workers, lease).ok_or_else(|| lease_lost(lease))?;
        row.expires_ms = row.expires_ms.min(now_ms);
        Ok(())
    }

    async fn raise_mark(&self, lease: &Lease, mark_ms: u64) -> Result<(), StoreError> {
        check_time_ms("mark_ms", mark_ms)?;
        let mut workers = self.workers();
        let row = held(&mut workers, lease).ok_or_else(|| lease_lost(lease))?;
        row.mark = row.mark.max(mark_ms);
        Ok(())
    }

    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError> {
        let workers = self.workers();
        let rows = workers.leases.range((space.clone(), 0)..=(space.clone(), u64::MAX));
        Ok(rows.map(|(_, row)| row.record.clone()).collect())
    }

    async fn now_ms(&self) -> Result<u64, StoreError> {
        Ok(self.clock_ms())
    }
}

#[async_trait]
impl WorkerStore for MemoryStore {
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError> {
        check_assign_request(req)?;
        let mut workers = self.workers();
        let id = workers.last_assigned + 1;
        if id > req.max_worker {
            return Err(StoreError::WorkersExhausted {
                space: req.space.clone(),
                max: req.max_worker,
            });
        }
        workers.last_assigned = id;
        Ok(id)
    }
}

/// The row of `lease` if it still holds the lease's token and holder id.
fn held<'w>(workers: &'w mut Workers, lease: &Lease) -> Option<&'w mut LeaseRecord> {
    let key = (lease.space.clone(), lease.worker_id);
    let row = workers.leases.get_mut(&key)?;
    (row.record.token == lease.token && row.holder_id == lease.holder_id).then_some(&mut row.record)
}
