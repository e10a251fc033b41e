//! idmint: the embeddable id library.
//!
//! This crate wires the pure generators of `idmint-core` to the stores of `idmint-store`:
//! [`Segments`] serves segment-mode ids for every tag of a store, loading a tag on its first
//! request, refilling each tag's double buffer in the background (one refill per tag at a
//! time) at a step paced to the consumption rate, bounding every wait, dropping tags
//! deleted from the store, refusing ranges from a store that went backwards (per-tag
//! high-water marks, persisted in a state directory), and giving unissued ids back at
//! shutdown.
//!
//! It is the only crate that spawns tasks or reads time. Every task it spawns belongs to a
//! `TaskTracker` and stops on one `CancellationToken` ([`Segments::shutdown`]). It knows
//! nothing of HTTP.

mod config;
mod error;
mod generator;
mod highwater;
mod segments;

pub use config::{ConfigError, SegmentConfig};
pub use error::Error;
pub use generator::{TagGenerator, TagStatus};
pub use highwater::{HIGH_WATER_FILE, LOCK_FILE};
pub use idmint_core::{Count, IdRange, Tag};
pub use segments::Segments;
