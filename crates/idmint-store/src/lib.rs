//! idmint-store: where segment rows live.
//!
//! This crate owns the [`SegmentStore`] trait (atomic range allocation plus tag create, list,
//! get, set step, delete), its typed errors, store URLs, and the backends: [`MemoryStore`]
//! (the reference every backend is checked against) and [`SqliteStore`] (the embedded
//! default). Every backend passes one conformance suite (`tests/it/conformance.rs`).
//!
//! It must not spawn background tasks or read idmint's clock; it must not know HTTP. Its
//! only timing is the database's own `update_time` column.

mod error;
mod memory;
mod sqlite;
mod url;

use std::sync::Arc;

use async_trait::async_trait;
use idmint_core::{Description, IdRange, StartId, Step, Tag};

pub use error::StoreError;
pub use memory::MemoryStore;
pub use sqlite::SqliteStore;
pub use url::{DEFAULT_STORE_URL, StoreUrl};

/// The name of the segment table: Meituan Leaf's, so an existing Leaf database works as is.
pub const TABLE_NAME: &str = "leaf_alloc";

/// What `tag create` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSpec {
    /// The tag (`biz_tag`).
    pub tag: Tag,
    /// Ids reserved per allocation.
    pub step: Step,
    /// The first id the tag hands out (the initial `max_id`).
    pub start: StartId,
    /// Free text for operators.
    pub description: Description,
}

/// One row of the segment table as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagRecord {
    /// The tag (`biz_tag`).
    pub tag: Tag,
    /// The first id not yet reserved by any node.
    pub max_id: u64,
    /// Ids reserved per allocation. Read as stored, so a Leaf row with an unusual step is
    /// still served.
    pub step: u64,
    /// Free text for operators, as stored.
    pub description: String,
    /// When the row last changed, in seconds since the Unix epoch.
    pub update_time_s: u64,
}

/// Durable storage of segment rows, shared by every idmint node.
///
/// Implementations must make `allocate` atomic: concurrent callers, in this process or any
/// other node, always receive disjoint ranges, and `max_id` never decreases.
#[async_trait]
pub trait SegmentStore: Send + Sync + 'static {
    /// Reserves the next `step` ids of `tag` in one atomic update and returns them as
    /// `[old max_id, new max_id)`. Refuses with [`StoreError::Exhausted`] rather than pass
    /// `i64::MAX`, and with [`StoreError::TagNotFound`] for an unknown tag.
    async fn allocate(&self, tag: &Tag) -> Result<IdRange, StoreError>;

    /// Creates a tag row; refuses an existing tag and more than `TAG_COUNT_MAX` tags.
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError>;

    /// The row of `tag`, if it exists.
    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError>;

    /// Every row, ordered by tag, at most `TAG_COUNT_MAX`. Rows whose `biz_tag` is not a
    /// valid tag name are skipped with a warning.
    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError>;

    /// Changes the step of `tag`; later allocations use it.
    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError>;

    /// Deletes the row of `tag`.
    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError>;

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Where the store lives, for logs: its URL with any password removed.
    fn describe(&self) -> String;
}

/// Opens the store a URL names, creating its table (and, for SQLite, its file and
/// directory) when absent.
pub async fn open(url: &StoreUrl) -> Result<Arc<dyn SegmentStore>, StoreError> {
    match url {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
        StoreUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path).await?)),
    }
}

/// The range `[max_id_after - step, max_id_after)` an allocation reserved, refusing rows that
/// would yield no valid id.
pub(crate) fn allocated_range(
    tag: &Tag,
    max_id_after: i64,
    step: i64,
) -> Result<IdRange, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { tag: tag.to_string(), reason };
    if step < 1 {
        return Err(corrupt(format!("step is {step}; it must be at least 1")));
    }
    let end = u64::try_from(max_id_after)
        .map_err(|_| corrupt(format!("max_id is negative ({max_id_after})")))?;
    // Ids start at 1: a Leaf row whose max_id is 0 loses only the id 0.
    let start = end.saturating_sub(step as u64).max(idmint_core::limits::ID_MIN);
    IdRange::new(start, end)
        .ok_or_else(|| corrupt(format!("allocation ended at {end}: no valid id in range")))
}
