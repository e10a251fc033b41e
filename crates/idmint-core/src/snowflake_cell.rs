//! The snowflake generator's shared state in one atomic word, stepped by compare-and-swap:
//! what lets every core issue ids without a lock.
//!
//! The word holds the *last id issued*, composed as the layout composes ids
//! (`time | worker | sequence`), with bit 63 (never part of an id) set while the generator is
//! stopped. Beside it, on the same cache line, sits the persisted time mark in units: no id
//! is issued with a time above it. An issue loads the word, then the mark, then reads the
//! clock (through the caller's closure: this module reads none), asks [`step`] for the next
//! state and installs it with one CAS on the word; a failed CAS means another thread issued,
//! and the loop retries on the word it found, at most [`SNOWFLAKE_CAS_ATTEMPTS_MAX`] times.
//!
//! Why one word: the worker id, the stop and the state an incarnation starts from change
//! together with the ids themselves, so there is no moment at which a thread can issue under
//! a worker id already given up, or after a stop returned. Every change of the word makes its
//! time and sequence, or its worker id, differ from every earlier value of it (issues step up,
//! a stop sets bit 63, a new incarnation starts strictly above the old state), so a CAS from a
//! word read before a change always fails: no ABA.
//!
//! Why the clock after the word: a successful CAS proves no one issued between this thread's
//! load and its CAS, so every id issued before was issued with a clock read before this one;
//! only a clock that really went back looks "behind" (as under a lock).
//!
//! A thread that finds the unit's sequence spent gets [`Issued::WaitUntil`] without writing the
//! word: waiters only read the shared line, so the issuing thread keeps it.

use crate::limits::SNOWFLAKE_CAS_ATTEMPTS_MAX;
use crate::snowflake::{ClockPolicy, Layout, Step, step};
use crate::sync::{AtomicU64, Ordering};

/// Bit 63 of the word: the generator is stopped (lease lost, shutting down). No layout uses it.
const STOPPED: u64 = 1 << 63;

/// The outcome of [`IssueCell::issue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Issued {
    /// This id was issued: it is greater than every id issued before it.
    Id(u64),
    /// The unit's sequence is spent or the clock is behind within tolerance: nothing is issued
    /// until the clock reads `units`.
    WaitUntil {
        /// The first unit at which an issue can succeed.
        units: u64,
    },
    /// The next id's time, `units`, lies above the persisted mark: a mark must be written
    /// first.
    NeedMark {
        /// The time of the id that would have been issued.
        units: u64,
    },
    /// The clock is behind the last id by more than the policy allows.
    Refuse {
        /// How far behind, in units.
        behind_units: u64,
    },
    /// The layout's time field is full.
    Exhausted,
    /// The generator is stopped.
    Stopped,
    /// Every attempt lost its CAS to another thread (each loss is another thread's id).
    Contended,
}

/// The outcome of [`IssueCell::reserve_unit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Reserved {
    /// Every sequence of `unit` is the caller's, under `worker`.
    Unit {
        /// The time unit reserved.
        unit: u64,
        /// The worker id of its ids.
        worker: u64,
    },
    /// The mark or the lead bound forbids the next unit now (or the CAS kept failing).
    NotNow,
    /// The generator is stopped.
    Stopped,
    /// The layout's time field is full.
    Exhausted,
}

/// The last id issued and the persisted mark, on one cache line of their own.
#[derive(Debug)]
#[repr(align(128))]
pub struct IssueCell {
    /// The last id issued (composed), `| STOPPED` while stopped.
    word: AtomicU64,
    /// The persisted time mark, in units: no id is issued with a time above it.
    mark_units: AtomicU64,
}

impl IssueCell {
    /// A running cell of `worker` that has issued nothing (its state is unit 0, sequence 0)
    /// and has no mark; `None` when `worker` does not fit `layout`.
    pub fn new(layout: &Layout, worker: u64) -> Option<IssueCell> {
        let word = layout.compose(0, worker, 0)?;
        Some(IssueCell { word: AtomicU64::new(word), mark_units: AtomicU64::new(0) })
    }

    /// Issues the next id (see the module's doc): `now_units` reads the clock, in units of
    /// `layout`, after the word was loaded; it is called once per attempt.
    #[inline]
    pub fn issue(
        &self,
        layout: &Layout,
        policy: &ClockPolicy,
        max_vibration: u64,
        mut now_units: impl FnMut() -> u64,
    ) -> Issued {
        let mut word = self.word.load(Ordering::Acquire);
        for _ in 0..SNOWFLAKE_CAS_ATTEMPTS_MAX {
            if word & STOPPED != 0 {
                return Issued::Stopped;
            }
            // After the word (Acquire): a new incarnation resets the mark before it publishes
            // its word, so a thread that sees that word sees the reset too.
            let mark_units = self.mark_units.load(Ordering::Acquire);
            let (last, worker) = split(layout, word);
            match step(layout, last, now_units(), policy, max_vibration) {
                Step::Issue { packed } => {
                    let (time, sequence) = layout.unpack(packed);
                    if time > mark_units {
                        return Issued::NeedMark { units: time };
                    }
                    let Some(id) = layout.compose(time, worker, sequence) else {
                        return Issued::Exhausted;
                    };
                    match self.word.compare_exchange_weak(
                        word,
                        id,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Issued::Id(id),
                        Err(current) => word = current,
                    }
                }
                Step::WaitUntil { units } => return Issued::WaitUntil { units },
                Step::Refuse { behind_units } => return Issued::Refuse { behind_units },
                Step::Exhausted => return Issued::Exhausted,
            }
        }
        Issued::Contended
    }

    /// Reserves every sequence of one unit for the cached ring: the first unit above the
    /// last one issued, or `now_units` if later, as long as it lies within the mark and at
    /// most `lead_units` ahead of `now_units`.
    pub fn reserve_unit(&self, layout: &Layout, now_units: u64, lead_units: u64) -> Reserved {
        let mut word = self.word.load(Ordering::Acquire);
        for _ in 0..SNOWFLAKE_CAS_ATTEMPTS_MAX {
            if word & STOPPED != 0 {
                return Reserved::Stopped;
            }
            let mark_units = self.mark_units.load(Ordering::Acquire);
            let (last, worker) = split(layout, word);
            let unit = (layout.unpack(last).0 + 1).max(now_units);
            if unit > mark_units || unit - now_units > lead_units {
                return Reserved::NotNow;
            }
            let Some(id) = layout.compose(unit, worker, layout.max_sequence()) else {
                return Reserved::Exhausted;
            };
            // Crash before duplicating: the unit lies above every id issued.
            assert!(id > word, "a unit reserved at or below the last id");
            match self.word.compare_exchange_weak(word, id, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Reserved::Unit { unit, worker },
                Err(current) => word = current,
            }
        }
        Reserved::NotNow
    }

    /// Stops the cell: once this returns, no issue or reservation succeeds until
    /// [`IssueCell::begin`]. Returns the state `(time_units << sequence_bits) | sequence` of
    /// the last id issued, final from then on.
    pub fn stop(&self, layout: &Layout) -> u64 {
        let word = self.word.fetch_or(STOPPED, Ordering::AcqRel);
        split(layout, word).0
    }

    /// Starts a new incarnation under `worker` (a lease held again, perhaps another worker
    /// id): the mark goes to 0 (the new incarnation's mark is not written yet), and the state
    /// to the last sequence of the old state's unit (so the next id lies in a later unit),
    /// strictly above the old state, and at least `floor` (a packed state: the new holder's
    /// floor or inherited mark), unstopped. `false`, and stopped, when no state above fits the layout.
    pub fn begin(&self, layout: &Layout, worker: u64, floor: u64) -> bool {
        // Stopped first: a thread that read the old word fails its CAS from here on, and one
        // that reads the new word sees the mark reset below.
        let old = self.word.fetch_or(STOPPED, Ordering::AcqRel);
        self.mark_units.store(0, Ordering::Release);
        // From the old unit's last sequence, so the next id lies in a later unit than every
        // old one and ids increase even when the worker id changes; strictly above the old
        // state, so the word differs from every word read before.
        let (old_last, _) = split(layout, old);
        let old_time = layout.unpack(old_last).0;
        let mut above = (old_time << layout.sequence_bits() | layout.max_sequence()).max(floor);
        if above == old_last {
            above = ((old_time + 1) << layout.sequence_bits()) | layout.max_sequence();
        }
        let (time, sequence) = layout.unpack(above);
        match layout.compose(time, worker, sequence) {
            Some(word) => {
                self.word.store(word, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Raises the state to at least the packed `floor` (keeping the worker id and the stop):
    /// a generator starting above its persisted marks. `false` when `floor` does not fit.
    pub fn raise_floor(&self, layout: &Layout, floor: u64) -> bool {
        let (time, sequence) = layout.unpack(floor);
        if layout.pack(time, sequence) != Some(floor) {
            return false;
        }
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let (last, worker) = split(layout, word);
            if last >= floor {
                return true;
            }
            let Some(raised) = layout.compose(time, worker, sequence) else { return false };
            match self.word.compare_exchange_weak(
                word,
                raised | (word & STOPPED),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(current) => word = current,
            }
        }
    }

    /// Raises the persisted mark to `units` (it never comes down, except at [`Self::begin`]).
    pub fn raise_mark(&self, units: u64) {
        self.mark_units.fetch_max(units, Ordering::AcqRel);
    }

    /// The persisted mark, in units.
    pub fn mark_units(&self) -> u64 {
        self.mark_units.load(Ordering::Acquire)
    }

    /// The packed state `(time_units << sequence_bits) | sequence` of the last id issued.
    pub fn last(&self, layout: &Layout) -> u64 {
        split(layout, self.word.load(Ordering::Acquire)).0
    }

    /// The worker id of the current incarnation.
    pub fn worker(&self, layout: &Layout) -> u64 {
        split(layout, self.word.load(Ordering::Acquire)).1
    }

    /// Whether the cell is stopped.
    pub fn is_stopped(&self) -> bool {
        self.word.load(Ordering::Acquire) & STOPPED != 0
    }
}

/// A word's packed state `(time_units << sequence_bits) | sequence` and worker id.
#[inline]
fn split(layout: &Layout, word: u64) -> (u64, u64) {
    let id = word & !STOPPED;
    let sequence_bits = layout.sequence_bits();
    let sequence = id & layout.max_sequence();
    let worker = (id >> sequence_bits) & layout.max_worker();
    let time = id >> (sequence_bits + layout.worker_bits());
    ((time << sequence_bits) | sequence, worker)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::snowflake::TimeUnit;

    fn layout() -> Layout {
        Layout::new(20, 3, 2, TimeUnit::Millis, 0).expect("valid")
    }

    #[test]
    fn a_cell_issues_increasing_ids_within_its_mark_and_stops_for_good() {
        let l = layout();
        let cell = IssueCell::new(&l, 5).expect("fits");
        let strict = ClockPolicy::STRICT;
        assert_eq!(cell.issue(&l, &strict, 0, || 10), Issued::NeedMark { units: 10 });
        cell.raise_mark(11);
        let mut ids = Vec::new();
        for _ in 0..4 {
            let Issued::Id(id) = cell.issue(&l, &strict, 0, || 10) else { panic!("an id") };
            ids.push(id);
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(ids[0], l.compose(10, 5, 0).expect("fits"));
        assert_eq!(cell.issue(&l, &strict, 0, || 10), Issued::WaitUntil { units: 11 });
        assert_eq!(cell.issue(&l, &strict, 0, || 12), Issued::NeedMark { units: 12 });
        assert_eq!(cell.issue(&l, &strict, 0, || 9), Issued::Refuse { behind_units: 1 });
        assert_eq!(cell.stop(&l), l.pack(10, 3).expect("packs"));
        assert_eq!(cell.issue(&l, &strict, 0, || 11), Issued::Stopped);
        assert_eq!(cell.reserve_unit(&l, 11, 5), Reserved::Stopped);
    }

    #[test]
    fn a_new_incarnation_starts_strictly_above_with_its_mark_reset() {
        let l = layout();
        let cell = IssueCell::new(&l, 1).expect("fits");
        cell.raise_mark(100);
        assert!(matches!(cell.issue(&l, &ClockPolicy::STRICT, 0, || 50), Issued::Id(_)));
        let _ = cell.stop(&l);
        // A floor below the old state still starts above it, in the old unit's last sequence,
        // and once there, a unit later (never the same word twice).
        assert!(cell.begin(&l, 1, l.pack(40, 0).expect("packs")));
        assert_eq!((cell.last(&l), cell.worker(&l)), (l.pack(50, 3).expect("packs"), 1));
        assert!(cell.begin(&l, 1, 0));
        assert_eq!(cell.last(&l), l.pack(51, 3).expect("packs"));
        assert_eq!(cell.mark_units(), 0);
        assert!(cell.begin(&l, 6, l.pack(70, 3).expect("packs")));
        assert_eq!((cell.last(&l), cell.worker(&l)), (l.pack(70, 3).expect("packs"), 6));
        assert!(!cell.is_stopped());
        cell.raise_mark(72);
        let reserved = cell.reserve_unit(&l, 60, 20);
        assert_eq!(reserved, Reserved::Unit { unit: 71, worker: 6 });
        assert_eq!(cell.reserve_unit(&l, 60, 11), Reserved::NotNow, "past the lead");
        assert_eq!(cell.reserve_unit(&l, 60, 20), Reserved::Unit { unit: 72, worker: 6 });
        assert_eq!(cell.reserve_unit(&l, 60, 20), Reserved::NotNow, "past the mark");
        // The end of time: the last state issues nothing, and nothing above it fits.
        assert!(cell.begin(&l, 6, l.pack(l.max_time_units(), 3).expect("packs")));
        cell.raise_mark(u64::MAX);
        assert_eq!(cell.issue(&l, &ClockPolicy::STRICT, 0, || 80), Issued::Exhausted);
        assert!(!cell.begin(&l, 6, 0));
        assert!(cell.is_stopped());
    }
}
