//! Didi Tinyid's tables, served as they are: `tiny_id_info` (one row per `biz_type`: `max_id`,
//! `step`, `delta`, `remainder` and the optimistic `version`) and `tiny_id_token` (which
//! token may take ids of which `biz_type`).
//!
//! [`TinyidStore`] is a [`RangeStore`] in *index* space: the engine's double buffer hands
//! out indices `k`, and the `biz_type`'s [`Stride`] turns them into the ids
//! `k * delta + remainder` (`idmint_core::stride`). An allocation is Tinyid's own: read the
//! row, then `UPDATE … SET max_id = ?, update_time = now(), version = version + 1 WHERE id = ?
//! AND max_id = ? AND version = ? AND biz_type = ?`, retried a bounded number of times, so a
//! Tinyid server and idmint nodes can allocate from one row at the same time: each CAS that
//! wins owns `(old max_id, new max_id]`, and every writer bumps `version`, so no writer
//! reading a stale row can win.
//!
//! The stride a node first serves a `biz_type` with is pinned for the life of the store: a
//! row whose `delta` or `remainder` changes afterwards is refused (the indices already in
//! memory would map to other ids).
//!
//! It must not create, alter or administer Tinyid's tables (Tinyid's users manage rows with
//! their own SQL), spawn tasks, or show a password.

use async_trait::async_trait;
use idmint_core::{Stride, Tag};

use crate::{RangeStore, StoreError};

/// Tinyid's id table.
pub const TINYID_INFO_TABLE: &str = "tiny_id_info";
/// Tinyid's token table.
pub const TINYID_TOKEN_TABLE: &str = "tiny_id_token";
/// Most `tiny_id_token` rows read; a table with more is refused (the token map is held in
/// memory and reread every refresh).
pub const TINYID_TOKENS_MAX: usize = 100_000;
/// Most rounds of Tinyid's read-then-compare-and-set one allocation tries before it fails as
/// unavailable (Tinyid's own server gives up after fewer).
pub const TINYID_CAS_ATTEMPTS_MAX: u32 = 16;
/// Longest token read from `tiny_id_token` (its column is `varchar(255)`).
pub const TINYID_TOKEN_LEN_MAX: usize = 255;

/// One `tiny_id_token` row: `token` may take ids of `biz_type`.
#[derive(Clone, PartialEq, Eq)]
pub struct TinyidToken {
    /// The token, as stored. A secret: `Debug` shows `***`.
    pub token: String,
    /// The `biz_type` it opens.
    pub biz_type: Tag,
}

impl std::fmt::Debug for TinyidToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TinyidToken")
            .field("token", &"***")
            .field("biz_type", &self.biz_type)
            .finish()
    }
}

/// One `tiny_id_info` row as Tinyid keeps it, in ids (not the engine's indices): what a
/// status page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TinyidRow {
    /// The `biz_type`.
    pub biz_type: Tag,
    /// The last id reserved, inclusive (Tinyid's `max_id`).
    pub max_id: u64,
    /// Ids a segment reserves (Tinyid's `step`).
    pub step: u64,
    /// `delta` and `remainder`: the row hands out the ids `id % delta == remainder`.
    pub stride: Stride,
    /// When the row last changed, in seconds since the Unix epoch.
    pub update_time_s: u64,
}

/// A Tinyid database seen as a segment store in index space, plus its tokens.
#[async_trait]
pub trait TinyidStore: RangeStore {
    /// Every `tiny_id_info` row idmint can serve, in ids, ordered by `biz_type`, at most
    /// `TAG_COUNT_MAX` (a row it cannot serve is left out; a request for it says why).
    async fn rows(&self) -> Result<Vec<TinyidRow>, StoreError>;

    /// The row of `biz_type`, in ids, compared exactly; a row idmint cannot serve is
    /// [`StoreError::Corrupt`] with the reason.
    async fn row(&self, biz_type: &Tag) -> Result<Option<TinyidRow>, StoreError>;

    /// Every `tiny_id_token` row whose `biz_type` is a valid tag and whose token is not empty
    /// (an empty token opens nothing, as in Tinyid); at most [`TINYID_TOKENS_MAX`].
    async fn tokens(&self) -> Result<Vec<TinyidToken>, StoreError>;

    /// The stride `biz_type` is served with, pinned by this store's first allocation of it.
    fn stride(&self, biz_type: &Tag) -> Option<Stride>;
}

#[cfg(feature = "mysql")]
pub use mysql::TinyidMySqlStore;

#[cfg(feature = "mysql")]
mod mysql;
