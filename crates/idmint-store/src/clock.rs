//! The clock of the stores that live on this machine (memory, SQLite): the time their worker
//! leases are judged by, as the database servers judge theirs by their own (`NOW(6)`,
//! `statement_timestamp()`, Redis `TIME`).
//!
//! A store on this machine has no clock of its own; the machine's is the one every process
//! sharing the store reads, so it is the store's. It is injectable so tests can move a
//! store's time apart from a node's. This file and `memory.rs` are the store crate's only
//! readers of the wall clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the store's time.
pub trait StoreClock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch; 0 for a clock set before it.
    fn now_ms(&self) -> u64;

    /// Microseconds since the Unix epoch, what lease tokens are drawn from; a clock that
    /// counts milliseconds only answers them in microseconds.
    fn now_us(&self) -> u64 {
        self.now_ms().saturating_mul(1_000)
    }
}

/// The machine's clock (`SystemTime`): the default of the memory and SQLite stores.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalClock;

impl StoreClock for LocalClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }

    fn now_us(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }
}
