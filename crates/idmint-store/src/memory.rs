//! The memory backend: the reference implementation of [`SegmentStore`] (and, in
//! `memory/workers.rs`, of [`WorkerStore`](crate::WorkerStore); in `memory/meta.rs`, of
//! [`TagMetaStore`](crate::TagMetaStore)).
//!
//! It keeps rows in a map behind one mutex, so every call is trivially atomic. It is what the
//! conformance suite's expectations are written against; nothing persists across restarts.

mod meta;
mod sequences;
mod workers;

pub use workers::WorkerRowsSnapshot;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};
use idmint_core::{Step, Tag};

use crate::clock::{LocalClock, StoreClock};
use crate::{
    Allocation, RangeStore, SegmentStore, StoreError, TagRecord, TagSpec, allocated_range,
    check_new_max_id, effective_step, initial_max_id,
};

/// Rows in process memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    rows: Mutex<BTreeMap<Tag, TagRecord>>,
    /// Tombstones of deleted tags: name -> the `max_id` it had reached. Kept in the same
    /// lock as the rows, so a delete and its tombstone are one step.
    tombstones: Mutex<BTreeMap<Tag, u64>>,
    /// Worker leases and the assignment sequence (`memory/workers.rs`).
    workers: Mutex<workers::Workers>,
    /// Sequence definitions and ceilings (`memory/sequences.rs`).
    sequences: Mutex<sequences::Sequences>,
    /// Tag metadata: (tag, name) -> value (`memory/meta.rs`).
    meta: Mutex<BTreeMap<(Tag, String), String>>,
    /// The store's clock: worker leases expire by it (`memory/workers.rs`).
    clock: Clock,
}

/// The clock a memory store judges leases by: the machine's unless a test gives another.
#[derive(Debug, Clone)]
struct Clock(Arc<dyn StoreClock>);

impl Default for Clock {
    fn default() -> Clock {
        Clock(Arc::new(LocalClock))
    }
}

impl MemoryStore {
    /// An empty store whose worker leases expire by the machine's clock.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// An empty store whose worker leases expire by `clock` (a test's, to move the store's
    /// time apart from a node's).
    pub fn with_clock(clock: Arc<dyn StoreClock>) -> MemoryStore {
        MemoryStore { clock: Clock(clock), ..MemoryStore::default() }
    }

    /// The store's clock, in milliseconds.
    fn clock_ms(&self) -> u64 {
        self.clock.0.now_ms()
    }

    fn tombstones(&self) -> MutexGuard<'_, BTreeMap<Tag, u64>> {
        // Taken only while `rows` is held, after it: one order, no deadlock.
        self.tombstones.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn rows(&self) -> MutexGuard<'_, BTreeMap<Tag, TagRecord>> {
        // Every mutation below is a single assignment after its checks, so a poisoned map
        // is still consistent.
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl RangeStore for MemoryStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        let mut rows = self.rows();
        let row = rows.get_mut(tag).ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        let effective = effective_step(row.step, step);
        let Some(max_id_after) = row.max_id.checked_add(effective).filter(|end| *end <= ID_MAX)
        else {
            return Err(StoreError::Exhausted {
                tag: tag.clone(),
                max_id: row.max_id,
                step: effective,
            });
        };
        // All fit i64: row.step <= effective, and max_id + effective <= ID_MAX == i64::MAX.
        let allocation = allocated_range(tag, max_id_after as i64, row.step as i64, step)?;
        row.max_id = max_id_after;
        row.update_time_s = now_s();
        Ok(allocation)
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        check_new_max_id(new)?;
        let mut rows = self.rows();
        let row = rows.get_mut(tag).ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        if row.max_id != expected {
            return Ok(false);
        }
        row.max_id = new;
        row.update_time_s = now_s();
        Ok(true)
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        Ok(self.rows().get(tag).cloned())
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        Ok(self.rows().values().take(TAG_COUNT_MAX).cloned().collect())
    }

    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        let _rows = self.rows();
        Ok(self.tombstones().get(tag).copied())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn describe(&self) -> String {
        "memory://".to_string()
    }
}

#[async_trait]
impl SegmentStore for MemoryStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        let mut rows = self.rows();
        if rows.contains_key(&spec.tag) {
            return Err(StoreError::TagExists(spec.tag.clone()));
        }
        if rows.len() >= TAG_COUNT_MAX {
            return Err(StoreError::TooManyTags);
        }
        let max_id = initial_max_id(spec, self.tombstones().get(&spec.tag).copied())?;
        let record = TagRecord {
            tag: spec.tag.clone(),
            max_id,
            step: spec.step.get(),
            description: spec.description.as_str().to_string(),
            update_time_s: now_s(),
        };
        rows.insert(spec.tag.clone(), record.clone());
        Ok(record)
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        let mut rows = self.rows();
        let row = rows.get_mut(tag).ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        row.step = step.get();
        row.update_time_s = now_s();
        Ok(row.clone())
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        let mut rows = self.rows();
        let row = rows.remove(tag).ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        let mut tombstones = self.tombstones();
        let tomb = tombstones.entry(tag.clone()).or_insert(row.max_id);
        *tomb = (*tomb).max(row.max_id);
        Ok(())
    }
}

fn now_s() -> u64 {
    // A clock before 1970 only makes update_time 0; it never affects ids.
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
