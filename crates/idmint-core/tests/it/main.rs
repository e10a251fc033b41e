//! idmint-core's integration tests: one binary, one module per concern.

#![allow(clippy::unwrap_used, reason = "test helpers may panic: a panic is a test failure")]

mod buffer_model;
mod encoding_model;
mod pacing_model;
mod permute_model;
mod residue_model;
mod ring_model;
mod snowflake_model;
mod uuid_model;
