//! idmint-store's integration tests, in one binary so they link once.
//!
//! `conformance` is the backend-agnostic suite every `SegmentStore` must pass; each backend
//! module instantiates it with a factory and adds the checks only that backend can make
//! (persistence, foreign table layouts). `inputs` checks the newtypes that guard the trait.
//! Memory and SQLite are hermetic (files only in temporary directories). MySQL, PostgreSQL
//! and Redis (features `mysql`, `postgres`, `redis`) run against the servers the test kit
//! gives (those `IDMINT_TEST_MYSQL_URL` / `IDMINT_TEST_POSTGRES_URL` / `IDMINT_TEST_REDIS_URL`
//! name, else private ones started from the installed binaries), each run in a fresh
//! database or key prefix, and are skipped, and reported in the run's summary, when neither
//! is there. `workers` is the suite every `WorkerStore` must pass (worker
//! leases and assigned ids), instantiated there for all four backends; `sequences` likewise
//! for every `SequenceStore` (sequence definitions and their ceilings); `meta` for every
//! `TagMetaStore` (per-tag values changed by compare-and-set).

// Helpers outside `#[test]` functions are test code too: an unwrap that panics is a failing
// check, reported with its line.
#![allow(clippy::unwrap_used, reason = "in tests, a panicking unwrap is a failed assertion")]

mod conformance;
#[cfg(feature = "mysql")]
mod flicker;
#[cfg(feature = "mysql")]
mod gate;
#[cfg(all(feature = "mysql", feature = "postgres"))]
mod grants;
mod inputs;
mod interleave;
mod memory;
mod meta;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
mod sequences;
mod sqlite;
mod tmpfs;
mod workers;
