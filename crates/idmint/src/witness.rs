//! The cluster-wide regression guard: a witness, a second and independent store that keeps
//! every tag's highest allocated id, raised by every node before it serves a range.
//!
//! A node's own marks (`marks.rs`) cannot see the ranges other nodes were given: after the
//! store is restored from an older backup, a node could be handed ids another node already
//! served. The witness sees every allocation of every node, so a range below its mark is
//! refused and the store moved past it, whichever node served those ids. It is one more
//! [`Marks`]: the seam where per-key high-water marks live, so a store of another kind can
//! stand in.

use std::sync::Arc;

use async_trait::async_trait;
use idmint_core::Tag;
use idmint_store::{StoreError, TagMetaStore};

/// Per-tag high-water marks that only rise, kept durably.
#[async_trait]
pub trait Marks: Send + Sync + 'static {
    /// Raises `tag`'s mark to at least `end`, durably before it answers, and answers the mark
    /// as it was before the call (0 without one). `end` 0 reads the mark, writing nothing.
    async fn raise(&self, tag: &Tag, end: u64) -> Result<u64, StoreError>;
}

/// The tag-metadata name under which a witness keeps a tag's mark.
pub const WITNESS_META_NAME: &str = "witness";

/// How many compare-and-set rounds a raise makes while other nodes raise the same mark.
const RAISE_ATTEMPTS: usize = 32;

/// [`Marks`] in a store's tag metadata ([`WITNESS_META_NAME`]): one read and one
/// compare-and-set per raise, so racing nodes never lower each other's marks.
pub struct MetaMarks {
    meta: Arc<dyn TagMetaStore>,
}

impl MetaMarks {
    /// Marks kept in `meta`.
    pub fn new(meta: Arc<dyn TagMetaStore>) -> MetaMarks {
        MetaMarks { meta }
    }
}

#[async_trait]
impl Marks for MetaMarks {
    async fn raise(&self, tag: &Tag, end: u64) -> Result<u64, StoreError> {
        for _ in 0..RAISE_ATTEMPTS {
            let current = self.meta.meta(tag, WITNESS_META_NAME).await?;
            let before = match current.as_deref() {
                None => 0,
                Some(text) => text.parse::<u64>().map_err(|_| StoreError::Corrupt {
                    tag: tag.to_string(),
                    reason: format!("the witness's mark {text:?} is not a number"),
                })?,
            };
            if before >= end {
                return Ok(before);
            }
            let new = end.to_string();
            let set =
                self.meta.compare_and_set_meta(tag, WITNESS_META_NAME, current.as_deref(), &new);
            if set.await? {
                return Ok(before);
            }
        }
        Err(StoreError::Unavailable(format!(
            "the witness's mark of tag {tag} changed {RAISE_ATTEMPTS} times while this node \
             raised it; retrying"
        )))
    }
}

/// The witness a node consults: its [`Marks`] and where they live (for logs and errors).
#[derive(Clone)]
pub struct Witness {
    marks: Arc<dyn Marks>,
    name: String,
}

impl Witness {
    /// A witness keeping its marks in `marks`, named `name` (its URL, password removed).
    pub fn new(marks: Arc<dyn Marks>, name: impl Into<String>) -> Witness {
        Witness { marks, name: name.into() }
    }

    /// Where the marks live.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// See [`Marks::raise`].
    pub async fn raise(&self, tag: &Tag, end: u64) -> Result<u64, StoreError> {
        self.marks.raise(tag, end).await
    }
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witness").field("name", &self.name).finish_non_exhaustive()
    }
}

impl PartialEq for Witness {
    /// The same marks under the same name.
    fn eq(&self, other: &Witness) -> bool {
        Arc::ptr_eq(&self.marks, &other.marks) && self.name == other.name
    }
}

impl Eq for Witness {}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_store::MemoryStore;

    #[tokio::test]
    async fn a_mark_only_rises_and_each_raise_answers_the_one_before() {
        let marks = MetaMarks::new(Arc::new(MemoryStore::new()));
        let tag = Tag::parse("order").unwrap();
        assert_eq!(marks.raise(&tag, 0).await, Ok(0));
        assert_eq!(marks.raise(&tag, 100).await, Ok(0));
        assert_eq!(marks.raise(&tag, 50).await, Ok(100));
        assert_eq!(marks.raise(&tag, 0).await, Ok(100));
        assert_eq!(marks.raise(&tag, 300).await, Ok(100));
        assert_eq!(marks.raise(&Tag::parse("user").unwrap(), 7).await, Ok(0));
    }

    /// Many raises at once from many tasks: the mark ends at the largest, and every raise
    /// answers a mark below its own end or the largest (never loses another's).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_raises_never_lower_the_mark() {
        let marks = Arc::new(MetaMarks::new(Arc::new(MemoryStore::new())));
        let tag = Tag::parse("order").unwrap();
        let tasks: Vec<_> = (1..=64_u64)
            .map(|end| {
                let (marks, tag) = (Arc::clone(&marks), tag.clone());
                tokio::spawn(async move { marks.raise(&tag, end * 10).await.unwrap() })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(marks.raise(&tag, 0).await, Ok(640));
    }
}
