//! A segment's values: the reserved id range `[start, end)` and a snapshot of how far it was
//! handed out. The atomic cursor that hands a segment out lives in the double buffer
//! (`buffer.rs`), which packs it with the segment's epoch.

use std::ops::Range;

use crate::limits::{ID_MAX, ID_MIN};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_refuse_empty_zero_and_past_the_maximum() {
        assert!(IdRange::new(5, 5).is_none());
        assert!(IdRange::new(0, 5).is_none());
        assert!(IdRange::new(ID_MAX, ID_MAX + 2).is_none());
        assert_eq!(IdRange::new(ID_MAX, ID_MAX + 1).map(|r| r.len()), Some(1));
        assert_eq!(IdRange::new(3, 6).map(|r| r.ids().collect::<Vec<_>>()), Some(vec![3, 4, 5]));
    }
}
