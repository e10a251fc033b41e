//! Residue interleaving, checked against its promise: N stores with distinct residues, each
//! advancing its own counter by any amounts at any pace, never claim the same id.

use std::collections::BTreeSet;

use idmint_core::IdRange;
use idmint_core::residue::{block_ids, block_in_range, ticket_at_or_above};
use proptest::prelude::*;

proptest! {
    /// Every store takes allocations of at least `modulus × block` ids from its own counter
    /// (starting anywhere, jumping forward anywhere); the blocks they stand for never share
    /// an id, and each store's blocks keep its residue.
    #[test]
    fn stores_with_distinct_residues_never_share_an_id(
        modulus in 1u64..5,
        block in 1u64..50,
        starts in prop::collection::vec(1u64..10_000, 5),
        steps in prop::collection::vec((0usize..5, 0u64..3, 0u64..500), 1..200),
    ) {
        let mut counters: Vec<u64> = starts.iter().take(modulus as usize).copied().collect();
        let mut claimed = BTreeSet::new();
        for (store, extra, jump) in steps {
            let store = store % modulus as usize;
            let start = counters[store] + jump;
            let len = modulus * block + extra * block / 2;
            let allocation = IdRange::new(start, start + len).unwrap();
            counters[store] = start + len;
            let ticket = block_in_range(allocation, block, store as u64, modulus).unwrap();
            prop_assert_eq!(ticket % modulus, store as u64);
            let ids = block_ids(ticket, block).unwrap();
            prop_assert!(ids.start() >= allocation.start() && ids.start() < allocation.end());
            for id in ids.ids() {
                prop_assert!(claimed.insert(id), "id {} claimed twice", id);
            }
        }
    }

    /// Raising a store to `ticket_at_or_above(id)` puts its next block at or above `id`.
    #[test]
    fn a_raised_store_hands_out_nothing_below_the_mark(
        id in 1u64..1_000_000, block in 1u64..1000, modulus in 1u64..5, residue in 0u64..5,
    ) {
        let residue = residue % modulus;
        let max_id = ticket_at_or_above(id, block) * block;
        let allocation = IdRange::new(max_id, max_id + modulus * block).unwrap();
        let ticket = block_in_range(allocation, block, residue, modulus).unwrap();
        prop_assert!(block_ids(ticket, block).unwrap().start() >= id);
    }
}
