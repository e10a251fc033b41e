//! idmint-core: the pure logic of idmint.
//!
//! This crate owns tag names, the named limits, validated newtypes (`Step`, `Count`,
//! `StartId`, `Description`, `PreloadRatio`), segment ranges ([`IdRange`]) and the
//! [`DoubleBuffer`] that hands them out with one atomic cursor and says when a refill is
//! needed, the pacing arithmetic (`pacing.rs`) that sizes segments from the measured
//! rate, the block arithmetic of residue interleaving over N stores (`residue.rs`),
//! snowflake-style layouts with the pure state step of their generator (`snowflake.rs`) and
//! the one atomic word that lets every core step it without a lock (`snowflake_cell.rs`),
//! the lock-free [`Ring`] of pre-made ids behind the cached generator (`ring.rs`), the
//! string encodings of ids (`encoding.rs`), the keyed permutation behind non-guessable
//! public ids (`permute.rs`), and UUID v4/v7 and ULID: monotonic states, text forms and
//! parsing (`uuid.rs`), and Didi Tinyid's `delta`/`remainder` arithmetic (`stride.rs`), and the timestamp
//! oracle's layout and step (`tso.rs`).
//!
//! It must not do I/O, await, spawn, or read a clock: time and store answers arrive as
//! arguments, decisions leave as return values. That is what lets one simulation drive every
//! generator deterministically.

pub mod buffer;
pub mod encoding;
pub mod limits;
pub mod pacing;
pub mod permute;
pub mod residue;
pub mod ring;
pub mod segment;
pub mod snowflake;
pub mod snowflake_cell;
pub mod stride;
pub mod tag;
pub mod tso;
pub mod uuid;
pub mod values;

mod sync;

pub use buffer::{BufferSnapshot, DoubleBuffer, InstallError, SEGMENT_LEN_MAX, Take};
pub use pacing::RateMeter;
pub use ring::{Ring, RingError};
pub use segment::{IdRange, SegmentSnapshot};
// `snowflake::Step`, `Start` and `Parts` stay in their module: the root's `Step` is the
// segment step.
pub use snowflake::{ClockPolicy, Layout, LayoutError, TimeUnit};
pub use stride::{Stride, StrideError};
pub use tag::{INTERNAL_PREFIX, TAG_RULE, Tag, TagError, is_internal_name};
pub use values::{Count, Description, PreloadRatio, StartId, Step, ValueError};
