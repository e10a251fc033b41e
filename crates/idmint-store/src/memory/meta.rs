//! The memory backend's [`TagMetaStore`]: values in a map behind one mutex, so a
//! compare-and-set is trivially atomic; the reference the metadata suite is written against.
//! Nothing persists.

use std::sync::PoisonError;

use async_trait::async_trait;
use idmint_core::Tag;

use super::MemoryStore;
use crate::meta::{check_cas, check_name};
use crate::{StoreError, TagMetaStore};

#[async_trait]
impl TagMetaStore for MemoryStore {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        check_name(name)?;
        let values = self.meta.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(values.get(&(tag.clone(), name.to_string())).cloned())
    }

    async fn compare_and_set_meta(
        &self,
        tag: &Tag,
        name: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError> {
        check_cas(name, expected, new)?;
        // A single insert after the compare: a poisoned map is still consistent.
        let mut values = self.meta.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tag.clone(), name.to_string());
        if values.get(&key).map(String::as_str) != expected {
            return Ok(false);
        }
        values.insert(key, new.to_string());
        Ok(true)
    }

    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError> {
        check_name(name)?;
        let values = self.meta.lock().unwrap_or_else(PoisonError::into_inner);
        let named = values.iter().filter(|((_, n), _)| n == name);
        Ok(named.map(|((tag, _), value)| (tag.clone(), value.clone())).collect())
    }
}
