//! idmint's integration tests: one binary, one module per concern.

#![allow(clippy::unwrap_used, reason = "test helpers may panic: a panic is a test failure")]

mod by_name;
mod embedding;
#[cfg(feature = "mysql")]
mod flicker;
mod formats_model;
mod full_disk;
#[cfg(feature = "mysql")]
#[path = "../../../idmint-store/tests/it/gate.rs"]
#[allow(dead_code, reason = "shared with idmint-store's tests, which use all of it")]
mod gate;
mod give_back;
mod guard;
mod key_guard;
mod marks_ahead;
mod node;
mod pacing;
#[cfg(feature = "redis")]
mod redis_guard;
#[cfg(feature = "redis")]
#[path = "../../../idmint-store/tests/it/redis/keys.rs"]
mod redis_keys;
#[cfg(feature = "redis")]
mod sequences;
mod sequences_engine;
mod serving;
mod shutdown;
mod simulation;
mod snowflake;
mod snowflake_restart;
mod snowflake_shards;
mod snowflake_start;
mod strict;
mod test_store;
#[path = "../../../idmint-store/tests/it/tmpfs.rs"]
mod tmpfs;
#[cfg(feature = "mysql")]
mod tombstones;
mod uuids;
