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
    /// `put_run` of this many consecutive ids.
    PutRun(u64),
    Take,
    /// `take_checked` at this padding.
    TakeChecked,
}

proptest! {
    /// Any sequence of puts (one id, or a run) and takes gives what a bounded `VecDeque`
    /// gives: a put refused exactly when full (a run puts what fits), takes in put order,
    /// `None` exactly when empty, and the fill signal below the padding.
    #[test]
    fn the_ring_is_a_bounded_fifo(
        capacity_log2 in 1u32..7,
        padding_permille in 0u32..1_200,
        ops in prop::collection::vec(
            prop_oneof![
                Just(Op::Put),
                (0u64..80).prop_map(Op::PutRun),
                Just(Op::Take),
                Just(Op::TakeChecked),
            ],
            1..400,
        ),
    ) {
        let capacity = 1u64 << capacity_log2;
        let ring = Ring::new(capacity).unwrap();
        let mut model = VecDeque::new();
        let mut next_id = 1;
        // Takes so far: the position of the next take.
        let mut taken: u64 = 0;
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
                Op::PutRun(count) => {
                    let fit = count.min(capacity - model.len() as u64);
                    prop_assert_eq!(ring.put_run(next_id, count), fit);
                    model.extend(next_id..next_id + fit);
                    next_id += count;
                }
                Op::Take => {
                    let expected = model.pop_front();
                    prop_assert_eq!(ring.take(), expected);
                    taken += u64::from(expected.is_some());
                }
                Op::TakeChecked => {
                    // The fill check is made by the take of every sixteenth of the capacity
                    // (at least every position), on the length after the take.
                    let position = taken;
                    let expected = model.pop_front().map(|id| {
                        let every = (capacity / 16).max(1);
                        let threshold = capacity * u64::from(padding_permille.min(1_000));
                        let low = (model.len() as u64) * 1_000 < threshold;
                        (id, position.is_multiple_of(every) && low)
                    });
                    prop_assert_eq!(ring.take_checked(padding_permille), expected);
                    taken += u64::from(expected.is_some());
                }
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
    let taken = run(1_024, 1, 3, IDS, Fill::Singles);
    assert_eq!(taken, (1..=IDS).collect::<Vec<_>>(), "an id was lost or taken twice");
}

/// The ring is built for one filler, but a second concurrent putter must not lose or repeat
/// ids either.
#[test]
fn two_fillers_and_two_takers_lose_and_repeat_nothing() {
    const IDS: u64 = 200_000;
    let taken = run(4_096, 2, 2, IDS, Fill::Singles);
    assert_eq!(taken, (1..=IDS).collect::<Vec<_>>(), "an id was lost or taken twice");
}

/// The filler's batched put: one filler putting runs of 1 to 64 ids and three takers using
/// the checked take move a million ids through a small ring, each taken exactly once.
#[test]
fn runs_put_by_one_filler_are_each_taken_once() {
    const IDS: u64 = 1_000_000;
    let taken = run(1_024, 1, 3, IDS, Fill::Runs);
    assert_eq!(taken, (1..=IDS).collect::<Vec<_>>(), "an id was lost or taken twice");
}

/// Two fillers putting runs at once never claim one slot.
#[test]
fn runs_put_by_two_fillers_are_each_taken_once() {
    const IDS: u64 = 400_000;
    let taken = run(256, 2, 2, IDS, Fill::Runs);
    assert_eq!(taken, (1..=IDS).collect::<Vec<_>>(), "an id was lost or taken twice");
}

/// How the fillers of [`run`] put their ids, and how the takers take them.
#[derive(Clone, Copy)]
enum Fill {
    /// Filler `f` puts the ids `≡ f` modulo the fillers one at a time with `put`, in
    /// increasing order; the takers use `take`.
    Singles,
    /// Filler `f` owns the block `f * ids / fillers + 1 ..` and puts it with `put_run` in runs
    /// of 1 to 64 ids; the takers use `take_checked`.
    Runs,
}

/// A thread stuck longer than this (a ring that stays full or empty) fails the test instead of
/// hanging it.
const STUCK_AFTER: Duration = Duration::from_secs(60);

/// Runs `filler_count` threads putting ids `1..=ids` as `fill` says and `takers` threads
/// taking until the fillers are done and the ring is empty. Checks that each taker saw each
/// filler's ids in increasing order and returns every id taken, sorted.
fn run(capacity: u64, filler_count: u64, takers: usize, ids: u64, fill: Fill) -> Vec<u64> {
    let deadline = Instant::now() + STUCK_AFTER;
    let per_filler = ids / filler_count;
    if let Fill::Runs = fill {
        assert_eq!(per_filler * filler_count, ids, "blocks of equal size");
    }
    // The filler that put `id`.
    let filler_of = move |id: u64| match fill {
        Fill::Singles => id % filler_count,
        Fill::Runs => (id - 1) / per_filler,
    };
    let ring = Arc::new(Ring::new(capacity).unwrap());
    let filled = Arc::new(AtomicBool::new(false));
    let takers: Vec<_> = (0..takers)
        .map(|_| {
            let (ring, filled) = (Arc::clone(&ring), Arc::clone(&filled));
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let taken = match fill {
                        Fill::Singles => ring.take(),
                        Fill::Runs => ring.take_checked(500).map(|(id, _)| id),
                    };
                    match taken {
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
            std::thread::spawn(move || match fill {
                Fill::Singles => {
                    for id in (1..=ids).filter(|id| id % filler_count == f) {
                        while !ring.put(id) {
                            assert!(
                                Instant::now() < deadline,
                                "the filler found the ring full for good"
                            );
                            std::thread::yield_now();
                        }
                    }
                }
                Fill::Runs => {
                    let (mut next, end) = (f * per_filler + 1, (f + 1) * per_filler + 1);
                    let mut length = 1;
                    while next < end {
                        let count = length.min(end - next);
                        next += ring.put_run(next, count);
                        length = length % 64 + 1;
                        assert!(Instant::now() < deadline, "the filler found the ring full");
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
            let from_f: Vec<u64> = got.iter().copied().filter(|id| filler_of(*id) == f).collect();
            assert!(from_f.windows(2).all(|w| w[0] < w[1]), "a taker saw ids out of order");
        }
        all.extend(got);
    }
    all.sort_unstable();
    all
}
