//! The keyed permutation behind non-guessable ids: a bijection exhaustively on a 20-bit space
//! (and a 21-bit one, for the odd split), a round trip by proptest on every width up to 63
//! bits, and 1 000 000 consecutive internal ids giving 1 000 000 distinct public ids with no
//! visible order (about half of consecutive pairs go down, as for random numbers).

use std::collections::HashSet;

use idmint_core::permute::{
    PERMUTE_BITS_MAX, PERMUTE_BITS_MIN, PERMUTE_KEY_BYTES, Permutation, PermuteKey,
};
use proptest::prelude::*;

fn permutation(key: [u8; PERMUTE_KEY_BYTES], bits: u32) -> Permutation {
    Permutation::new(&PermuteKey::from_bytes(key), bits).expect("a valid width")
}

#[test]
fn exhaustive_bijection_on_20_and_21_bits() {
    for bits in [20, 21] {
        let p = permutation(*b"exhaustive-key-1", bits);
        let mut seen = vec![false; 1 << bits];
        for id in 1..=p.max_id() {
            let public = p.forward(id).expect("in range");
            assert!(public >= 1 && public <= p.max_id(), "{public} out of range");
            assert!(!seen[public as usize], "{bits} bits: public id {public} twice");
            seen[public as usize] = true;
            assert_eq!(p.backward(public), Ok(id), "{bits} bits: {public} does not map back");
        }
        // Every public id in 1..2^bits was reached, 0 never: onto, and zero stays out.
        assert!(!seen[0]);
        assert_eq!(seen.iter().filter(|s| **s).count() as u64, p.max_id());
    }
}

#[test]
fn a_million_consecutive_ids_are_distinct_and_show_no_order() {
    let p = permutation(*b"0123456789abcdef", 41);
    let start = 1_000_000_000u64;
    let publics: Vec<u64> =
        (start..start + 1_000_000).map(|id| p.forward(id).expect("in range")).collect();
    let distinct: HashSet<u64> = publics.iter().copied().collect();
    assert_eq!(distinct.len(), publics.len(), "two internal ids share a public id");
    let down = publics.windows(2).filter(|w| w[1] < w[0]).count() as f64;
    let share = down / (publics.len() - 1) as f64;
    // For independent random values the share is 0.5 ± 0.0005 (one standard deviation).
    assert!((0.49..=0.51).contains(&share), "{share} of consecutive pairs go down");
    // Consecutive internal ids land far apart: the median gap is a sizeable part of 2^41.
    let mut gaps: Vec<u64> = publics.windows(2).map(|w| w[0].abs_diff(w[1])).collect();
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    assert!(median > p.max_id() / 8, "median gap {median} is small for 2^41");
}

#[test]
fn different_keys_give_different_permutations() {
    let a = permutation(*b"key-aaaaaaaaaaaa", 32);
    let b = permutation(*b"key-bbbbbbbbbbbb", 32);
    let same = (1..10_000u64).filter(|id| a.forward(*id) == b.forward(*id)).count();
    assert!(same < 3, "{same} of 10 000 ids map alike under two keys");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_id_of_every_width_round_trips(
        key in any::<[u8; PERMUTE_KEY_BYTES]>(),
        bits in PERMUTE_BITS_MIN..=PERMUTE_BITS_MAX,
        raw in any::<u64>(),
    ) {
        let p = permutation(key, bits);
        let id = raw % p.max_id() + 1;
        let public = p.forward(id).unwrap();
        prop_assert!(public >= 1 && public <= p.max_id());
        prop_assert_eq!(p.backward(public), Ok(id));
        prop_assert_eq!(p.forward(p.backward(id).unwrap()), Ok(id));
    }

    #[test]
    fn the_63_bit_permutation_round_trips(key in any::<[u8; PERMUTE_KEY_BYTES]>(), id in 1..=i64::MAX as u64) {
        let p = permutation(key, 63);
        let public = p.forward(id).unwrap();
        prop_assert_eq!(p.backward(public), Ok(id));
    }
}
