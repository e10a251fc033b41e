//! [`Tinyid`]: Didi Tinyid's `biz_type`s served from an existing Tinyid database, beside
//! Tinyid's own servers.
//!
//! The ids come from a [`Segments`] engine of its own over the [`TinyidStore`], which speaks
//! in indices (`idmint_store::TinyidStore`): the double buffer, its background refill, the
//! store-regression guard (a marks file of its own, `STATE_DIR/tinyid`) and the shutdown's
//! give-back all work unchanged, and each index leaves as `k * delta + remainder` through the
//! `biz_type`'s pinned [`Stride`]. A Tinyid segment handed to a client (`nextSegmentId`) is one
//! contiguous run of indices taken from the same buffer, so a client's segment and this
//! node's own ids never overlap.
//!
//! The token table (`tiny_id_token`) is read at start and reread every
//! `token_refresh_ms` (Tinyid: every minute) by a loop on the engine's tracker; a reread that
//! fails keeps the last table. Tokens are compared in constant time.
//!
//! It must not know HTTP, or read the wall clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use idmint_core::limits::{BATCH_COUNT_MAX, ID_MAX};
use idmint_core::{Count, IdRange, SegmentSnapshot, Stride, Tag};
use idmint_store::{RangeStore, StoreError, TinyidRow, TinyidStore};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::segment::{Error, Segments};
use crate::segment::{SegmentConfig, TagStatus};

/// Tinyid's token refresh period, and the default here.
pub const TOKEN_REFRESH_MS_DEFAULT: u64 = 60_000;
/// Shortest token refresh period accepted.
pub const TOKEN_REFRESH_MS_MIN: u64 = 1_000;
/// Longest token refresh period accepted: a token deleted from the table stops working
/// within this time.
pub const TOKEN_REFRESH_MS_MAX: u64 = 3_600_000;
/// Tinyid's `batch.size.max`, and the default largest `batchSize` here.
pub const BATCH_SIZE_MAX_DEFAULT: u64 = 10_000;
/// Largest segment handed to a client (`nextSegmentId`), in ids: Tinyid hands out the row's
/// step; a larger step is cut to this.
pub const CLIENT_SEGMENT_IDS_MAX: u64 = BATCH_COUNT_MAX;
/// Tinyid's preload point of a segment handed to a client: `loadingId` is this percentage of
/// the way from `currentId` to `maxId`.
pub const LOADING_PERCENT: u64 = 20;

const _: () = assert!(TOKEN_REFRESH_MS_MIN <= TOKEN_REFRESH_MS_DEFAULT);
const _: () = assert!(TOKEN_REFRESH_MS_DEFAULT <= TOKEN_REFRESH_MS_MAX);
const _: () = assert!(BATCH_SIZE_MAX_DEFAULT <= BATCH_COUNT_MAX);

/// How the Tinyid engine runs.
#[derive(Debug, Clone)]
pub struct TinyidConfig {
    /// The segment engine's tunables (its state directory, if any, is used for a marks file
    /// of its own in its `tinyid` subdirectory).
    pub segment: SegmentConfig,
    /// How often `tiny_id_token` is reread, in ms.
    pub token_refresh_ms: u64,
    /// Largest `batchSize` served: a larger one is cut to it, as Tinyid's `batch.size.max`
    /// does (at most `BATCH_COUNT_MAX`).
    pub batch_size_max: u64,
}

impl Default for TinyidConfig {
    fn default() -> TinyidConfig {
        TinyidConfig {
            segment: SegmentConfig::default(),
            token_refresh_ms: TOKEN_REFRESH_MS_DEFAULT,
            batch_size_max: BATCH_SIZE_MAX_DEFAULT,
        }
    }
}

/// A Tinyid segment, as Tinyid's `SegmentId`: the client hands out the ids `id` in
/// `(current_id, max_id]` with `id % delta == remainder`, and loads its next segment once it
/// passes `loading_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TinyidSegment {
    /// Below the segment's first id.
    pub current_id: u64,
    /// Where the client starts loading its next segment.
    pub loading_id: u64,
    /// The segment's last id (inclusive).
    pub max_id: u64,
    /// The step between ids.
    pub delta: u64,
    /// `id % delta` of every id.
    pub remainder: u64,
}

/// The `source` label of the `biz_type`s' metric series (and `kind` in status answers).
pub const METRICS_SOURCE: &str = "tinyid";

/// A `biz_type` as this node serves it: its row, and this node's buffer of it in ids.
#[derive(Debug, Clone)]
pub struct BizTypeView {
    /// The `tiny_id_info` row, in ids.
    pub row: TinyidRow,
    /// This node's segments, pacing and counters, when it serves the `biz_type`: the
    /// segments, next ids and high-water mark in ids (`k * delta + remainder`), the counts
    /// (remaining, handed out) and rates in ids.
    pub status: Option<TagStatus>,
}

/// Tokens by `biz_type`.
type TokenMap = HashMap<Tag, Vec<Box<[u8]>>>;

/// Tinyid's `biz_type`s, served.
pub struct Tinyid {
    store: Arc<dyn TinyidStore>,
    batch_size_max: u64,
    segments: Arc<Segments>,
    tokens: Arc<ArcSwap<TokenMap>>,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Tinyid {
    /// Starts serving `store`: reads the tokens (a failure stops the start), starts the
    /// segment engine and the token refresh. Must be called inside a tokio runtime.
    pub async fn start(
        store: Arc<dyn TinyidStore>,
        config: TinyidConfig,
    ) -> Result<Arc<Tinyid>, Error> {
        let refresh_ms = config.token_refresh_ms.clamp(TOKEN_REFRESH_MS_MIN, TOKEN_REFRESH_MS_MAX);
        let batch_size_max = config.batch_size_max.clamp(1, BATCH_COUNT_MAX);
        let tokens = Arc::new(ArcSwap::from_pointee(read_tokens(store.as_ref()).await?));
        let mut segment = config.segment.with_metrics_source(METRICS_SOURCE);
        if let Some(dir) = segment.state_dir().map(|d| d.join("tinyid")) {
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::LocalState(format!("cannot create {}: {e}", dir.display())))?;
            segment = segment.with_state_dir(dir);
        }
        let segments = Segments::start_ranges(Arc::clone(&store) as Arc<dyn RangeStore>, segment)?;
        let tinyid = Arc::new(Tinyid {
            store,
            batch_size_max,
            segments,
            tokens,
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
        });
        tinyid.tracker.spawn(refresh_tokens(
            Arc::clone(&tinyid.store),
            Arc::clone(&tinyid.tokens),
            Duration::from_millis(refresh_ms),
            tinyid.cancel.clone(),
        ));
        Ok(tinyid)
    }

    /// Whether `token` opens `biz_type` in `tiny_id_token`: compared in constant time with
    /// every token of that `biz_type` (the time says neither which one matched nor where a
    /// wrong one differs). A token of another `biz_type` never opens this one.
    pub fn token_opens(&self, biz_type: &Tag, token: &str) -> bool {
        let tokens = self.tokens.load();
        let Some(accepted) = tokens.get(biz_type) else { return false };
        let given = token.as_bytes();
        let mut open = false;
        for candidate in accepted {
            let equal = candidate.len() == given.len() && bool::from(candidate.ct_eq(given));
            open |= equal;
        }
        open
    }

    /// `batch_size` ids of `biz_type` (cut to `batch_size_max`, as Tinyid does), increasing,
    /// each `≡ remainder (mod delta)`.
    pub async fn next_ids(&self, biz_type: &Tag, batch_size: Count) -> Result<Vec<u64>, Error> {
        // Cannot fail: clamped to 1..=batch_size_max <= BATCH_COUNT_MAX.
        let count = Count::new(batch_size.get().min(self.batch_size_max)).unwrap_or(Count::ONE);
        let ranges = self.segments.next_ids(biz_type, count).await?;
        let stride = self.stride(biz_type)?;
        Ok(ranges.into_iter().flat_map(|range| stride.ids(range)).collect())
    }

    /// A segment for a Tinyid client: one contiguous run of the `biz_type`'s ids from this
    /// node's buffer, as long as the row's step (at most [`CLIENT_SEGMENT_IDS_MAX`] ids) or
    /// shorter where the buffer's current segment ends. The rest of what was taken is given
    /// back to the buffer when it can be, else skipped (never handed out twice).
    pub async fn next_segment(&self, biz_type: &Tag) -> Result<TinyidSegment, Error> {
        let generator = self.segments.generator(biz_type)?;
        let mut tag_step = generator.status().tag_step;
        if tag_step == 0 {
            // No allocation yet: the row's step (in indices), read once, so the first
            // client segment is as long as Tinyid's.
            tag_step = self.segments.get_tag(biz_type).await?.step;
        }
        let want = tag_step.clamp(1, CLIENT_SEGMENT_IDS_MAX);
        // Cannot fail: `want` is clamped to 1..=CLIENT_SEGMENT_IDS_MAX = BATCH_COUNT_MAX.
        let count = Count::new(want).unwrap_or(Count::ONE);
        let leases = self.segments.lease(biz_type, count).await?;
        let stride = self.stride(biz_type)?;
        let first = leases.first().map(|lease| lease.range).ok_or_else(|| Error::Unavailable {
            tag: biz_type.clone(),
            reason: "no ids were taken; retry".into(),
        })?;
        if let (Some(second), Some(last)) = (leases.get(1), leases.last()) {
            // Only the first run is handed out; the rest goes back when the buffer can
            // prove it safe (returns 0 otherwise: the ids are skipped).
            let _ = self.segments.take_back(
                biz_type,
                second.range.start(),
                last.range.end(),
                &leases[1..],
            );
        }
        segment_of(stride, first).ok_or_else(|| {
            Error::Store(StoreError::Exhausted {
                tag: biz_type.clone(),
                max_id: first.end(),
                step: 0,
            })
        })
    }

    /// The segment engine (its statuses in index space, for metrics: counts and rates are
    /// the same in ids).
    pub fn segments(&self) -> &Arc<Segments> {
        &self.segments
    }

    /// Every `tiny_id_info` row idmint can serve, with this node's buffer of each.
    pub async fn biz_types(&self) -> Result<Vec<BizTypeView>, Error> {
        let rows = self.segments.store_call(self.store.rows()).await?;
        Ok(rows.into_iter().map(|row| self.view(row)).collect())
    }

    /// The row of `biz_type` with this node's buffer of it; [`Error::UnknownTag`] when the
    /// table has no row of exactly that name.
    pub async fn biz_type(&self, biz_type: &Tag) -> Result<BizTypeView, Error> {
        match self.segments.store_call(self.store.row(biz_type)).await? {
            Some(row) => Ok(self.view(row)),
            None => Err(Error::UnknownTag(biz_type.clone())),
        }
    }

    fn view(&self, row: TinyidRow) -> BizTypeView {
        // The indices in memory follow the stride pinned by the first allocation.
        let stride = self.store.stride(&row.biz_type).unwrap_or(row.stride);
        let status = self.segments.status(&row.biz_type).map(|s| in_ids(stride, s));
        BizTypeView { row, status }
    }

    /// Where the store lives, for logs (password removed).
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// Stops the token refresh and the segment engine (giving each `biz_type`'s unissued
    /// ids back, by a compare-and-set that loses to any allocation made since).
    pub async fn shutdown(&self) {
        self.segments.shutdown().await;
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    fn stride(&self, biz_type: &Tag) -> Result<Stride, Error> {
        // Every index came from an allocation of this store, which pinned the stride first.
        self.store.stride(biz_type).ok_or_else(|| Error::Unavailable {
            tag: biz_type.clone(),
            reason: "no stride pinned yet; retry".into(),
        })
    }
}

impl Drop for Tinyid {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Tinyid's `SegmentId` of a run of indices: `current_id` just below its first id, so that
/// Tinyid's client (`init()`, then `nextId()`) hands out exactly the run's ids.
pub fn segment_of(stride: Stride, indices: IdRange) -> Option<TinyidSegment> {
    let first = stride.id(indices.start())?;
    let max_id = stride.id(indices.end() - 1)?;
    let current_id = first - 1;
    let loading_id = current_id + (max_id - current_id) * LOADING_PERCENT / 100;
    Some(TinyidSegment {
        current_id,
        loading_id,
        max_id,
        delta: stride.delta(),
        remainder: stride.remainder(),
    })
}

/// A status in index space as ids: each index `k` as `k * delta + remainder` (a range's
/// exclusive end as the id of its end index); counts and rates are the same in ids.
fn in_ids(stride: Stride, mut status: TagStatus) -> TagStatus {
    // Every index in memory came from a range the store checked against ID_MAX.
    let id = |k: u64| stride.id(k).unwrap_or(ID_MAX);
    let segment = |s: SegmentSnapshot| {
        IdRange::new(id(s.range.start()), id(s.range.end())).map(|range| SegmentSnapshot {
            range,
            next_id: id(s.next_id),
            preload_at: id(s.preload_at),
        })
    };
    status.buffer.current = status.buffer.current.and_then(segment);
    status.buffer.next = status.buffer.next.and_then(segment);
    status.buffer.high_water = id(status.buffer.high_water);
    status
}

async fn read_tokens(store: &dyn TinyidStore) -> Result<TokenMap, Error> {
    let rows = store.tokens().await?;
    let mut map = TokenMap::new();
    for row in rows {
        map.entry(row.biz_type).or_default().push(row.token.into_bytes().into_boxed_slice());
    }
    Ok(map)
}

async fn refresh_tokens(
    store: Arc<dyn TinyidStore>,
    tokens: Arc<ArcSwap<TokenMap>>,
    every: Duration,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        match read_tokens(store.as_ref()).await {
            Ok(map) => {
                tracing::debug!(biz_types = map.len(), "tinyid tokens reread");
                tokens.store(Arc::new(map));
            }
            Err(error) => tracing::warn!(%error, "tinyid tokens not reread; the last table stays"),
        }
    }
}
