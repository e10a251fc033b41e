//! Sequences: ids from Redis counters, each under a ceiling persisted in the store ahead of
//! it, so a Redis that loses its data never repeats an id; plain or reset every day in a
//! time zone, rendered by a [`SeqFormat`].

mod batch;
pub(crate) mod engine;
mod error;
pub(crate) mod format;

pub use engine::{
    SEQUENCE_MARKS_FILE, SEQUENCE_MARKS_LOCK_FILE, SequenceConfig, SequenceIds, SequenceStatus,
    Sequences, prepare_sequence,
};
pub use error::SequenceError;
pub use format::{SeqFormat, time_zone};
pub use jiff::tz::TimeZone;

/// Bounds and defaults of sequences.
pub mod limits {
    pub use super::batch::{
        SEQ_BATCH_IDS_MAX, SEQ_BATCH_WAITERS_MAX, SEQ_COUNT_MAX, SEQ_QUEUE_MAX,
    };
    pub use super::engine::{
        DAILY_MARK_DAYS, DEFINITION_TTL_MS, IDLE_AFTER_S, RAISE_LOCK_MS, SEQ_MARK_LAG_MS_MAX,
        SEQ_MARK_WRITE_MS, SEQ_RAISE_MAX, SEQ_RAISE_MIN, SEQ_SHUTDOWN_MS_MAX, SEQ_WAIT_MS_DEFAULT,
    };
    pub use super::format::{DAILY_FORMAT_DEFAULT, DAY_SPAN_CHECKED, SEQ_WIDTH_MAX};
    pub use idmint_store::COUNTER_MAX;
}
