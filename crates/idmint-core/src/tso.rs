//! The timestamp oracle's arithmetic: 64-bit timestamps `physical_ms << 18 | logical`
//! (PD's layout: milliseconds since the Unix epoch above an 18-bit counter), and the step
//! that hands out a batch of them above every one handed out before and below a ceiling.
//!
//! The owner of the oracle holds a ceiling, a time in milliseconds reserved in the store
//! ahead of its clock: every timestamp it hands out has its physical part at or below the
//! ceiling, and a new owner starts above the ceiling it inherits. A clock behind the last
//! timestamp (or the inherited ceiling) is never followed back: the batch comes from the
//! logical part of the last millisecond, then from the next millisecond.

use crate::snowflake::UtcMs;

/// Bits of a timestamp's logical part.
pub const LOGICAL_BITS: u32 = 18;
/// The largest logical part.
pub const LOGICAL_MAX: u64 = (1 << LOGICAL_BITS) - 1;
/// The most timestamps one batch holds: they share one millisecond.
pub const BATCH_MAX: u64 = 1 << LOGICAL_BITS;
/// The largest physical part: 2^46 - 1 ms after the Unix epoch (the year 4199).
pub const PHYSICAL_MS_MAX: u64 = (1 << (64 - LOGICAL_BITS)) - 1;

/// `physical_ms << 18 | logical`, or `None` past either part's range.
pub const fn compose(physical_ms: u64, logical: u64) -> Option<u64> {
    if physical_ms > PHYSICAL_MS_MAX || logical > LOGICAL_MAX {
        return None;
    }
    Some(physical_ms << LOGICAL_BITS | logical)
}

/// A timestamp's parts: milliseconds since the Unix epoch and the logical counter.
pub const fn split(timestamp: u64) -> (u64, u64) {
    (timestamp >> LOGICAL_BITS, timestamp & LOGICAL_MAX)
}

/// A timestamp's parts, for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The timestamp.
    pub timestamp: u64,
    /// Milliseconds since the Unix epoch.
    pub physical_ms: u64,
    /// The counter within the millisecond.
    pub logical: u64,
    /// The physical part as a UTC time.
    pub time: UtcMs,
}

/// `timestamp`'s parts.
pub const fn decode(timestamp: u64) -> Parts {
    let (physical_ms, logical) = split(timestamp);
    Parts { timestamp, physical_ms, logical, time: UtcMs(physical_ms) }
}

/// What [`take`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// `count` timestamps from `first`, all in one millisecond; the next batch starts at
    /// `first + count`.
    Granted {
        /// The first timestamp of the batch.
        first: u64,
    },
    /// The batch would pass the ceiling: raise it to at least `need_ms` first.
    Raise {
        /// The physical part the batch needs.
        need_ms: u64,
    },
    /// The batch would reach [`PHYSICAL_MS_MAX`]: the oracle is spent.
    Exhausted,
}

/// A batch of `count` (1 to [`BATCH_MAX`]) timestamps at or above `next` and at or above the
/// clock's `now_ms`, in one millisecond, whose physical part is at most `ceiling_ms`.
pub fn take(next: u64, ceiling_ms: u64, now_ms: u64, count: u64) -> Take {
    debug_assert!((1..=BATCH_MAX).contains(&count));
    let Some(at_clock) = compose(now_ms.min(PHYSICAL_MS_MAX), 0) else { return Take::Exhausted };
    let mut first = next.max(at_clock);
    let (physical_ms, logical) = split(first);
    if logical + count > BATCH_MAX {
        // The rest of this millisecond is too small: the next one, its logical part from 0.
        match compose(physical_ms + 1, 0) {
            Some(next_ms) => first = next_ms,
            None => return Take::Exhausted,
        }
    }
    let need_ms = split(first).0;
    // The last millisecond is never used: `first + count` (the next batch's start) fits.
    if need_ms >= PHYSICAL_MS_MAX {
        return Take::Exhausted;
    }
    if need_ms > ceiling_ms {
        return Take::Raise { need_ms };
    }
    Take::Granted { first }
}

/// The first timestamp an owner that inherits `ceiling_ms` may hand out: above every
/// timestamp any earlier owner handed out.
pub const fn first_above(ceiling_ms: u64) -> Option<u64> {
    compose(ceiling_ms.saturating_add(1), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_is_the_milliseconds_above_an_18_bit_counter() {
        assert_eq!(compose(1, 0), Some(1 << 18));
        assert_eq!(compose(1_795_333_265_390, 7).map(split), Some((1_795_333_265_390, 7)));
        assert_eq!(compose(PHYSICAL_MS_MAX, LOGICAL_MAX), Some(u64::MAX));
        assert_eq!(compose(PHYSICAL_MS_MAX + 1, 0), None);
        assert_eq!(compose(0, LOGICAL_MAX + 1), None);
        let parts = decode(compose(1_795_333_265_390, 3).unwrap());
        assert_eq!(parts.time.to_string(), "2026-11-22T07:41:05.390Z");
    }

    #[test]
    fn a_batch_starts_at_the_clock_or_above_the_last_and_never_spans_a_millisecond() {
        let at = |ms, logical| compose(ms, logical).unwrap();
        // The clock ahead of the last: the batch starts at the clock.
        assert_eq!(take(at(100, 5), 200, 150, 10), Take::Granted { first: at(150, 0) });
        // The clock behind the last (stepped back, or behind an inherited ceiling): the batch
        // continues the last millisecond's logical part.
        assert_eq!(take(at(100, 5), 200, 90, 10), Take::Granted { first: at(100, 5) });
        // Too few logical values left in the millisecond: the next millisecond.
        assert_eq!(take(at(100, LOGICAL_MAX), 200, 90, 2), Take::Granted { first: at(101, 0) });
        assert_eq!(take(at(100, 0), 200, 90, BATCH_MAX), Take::Granted { first: at(100, 0) });
        // Past the ceiling: raise first.
        assert_eq!(take(at(100, 0), 120, 121, 1), Take::Raise { need_ms: 121 });
        assert_eq!(
            take(at(120, LOGICAL_MAX), 120, 0, 1),
            Take::Granted { first: at(120, LOGICAL_MAX) }
        );
        assert_eq!(take(at(120, LOGICAL_MAX), 120, 0, 2), Take::Raise { need_ms: 121 });
        assert_eq!(take(u64::MAX, u64::MAX, 0, 1), Take::Exhausted);
        assert_eq!(first_above(120), Some(at(121, 0)));
    }

    /// A seeded walk of a clock that jumps both ways, batches of every size and ceilings
    /// raised when asked: every batch is above the last, and under the ceiling.
    #[test]
    fn batches_strictly_increase_under_the_ceiling_whatever_the_clock_does() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut random = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let (mut next, mut ceiling, mut now) = (first_above(1_000).unwrap(), 1_000, 900);
        let mut last = None;
        for _ in 0..200_000 {
            now = (now + random(5)).saturating_sub(random(4));
            let count = if random(10) == 0 { 1 + random(BATCH_MAX) } else { 1 + random(100) };
            match take(next, ceiling, now, count) {
                Take::Granted { first } => {
                    let end = first + count - 1;
                    assert!(last.is_none_or(|l| first > l), "{first} after {last:?}");
                    assert_eq!(split(first).0, split(end).0, "a batch spans a millisecond");
                    assert!(split(end).0 <= ceiling);
                    (last, next) = (Some(end), end + 1);
                }
                Take::Raise { need_ms } => {
                    assert!(need_ms > ceiling);
                    ceiling = need_ms.max(now) + random(3_000);
                }
                Take::Exhausted => unreachable!(),
            }
        }
    }
}
