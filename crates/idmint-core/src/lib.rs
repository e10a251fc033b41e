//! idmint-core: the pure logic of idmint.
//!
//! This crate owns tag names, the named limits, validated newtypes (`Step`, `Count`,
//! `StartId`, `Description`, `PreloadRatio`), the [`Segment`] with its atomic cursor and the
//! [`DoubleBuffer`] that hands ids out and says when a refill is needed.
//!
//! It must not do I/O, await, spawn, or read a clock: time and store answers arrive as
//! arguments, decisions leave as return values. That is what lets one simulation drive every
//! generator deterministically.

pub mod buffer;
pub mod limits;
pub mod segment;
pub mod tag;
pub mod values;

pub use buffer::{BufferSnapshot, DoubleBuffer, InstallError, Take};
pub use segment::{IdRange, Segment, SegmentSnapshot};
pub use tag::{Tag, TagError};
pub use values::{Count, Description, PreloadRatio, StartId, Step, ValueError};
