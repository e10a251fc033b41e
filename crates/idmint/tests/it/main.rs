//! idmint's integration tests: one binary, one module per concern.

#![allow(clippy::unwrap_used, reason = "test helpers may panic: a panic is a test failure")]

mod embedding;
mod guard;
mod pacing;
mod serving;
mod shutdown;
mod simulation;
mod test_store;
