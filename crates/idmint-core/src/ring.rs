//! The ring of pre-made ids behind the cached generator (Baidu uid-generator's
//! `CachedUidGenerator` `RingBuffer`): a filler puts whole time units of ids in ahead of need,
//! and takers take them one by one without a lock.
//!
//! The ring is Dmitry Vyukov's bounded queue. Each slot has a *turn*: position `p` may be put
//! into slot `p % capacity` when its turn reads `p`, and taken from it when the turn reads
//! `p + 1`; the taker then sets it to `p + capacity`, the next put's position for that slot.
//! Putters and takers claim positions with one CAS on their own cursor (`tail`, `head`, each
//! on its own cache lines), so a taker never reads a slot whose put is unfinished and a put
//! never overwrites an id not yet taken. The turn is written with Release after the id and
//! read with Acquire before it (and the other way round for the taker's read and the next
//! put), which orders every id access without a lock. Positions are `u64` and only grow, so
//! they never wrap and a CAS cannot be fooled by a reused value (no ABA). `tests/loom.rs`
//! checks it under loom.
//!
//! The ring is built for one filler and many takers, but a second concurrent putter is safe
//! too. It makes no ids and reads no clock: the caller fills it (see
//! [`crate::snowflake::Layout::ids_of_unit`]) and asks [`Ring::needs_fill`] when to.

use std::fmt;

use crate::limits::{RING_ATTEMPTS_MAX, RING_CAPACITY_MAX, RING_CAPACITY_MIN};
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

/// One slot: the id, and whose turn it is.
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
            .map(|position| Slot { turn: AtomicU64::new(position), id: AtomicU64::new(0) })
            .collect();
        Ok(Ring {
            head: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            slots,
            mask: capacity - 1,
        })
    }

    /// Puts `id` at the back. `false` when the ring is full (or, with several concurrent
    /// putters, when this one lost the race [`RING_ATTEMPTS_MAX`] times): the id was not put.
    pub fn put(&self, id: u64) -> bool {
        let mut position = self.tail.0.load(Ordering::Relaxed);
        for _ in 0..RING_ATTEMPTS_MAX {
            let slot = self.slot(position);
            // Acquire pairs with the taker's Release that freed the slot: its read of the old
            // id happens before the write below.
            let turn = slot.turn.load(Ordering::Acquire);
            match turn.wrapping_sub(position) as i64 {
                0 => match self.tail.0.compare_exchange_weak(
                    position,
                    position + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.id.store(id, Ordering::Relaxed);
                        // Release: the id is written before a taker can see the turn.
                        slot.turn.store(position + 1, Ordering::Release);
                        return true;
                    }
                    Err(current) => position = current,
                },
                // The slot still holds the id of `position - capacity`, not taken yet.
                behind if behind < 0 => return false,
                // Another putter claimed `position`; our view of the tail was stale.
                _ => position = self.tail.0.load(Ordering::Relaxed),
            }
        }
        false
    }

    /// Takes the id at the front, or `None` when the ring is empty (or this taker lost the
    /// race for the front [`RING_ATTEMPTS_MAX`] times: each loss is another taker's success).
    /// One CAS on the head when uncontended; no lock, no allocation.
    #[inline]
    pub fn take(&self) -> Option<u64> {
        let mut position = self.head.0.load(Ordering::Relaxed);
        for _ in 0..RING_ATTEMPTS_MAX {
            let slot = self.slot(position);
            // Acquire pairs with the put's Release: the id of `position` is visible.
            let turn = slot.turn.load(Ordering::Acquire);
            match turn.wrapping_sub(position + 1) as i64 {
                0 => match self.head.0.compare_exchange_weak(
                    position,
                    position + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let id = slot.id.load(Ordering::Relaxed);
                        // Release: the read above happens before the next put into the slot.
                        slot.turn.store(position + self.capacity(), Ordering::Release);
                        return Some(id);
                    }
                    Err(current) => position = current,
                },
                // The put of `position` has not finished (or not started): empty.
                behind if behind < 0 => return None,
                // Another taker took `position`; our view of the head was stale.
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
