//! A segment: a reserved id range `[start, end)` handed out by an atomic cursor.
//!
//! Taking ids is one `fetch_add` on the cursor: no lock, no allocation. Ranges taken from one
//! segment are disjoint and, in the order the cursor hands them out, increasing.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::limits::{BATCH_COUNT_MAX, ID_MAX, ID_MIN};
use crate::values::PreloadRatio;

/// A half-open id range `[start, end)`, never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdRange {
    start: u64,
    end: u64,
}

impl IdRange {
    /// A range `[start, end)`, or `None` if it is empty or leaves `ID_MIN..=ID_MAX`.
    pub fn new(start: u64, end: u64) -> Option<IdRange> {
        (ID_MIN <= start && start < end && end <= ID_MAX + 1).then_some(IdRange { start, end })
    }

    /// First id of the range.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past the last id of the range.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Number of ids in the range (at least 1).
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Always false: an `IdRange` is never empty. Present for API completeness.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The ids of the range, in increasing order.
    pub fn ids(&self) -> Range<u64> {
        self.start..self.end
    }
}

/// A point-in-time view of a segment, for status pages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// The segment's range.
    pub range: IdRange,
    /// The next id the segment would hand out (`range.end()` once spent).
    pub next_id: u64,
    /// The id whose take requests the next segment.
    pub preload_at: u64,
}

/// A reserved range with its cursor.
#[derive(Debug)]
pub struct Segment {
    range: IdRange,
    preload_at: u64,
    cursor: AtomicU64,
}

impl Segment {
    /// Makes a segment over `range` whose refill point is `ratio` of the way in.
    pub fn new(range: IdRange, ratio: PreloadRatio) -> Segment {
        let preload_at = range.start + ratio.preload_offset(range.len());
        // Invariants a duplicate would follow from: a non-empty range of valid ids, a refill
        // point inside it. `IdRange::new` checked them; they are re-asserted where the
        // segment is made because everything downstream trusts them.
        assert!(ID_MIN <= range.start && range.start < range.end && range.end <= ID_MAX + 1);
        assert!(range.start <= preload_at && preload_at < range.end);
        Segment { range, preload_at, cursor: AtomicU64::new(range.start) }
    }

    /// Takes up to `n` ids. Returns the range taken and whether this take crossed the
    /// preload point (exactly one take per segment does), or `None` if the segment is spent.
    ///
    /// # Panics
    /// If `n` is 0 or above [`BATCH_COUNT_MAX`] (callers pass a validated `Count`), or if the
    /// cursor went below the segment start (which would mean ids repeat).
    #[inline]
    pub fn take(&self, n: u64) -> Option<(IdRange, bool)> {
        assert!((1..=BATCH_COUNT_MAX).contains(&n));
        // Checking first keeps a spent segment's cursor from growing on every call, which
        // bounds its overshoot past `end` to (concurrent takers x n).
        if self.cursor.load(Ordering::Relaxed) >= self.range.end {
            return None;
        }
        // Relaxed is enough: uniqueness needs only the total order of RMWs on the cursor;
        // the range itself was published with the segment.
        let first = self.cursor.fetch_add(n, Ordering::Relaxed);
        if first >= self.range.end {
            return None;
        }
        assert!(first >= self.range.start, "segment cursor below start: ids would repeat");
        let end = (first + n).min(self.range.end);
        let crossed = first <= self.preload_at && self.preload_at < end;
        Some((IdRange { start: first, end }, crossed))
    }

    /// The segment's range.
    pub fn range(&self) -> IdRange {
        self.range
    }

    /// The first id not yet handed out (`end` once spent).
    pub fn next_id(&self) -> u64 {
        self.cursor.load(Ordering::Relaxed).min(self.range.end)
    }

    /// Ids not yet handed out.
    pub fn remaining(&self) -> u64 {
        self.range.end - self.next_id()
    }

    /// Whether every id has been handed out.
    pub fn is_spent(&self) -> bool {
        self.remaining() == 0
    }

    /// A point-in-time view of the segment.
    pub fn snapshot(&self) -> SegmentSnapshot {
        SegmentSnapshot { range: self.range, next_id: self.next_id(), preload_at: self.preload_at }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(start: u64, end: u64) -> Segment {
        Segment::new(IdRange::new(start, end).expect("valid range"), PreloadRatio::DEFAULT)
    }

    #[test]
    fn takes_in_order_until_spent_and_clips_the_last_take() {
        let s = segment(10, 20);
        // Preload point: 10 % of 10 ids -> offset 1 -> id 11, inside this first take.
        assert_eq!(s.take(3), Some((IdRange { start: 10, end: 13 }, true)));
        assert_eq!(s.take(5), Some((IdRange { start: 13, end: 18 }, false)));
        assert_eq!(s.take(5), Some((IdRange { start: 18, end: 20 }, false)));
        assert!(s.is_spent());
        assert_eq!(s.take(1), None);
        assert_eq!(s.next_id(), 20);
    }

    #[test]
    fn exactly_one_take_crosses_the_preload_point() {
        let s = segment(1, 101);
        let crossings = (0..100).filter_map(|_| s.take(1)).filter(|(_, c)| *c).count();
        assert_eq!(crossings, 1);
    }

    #[test]
    fn ranges_refuse_empty_zero_and_past_the_maximum() {
        assert!(IdRange::new(5, 5).is_none());
        assert!(IdRange::new(0, 5).is_none());
        assert!(IdRange::new(ID_MAX, ID_MAX + 2).is_none());
        assert!(IdRange::new(ID_MAX, ID_MAX + 1).is_some());
    }
}
