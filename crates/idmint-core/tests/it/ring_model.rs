//! The ring of pre-made ids, checked against its promises: single-threaded it behaves exactly
//! like a bounded FIFO queue; under threads (one filler and three takers, and two fillers for
//! good measure) every id put is taken exactly once, and each taker sees ids in the order
//! they were put.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idmint_core::Ring;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put,
    Take,
}

proptest! {
    /// Any sequence of puts and takes gives what a bounded `VecDeque` gives: a put refused
    /// exactly when full, takes in put order, `None` exactly when empty, and the fill signal
    /// below the padding.
    #[test]
    fn the_ring_is_a_bounded_fifo(
        capacity_log2 in 1u32..7,
        padding_permille in 0u32..1_200,
        ops in prop::collection::vec(prop_oneof![Just(Op::Put), Just(Op::Take)], 1..400),
    ) {
        let capacity = 1u64 << capacity_log2;
        let ring = Ring::new(capacity).unwrap();
        let mut model = VecDeque::new();
        let mut next_id = 1;
        for op in ops {
            match op {
                Op::Put => {
                    let fits = (model.len() as u64) < capacity;
                    prop_assert_eq!(ring.put(next_id), fits);
                    if fits {
                        model.push_back(next_id);
                    }
                    next_id += 1;
                }
                Op::Take => prop_assert_eq!(ring.take(), model.pop_front()),
            }
            prop_assert_eq!(ring.len(), model.len() as u64);
            prop_assert_eq!(ring.is_empty(), model.is_empty());
            let threshold = capacity * u64::from(padding_permille.min(1_000));
            prop_assert_eq!(ring.needs_fill(padding_permille), (model.len() as u64) * 1_000 < threshold);
        }
    }
}

/// One filler thread and three takers move a million ids through a small ring, so every slot
/// is reused thousands of times: each id is taken exactly once.
#[test]
fn one_filler_and_three_takers_move_a_million_ids_each_once() {
    const IDS: u64 = 1_000_000;
    let taken = run(1_024, 1, 3, IDS);
    assert_eq!(taken, (1..=IDS).collect::<Vec<_>>(), "an id was lost or taken twice");
}

/// The ring is built for one filler, but a second concurrent putter must not lose or repeat
/// ids either.
#[test]
fn two_fillers_and_two_takers_lose_and_repeat_nothing() {
    const IDS: u64 = 200_000;
    let taken = run(4_096, 2, 2, IDS);
    assert_eq!(taken, (1..=IDS).collect::<Vec<_>>(), "an id was lost or taken twice");
}

/// Runs `fillers` threads putting ids `1..=ids` (filler `f` puts those `≡ f` modulo the
/// fillers, in increasing order) and `takers` threads taking until the fillers are done and
/// the ring is empty. Checks that each taker saw each filler's ids in increasing order and
/// returns every id taken, sorted.
/// A thread stuck longer than this (a ring that stays full or empty) fails the test instead of
/// hanging it.
const STUCK_AFTER: Duration = Duration::from_secs(60);

fn run(capacity: u64, filler_count: u64, takers: usize, ids: u64) -> Vec<u64> {
    let deadline = Instant::now() + STUCK_AFTER;
    let ring = Arc::new(Ring::new(capacity).unwrap());
    let filled = Arc::new(AtomicBool::new(false));
    let takers: Vec<_> = (0..takers)
        .map(|_| {
            let (ring, filled) = (Arc::clone(&ring), Arc::clone(&filled));
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    match ring.take() {
                        Some(id) => got.push(id),
                        None if filled.load(Ordering::Acquire) && ring.is_empty() => break,
                        None => {
                            assert!(
                                Instant::now() < deadline,
                                "a taker found the ring empty for good"
                            );
                            std::thread::yield_now();
                        }
                    }
                }
                got
            })
        })
        .collect();
    let fillers: Vec<_> = (0..filler_count)
        .map(|f| {
            let ring = Arc::clone(&ring);
            std::thread::spawn(move || {
                for id in (1..=ids).filter(|id| id % filler_count == f) {
                    while !ring.put(id) {
                        assert!(
                            Instant::now() < deadline,
                            "the filler found the ring full for good"
                        );
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for filler in fillers {
        filler.join().unwrap();
    }
    filled.store(true, Ordering::Release);
    let mut all = Vec::new();
    for taker in takers {
        let got = taker.join().unwrap();
        for f in 0..filler_count {
            let from_f: Vec<u64> =
                got.iter().copied().filter(|id| id % filler_count == f).collect();
            assert!(from_f.windows(2).all(|w| w[0] < w[1]), "a taker saw ids out of order");
        }
        all.extend(got);
    }
    all.sort_unstable();
    all
}
