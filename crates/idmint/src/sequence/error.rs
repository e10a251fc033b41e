//! [`SequenceError`]: why sequence ids were not served, shared by the engine and its
//! per-counter queue (which answers waiters with it).

use idmint_core::Tag;
use idmint_store::StoreError;

/// Why sequence ids were not served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SequenceError {
    /// No such sequence.
    #[error("sequence {0} does not exist; create it with `idmint seq create {0}`")]
    NotFound(Tag),
    /// A bad request (count, definition); the message says how to fix it.
    #[error("{0}")]
    Invalid(String),
    /// No room below the ceiling within the wait, or the counters or the store failed.
    #[error("sequence {name}: {reason}")]
    Unavailable {
        /// The sequence.
        name: Tag,
        /// What failed.
        reason: String,
    },
    /// The sequence reached the largest number it can hold ([`COUNTER_MAX`](idmint_store::COUNTER_MAX)): final, no
    /// retry serves it. Its ceiling is left where it was.
    #[error(
        "sequence {name}{} has reached {limit}, the largest number a sequence holds; take ids \
         from a new sequence name{}",
        period_note(period),
        if period.is_empty() { "" } else { " (a daily sequence starts again at 1 the next day)" }
    )]
    Exhausted {
        /// The sequence.
        name: Tag,
        /// `""`, or the day (`YYYYMMDD`) of a daily sequence.
        period: String,
        /// The largest number it can hold.
        limit: u64,
    },
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The marks file could not be opened (damaged, or in use by another process); the
    /// message names the file and the fix.
    #[error("{0}")]
    LocalState(String),
}

/// `" (day YYYYMMDD)"` for a daily sequence's period, `""` for a plain one, in messages.
fn period_note(period: &str) -> String {
    if period.is_empty() { String::new() } else { format!(" (day {period})") }
}
