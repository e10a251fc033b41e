//! The double buffer: a current segment handing ids out and a next one loaded ahead of need.
//!
//! Taking ids loads the current segment (a lock-free `ArcSwap` read) and steps its cursor.
//! When the current segment is spent the buffer switches to the next one under a small lock,
//! once per segment. The buffer never fetches: a take reports "refill needed" and the caller
//! (the `idmint` library) asks the store and calls [`DoubleBuffer::install`].
//!
//! Invariant: every installed range starts at or above the end of every range installed
//! before it, so ids from one buffer only ever increase.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwapOption;

use crate::limits::TAKE_SEGMENTS_MAX;
use crate::segment::{IdRange, Segment, SegmentSnapshot};
use crate::values::{Count, PreloadRatio};

/// The per-tag double buffer.
#[derive(Debug)]
pub struct DoubleBuffer {
    current: ArcSwapOption<Segment>,
    next: ArcSwapOption<Segment>,
    /// Serialises installs and switches (the refill path); holds the end of the highest range
    /// ever installed, below which nothing may be installed again.
    high_water: Mutex<u64>,
    ratio: PreloadRatio,
}

/// What one take got: up to [`TAKE_SEGMENTS_MAX`] contiguous ranges, in increasing order, and
/// whether the caller should make sure a refill is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    ranges: [Option<IdRange>; TAKE_SEGMENTS_MAX],
    count: u64,
    refill_needed: bool,
}

/// Why a range was not installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InstallError {
    /// The range starts below the end of a range this buffer already holds or held: the store
    /// went backwards (a restored backup, a lagging replica). Installing it would repeat ids.
    Regression {
        /// The refused range.
        range: IdRange,
        /// The end of the highest range installed so far.
        high_water: u64,
    },
    /// Both segments are occupied and the current one is not spent: the caller refilled
    /// without need.
    Full,
}

/// A point-in-time view of both segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSnapshot {
    /// The segment ids are taken from, if any was installed.
    pub current: Option<SegmentSnapshot>,
    /// The segment loaded ahead, if any.
    pub next: Option<SegmentSnapshot>,
}

impl DoubleBuffer {
    /// An empty buffer whose segments request a refill once `ratio` of them is used.
    pub fn new(ratio: PreloadRatio) -> DoubleBuffer {
        DoubleBuffer {
            current: ArcSwapOption::empty(),
            next: ArcSwapOption::empty(),
            high_water: Mutex::new(0),
            ratio,
        }
    }

    /// Takes up to `count` ids: from the current segment and, if it runs out, from the next
    /// one after switching to it. Fewer ids than asked (possibly none) come back when both
    /// segments run out; `refill_needed` is then set.
    #[inline]
    pub fn take(&self, count: Count) -> Take {
        let mut take = Take { ranges: [None; TAKE_SEGMENTS_MAX], count: 0, refill_needed: false };
        let mut wanted = count.get();
        let mut filled = 0;
        for _ in 0..TAKE_SEGMENTS_MAX {
            let guard = self.current.load();
            let Some(segment) = guard.as_ref() else {
                take.refill_needed = true;
                return take;
            };
            if let Some((range, crossed)) = segment.take(wanted) {
                // Ranges fill slots from the front, so `first()` always sees the first id.
                take.ranges[filled] = Some(range);
                filled += 1;
                take.count += range.len();
                take.refill_needed |= crossed;
                wanted -= range.len();
                if wanted == 0 {
                    return take;
                }
            }
            if !self.switch_from(segment) {
                take.refill_needed = true;
                return take;
            }
        }
        take.refill_needed = true;
        take
    }

    /// Installs a freshly allocated range: as the current segment if there is none or it is
    /// spent (and nothing waits in `next`), otherwise as the next one.
    pub fn install(&self, range: IdRange) -> Result<(), InstallError> {
        let mut high_water = self.lock();
        if range.start() < *high_water {
            return Err(InstallError::Regression { range, high_water: *high_water });
        }
        let segment = Arc::new(Segment::new(range, self.ratio));
        let current = self.current.load();
        let next_is_empty = self.next.load().is_none();
        match current.as_ref() {
            Some(current) if !current.is_spent() || !next_is_empty => {
                if !next_is_empty {
                    return Err(InstallError::Full);
                }
                // Installed side of the invariant: the new range lies above the current one.
                assert!(range.start() >= current.range().end(), "installed range overlaps");
                self.next.store(Some(segment));
            }
            _ => self.current.store(Some(segment)),
        }
        *high_water = range.end();
        Ok(())
    }

    /// Whether a refill would be installed (the next slot is free). A caller that saw
    /// `refill_needed` checks this before asking the store, so concurrent signals cost one
    /// allocation, not several.
    pub fn wants_refill(&self) -> bool {
        self.next.load().is_none()
    }

    /// Whether a refill is due now: the next slot is free and the current segment is absent
    /// or past its preload point. A refiller re-checks this when it finishes, so a preload
    /// signal that arrived while it was busy is not lost.
    pub fn refill_due(&self) -> bool {
        self.wants_refill()
            && self.current.load().as_ref().is_none_or(|s| {
                let snapshot = s.snapshot();
                snapshot.next_id > snapshot.preload_at
            })
    }

    /// Ids left in both segments.
    pub fn remaining(&self) -> u64 {
        let current = self.current.load().as_ref().map_or(0, |s| s.remaining());
        let next = self.next.load().as_ref().map_or(0, |s| s.remaining());
        current + next
    }

    /// A point-in-time view of both segments.
    pub fn snapshot(&self) -> BufferSnapshot {
        BufferSnapshot {
            current: self.current.load().as_ref().map(|s| s.snapshot()),
            next: self.next.load().as_ref().map(|s| s.snapshot()),
        }
    }

    /// Moves `next` into `current` if `spent` is still current. Returns whether the caller
    /// should try again (a switch happened, by this call or another), or `false` when there
    /// is nothing to switch to.
    fn switch_from(&self, spent: &Arc<Segment>) -> bool {
        let _high_water = self.lock();
        let current = self.current.load();
        let still_current = current.as_ref().is_some_and(|c| Arc::ptr_eq(c, spent));
        if !still_current {
            return true;
        }
        let Some(next) = self.next.swap(None) else {
            return false;
        };
        assert!(spent.is_spent(), "switched away from a segment with ids left");
        assert!(next.range().start() >= spent.range().end(), "next segment overlaps current");
        self.current.store(Some(next));
        true
    }

    fn lock(&self) -> MutexGuard<'_, u64> {
        // The guarded value is written last in `install`, after every check, so a panic while
        // holding the lock cannot leave it lower than the ranges installed: poisoning is safe
        // to ignore.
        self.high_water.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Take {
    /// The ranges taken, in increasing order (at most [`TAKE_SEGMENTS_MAX`]).
    pub fn ranges(&self) -> impl Iterator<Item = IdRange> + '_ {
        self.ranges.iter().flatten().copied()
    }

    /// Number of ids taken.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The first id taken, if any.
    pub fn first(&self) -> Option<u64> {
        self.ranges[0].map(|r| r.start())
    }

    /// Whether the caller should make sure a refill is under way: this take crossed a
    /// segment's preload point or came up short.
    pub fn refill_needed(&self) -> bool {
        self.refill_needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> IdRange {
        IdRange::new(start, end).expect("valid range")
    }

    fn count(n: u64) -> Count {
        Count::new(n).expect("valid count")
    }

    #[test]
    fn empty_buffer_asks_for_a_refill_and_gives_nothing() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        let t = b.take(count(1));
        assert_eq!((t.count(), t.refill_needed()), (0, true));
    }

    #[test]
    fn a_batch_spans_the_switch_exactly() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 11)).expect("first install");
        assert_eq!(b.take(count(7)).count(), 7);
        b.install(range(100, 110)).expect("second install");
        let t = b.take(count(5));
        assert_eq!(t.ranges().collect::<Vec<_>>(), vec![range(8, 11), range(100, 102)]);
        assert_eq!(b.remaining(), 8);
    }

    #[test]
    fn the_first_id_after_a_switch_is_reported_first() {
        // Regression: a take that found the current segment spent put the next segment's
        // range in the second slot, and `first()` (reading the first slot) lost the id.
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 3)).expect("first install");
        assert_eq!(b.take(count(1)).first(), Some(1));
        b.install(range(3, 5)).expect("next");
        assert_eq!(b.take(count(1)).first(), Some(2));
        let t = b.take(count(1));
        assert_eq!((t.first(), t.count()), (Some(3), 1));
    }

    #[test]
    fn regressions_and_needless_refills_are_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(100, 200)).expect("first install");
        assert_eq!(
            b.install(range(150, 250)),
            Err(InstallError::Regression { range: range(150, 250), high_water: 200 })
        );
        b.install(range(200, 300)).expect("next");
        assert_eq!(b.install(range(300, 400)), Err(InstallError::Full));
    }

    #[test]
    fn threads_never_share_an_id_and_each_sees_increasing_ids() {
        let b = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    let mut ids = Vec::new();
                    while ids.len() < 20_000 {
                        ids.extend(b.take(count(3)).ranges().flat_map(|r| r.ids()));
                        std::hint::spin_loop();
                    }
                    ids
                })
            })
            .collect();
        // The installer plays the store: consecutive ranges of 1000, installed when wanted.
        let mut next_start = 1;
        while !threads.iter().all(|t| t.is_finished()) {
            if b.wants_refill() && b.install(range(next_start, next_start + 1000)).is_ok() {
                next_start += 1000;
            }
            std::thread::yield_now();
        }
        let mut all = Vec::new();
        for t in threads {
            let ids = t.join().expect("taker thread");
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "a thread saw ids go down");
            all.extend(ids);
        }
        let taken = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), taken, "an id was handed out twice");
    }
}
