//! The synchronisation primitives the double buffer and the id ring use: std's, or loom's
//! when built with `--cfg loom` so `tests/loom.rs` can explore every interleaving of takes,
//! switches, puts and fills.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

pub(crate) use std::sync::PoisonError;
