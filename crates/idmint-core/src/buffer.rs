//! The double buffer: a current segment handing ids out and a next one loaded ahead of need.
//!
//! The per-id path is a few plain loads and one `fetch_add` on a packed cursor,
//! `(epoch << OFFSET_BITS) | offset`: no lock, no allocation, no reference count. Each
//! installed segment gets the next epoch and is written to `slots[epoch % SLOTS]` before the
//! cursor moves to it. A taker reads the *hint* (the current epoch, on its own cache line),
//! loads that epoch's slot, and only then steps the cursor; the step is valid when the epoch
//! it returned is the one the slot was written for. Every load happens before the
//! `fetch_add`, so nothing waits on it, and the cursor's line is the only one takers write.
//!
//! Why a stale slot is never misread: a slot is rewritten only by a later switch, and every
//! switch moves the cursor with a `swap`, which reads the cursor after every earlier
//! `fetch_add` (all writes to the cursor are read-modify-writes). So a taker whose
//! `fetch_add` returned epoch `e` read its slot before any switch away from `e`, hence before
//! the slot could be rewritten; if the slot held another epoch, the taker retries and its
//! ids are wasted, never handed out twice. `tests/loom.rs` checks this under every
//! interleaving loom explores.
//!
//! Installing and switching take a small lock, once per segment. The buffer never fetches: a
//! take reports "refill needed" and the caller (the `idmint` library) asks the store and
//! calls [`DoubleBuffer::install`]. At shutdown [`DoubleBuffer::freeze`] stops every later
//! take and [`DoubleBuffer::unissued_tail`] names the ids that were never handed out.
//!
//! Give-back: [`DoubleBuffer::give_back`] takes back ids a caller took and did not use (a
//! server leasing ranges to remote clients gets the unused part of a lease back when the
//! client stops), so the next take hands them out again. It is the one move of the cursor
//! downwards, and it is allowed only where it provably repeats no id: under the lock (no
//! install, switch or freeze moves the segment under it), inside the current segment, by one
//! compare-and-swap from exactly the range's end to its start (any step since the caller's
//! take moved the cursor and makes the swap fail; a taker stepping after the swap gets the
//! ids given back, which nobody holds any more), and only at or above the end of every range
//! given back before. That last rule gives each id back at most once and, with the swap,
//! makes every give-back start at the highest point the cursor reached in its epoch (the
//! proof is in `give_back`): the ids of the range were handed out once, to the caller, and
//! none after them. An id is therefore handed out at most twice, the second time only after
//! its first taker gave it back; a replayed give-back (a retried RPC) is refused rather than
//! pulling ids back from under the taker that got them next. The swap is a read-modify-write
//! like every other write to the cursor, so a switch's `swap` still reads every earlier step.
//!
//! Invariant: every installed range starts at or above the end of every range installed
//! before it (and above the floor restored from disk), so ids from one buffer only ever
//! increase, except that ids given back are handed out again (each at most once more).

use crate::limits::{LEASE_COUNT_MAX, TAKE_SEGMENTS_MAX};
use crate::segment::{IdRange, SegmentSnapshot};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, PoisonError};
use crate::values::{Count, PreloadRatio};

/// Low bits of the cursor: the offset of the next id within the current segment.
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// Longest segment the buffer holds.
pub const SEGMENT_LEN_MAX: u64 = 1 << (OFFSET_BITS - 1);
/// High bits of the cursor: the epoch (the number of segments installed), modulo 2^24.
const EPOCH_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;
/// Hint flag: the current segment was found spent with nothing to switch to. Takers go to
/// the slow path without stepping the cursor, so a long store outage cannot carry the offset
/// into the epoch bits.
const HINT_SPENT: u64 = 1 << 63;
/// Hint flag: the buffer is frozen; every take fails.
const HINT_FROZEN: u64 = 1 << 62;
/// Slots segments are published in; a slot is reused `SLOTS` installs later.
const SLOTS: usize = 4;
/// Attempts of one take: enough for a switch and a stale slot, bounded all the same.
const TAKE_ATTEMPTS_MAX: usize = 4;

// A taker steps the cursor only after reading a hint without flags, so past a segment's end
// the offset grows by at most 2 * LEASE_COUNT_MAX (the largest count) per taker in flight when
// the spent flag was set; over 2^18 such takers would be needed to reach the epoch bits.
const _: () = assert!(SEGMENT_LEN_MAX + (1 << 18) * 2 * LEASE_COUNT_MAX < OFFSET_MASK);
const _: () = assert!(SLOTS >= 2 && SLOTS.is_power_of_two());

/// Keeps a value on its own cache lines (two, against adjacent-line prefetch), so takers
/// writing the cursor do not evict the lines they only read.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// The per-tag double buffer: takes step one atomic cursor through the current segment, the
/// refill path installs the next segment and switches to it under a lock, and unused ids can
/// be given back ([`DoubleBuffer::give_back`]) when the buffer can prove nobody took an id
/// after them and they were never given back before.
#[derive(Debug)]
pub struct DoubleBuffer {
    /// `(epoch << OFFSET_BITS) | offset`: the only word the per-id path writes. Within an
    /// epoch it only grows, except by a give-back, which moves it down under the lock.
    cursor: Padded<AtomicU64>,
    /// The current epoch (masked), or a flag: where takers look first. Written once per
    /// switch, read by every take.
    hint: Padded<AtomicU64>,
    slots: Padded<[Slot; SLOTS]>,
    /// Serialises installs, switches, the freeze and give-backs (everything but takes).
    state: Mutex<State>,
    ratio: PreloadRatio,
}

/// A published segment. `seq` is `2 * epoch` (masked) once the slot holds that epoch's
/// segment.
#[derive(Debug)]
struct Slot {
    seq: AtomicU64,
    start: AtomicU64,
    len: AtomicU64,
    preload_offset: AtomicU64,
}

/// A segment as the lock holder knows it.
#[derive(Debug, Clone, Copy)]
struct Planned {
    range: IdRange,
    preload_offset: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Segments installed so far; the current segment's epoch. 0: none yet.
    epoch: u64,
    current: Option<Planned>,
    next: Option<Planned>,
    /// End of the highest range ever installed (or the floor restored from disk), below
    /// which nothing may be installed again.
    high_water: u64,
    /// Ids of the segments switched away from: with the current offset, the ids handed out.
    completed: u64,
    /// Set by the freeze: ids of the current segment handed out when it froze.
    frozen_offset: Option<u64>,
    /// The highest end of any range given back so far (0: none). Ids below it are never
    /// given back again, so each id is given back at most once: a replayed give-back cannot
    /// move the cursor back under the taker that got the ids the first one returned. It is
    /// an id, not an offset, so it stays valid across switches (later segments lie above).
    given_back_below: u64,
}

/// What one take got: up to [`TAKE_SEGMENTS_MAX`] contiguous ranges, in increasing order, and
/// whether the caller should make sure a refill is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Take {
    ranges: [Option<IdRange>; TAKE_SEGMENTS_MAX],
    count: u64,
    refill_needed: bool,
    frozen: bool,
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
    /// Ids handed out since the buffer was created (ids lost to a stale retry included), less
    /// the ids given back. A give-back lowers it by the range's length, so two samples may
    /// go down: subtract them with `saturating_sub`.
    pub handed_out: u64,
    /// End of the highest range ever installed or restored: nothing below it is installed.
    pub high_water: u64,
    /// Whether the buffer is frozen.
    pub frozen: bool,
    /// Segments that became current so far (0: none yet). Its parity places the current
    /// segment in one of Leaf's two buffer slots (`/cache`'s `pos`).
    pub epoch: u64,
}

/// One attempt on the current segment.
enum Attempt {
    Took(IdRange, bool),
    Spent(u64),
    Stale,
    Frozen,
}

impl DoubleBuffer {
    /// An empty buffer whose segments request a refill once `ratio` of them is used.
    pub fn new(ratio: PreloadRatio) -> DoubleBuffer {
        let slot = || Slot {
            seq: AtomicU64::new(0),
            start: AtomicU64::new(0),
            len: AtomicU64::new(0),
            preload_offset: AtomicU64::new(0),
        };
        // Epoch 0 is "no segment": the hint says spent, and slot 0 holds an empty segment.
        DoubleBuffer {
            cursor: Padded(AtomicU64::new(0)),
            hint: Padded(AtomicU64::new(HINT_SPENT)),
            slots: Padded([slot(), slot(), slot(), slot()]),
            state: Mutex::new(State::default()),
            ratio,
        }
    }

    /// Takes up to `count` ids: from the current segment and, if it runs out, from the next
    /// one after switching to it. Fewer ids than asked (possibly none) come back when both
    /// segments run out; `refill_needed` is then set. A frozen buffer gives none; a take
    /// that races the freeze may keep the ids it took before it.
    #[inline]
    pub fn take(&self, count: Count) -> Take {
        let mut take = Take {
            ranges: [None; TAKE_SEGMENTS_MAX],
            count: 0,
            refill_needed: false,
            frozen: false,
        };
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
                Attempt::Frozen => {
                    take.frozen = true;
                    return take;
                }
            }
        }
        take.refill_needed |= wanted > 0;
        take
    }

    /// Takes one id: the common case of [`DoubleBuffer::take`] without its multi-range
    /// bookkeeping. Returns the id, if any, and whether a refill is needed. `None` from a
    /// frozen buffer comes with `false`; [`DoubleBuffer::is_frozen`] tells the two apart.
    #[inline]
    pub fn take_one(&self) -> (Option<u64>, bool) {
        if let Attempt::Took(range, crossed) = self.take_once(1) {
            return (Some(range.start()), crossed);
        }
        let take = self.take(Count::ONE);
        (take.first(), take.refill_needed())
    }

    /// Takes back `range`, ids the caller took from this buffer and did not use, so the next
    /// take hands them out again (it starts at `range.start()`). Returns whether it did; on
    /// `false` nothing changed and the ids stay spent: wasted, never repeated.
    ///
    /// The caller must hold every id of `range`: it took them from this buffer and uses none
    /// of them once this returns `true`. The buffer proves the rest, and takes the range back
    /// only when all of these hold (checked under the lock, so serialised with installs,
    /// switches and the freeze):
    /// 1. the buffer is not frozen: the freeze counted what was handed out, and that count
    ///    (hence [`DoubleBuffer::unissued_tail`]) must stay exact;
    /// 2. `range` lies inside the current segment;
    /// 3. the cursor stands exactly at `range.end()` in the current epoch, so nobody took an
    ///    id after the range: one compare-and-swap moves it back to `range.start()`, and it
    ///    fails if any take stepped the cursor since. A take that steps after the swap gets
    ///    the ids given back;
    /// 4. no id of `range` was given back before: `range.start()` is at or above the end of
    ///    every range given back so far. Conservative on purpose: ids below a give-back's end
    ///    are never taken back again, even by their rightful holder (wasted at worst).
    ///
    /// A take that covers the preload id again after a give-back moved the cursor back across
    /// it signals a refill again; [`DoubleBuffer::refill_due`] re-checks, so the extra signal
    /// starts nothing when a refill already landed.
    pub fn give_back(&self, range: IdRange) -> bool {
        let mut state = self.lock();
        // Rules 1 and 4. After the freeze the swap below would fail too (the freeze parked
        // the cursor in an epoch no segment has), but the exactness of the freeze's count
        // should not rest on that.
        if state.frozen_offset.is_some() || range.start() < state.given_back_below {
            return false;
        }
        let Some(current) = state.current else {
            return false;
        };
        let segment = current.range;
        // Rule 2, before any subtraction below: offsets only mean something inside the
        // segment. It also refuses a range reaching past the segment's end whose end offset
        // a taker's step past the end happens to match.
        if range.start() < segment.start() || range.end() > segment.end() {
            return false;
        }
        // Every write to the hint happens under this lock, so this load sees the last one.
        // The spent flag of the current epoch is set only after a step in this epoch
        // returned an offset at or past the segment's length, which left the cursor past
        // `segment.len() >= range.end() - segment.start()`; steps only grow it from there and
        // a give-back cannot succeed from there, so the swap below would fail anyway.
        // Refusing first keeps it certain that no give-back ever moves the cursor back under
        // the flag, where takers would stop in front of ids left.
        if self.hint.0.load(Ordering::Acquire) & HINT_SPENT != 0 {
            return false;
        }
        // Why the swap proves the range was handed out once, to the caller, and nothing
        // after it. Between switches the cursor moves up by steps and down only here. Rule 4
        // gives each id back at most once, and a give-back always starts at the cursor's
        // highest point in the epoch: if the cursor stood below that point, the give-back
        // that put it there set `given_back_below` to that point, above the cursor, and a
        // range ending at the cursor would start below the mark. So the ids of `range`
        // (never given back) were each covered by exactly one step, the caller's, and no id
        // above them by any. The epoch is the current one: only a switch or the freeze (both
        // under this lock) change the cursor's epoch bits.
        let epoch_bits = (state.epoch & EPOCH_MASK) << OFFSET_BITS;
        let at_end = epoch_bits | (range.end() - segment.start());
        let at_start = epoch_bits | (range.start() - segment.start());
        // AcqRel like every other write to the cursor: a read-modify-write, so a later
        // switch's `swap` still reads every step before it.
        if self
            .cursor
            .0
            .compare_exchange(at_end, at_start, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        state.given_back_below = range.end();
        true
    }

    /// Installs a freshly allocated range: as the current segment if there is none or it is
    /// spent (and nothing waits in `next`), otherwise as the next one. The range asks for a
    /// refill once the preload ratio of it is used, or earlier so that at least `reserve` ids
    /// remain when it asks (the runway one refill needs at the measured rate and latency).
    ///
    /// A frozen buffer keeps the range without serving it, so [`DoubleBuffer::unissued_tail`]
    /// can give it back.
    pub fn install(&self, range: IdRange, reserve: u64) -> Result<(), InstallError> {
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
        let ratio_offset = self.ratio.preload_offset(range.len());
        let runway_offset = (range.len() - 1).saturating_sub(reserve);
        let planned = Planned { range, preload_offset: ratio_offset.min(runway_offset) };
        if state.frozen_offset.is_none() && self.current_remaining(&state) == 0 {
            self.publish(&mut state, planned);
        } else {
            // Installed side of the invariant: the new range lies above the current one.
            assert!(
                state.current.is_none_or(|c| range.start() >= c.range.end()),
                "range overlaps the current segment"
            );
            state.next = Some(planned);
        }
        state.high_water = range.end();
        Ok(())
    }

    /// Raises the high-water mark to `floor` (if it is higher): ranges starting below it are
    /// refused from now on. Used with the mark a node persisted before a restart.
    pub fn raise_floor(&self, floor: u64) {
        let mut state = self.lock();
        state.high_water = state.high_water.max(floor);
    }

    /// Whether a refill is due now: not frozen, the next slot is free and the current segment
    /// is absent or past its preload point. A refiller re-checks this when it finishes, so a
    /// preload signal that arrived while it was busy is not lost; and a take's signal is only
    /// a reason to call this, so a preload point crossed again after a give-back starts no
    /// second refill once the first one landed.
    pub fn refill_due(&self) -> bool {
        let state = self.lock();
        state.frozen_offset.is_none()
            && state.next.is_none()
            && self.current_snapshot(&state).is_none_or(|s| s.next_id > s.preload_at)
    }

    /// Ids left in both segments (0 once frozen).
    pub fn remaining(&self) -> u64 {
        let state = self.lock();
        if state.frozen_offset.is_some() {
            return 0;
        }
        self.current_remaining(&state) + state.next.map_or(0, |p| p.range.len())
    }

    /// Stops handing ids out: every take that has not stepped the cursor yet fails, and the
    /// ids the current segment handed out are counted exactly (after a give-back, the cursor
    /// stands at the start of the range given back, so the count excludes it). Idempotent.
    pub fn freeze(&self) {
        let mut state = self.lock();
        if state.frozen_offset.is_some() {
            return;
        }
        self.hint.0.store(HINT_FROZEN, Ordering::Release);
        // Move the cursor to an epoch no slot holds: a taker that read the hint before the
        // store above steps into it, finds its slot stale, retries and sees the flag.
        let parked = ((state.epoch + 1) & EPOCH_MASK) << OFFSET_BITS;
        let taken = self.cursor.0.swap(parked, Ordering::AcqRel) & OFFSET_MASK;
        state.frozen_offset = Some(taken);
    }

    /// Whether [`DoubleBuffer::freeze`] was called.
    pub fn is_frozen(&self) -> bool {
        self.hint.0.load(Ordering::Acquire) & HINT_FROZEN != 0
    }

    /// Once frozen: the ids never handed out at the top of what this buffer was given, as one
    /// range ending at the high-water mark (the end of the last range installed). It covers
    /// the unserved next segment and, when contiguous with it, the rest of the current one.
    /// `None` before the freeze or when every id up to the mark was handed out.
    pub fn unissued_tail(&self) -> Option<IdRange> {
        let state = self.lock();
        let frozen_offset = state.frozen_offset?;
        let current = state.current.and_then(|c| {
            let first_unissued = c.range.start() + frozen_offset.min(c.range.len());
            IdRange::new(first_unissued, c.range.end())
        });
        match (current, state.next) {
            (Some(c), Some(n)) if c.end() == n.range.start() => {
                IdRange::new(c.start(), n.range.end())
            }
            (_, Some(n)) => Some(n.range),
            (Some(c), None) => Some(c),
            (None, None) => None,
        }
    }

    /// A point-in-time view of both segments.
    pub fn snapshot(&self) -> BufferSnapshot {
        let state = self.lock();
        let current = self.current_snapshot(&state);
        BufferSnapshot {
            current,
            next: state.next.map(|p| SegmentSnapshot {
                range: p.range,
                next_id: p.range.start(),
                preload_at: p.range.start() + p.preload_offset,
            }),
            handed_out: state.completed + current.map_or(0, |s| s.next_id - s.range.start()),
            high_water: state.high_water,
            frozen: state.frozen_offset.is_some(),
            epoch: state.epoch,
        }
    }

    /// One step of the cursor against the slot the hint names.
    #[inline]
    fn take_once(&self, n: u64) -> Attempt {
        // Acquire pairs with the Release stores in `publish`: the slot of the hinted epoch
        // is visible.
        let hint = self.hint.0.load(Ordering::Acquire);
        if hint & (HINT_SPENT | HINT_FROZEN) != 0 {
            return if hint & HINT_FROZEN != 0 {
                Attempt::Frozen
            } else {
                Attempt::Spent(hint & EPOCH_MASK)
            };
        }
        let slot = &self.slots.0[hint as usize % SLOTS];
        let seq = slot.seq.load(Ordering::Acquire);
        let start = slot.start.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        let preload_offset = slot.preload_offset.load(Ordering::Relaxed);
        // AcqRel: the loads above stay before the step, and a switch's `swap` that reads this
        // step (or a later one) sees them done before it rewrites any slot.
        let taken = self.cursor.0.fetch_add(n, Ordering::AcqRel);
        let (epoch, offset) = (taken >> OFFSET_BITS, taken & OFFSET_MASK);
        if seq != 2 * epoch {
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
    /// `false` when there is nothing to switch to; then takers are told to stop stepping the
    /// cursor until an install.
    fn switch_from(&self, spent_epoch: u64) -> bool {
        let mut state = self.lock();
        if state.frozen_offset.is_some() {
            return true; // the retry sees the frozen hint
        }
        if state.epoch & EPOCH_MASK != spent_epoch {
            return true;
        }
        let Some(next) = state.next.take() else {
            self.hint.0.store(spent_epoch | HINT_SPENT, Ordering::Release);
            return false;
        };
        // A give-back cannot make this fire. `spent_epoch` is current, so it came from a step
        // in this epoch that returned an offset at or past the segment's length (directly, or
        // through the spent flag such a step led to): the cursor has stood past the end since
        // then, and a give-back only succeeds from an offset inside the segment.
        assert_eq!(self.current_remaining(&state), 0, "switched away from ids left");
        assert!(
            state.current.is_none_or(|c| next.range.start() >= c.range.end()),
            "next overlaps current"
        );
        self.publish(&mut state, next);
        true
    }

    /// Makes `planned` the current segment under a new epoch. Only called with the lock held
    /// and the current segment spent, so no id of the old epoch is lost by moving the cursor
    /// (give-backs take the same lock, so none can un-spend it before the swap below).
    fn publish(&self, state: &mut State, planned: Planned) {
        let epoch = state.epoch + 1;
        let masked = epoch & EPOCH_MASK;
        let slot = &self.slots.0[masked as usize % SLOTS];
        slot.start.store(planned.range.start(), Ordering::Relaxed);
        slot.len.store(planned.range.len(), Ordering::Relaxed);
        slot.preload_offset.store(planned.preload_offset, Ordering::Relaxed);
        slot.seq.store(2 * masked, Ordering::Release);
        // A swap, not a store: it reads every earlier step, which is what orders the slot
        // reads of takers still on an old epoch before this slot's next rewrite.
        self.cursor.0.swap(masked << OFFSET_BITS, Ordering::AcqRel);
        self.hint.0.store(masked, Ordering::Release);
        state.completed += state.current.map_or(0, |c| c.range.len());
        state.epoch = epoch;
        state.current = Some(planned);
    }

    fn current_snapshot(&self, state: &State) -> Option<SegmentSnapshot> {
        let current = state.current?;
        let offset = match state.frozen_offset {
            Some(frozen) => frozen,
            None => self.cursor.0.load(Ordering::Acquire) & OFFSET_MASK,
        };
        let range = current.range;
        Some(SegmentSnapshot {
            range,
            next_id: range.start() + offset.min(range.len()),
            preload_at: range.start() + current.preload_offset,
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

    /// Whether this take stopped at the freeze. Ids it holds were taken before the freeze
    /// and are valid (the freeze counted them as handed out); no later take gets any.
    pub fn frozen(&self) -> bool {
        self.frozen
    }
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::limits::BATCH_COUNT_MAX;

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
        b.install(range(1, 11), 0).expect("first install");
        assert_eq!(b.take(count(7)).count(), 7);
        b.install(range(100, 110), 0).expect("second install");
        let t = b.take(count(5));
        assert_eq!(t.ranges().collect::<Vec<_>>(), vec![range(8, 11), range(100, 102)]);
        assert_eq!(b.remaining(), 8);
    }

    #[test]
    fn the_first_id_after_a_switch_is_reported_first() {
        // Regression: a take that found the current segment spent put the next segment's
        // range in the second slot, and `first()` (reading the first slot) lost the id.
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 3), 0).expect("first install");
        assert_eq!(b.take(count(1)).first(), Some(1));
        b.install(range(3, 5), 0).expect("next");
        assert_eq!(b.take(count(1)).first(), Some(2));
        let t = b.take(count(1));
        assert_eq!((t.first(), t.count()), (Some(3), 1));
    }

    #[test]
    fn take_one_switches_and_signals_like_take() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        assert_eq!(b.take_one(), (None, true));
        b.install(range(1, 3), 0).expect("first install");
        assert_eq!(b.take_one(), (Some(1), true)); // 10 % of 2 ids: the first id preloads
        b.install(range(7, 9), 0).expect("next");
        assert_eq!(b.take_one(), (Some(2), false));
        assert_eq!(b.take_one(), (Some(7), true));
        assert_eq!(b.take_one(), (Some(8), false));
        assert_eq!(b.take_one(), (None, true));
    }

    #[test]
    fn regressions_and_needless_refills_are_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(100, 200), 0).expect("first install");
        assert_eq!(
            b.install(range(150, 250), 0),
            Err(InstallError::Regression { range: range(150, 250), high_water: 200 })
        );
        b.install(range(200, 300), 0).expect("next");
        assert_eq!(b.install(range(300, 400), 0), Err(InstallError::Full));
        let long = range(1_000, 1_000 + SEGMENT_LEN_MAX + 1);
        assert_eq!(
            DoubleBuffer::new(PreloadRatio::DEFAULT).install(long, 0),
            Err(InstallError::TooLong { range: long })
        );
    }

    #[test]
    fn a_frozen_buffer_gives_nothing_and_names_its_unissued_tail() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 11), 0).expect("first install");
        assert_eq!(b.take(count(3)).count(), 3);
        b.install(range(11, 21), 0).expect("contiguous next");
        assert_eq!(b.unissued_tail(), None, "no tail before the freeze");
        b.freeze();
        b.freeze();
        let t = b.take(count(1));
        assert_eq!((t.count(), t.frozen(), t.refill_needed()), (0, true, false));
        assert_eq!(b.take_one(), (None, false));
        assert!(b.is_frozen());
        assert!(!b.refill_due());
        assert_eq!(b.remaining(), 0);
        // Contiguous: the rest of the current segment and all of the next.
        assert_eq!(b.unissued_tail(), Some(range(4, 21)));
        assert_eq!(b.snapshot().handed_out, 3);
    }

    #[test]
    fn the_tail_skips_a_gap_and_includes_a_range_installed_after_the_freeze() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 11), 0).expect("first install");
        b.install(range(50, 60), 0).expect("next, after another node's range");
        assert_eq!(b.take(count(2)).count(), 2);
        b.freeze();
        // Ids 11..50 belong to another node: only the untouched next range goes back.
        assert_eq!(b.unissued_tail(), Some(range(50, 60)));

        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 11), 0).expect("first install");
        assert_eq!(b.take(count(10)).count(), 10);
        b.freeze();
        assert_eq!(b.unissued_tail(), None, "everything was handed out");
        // A refill that was in flight lands after the freeze: kept, never served.
        b.install(range(11, 21), 0).expect("late install");
        assert_eq!(b.take_one(), (None, false));
        assert_eq!(b.unissued_tail(), Some(range(11, 21)));
    }

    #[test]
    fn the_reserve_moves_the_preload_point_earlier() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 1001), 950).expect("install");
        // 10 % would be offset 100; keeping 950 of 1000 ids in hand needs offset 49.
        assert_eq!(b.snapshot().current.map(|s| s.preload_at), Some(50));
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 1001), 5_000).expect("install");
        assert_eq!(b.take_one(), (Some(1), true), "a reserve past the length asks at once");
    }

    #[test]
    fn a_restored_floor_refuses_lower_ranges() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.raise_floor(500);
        b.raise_floor(100);
        assert_eq!(
            b.install(range(100, 200), 0),
            Err(InstallError::Regression { range: range(100, 200), high_water: 500 })
        );
        b.install(range(500, 600), 0).expect("at the floor");
        assert_eq!(b.snapshot().high_water, 600);
    }

    #[test]
    fn takes_on_a_dry_buffer_stop_stepping_the_cursor() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 3), 0).expect("install");
        for _ in 0..1_000 {
            b.take(count(BATCH_COUNT_MAX));
        }
        // Only the first dry take stepped past the end (twice: the rest of its batch); the rest
        // saw the spent hint.
        let cursor = b.cursor.0.load(Ordering::Relaxed) & OFFSET_MASK;
        assert!(cursor < 2 * BATCH_COUNT_MAX, "cursor offset {cursor}");
        assert_eq!(b.snapshot().handed_out, 2);
        b.install(range(3, 5), 0).expect("refill");
        assert_eq!(b.take_one(), (Some(3), true));
    }

    fn ids(take: Take) -> Vec<u64> {
        take.ranges().flat_map(|r| r.ids()).collect()
    }

    #[test]
    fn the_last_take_given_back_comes_out_next() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(b.take(count(3)).count(), 3);
        assert_eq!(ids(b.take(count(5))), vec![4, 5, 6, 7, 8]);
        assert!(b.give_back(range(4, 9)));
        assert_eq!(b.snapshot().handed_out, 3, "the give-back is not counted as handed out");
        assert_eq!(b.remaining(), 97);
        assert_eq!(ids(b.take(count(5))), vec![4, 5, 6, 7, 8], "the same ids come out next");
        assert_eq!(b.snapshot().handed_out, 8);
    }

    #[test]
    fn the_tail_of_a_take_can_be_given_back() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(ids(b.take(count(10))), (1..11).collect::<Vec<_>>());
        assert!(b.give_back(range(7, 11)));
        assert_eq!(b.snapshot().handed_out, 6);
        assert_eq!(b.take_one(), (Some(7), false));
    }

    #[test]
    fn a_range_the_cursor_moved_past_is_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(ids(b.take(count(5))), vec![1, 2, 3, 4, 5]);
        assert_eq!(b.take_one(), (Some(6), false));
        // Not the last take: id 6 was taken after it, so moving the cursor back would hand
        // 6 out again.
        assert!(!b.give_back(range(1, 6)));
        assert!(!b.give_back(range(3, 6)));
        assert_eq!(b.snapshot().handed_out, 6, "a refusal changes nothing");
        assert_eq!(b.take_one(), (Some(7), false));
    }

    #[test]
    fn a_partially_overlapping_range_is_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(ids(b.take(count(5))), vec![1, 2, 3, 4, 5]);
        // Reaches past the last take (ids never handed out) or stops short of it (ids after
        // it are held): either way the cursor is not at the range's end.
        assert!(!b.give_back(range(3, 7)));
        assert!(!b.give_back(range(2, 5)));
        assert!(!b.give_back(range(5, 7)));
        assert_eq!(b.take_one(), (Some(6), false));
    }

    #[test]
    fn a_range_outside_the_current_segment_is_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        assert!(!b.give_back(range(1, 2)), "no segment yet");
        b.install(range(10, 20), 0).expect("install");
        assert_eq!(ids(b.take(count(5))), vec![10, 11, 12, 13, 14]);
        // Ends where the cursor stands but starts below the segment: its start has no offset.
        assert!(!b.give_back(range(8, 15)));
        assert_eq!(b.take_one(), (Some(15), false));

        // A take past the end steps the cursor to offset 8 of a 2-id segment (and sets the
        // spent flag): a range ending 8 ids into the segment matches the cursor but reaches
        // past the segment's end.
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(10, 12), 0).expect("install");
        assert_eq!(ids(b.take(count(5))), vec![10, 11]);
        assert!(!b.give_back(range(11, 18)));
        assert!(!b.give_back(range(11, 12)), "the cursor stands past the end");
        b.install(range(12, 14), 0).expect("refill");
        assert_eq!(b.take_one(), (Some(12), true));
    }

    #[test]
    fn a_range_from_before_a_switch_is_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 6), 0).expect("install");
        assert_eq!(ids(b.take(count(3))), vec![1, 2, 3]);
        b.install(range(6, 16), 0).expect("next");
        let take = b.take(count(5));
        assert_eq!(take.ranges().collect::<Vec<_>>(), vec![range(4, 6), range(6, 9)]);
        // The part in the switched-away segment is gone for good; the part in the current one
        // is the last take there and comes back.
        assert!(!b.give_back(range(4, 6)));
        assert!(!b.give_back(range(4, 9)));
        assert!(b.give_back(range(6, 9)));
        assert_eq!(b.take_one(), (Some(6), false));

        // The old segment was spent exactly (the cursor at its end, no spent flag): after the
        // switch its last take no longer comes back.
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 6), 0).expect("install");
        assert_eq!(ids(b.take(count(5))), vec![1, 2, 3, 4, 5]);
        b.install(range(10, 20), 0).expect("installed as current: the first was spent");
        assert!(!b.give_back(range(1, 6)));
        assert_eq!(b.take_one(), (Some(10), false));
    }

    #[test]
    fn a_frozen_buffer_refuses_give_back() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(ids(b.take(count(10))), (1..11).collect::<Vec<_>>());
        b.freeze();
        // The last take, never given back: only the freeze stands in the way. Taking it back
        // would hand ids the freeze counted as handed out to the store's give-back too.
        assert!(!b.give_back(range(7, 11)));
        assert_eq!(b.unissued_tail(), Some(range(11, 101)));
        assert_eq!(b.snapshot().handed_out, 10);
    }

    #[test]
    fn the_tail_after_a_give_back_and_a_freeze_is_exact() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(ids(b.take(count(10))), (1..11).collect::<Vec<_>>());
        assert!(b.give_back(range(7, 11)));
        assert_eq!(ids(b.take(count(2))), vec![7, 8]);
        b.freeze();
        // Exactly the ids nobody holds: 9 and 10 were given back and not taken again.
        assert_eq!(b.unissued_tail(), Some(range(9, 101)));
        assert_eq!(b.snapshot().handed_out, 8);
    }

    #[test]
    fn a_replayed_give_back_is_refused() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        assert_eq!(ids(b.take(count(5))), vec![1, 2, 3, 4, 5]);
        assert!(b.give_back(range(1, 6)));
        // Another taker gets the same ids; the first one's give-back arrives again (a retried
        // RPC). Accepting it would hand 1..6 out a third time, under the second taker.
        assert_eq!(ids(b.take(count(5))), vec![1, 2, 3, 4, 5]);
        assert!(!b.give_back(range(1, 6)));
        assert!(!b.give_back(range(3, 6)));
        assert_eq!(b.take_one(), (Some(6), false));
        // Ids above every range given back still come back.
        assert_eq!(ids(b.take(count(3))), vec![7, 8, 9]);
        assert!(b.give_back(range(7, 10)));
        assert_eq!(b.take_one(), (Some(7), false));
    }

    #[test]
    fn a_give_back_at_a_segments_end_keeps_the_switch_exact() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 3), 0).expect("install");
        assert_eq!(ids(b.take(count(2))), vec![1, 2]);
        // Spent exactly: the cursor stands at the end, no step went past it.
        assert!(b.give_back(range(2, 3)));
        assert_eq!(b.remaining(), 1);
        // Not spent any more, so the refill waits as the next segment.
        b.install(range(3, 5), 0).expect("next");
        assert_eq!(b.snapshot().next.map(|n| n.range), Some(range(3, 5)));
        assert_eq!(ids(b.take(count(3))), vec![2, 3, 4]);
    }

    #[test]
    fn a_preload_point_crossed_again_after_a_give_back_is_harmless() {
        let b = DoubleBuffer::new(PreloadRatio::DEFAULT);
        b.install(range(1, 101), 0).expect("install");
        let take = b.take(count(15));
        assert!(take.refill_needed(), "covers the preload id 11");
        assert!(b.refill_due());
        assert!(b.give_back(range(6, 16)));
        assert!(!b.refill_due(), "back before the preload point");
        // The same preload id is covered again: a second signal, and a refill is due again.
        assert!(b.take(count(10)).refill_needed());
        assert!(b.refill_due());
        b.install(range(101, 201), 0).expect("next");
        // Once the refill landed, a signal finds nothing due.
        assert!(!b.refill_due());
        assert_eq!(b.remaining(), 185);
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
            if b.refill_due() && b.install(range(next_start, next_start + len), 0).is_ok() {
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

    #[test]
    fn threads_that_give_back_never_share_an_id() {
        let b = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    let (mut ids, mut given_back) = (Vec::new(), 0u64);
                    let mut turn = t;
                    while ids.len() < 20_000 {
                        turn += 1;
                        let take = b.take(count(1 + turn % 4));
                        ids.extend(take.ranges().flat_map(|r| r.ids()));
                        // Every other take gives back its last range, or the tail of it: the
                        // ids it gives back are the last ones it took, and it drops them.
                        if let Some(last) = take.ranges().last().filter(|_| turn % 2 == 0) {
                            let back = range(last.start() + (turn / 2) % last.len(), last.end());
                            if b.give_back(back) {
                                ids.truncate(ids.len() - back.len() as usize);
                                given_back += back.len();
                            }
                        }
                        std::hint::spin_loop();
                    }
                    (ids, given_back)
                })
            })
            .collect();
        // The same installer as above: tiny ranges with gaps, so give-backs race switches too.
        let (mut next_start, mut len) = (1, 1);
        while !threads.iter().all(|t| t.is_finished()) {
            if b.refill_due() && b.install(range(next_start, next_start + len), 0).is_ok() {
                next_start += len + len % 3;
                len = len % 16 + 1;
            }
            std::hint::spin_loop();
        }
        let (mut all, mut given_back) = (Vec::new(), 0);
        for t in threads {
            let (ids, back) = t.join().expect("taker thread");
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "a thread kept ids out of order");
            all.extend(ids);
            given_back += back;
        }
        eprintln!("{given_back} ids given back");
        assert!(given_back > 0, "no give-back succeeded: the test tested nothing");
        let kept = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), kept, "an id is held by two threads");
    }
}
