//! idmint-store's integration tests, in one binary so they link once.
//!
//! `conformance` is the backend-agnostic suite every `SegmentStore` must pass; each backend
//! module instantiates it with a factory and adds the checks only that backend can make
//! (persistence, foreign table layouts). `inputs` checks the newtypes that guard the trait.
//! Everything here is hermetic: no network, files only in temporary directories.

// Helpers outside `#[test]` functions are test code too: an unwrap that panics is a failing
// check, reported with its line.
#![allow(clippy::unwrap_used, reason = "in tests, a panicking unwrap is a failed assertion")]

mod conformance;
mod inputs;
mod memory;
mod sqlite;
