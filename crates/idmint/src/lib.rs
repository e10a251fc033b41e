//! idmint: the embeddable id library.
//!
//! This crate wires the pure generators of `idmint-core` to the stores of `idmint-store`:
//! [`Segments`] serves segment-mode ids for every tag of a store, loading a tag on its first
//! request, refilling each tag's double buffer in the background (one refill per tag at a
//! time) at a step paced to the consumption rate, bounding every wait, dropping tags
//! deleted from the store, refusing ranges from a store that went backwards (per-tag
//! high-water marks, persisted in a state directory), and giving unissued ids back at
//! shutdown. It leases whole ranges to remote clients with a proof (`lease.rs`) and takes
//! back what a client did not use when that is provably safe. [`Uuids`] makes UUID v4/v7 and ULID ids from the clock and a CSPRNG, no store.
//!
//! It is the only crate that spawns tasks or reads time. Every task it spawns belongs to a
//! `TaskTracker` and stops on one `CancellationToken` ([`Segments::shutdown`]). It knows
//! nothing of HTTP.

mod cached;
mod clock;
mod config;
mod error;
mod generator;
mod highwater;
mod idformat;
mod lease;
mod segments;
mod seqformat;
mod sequence;
mod snowflake;
mod unknown;
mod uuids;

pub use cached::{
    CACHED_MAX_LEAD_MS_DEFAULT, CACHED_RING_CAPACITY_DEFAULT, CachedConfig, CachedSnowflake,
    TAKE_WAIT_MS_MAX,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ConfigError, SegmentConfig};
pub use error::Error;
pub use generator::{REFILL_DURATION_METRIC, TagGenerator, TagStatus};
pub use highwater::{HIGH_WATER_FILE, LOCK_FILE};
pub use idformat::{
    Decoded, FormatError, IdFormat, KEY_GUARD_PREFIX, Renderer, TEMPLATE_DEFAULT, TEMPLATE_LEN_MAX,
    claim_key, key_guard_tag,
};
pub use idmint_core::{Count, IdRange, Tag};
pub use lease::{Lease, TakeBackError};
pub use segments::{CreatedTag, Segments};
pub use seqformat::{DAILY_FORMAT_DEFAULT, DAY_SPAN_CHECKED, SEQ_WIDTH_MAX, SeqFormat, time_zone};
pub use sequence::{
    DEFINITION_TTL_MS, IDLE_AFTER_S, RAISE_LOCK_MS, SEQ_COUNT_MAX, SEQ_RAISE_MAX, SEQ_RAISE_MIN,
    SEQ_WAIT_MS_DEFAULT, SequenceConfig, SequenceError, SequenceIds, SequenceStatus, Sequences,
    prepare_sequence,
};
pub use snowflake::{
    BORROW_LEAD_MS_MAX, LEASE_MARGIN_MS_DEFAULT, LEASE_TTL_MS_DEFAULT, SETTLE_MS_DEFAULT,
    SNOWFLAKE_WAIT_MS_MAX, Snowflake, SnowflakeConfig, SnowflakeError, SnowflakeStatus,
    TIME_MARK_FILE, TIME_MARK_LOCK_FILE, TIME_WINDOW_MS_DEFAULT, TIME_WINDOW_MS_MAX,
    TIME_WINDOW_MS_MIN, TOLERANCE_MS_DEFAULT, TOLERANCE_MS_MAX, WorkerIdSource, settle_ms,
};
pub use uuids::{UUID_LOCK_CHUNK, Uuids, UuidsError};

/// Stores to start [`Segments`] on, re-exported so an embedder needs one dependency. With the
/// `mysql` / `postgres` features, `MySqlStore::from_pool` and `PgStore::from_pool` take the
/// sqlx pool the application already has: ids in-process on its own database, no second
/// pool and no idmint server.
pub mod store {
    #[cfg(feature = "mysql")]
    pub use idmint_store::MySqlStore;
    #[cfg(feature = "postgres")]
    pub use idmint_store::PgStore;
    #[cfg(feature = "sqlite")]
    pub use idmint_store::SqliteStore;
    pub use idmint_store::{
        AllocMode, CounterStore, InterleavedStore, MemoryStore, SegmentStore, SequenceSpec,
        SequenceStore, SqlOptions, StoreError, StoreUrl, TableName, TagSpec, open, open_counters,
    };
}
