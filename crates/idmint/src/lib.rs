//! idmint: unique 64-bit ids inside your own process.
//!
//! The engines, one module each, every type their signatures use re-exported beside them (an
//! embedder needs this crate alone), their bounds and defaults in a `limits` module:
//!
//! | module | engine | ids |
//! |---|---|---|
//! | [`segment`] | [`Segments`] | per tag, from ranges reserved in a store (Meituan Leaf): a double buffer per tag, refilled in the background at a step paced to the consumption, ranges leased to remote clients, unissued ids given back at shutdown |
//! | [`snowflake`] | [`Snowflake`], [`CachedSnowflake`] | `time | worker | sequence` layouts, the worker id leased from a store; or a ring of pre-made ids on borrowed time |
//! | [`sequence`] | [`Sequences`] | Redis counters under a ceiling persisted in the store, plain or reset daily |
//! | [`format`](mod@format) | [`IdFormat`] | a tag's public ids: templates, encodings, a keyed permutation, decoding |
//! | [`uuid`] | [`Uuids`] | UUID v4/v7 and ULID, no store |
//! | [`node`] | [`Node`] | every engine above as one node, built by [`NodeBuilder`] from a [`NodeConfig`], with its start and shutdown order and the rules every transport shares (what `idmint serve` runs) |
//! | [`store`] | | the stores to start them on: memory, SQLite (feature `sqlite`, on by default), MySQL/MariaDB, PostgreSQL, Redis (features `mysql`, `postgres`, `redis`) |
//! | [`clock`] | | the wall clock the time-based engines read, injectable in tests |
//!
//! ```
//! use std::sync::Arc;
//!
//! use idmint::segment::{Count, SegmentConfig, Step};
//! use idmint::store::{MemoryStore, TagSpec};
//! use idmint::{Segments, Tag};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Any store: `store::SqliteStore::open(path).await?` keeps the tags across restarts.
//! let segments = Segments::start(Arc::new(MemoryStore::new()), SegmentConfig::default())?;
//! let order = Tag::parse("order")?;
//! let step = Step::new(1_000)?;
//! let spec = TagSpec { tag: order.clone(), step, start: None, description: Default::default(), force: false };
//! segments.create_tag(&spec).await?;
//!
//! let first = segments.next_id(&order).await?;
//! let batch = segments.next_ids(&order, Count::new(10)?).await?;
//! assert!(batch.iter().all(|range| range.ids().all(|id| id > first)));
//! segments.shutdown().await; // gives back what was not handed out
//! # Ok(())
//! # }
//! ```
//!
//! Every task it spawns belongs to a `TaskTracker` and stops on a `CancellationToken`
//! ([`Segments::shutdown`], [`Node::shutdown`]); it reads the wall clock only through an
//! injected [`Clock`]. It knows nothing of HTTP (ARCHITECTURE.md: what each crate may do).

mod cached;
pub mod clock;
mod config;
mod error;
mod generator;
mod giveback;
mod highwater;
mod idformat;
mod lease;
pub mod node;
mod registry;
mod segments;
mod seqbatch;
mod seqformat;
mod sequences;
mod snowflake_gen;
mod take_first;
pub mod tinyid;
mod unknown;
mod uuids;

pub use cached::CachedSnowflake;
pub use clock::{Clock, SystemClock};
pub use error::Error;
pub use idformat::IdFormat;
pub use idmint_core::{Tag, TagError};
pub use node::{Node, NodeBuilder, NodeConfig};
pub use segments::Segments;
pub use sequences::Sequences;
pub use snowflake_gen::Snowflake;
pub use uuids::Uuids;

pub mod segment {
    //! Segment-mode ids: [`Segments`] serves every tag of a store from a double buffer per tag.
    //!
    //! A tag's buffer holds two segments (ranges reserved in the store with one atomic update);
    //! the next is loaded in the background once the preload ratio of the current one is used,
    //! at a step paced to the tag's consumption. A store that goes backwards is caught by
    //! per-tag high-water marks ([`HIGH_WATER_FILE`] in the state directory); ranges leased to
    //! remote clients carry a proof ([`Lease`]); [`Segments::shutdown`] gives the unissued tail
    //! of each tag back.

    pub use crate::config::{ConfigError, SegmentConfig};
    pub use crate::error::Error;
    pub use crate::generator::{REFILL_DURATION_METRIC, TagGenerator, TagStatus};
    pub use crate::highwater::{HIGH_WATER_FILE, LOCK_FILE};
    pub use crate::lease::{Lease, TakeBackError};
    pub use crate::segments::{ByNameError, CreatedTag, Segments};
    pub use idmint_core::{
        BufferSnapshot, Count, Description, IdRange, PreloadRatio, SegmentSnapshot, StartId, Step,
        Tag, TagError, ValueError,
    };

    /// Bounds and defaults of segment serving. Configuration may lower a bound, never raise
    /// it.
    pub mod limits {
        pub use idmint_core::SEGMENT_LEN_MAX;
        pub use idmint_core::limits::{
            BATCH_COUNT_MAX, DESCRIPTION_LEN_MAX, GIVE_BACK_BATCH_MAX, GIVE_BACK_CONCURRENCY_MAX,
            GIVE_BACK_MS_MAX, ID_MAX, ID_MIN, PRELOAD_PERMILLE_DEFAULT, PRELOAD_PERMILLE_MAX,
            RATE_HISTORY_EVERY_MS, RATE_HISTORY_LEN, RATE_SAMPLE_MS, REFILL_RETRY_MS_MAX,
            REFILL_RETRY_MS_MIN, REFILL_WAIT_MS_DEFAULT, REFILL_WAIT_MS_MAX, REGRESSION_JUMPS_MAX,
            SEGMENT_DURATION_S_DEFAULT, SEGMENT_DURATION_S_MAX, SEGMENT_DURATION_S_MIN,
            STEP_DEFAULT, STEP_MAX, STEP_MIN, STORE_CALL_TIMEOUT_MS_DEFAULT,
            STORE_CALL_TIMEOUT_MS_MAX, TAG_COUNT_MAX, TAG_LEN_MAX, TAG_REFRESH_MS_DEFAULT,
            TAG_REFRESH_MS_MAX, TAG_REFRESH_MS_MIN, TAKE_SEGMENTS_MAX,
            UNKNOWN_TAG_LOOKUPS_PER_S_MAX, UNKNOWN_TAG_TTL_MS, UNKNOWN_TAGS_MAX,
        };
    }
}

pub mod snowflake {
    //! Snowflake-style ids: `time | worker | sequence` in one `u64`, in a [`Layout`].
    //!
    //! [`Snowflake`] holds a worker id (leased from a store with a fencing token, assigned by
    //! it, or static) and a persisted time mark ([`TIME_MARK_FILE`]), so a clock that steps back
    //! is waited out or refused, never repeated. [`CachedSnowflake`] serves the same ids from a
    //! ring of pre-made ones, filled a unit of borrowed time at a time (Baidu uid-generator).

    pub use crate::cached::{CachedConfig, CachedSnowflake};
    pub use crate::snowflake_gen::{
        Snowflake, SnowflakeConfig, SnowflakeError, SnowflakeStatus, TIME_MARK_FILE,
        TIME_MARK_LOCK_FILE, WorkerIdRange, WorkerIdSource, settle_ms,
    };
    pub use idmint_core::snowflake::{LifetimeError, PRESETS, Parts, UtcMs, UtcMsError};
    pub use idmint_core::{ClockPolicy, Layout, LayoutError, TimeUnit};

    /// Bounds and defaults of the snowflake engines.
    pub mod limits {
        pub use crate::cached::{
            CACHED_MAX_AGE_MS_DEFAULT, CACHED_MAX_AGE_MS_MAX, CACHED_MAX_AGE_MS_MIN,
            CACHED_MAX_LEAD_MS_DEFAULT, CACHED_RING_CAPACITY_DEFAULT, TAKE_WAIT_MS_MAX,
        };
        pub use crate::node::{
            SNOWFLAKE_RETRY_MS_MAX, SNOWFLAKE_RETRY_MS_MIN, SNOWFLAKE_START_ATTEMPT_MS_MAX,
        };
        pub use crate::snowflake_gen::{
            BORROW_LEAD_MS_MAX, CLOCK_OFFSET_PERIOD_MS, FIRST_ID_MS_DEFAULT_MAX,
            LEASE_MARGIN_MS_DEFAULT, LEASE_TTL_MS_DEFAULT, SETTLE_MS_DEFAULT,
            SNOWFLAKE_WAIT_MS_MAX, TIME_WINDOW_MS_DEFAULT, TIME_WINDOW_MS_MAX, TIME_WINDOW_MS_MIN,
            TOLERANCE_MS_DEFAULT, TOLERANCE_MS_MAX,
        };
        pub use idmint_core::limits::{
            CLOCK_TOLERANCE_MS_MAX, LAYOUT_BITS_MAX, LAYOUT_END_MS_MAX, LAYOUT_EXPIRY_HORIZON_MS,
            LAYOUT_EXPIRY_HORIZON_YEARS, LAYOUT_FIELD_BITS_MAX, LAYOUT_LIFETIME_MS_MIN,
            RING_ATTEMPTS_MAX, RING_CAPACITY_MAX, RING_CAPACITY_MIN, RING_PADDING_PERMILLE_DEFAULT,
            VIBRATION_BITS_DEFAULT_MAX, VIBRATION_COST_SHIFT,
        };
    }
}

pub mod sequence {
    //! Sequences: ids from Redis counters, each under a ceiling persisted in the store ahead of
    //! it, so a Redis that loses its data never repeats an id; plain or reset every day in a
    //! time zone, rendered by a [`SeqFormat`].

    pub use crate::seqformat::{SeqFormat, time_zone};
    pub use crate::sequences::{
        SEQUENCE_MARKS_FILE, SEQUENCE_MARKS_LOCK_FILE, SequenceConfig, SequenceError, SequenceIds,
        SequenceStatus, Sequences, prepare_sequence,
    };
    pub use jiff::tz::TimeZone;

    /// Bounds and defaults of sequences.
    pub mod limits {
        pub use crate::seqbatch::{SEQ_BATCH_IDS_MAX, SEQ_BATCH_WAITERS_MAX, SEQ_QUEUE_MAX};
        pub use crate::seqformat::{DAILY_FORMAT_DEFAULT, DAY_SPAN_CHECKED, SEQ_WIDTH_MAX};
        pub use crate::sequences::{
            DAILY_MARK_DAYS, DEFINITION_TTL_MS, IDLE_AFTER_S, RAISE_LOCK_MS, SEQ_COUNT_MAX,
            SEQ_MARK_LAG_MS_MAX, SEQ_MARK_WRITE_MS, SEQ_RAISE_MAX, SEQ_RAISE_MIN,
            SEQ_SHUTDOWN_MS_MAX, SEQ_WAIT_MS_DEFAULT,
        };
        pub use idmint_store::COUNTER_MAX;
    }
}

pub mod format {
    //! Public ids: a tag's [`IdFormat`] renders its ids through a template (dates, encodings,
    //! fixed widths), optionally permuted under a key so they do not reveal the count, and
    //! decodes them back; [`claim_key`] records a tag's key so it cannot change under it.

    pub use crate::idformat::{
        Decoded, FormatError, IdFormat, KEY_GUARD_PREFIX, Renderer, claim_key, key_guard_tag,
    };
    pub use idmint_core::encoding::{Encoding, EncodingError};
    pub use idmint_core::permute::{Permutation, PermuteError, PermuteKey};

    /// Bounds and defaults of formats.
    pub mod limits {
        pub use crate::idformat::{TEMPLATE_DEFAULT, TEMPLATE_LEN_MAX};
    }
}

pub mod uuid {
    //! UUID v4/v7 and ULID from the [`Clock`](crate::clock::Clock) and a CSPRNG: [`Uuids`].

    pub use crate::uuids::{Uuids, UuidsError};
    pub use idmint_core::uuid::{UuidError, UuidFormat};

    /// Bounds of the UUID engine.
    pub mod limits {
        pub use crate::uuids::UUID_LOCK_CHUNK;
    }
}

pub mod store {
    //! Stores to start the engines on, re-exported so an embedder needs one dependency. With the
    //! `mysql` / `postgres` features, `MySqlStore::from_pool` and `PgStore::from_pool` take the
    //! sqlx pool the application already has: ids in-process on its own database, no second
    //! pool and no idmint server.

    #[cfg(feature = "mysql")]
    pub use idmint_store::MySqlStore;
    #[cfg(feature = "postgres")]
    pub use idmint_store::PgStore;
    #[cfg(feature = "sqlite")]
    pub use idmint_store::SqliteStore;
    #[cfg(feature = "redis")]
    pub use idmint_store::redis::{RedisConn, RedisCounters, RedisStore, RedisUrl};
    pub use idmint_store::{
        AllocMode, Allocation, AssignRequest, CounterKey, CounterState, CounterStore,
        DEFAULT_STORE_URL, FlickerUrl, InterleavedStore, Lease, LeaseRecord, LeaseRequest,
        MemoryStore, SegmentStore, SequenceRecord, SequenceSpec, SequenceStore, SqlOptions, SqlUrl,
        StoreError, StoreUrl, TableName, TagRecord, TagSpec, Take, WorkerSpace, WorkerStore, open,
        open_counters, open_sequences, open_workers,
    };
}
