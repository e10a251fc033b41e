//! idmint: the embeddable id library.
//!
//! This crate wires the pure generators of `idmint-core` to the stores of `idmint-store`:
//! [`Segments`] serves segment-mode ids for every tag of a store, loading a tag on its first
//! request, refilling each tag's double buffer in the background (one refill per tag at a
//! time), bounding every wait, and dropping tags deleted from the store.
//!
//! It is the only crate that spawns tasks or reads time. Every task it spawns belongs to a
//! `TaskTracker` and stops on one `CancellationToken` ([`Segments::shutdown`]). It knows
//! nothing of HTTP.

mod config;
mod error;
mod generator;
mod segments;

pub use config::{ConfigError, SegmentConfig};
pub use error::Error;
pub use generator::TagGenerator;
pub use idmint_core::{Count, IdRange, Tag};
pub use segments::Segments;
