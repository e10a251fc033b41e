//! The double buffer: a current segment handing ids out and a next one loaded ahead of need.
//!
//! The per-id path is one `fetch_add` on a packed cursor, `(epoch << OFFSET_BITS) | offset`,
//! plus a few plain loads: no lock, no allocation, no reference count. Each installed segment
//! gets the next epoch and is published in `slots[epoch % SLOTS]` under a seqlock before the
//! cursor moves to it; a taker reads its epoch's slot and checks the slot's sequence after
//! reading, so a taker that stalled across `SLOTS - 1` switches finds its slot reused and
//! retries: its ids are wasted, never handed out twice.
//!
//! Installing and switching take a small lock, once per segment. The buffer never fetches: a
//! take reports "refill needed" and the caller (the `idmint` library) asks the store and
//! calls [`DoubleBuffer::install`].
//!
//! Invariant: every installed range starts at or above the end of every range installed
//! before it, so ids from one buffer only ever increase.

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::limits::{BATCH_COUNT_MAX, TAKE_SEGMENTS_MAX};
use crate::segment::{IdRange, SegmentSnapshot};
use crate::values::{Count, PreloadRatio};

/// Low bits of the cursor: the offset of the next id within the current segment.
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// Longest segment the buffer holds. An offset at or past it is spent whatever the segment,
/// so takers stop stepping the cursor there and the offset can never carry into the epoch.
pub const SEGMENT_LEN_MAX: u64 = 1 << (OFFSET_BITS - 1);
/// High bits of the cursor: the epoch (the number of segments installed), modulo 2^24.
const EPOCH_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;
/// Slots segments are published in; a slot is reused `SLOTS` installs later.
const SLOTS: usize = 4;
/// Attempts of one take: enough for a switch and a stale slot, bounded all the same.
const TAKE_ATTEMPTS_MAX: usize = 4;

// Offsets stop growing at SEGMENT_LEN_MAX; concurrent takers overshoot it by at most
// BATCH_COUNT_MAX each, and 2^39 such takers would be needed to reach the epoch bits.
const _: () = assert!(SEGMENT_LEN_MAX + BATCH_COUNT_MAX < OFFSET_MASK);
const _: () = assert!(SLOTS >= 2 && SLOTS.is_power_of_two());

/// The per-tag double buffer.
#[derive(Debug)]
pub struct DoubleBuffer {
    /// `(epoch << OFFSET_BITS) | offset`: the only word the per-id path writes.
    cursor: AtomicU64,
    slots: [Slot; SLOTS],
    /// Serialises installs and switches (the refill path).
    state: Mutex<State>,
    ratio: PreloadRatio,
}

/// A published segment. `seq` is `2 * epoch` when the slot holds that epoch's segment and odd
/// while it is being written.
#[derive(Debug, Default)]
struct Slot {
    seq: AtomicU64,
    start: AtomicU64,
    len: AtomicU64,
    preload_offset: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// Segments installed so far; the current segment's epoch. 0: none yet.
    epoch: u64,
    current: Option<IdRange>,
    next: Option<IdRange>,
    /// End of the highest range ever installed, below which nothing may be installed again.
    high_water: u64,
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
    /// The range is longer than [`SEGMENT_LEN_MAX`] ids.
    TooLong {
        /// The refused range.
        range: IdRange,
    },
}

/// A point-in-time view of both segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSnapshot {
    /// The segment ids are taken from, if any was installed.
    pub current: Option<SegmentSnapshot>,
    /// The segment loaded ahead, if any.
    pub next: Option<SegmentSnapshot>,
}

/// One attempt on the current segment.
enum Attempt {
    Took(IdRange, bool),
    Spent(u64),
    Stale,
}

impl DoubleBuffer {
    /// An empty buffer whose segments request a refill once `ratio` of them is used.
    pub fn new(ratio: PreloadRatio) -> DoubleBuffer {
        // Epoch 0 is published as an empty segment: every take finds it spent.
        DoubleBuffer {
            cursor: AtomicU64::new(0),
            slots: Default::default(),
            state: Mutex::new(State::default()),
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
        for _ in 0..TAKE_ATTEMPTS_MAX {
            match self.take_once(wanted) {
                Attempt::Took(range, crossed) => {
                    take.refill_needed |= crossed;
                    // Ranges fill slots from the front, so `first()` sees the first id.
                    take.ranges[filled] = Some(range);
                    filled += 1;
                    take.count += range.len();
                    wanted -= range.len();
                    if wanted == 0 || filled == TAKE_SEGMENTS_MAX {
                        break;
                    }
                }
                Attempt::Spent(epoch) => {
                    if !self.switch_from(epoch) {
                        break;
                    }
                }
                Attempt::Stale => {}
            }
        }
        take.refill_needed |= wanted > 0;
        take
    }

    /// Takes one id: the common case of [`DoubleBuffer::take`] without its multi-range
    /// bookkeeping. Returns the id, if any, and whether a refill is needed.
    #[inline]
    pub fn take_one(&self) -> (Option<u64>, bool) {
        if let Attempt::Took(range, crossed) = self.take_once(1) {
            return (Some(range.start()), crossed);
        }
        let take = self.take(Count::ONE);
        (take.first(), take.refill_needed())
    }

    /// Installs a freshly allocated range: as the current segment if there is none or it is
    /// spent (and nothing waits in `next`), otherwise as the next one.
    pub fn install(&self, range: IdRange) -> Result<(), InstallError> {
        let mut state = self.lock();
        if range.start() < state.high_water {
            return Err(InstallError::Regression { range, high_water: state.high_water });
        }
        if range.len() > SEGMENT_LEN_MAX {
            return Err(InstallError::TooLong { range });
        }
        if state.next.is_some() {
            return Err(InstallError::Full);
        }
        if self.current_remaining(&state) == 0 {
            self.publish(&mut state, range);
        } else {
            // Installed side of the invariant: the new range lies above the current one.
            assert!(state.current.is_some_and(|c| range.start() >= c.end()), "range overlaps");
            state.next = Some(range);
        }
        state.high_water = range.end();
        Ok(())
    }

    /// Whether a refill is due now: the next slot is free and the current segment is absent
    /// or past its preload point. A refiller re-checks this when it finishes, so a preload
    /// signal that arrived while it was busy is not lost.
    pub fn refill_due(&self) -> bool {
        let state = self.lock();
        state.next.is_none()
            && self.current_snapshot(&state).is_none_or(|s| s.next_id > s.preload_at)
    }

    /// Ids left in both segments.
    pub fn remaining(&self) -> u64 {
        let state = self.lock();
        self.current_remaining(&state) + state.next.map_or(0, |r| r.len())
    }

    /// A point-in-time view of both segments.
    pub fn snapshot(&self) -> BufferSnapshot {
        let state = self.lock();
        BufferSnapshot {
            current: self.current_snapshot(&state),
            next: state.next.map(|range| SegmentSnapshot {
                range,
                next_id: range.start(),
                preload_at: range.start() + self.ratio.preload_offset(range.len()),
            }),
        }
    }

    /// One step of the cursor, read against the slot of the epoch it returned.
    #[inline]
    fn take_once(&self, n: u64) -> Attempt {
        let seen = self.cursor.load(Ordering::Relaxed);
        if seen & OFFSET_MASK >= SEGMENT_LEN_MAX {
            return Attempt::Spent(seen >> OFFSET_BITS);
        }
        // Acquire pairs with the Release store in `publish`: the slot of the epoch read here
        // is visible.
        let taken = self.cursor.fetch_add(n, Ordering::Acquire);
        let (epoch, offset) = (taken >> OFFSET_BITS, taken & OFFSET_MASK);
        let slot = &self.slots[epoch as usize % SLOTS];
        // Seqlock read: the sequence before and after must both say "epoch, stable".
        let seq_before = slot.seq.load(Ordering::Acquire);
        let start = slot.start.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        let preload_offset = slot.preload_offset.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let seq_after = slot.seq.load(Ordering::Relaxed);
        if seq_before != seq_after || seq_before & 1 == 1 || (seq_before >> 1) & EPOCH_MASK != epoch
        {
            return Attempt::Stale;
        }
        if offset >= len {
            return Attempt::Spent(epoch);
        }
        let end = (offset + n).min(len);
        let crossed = offset <= preload_offset && preload_offset < end;
        match IdRange::new(start + offset, start + end) {
            Some(range) => Attempt::Took(range, crossed),
            // A published slot holds a valid range, so any sub-range is valid.
            None => unreachable!("slot of epoch {epoch} holds an invalid range"),
        }
    }

    /// Publishes `next` as the current segment if `spent_epoch` is still current. Returns
    /// whether the caller should try again (a switch happened, by this call or another), or
    /// `false` when there is nothing to switch to.
    fn switch_from(&self, spent_epoch: u64) -> bool {
        let mut state = self.lock();
        if state.epoch & EPOCH_MASK != spent_epoch {
            return true;
        }
        let Some(next) = state.next.take() else {
            return false;
        };
        assert_eq!(self.current_remaining(&state), 0, "switched away from ids left");
        assert!(state.current.is_none_or(|c| next.start() >= c.end()), "next overlaps current");
        self.publish(&mut state, next);
        true
    }

    /// Makes `range` the current segment under a new epoch. Only called with the lock held
    /// and the current segment spent, so no id of the old epoch is lost by moving the cursor.
    fn publish(&self, state: &mut State, range: IdRange) {
        let epoch = state.epoch + 1;
        let slot = &self.slots[epoch as usize % SLOTS];
        slot.seq.store(2 * epoch + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.start.store(range.start(), Ordering::Relaxed);
        slot.len.store(range.len(), Ordering::Relaxed);
        slot.preload_offset.store(self.ratio.preload_offset(range.len()), Ordering::Relaxed);
        slot.seq.store(2 * epoch, Ordering::Release);
        self.cursor.store((epoch & EPOCH_MASK) << OFFSET_BITS, Ordering::Release);
        state.epoch = epoch;
        state.current = Some(range);
    }

    fn current_snapshot(&self, state: &State) -> Option<SegmentSnapshot> {
        let range = state.current?;
        let offset = (self.cursor.load(Ordering::Acquire) & OFFSET_MASK).min(range.len());
        Some(SegmentSnapshot {
            range,
            next_id: range.start() + offset,
            preload_at: range.start() + self.ratio.preload_offset(range.len()),
        })
    }

    fn current_remaining(&self, state: &State) -> u64 {
        self.current_snapshot(state).map_or(0, |s| s.range.end() - s.next_id)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation of the state happens after its checks and cannot panic halfway, so
        // a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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
    use std::sync::Arc;

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
    fn take_one_switches_and_signals_like_take() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        assert_eq!(b.take_one(), (None, true));
        b.install(range(1, 3)).expect("first install");
        assert_eq!(b.take_one(), (Some(1), true)); // 10 % of 2 ids: the first id preloads
        b.install(range(7, 9)).expect("next");
        assert_eq!(b.take_one(), (Some(2), false));
        assert_eq!(b.take_one(), (Some(7), true));
        assert_eq!(b.take_one(), (Some(8), false));
        assert_eq!(b.take_one(), (None, true));
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
        let long = range(1_000, 1_000 + SEGMENT_LEN_MAX + 1);
        assert_eq!(
            DoubleBuffer::new(PreloadRatio::DEFAULT).install(long),
            Err(InstallError::TooLong { range: long })
        );
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
        // The installer plays the store: tiny ranges (1 to 16 ids) with gaps between them, so
        // epochs turn over constantly and every slot is reused many times under the takers.
        let (mut next_start, mut len) = (1, 1);
        while !threads.iter().all(|t| t.is_finished()) {
            if b.refill_due() && b.install(range(next_start, next_start + len)).is_ok() {
                next_start += len + len % 3;
                len = len % 16 + 1;
            }
            std::hint::spin_loop();
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
