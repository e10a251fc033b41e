//! Residue interleaving: how N independent stores (Flickr's ticket databases, or N segment
//! databases) hand out one tag's ids without ever colliding, so losing one store does not stop
//! the tag.
//!
//! The id space is cut into *blocks* of `block` ids; block `b` is the ids
//! `[b × block, (b + 1) × block)`. Store `i` of `N` owns exactly the blocks `b ≡ i (mod N)`
//! (its *residue*). A *ticket* is a block number: a Flicker database's auto-increment with
//! `auto_increment_increment = N` and `auto_increment_offset ≡ i` yields only such numbers;
//! a segment store's range `[m, m + N × block)` holds the start of exactly one block of its
//! residue ([`block_in_range`]). Distinct residues and one fixed `block` make the stores'
//! ids disjoint whatever their counters do; one store that lags only hands out lower blocks.

use crate::limits::ID_MAX;
use crate::segment::IdRange;

/// Ids of block `ticket`: `[ticket × block, (ticket + 1) × block)`, or `None` when that
/// passes [`ID_MAX`], or `block` is 0, or the block would start at id 0 (ticket 0: not an
/// id idmint hands out, so ticket 0 is never used).
pub fn block_ids(ticket: u64, block: u64) -> Option<IdRange> {
    if ticket == 0 || block == 0 {
        return None;
    }
    let start = ticket.checked_mul(block)?;
    let end = start.checked_add(block)?;
    if end - 1 > ID_MAX {
        return None;
    }
    IdRange::new(start, end)
}

/// The first block of residue `residue` (mod `modulus`) whose start lies in `range`: the
/// block a segment store's allocation `range` stands for when the store is interleaved as
/// `residue` of `modulus` with blocks of `block` ids. `None` when no such start lies in the
/// range (a range shorter than `modulus × block` may hold none), or for a zero `block` or
/// `modulus`, or a `residue` not below `modulus`.
///
/// The block may reach past `range`'s end, into the store's next allocation; that
/// allocation's own block is the next one of the residue, so no block is ever claimed twice.
pub fn block_in_range(range: IdRange, block: u64, residue: u64, modulus: u64) -> Option<u64> {
    if block == 0 || modulus == 0 || residue >= modulus {
        return None;
    }
    // The first block starting at or after the range's start.
    let first = range.start().div_ceil(block);
    let ticket = first.checked_add((residue + modulus - first % modulus) % modulus)?;
    let start = ticket.checked_mul(block)?;
    (start < range.end() && ticket > 0).then_some(ticket)
}

/// The smallest ticket whose block starts at or above `id`: what a store must be raised to
/// so that no later block of it holds an id below `id`.
pub fn ticket_at_or_above(id: u64, block: u64) -> u64 {
    id.div_ceil(block.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> IdRange {
        IdRange::new(start, end).unwrap()
    }

    #[test]
    fn blocks_tile_the_id_space() {
        assert_eq!(block_ids(1, 10), Some(range(10, 20)));
        assert_eq!(block_ids(7, 1), Some(range(7, 8)));
        assert_eq!(block_ids(0, 10), None);
        assert_eq!(block_ids(3, 0), None);
        assert_eq!(block_ids(ID_MAX, 1), Some(range(ID_MAX, ID_MAX + 1)));
        assert_eq!(block_ids(ID_MAX / 2 + 1, 2), None);
        assert_eq!(block_ids(u64::MAX, 2), None);
    }

    #[test]
    fn a_full_allocation_holds_exactly_one_block_of_its_residue() {
        // N = 3, block 10: an allocation of 30 ids, wherever it starts.
        for start in 1..200 {
            for residue in 0..3 {
                let got = block_in_range(range(start, start + 30), 10, residue, 3).unwrap();
                assert_eq!(got % 3, residue);
                assert!(got * 10 >= start && got * 10 < start + 30, "{start} {residue} {got}");
            }
        }
        assert_eq!(block_in_range(range(1, 5), 10, 0, 1), None, "too short to hold a start");
        assert_eq!(block_in_range(range(1, 50), 10, 3, 3), None, "residue out of range");
        assert_eq!(block_in_range(range(1, 50), 0, 0, 3), None);
        assert_eq!(ticket_at_or_above(100, 10), 10);
        assert_eq!(ticket_at_or_above(101, 10), 11);
    }
}
