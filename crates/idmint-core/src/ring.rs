//! The ring of pre-made ids behind the cached generator (Baidu uid-generator's
//! `CachedUidGenerator` `RingBuffer`): a filler puts whole time units of ids in ahead of need,
//! and takers take them one by one without a lock.
//!
//! Each slot has a *turn*, written only by putters: a put of position `p` writes the id into
//! slot `p % capacity`, then the turn `p + 1` (Release), which publishes it. Putters claim a
//! run of positions with one CAS on `tail`, after reading `head`: a position `q` is free once
//! the head has passed `q - capacity`. A taker reads the turn of the head position (Acquire),
//! reads the id, and only then claims the position with a CAS on `head` (Release). So a taker
//! never writes a slot: the slots' cache lines travel from the filler to the takers only,
//! instead of back and forth with every take (measured: the write-back made the take's first
//! access of each line a miss and then an upgrade, over a third of its cost). The read before
//! the claim is safe because a putter rewrites the slot of `p` only after it saw the head pass
//! `p` (Acquire, pairing with the claim's Release, which orders the taker's read before the
//! rewrite); a taker whose slot was rewritten under it therefore finds the head moved, its CAS
//! fails, and it drops what it read. `head` and `tail` each sit on their own cache lines.
//! Positions are `u64` and only grow, so they never wrap and a CAS cannot be fooled by a
//! reused value (no ABA). `tests/loom.rs` checks it under loom.
//!
//! The ring is built for one filler and many takers, but a second concurrent putter is safe
//! too. It makes no ids and reads no clock: the caller fills it (see
//! [`crate::snowflake::Layout::ids_of_unit`], [`Ring::put_run`]) and asks
//! [`Ring::needs_fill`] (or [`Ring::take_checked`]) when to.

use std::fmt;

use crate::limits::{
    RING_ATTEMPTS_MAX, RING_CAPACITY_MAX, RING_CAPACITY_MIN, RING_FILL_CHECK_EVERY_MAX,
};
use crate::sync::{AtomicU64, Ordering};

/// A fixed ring of pre-made ids: lock-free puts and takes, first in first out.
pub struct Ring {
    /// Position of the next take; takers claim it with a CAS.
    head: Padded<AtomicU64>,
    /// Position of the next put; putters claim it with a CAS.
    tail: Padded<AtomicU64>,
    slots: Box<[Slot]>,
    /// `capacity - 1`: the slot of position `p` is `p & mask`.
    mask: u64,
    /// The takes of positions `p` with `p & check_mask == 0` check whether a fill is due.
    check_mask: u64,
}

/// Why a ring was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingError {
    /// The capacity is not a power of two within
    /// `RING_CAPACITY_MIN..=RING_CAPACITY_MAX`.
    Capacity {
        /// The refused capacity.
        got: u64,
    },
}

/// Keeps a value on its own cache lines (two, against adjacent-line prefetch), so putters and
/// takers do not invalidate each other's cursor.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// One slot: the id, and the position it holds plus one once its put is done (0 before the
/// first put).
struct Slot {
    turn: AtomicU64,
    id: AtomicU64,
}

impl Ring {
    /// An empty ring of `capacity` slots: a power of two within
    /// [`RING_CAPACITY_MIN`]`..=`[`RING_CAPACITY_MAX`] (uid-generator sizes it as the ids of
    /// one unit times `2^boostPower`, 8 192 × 8).
    pub fn new(capacity: u64) -> Result<Ring, RingError> {
        if !capacity.is_power_of_two()
            || !(RING_CAPACITY_MIN..=RING_CAPACITY_MAX).contains(&capacity)
        {
            return Err(RingError::Capacity { got: capacity });
        }
        let slots = (0..capacity)
            .map(|_| Slot { turn: AtomicU64::new(0), id: AtomicU64::new(0) })
            .collect();
        Ok(Ring {
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            slots,
            mask: capacity - 1,
            check_mask: (capacity / 16).clamp(1, RING_FILL_CHECK_EVERY_MAX) - 1,
        })
    }

    /// Puts `id` at the back. `false` when the ring is full (or, with several concurrent
    /// putters, when this one lost the race [`RING_ATTEMPTS_MAX`] times): the id was not put.
    pub fn put(&self, id: u64) -> bool {
        self.put_run(id, 1) == 1
    }

    /// Puts the run `first, first + 1, …` of `count` ids at the back, as many as fit, and
    /// returns how many it put (from `first` on; 0 when the ring is full, or, with several
    /// concurrent putters, when this one lost the race [`RING_ATTEMPTS_MAX`] times). Like
    /// `count` calls of [`Ring::put`], but the positions are claimed with one CAS on the tail
    /// instead of one each: the filler puts a whole time unit, whose ids are consecutive, at
    /// the cost of one atomic read-modify-write. Takers may take the first ids of the run
    /// while the last ones are still being written; each slot's turn publishes it.
    ///
    /// # Panics
    /// When the run would pass `u64::MAX` (no layout makes such ids).
    pub fn put_run(&self, first: u64, count: u64) -> u64 {
        assert!(first.checked_add(count.saturating_sub(1)).is_some(), "a run of ids past u64::MAX");
        let mut position = self.tail.0.load(Ordering::Relaxed);
        for _ in 0..RING_ATTEMPTS_MAX {
            // Acquire pairs with the takers' Release claims: every taker of a position below
            // `head` has read its id, so the slots of positions below `head + capacity` may be
            // rewritten. (A stale, smaller head only puts fewer.)
            let head = self.head.0.load(Ordering::Acquire);
            let free = (head + self.capacity()).saturating_sub(position).min(count);
            if free == 0 {
                // Full (or `position` is another putter's stale view, which the CAS would
                // catch; the ring is full from its view too).
                return 0;
            }
            match self.tail.0.compare_exchange_weak(
                position,
                position + free,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // Last slot first: a taker that caught up with this run waits for all of
                    // it and then reads lines this putter no longer writes, instead of
                    // chasing the write front and pulling each line across cores up to four
                    // times (measured: a third of the rate when the two run on two cores).
                    for offset in (0..free).rev() {
                        let slot = self.slot(position + offset);
                        slot.id.store(first + offset, Ordering::Relaxed);
                        // Release: the id is written before a taker can see the turn.
                        slot.turn.store(position + offset + 1, Ordering::Release);
                    }
                    return free;
                }
                // Another putter claimed `position` (or a spurious failure): retry from the
                // tail it left.
                Err(current) => position = current,
            }
        }
        0
    }

    /// Takes the id at the front, or `None` when the ring is empty (or this taker lost the
    /// race for the front [`RING_ATTEMPTS_MAX`] times: each loss is another taker's success).
    /// One CAS on the head when uncontended; no lock, no allocation.
    #[inline]
    pub fn take(&self) -> Option<u64> {
        self.take_at().map(|(id, _)| id)
    }

    /// [`Ring::take`], and whether the ring now asks for a fill ([`Ring::needs_fill`]),
    /// checked only by the take of every [`RING_FILL_CHECK_EVERY_MAX`]-th position (or every
    /// sixteenth of the capacity, if fewer): the check reads the tail, whose cache line every
    /// put rewrites, so checking on each take would cost a cache miss per take while the
    /// filler is putting. Positions are unique, so exactly one taker checks at each of them;
    /// the fill is asked for at most that many takes late.
    #[inline]
    pub fn take_checked(&self, padding_permille: u32) -> Option<(u64, bool)> {
        let (id, position) = self.take_at()?;
        let due = position & self.check_mask == 0 && self.needs_fill(padding_permille);
        Some((id, due))
    }

    /// The take: the id and the position it was taken at.
    #[inline]
    fn take_at(&self) -> Option<(u64, u64)> {
        let mut position = self.head.0.load(Ordering::Relaxed);
        for _ in 0..RING_ATTEMPTS_MAX {
            let slot = self.slot(position);
            // Acquire pairs with the put's Release: the id of `position` is visible.
            let turn = slot.turn.load(Ordering::Acquire);
            match turn.wrapping_sub(position + 1) as i64 {
                0 => {
                    // Read before the claim, and kept only if the claim succeeds: a put
                    // rewrites this slot only after the head passed `position`, and then the
                    // CAS below fails.
                    let id = slot.id.load(Ordering::Relaxed);
                    // Release: the read above happens before a put that sees the head past
                    // `position` rewrites the slot.
                    match self.head.0.compare_exchange_weak(
                        position,
                        position + 1,
                        Ordering::Release,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => return Some((id, position)),
                        Err(current) => position = current,
                    }
                }
                // The put of `position` has not finished (or not started): empty.
                behind if behind < 0 => return None,
                // The slot was put again for a later round: another taker took `position`
                // and our view of the head was stale.
                _ => position = self.head.0.load(Ordering::Relaxed),
            }
        }
        None
    }

    /// The id at the front, without taking it, or `None` when the ring looks empty. A hint
    /// only: a taker may take it at once, and then the id read may be one put after it (never
    /// one before it: the turn read with Acquire shows the put of the front position done).
    /// The cached generator peeks to see whether the front has grown stale.
    pub fn peek(&self) -> Option<u64> {
        let position = self.head.0.load(Ordering::Acquire);
        let slot = self.slot(position);
        // Acquire pairs with the put's Release: the id of `position` (or a later one) is
        // visible.
        if slot.turn.load(Ordering::Acquire) != position + 1 {
            return None;
        }
        Some(slot.id.load(Ordering::Relaxed))
    }

    /// Ids in the ring, as of two loads that may race puts and takes: exact when nothing runs
    /// concurrently, otherwise within the puts and takes in flight. Counts puts that claimed
    /// their slot but have not finished writing it.
    pub fn len(&self) -> u64 {
        let head = self.head.0.load(Ordering::Acquire);
        let tail = self.tail.0.load(Ordering::Acquire);
        tail.saturating_sub(head).min(self.capacity())
    }

    /// Whether [`Ring::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of slots.
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    /// Whether fewer ids than `padding_permille` per mille of the capacity remain: time to
    /// fill (uid-generator's `paddingFactor`; the default is
    /// [`crate::limits::RING_PADDING_PERMILLE_DEFAULT`], half the ring). Per-mille above 1 000
    /// count as 1 000.
    pub fn needs_fill(&self, padding_permille: u32) -> bool {
        let permille = u64::from(padding_permille.min(1_000));
        // Capacity is at most 2^22, so the products cannot overflow.
        self.len() * 1_000 < self.capacity() * permille
    }

    fn slot(&self, position: u64) -> &Slot {
        // The mask keeps the index below the slot count, which fits a usize (it was
        // allocated).
        &self.slots[(position & self.mask) as usize]
    }
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::Capacity { got } => write!(
                f,
                "ring capacity {got} is invalid; use a power of two from {RING_CAPACITY_MIN} \
                 to {RING_CAPACITY_MAX}"
            ),
        }
    }
}

impl std::error::Error for RingError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::RING_PADDING_PERMILLE_DEFAULT;

    #[test]
    fn only_powers_of_two_in_bounds_make_a_ring() {
        for bad in [0, 1, 3, 6, RING_CAPACITY_MAX * 2, u64::MAX] {
            assert_eq!(Ring::new(bad).err(), Some(RingError::Capacity { got: bad }), "{bad}");
        }
        assert_eq!(Ring::new(2).map(|r| r.capacity()), Ok(2));
        assert_eq!(Ring::new(RING_CAPACITY_MIN).map(|r| r.capacity()), Ok(RING_CAPACITY_MIN));
        let message = RingError::Capacity { got: 3 }.to_string();
        assert!(message.contains("power of two"), "{message}");
    }

    #[test]
    fn ids_come_out_in_order_and_a_full_ring_refuses() {
        let ring = Ring::new(4).expect("valid capacity");
        assert_eq!(ring.take(), None);
        for id in 1..=4 {
            assert!(ring.put(id));
        }
        assert!(!ring.put(5), "full");
        assert_eq!(ring.len(), 4);
        assert_eq!(ring.take(), Some(1));
        assert!(ring.put(5), "one slot freed");
        assert!(!ring.put(6));
        assert_eq!(ring.peek(), Some(2), "the front, left in place");
        let rest: Vec<u64> = std::iter::from_fn(|| ring.take()).collect();
        assert_eq!(rest, [2, 3, 4, 5]);
        assert!(ring.is_empty());
        assert_eq!(ring.peek(), None);
    }

    #[test]
    fn the_ring_asks_for_a_fill_below_the_padding() {
        let ring = Ring::new(8).expect("valid capacity");
        assert!(ring.needs_fill(RING_PADDING_PERMILLE_DEFAULT));
        for id in 1..=4 {
            assert!(ring.put(id));
        }
        assert!(!ring.needs_fill(RING_PADDING_PERMILLE_DEFAULT), "half full is not below half");
        assert_eq!(ring.take(), Some(1));
        assert!(ring.needs_fill(RING_PADDING_PERMILLE_DEFAULT));
        assert!(!ring.needs_fill(0));
        assert!(ring.needs_fill(5_000), "capped at the whole ring, which is not full");
    }
}
