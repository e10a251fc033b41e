//! Segment-mode ids: [`Segments`] serves every tag of a store from a double buffer per tag.
//!
//! A tag's buffer holds two segments (ranges reserved in the store with one atomic update);
//! the next is loaded in the background once the preload ratio of the current one is used,
//! at a step paced to the tag's consumption. A store that goes backwards is caught by
//! per-tag high-water marks ([`HIGH_WATER_FILE`] in the state directory); ranges leased to
//! remote clients carry a proof ([`RangeLease`]); [`Segments::shutdown`] gives the unissued tail
//! of each tag back.

mod config;
pub(crate) mod engine;
mod error;
pub(crate) mod generator;
mod giveback;
mod lease;
mod registry;
pub(crate) mod take_first;
pub(crate) mod unknown;

pub use crate::marks::{HIGH_WATER_FILE, LOCK_FILE};
pub use config::{ConfigError, SegmentConfig};
pub use engine::{ByNameError, CreatedTag, Segments};
pub use error::Error;
pub use generator::{REFILL_DURATION_METRIC, TagGenerator, TagStatus};
pub use idmint_core::{
    BufferSnapshot, Count, Description, IdRange, PreloadRatio, SegmentSnapshot, StartId, Step, Tag,
    TagError, ValueError,
};
pub use lease::{RangeLease, TakeBackError};

/// Bounds and defaults of segment serving. Configuration may lower a bound, never raise
/// it.
pub mod limits {
    pub use idmint_core::SEGMENT_LEN_MAX;
    pub use idmint_core::limits::{
        BATCH_COUNT_MAX, DESCRIPTION_LEN_MAX, GIVE_BACK_BATCH_MAX, GIVE_BACK_CONCURRENCY_MAX,
        GIVE_BACK_MS_MAX, ID_MAX, ID_MIN, PRELOAD_PERMILLE_DEFAULT, PRELOAD_PERMILLE_MAX,
        RATE_HISTORY_EVERY_MS, RATE_HISTORY_LEN, RATE_SAMPLE_MS, REFILL_RETRY_MS_MAX,
        REFILL_RETRY_MS_MIN, REFILL_WAIT_MS_DEFAULT, REFILL_WAIT_MS_MAX, REGRESSION_JUMPS_MAX,
        SEGMENT_DURATION_S_DEFAULT, SEGMENT_DURATION_S_MAX, SEGMENT_DURATION_S_MIN, STEP_DEFAULT,
        STEP_MAX, STEP_MIN, STORE_CALL_TIMEOUT_MS_DEFAULT, STORE_CALL_TIMEOUT_MS_MAX,
        TAG_COUNT_MAX, TAG_LEN_MAX, TAG_REFRESH_MS_DEFAULT, TAG_REFRESH_MS_MAX, TAG_REFRESH_MS_MIN,
        TAKE_SEGMENTS_MAX, UNKNOWN_TAG_LOOKUPS_PER_S_MAX, UNKNOWN_TAG_TTL_MS, UNKNOWN_TAGS_MAX,
    };
}
