//! The memory backend: the conformance suite, and the tag-count bound (cheap to reach here).

use std::sync::Arc;

use idmint_core::limits::TAG_COUNT_MAX;
use idmint_store::{MemoryStore, RangeStore, SegmentStore, StoreError};

use crate::conformance::{Subject, conformance_suite, spec, tag};

async fn fresh() -> Option<Subject> {
    Some(Subject::new(Arc::new(MemoryStore::new())))
}

conformance_suite!(fresh);

#[tokio::test]
async fn create_beyond_the_tag_count_limit_is_refused() {
    let store = MemoryStore::new();
    for i in 0..TAG_COUNT_MAX {
        store.create_tag(&spec(&format!("t{i:05}"), 1, 1, "")).await.unwrap();
    }
    assert_eq!(
        store.create_tag(&spec("one-too-many", 1, 1, "")).await,
        Err(StoreError::TooManyTags)
    );
    assert_eq!(store.get_tag(&tag("one-too-many")).await, Ok(None));
    assert_eq!(store.list_tags().await.map(|rows| rows.len()), Ok(TAG_COUNT_MAX));
}
