//! The memory backend's [`SequenceStore`]: definitions and ceilings in maps behind one mutex,
//! the reference the sequence suite is written against. Nothing persists.

use std::collections::BTreeMap;
use std::sync::{MutexGuard, PoisonError};

use async_trait::async_trait;
use idmint_core::Tag;

use super::MemoryStore;
use crate::sequence::{
    CEILING_MAX, ceiling_overflow, check_period, check_raise, check_sequence_count, check_spec,
    sequence_exists,
};
use crate::{SequenceRecord, SequenceSpec, SequenceStore, StoreError};

/// The sequence state of one memory store.
#[derive(Debug, Default)]
pub(super) struct Sequences {
    definitions: BTreeMap<Tag, SequenceRecord>,
    ceilings: BTreeMap<(Tag, String), u64>,
}

impl MemoryStore {
    fn sequences(&self) -> MutexGuard<'_, Sequences> {
        // Every mutation below is a single insert or removal after its checks, so a poisoned
        // map is still consistent.
        self.sequences.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl SequenceStore for MemoryStore {
    async fn create_sequence(&self, spec: &SequenceSpec) -> Result<SequenceRecord, StoreError> {
        check_spec(spec)?;
        let mut sequences = self.sequences();
        if sequences.definitions.contains_key(&spec.name) {
            return Err(sequence_exists(&spec.name));
        }
        // Lossless: the map holds at most SEQUENCE_COUNT_MAX definitions.
        check_sequence_count(sequences.definitions.len() as i64)?;
        sequences.definitions.insert(spec.name.clone(), spec.clone());
        Ok(spec.clone())
    }

    async fn get_sequence(&self, name: &Tag) -> Result<Option<SequenceRecord>, StoreError> {
        Ok(self.sequences().definitions.get(name).cloned())
    }

    async fn list_sequences(&self) -> Result<Vec<SequenceRecord>, StoreError> {
        Ok(self.sequences().definitions.values().cloned().collect())
    }

    async fn delete_sequence(&self, name: &Tag) -> Result<(), StoreError> {
        let mut sequences = self.sequences();
        if sequences.definitions.remove(name).is_none() {
            return Err(StoreError::TagNotFound(name.clone()));
        }
        Ok(())
    }

    async fn ceiling(&self, name: &Tag, period: &str) -> Result<u64, StoreError> {
        check_period(period)?;
        Ok(self.sequences().ceilings.get(&(name.clone(), period.to_string())).copied().unwrap_or(0))
    }

    async fn raise_ceiling(&self, name: &Tag, period: &str, by: u64) -> Result<u64, StoreError> {
        check_raise(period, by)?;
        let mut sequences = self.sequences();
        let ceiling = sequences.ceilings.entry((name.clone(), period.to_string())).or_insert(0);
        let raised = ceiling
            .checked_add(by)
            .filter(|raised| *raised <= CEILING_MAX)
            .ok_or_else(|| ceiling_overflow(name, period, Ok(*ceiling), by))?;
        *ceiling = raised;
        Ok(raised)
    }
}
