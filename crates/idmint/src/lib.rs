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

pub mod clock;
mod fence;
pub mod format;
mod marks;
pub mod node;
pub mod peer;
pub mod segment;
pub mod sequence;
pub mod snowflake;
pub mod strict;
pub mod tinyid;
pub mod uuid;
pub mod witness;

pub use clock::{Clock, SystemClock};
pub use format::IdFormat;
pub use idmint_core::{Tag, TagError};
pub use node::{Node, NodeBuilder, NodeConfig};
pub use segment::{Error, Segments};
pub use sequence::Sequences;
pub use snowflake::{CachedSnowflake, Snowflake};
pub use uuid::Uuids;

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
        LeaseStore, MemoryStore, RangeStore, SegmentStore, SequenceRecord, SequenceSpec,
        SequenceStore, SqlOptions, SqlUrl, StoreError, StoreUrl, TableName, TagMetaStore,
        TagRecord, TagSpec, Take, WorkerSpace, WorkerStore, open, open_counters, open_sequences,
        open_workers,
    };
}
