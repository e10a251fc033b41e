//! Interleaving tests, run by loom over every schedule within a preemption bound: the double
//! buffer's segment switch (takes race with installs, switches, slot reuse, give-backs and the
//! freeze; no id may be held by two takers, come from outside the installed ranges, or be
//! given back by the freeze after it was handed out) and the id ring (takers race the filler,
//! its runs and each other; no id is taken twice or lost, and a slot rewritten under a taker
//! that read it before claiming it is never handed out), and the snowflake generator's state
//! word (issuers race a moving clock, a stop and a new incarnation; no id is issued twice,
//! after a stop, or under a new worker id before its mark is written).
//!
//! Built only with `--cfg loom` (which also swaps the buffer's atomics and lock for loom's, see
//! `src/sync.rs`); in a normal build this file is empty. Run it as CI does:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p idmint-core --test loom --release --locked -- --nocapture
//! ```
//!
//! `LOOM_MAX_PREEMPTIONS=N` overrides the bound each model sets (at their own bounds the
//! twelve models take about 70 s on the shared 2-core machine). The models run through
//! `loom::model::Builder`, which installs no `tracing` subscriber: to see a failing schedule
//! step by step, call `loom::model` instead and set
//! `LOOM_LOG=trace LOOM_LOCATION=1 LOOM_MAX_PREEMPTIONS=N`.
//!
//! Ids lost to a stale retry: a taker that read the hint before a switch and steps the cursor
//! after it finds its slot stale and retries; the ids its step covered in the new segment are
//! counted as handed out but returned to nobody. Such a step needs a publish between the
//! taker's hint load and its `fetch_add`, and one taker's attempts do not overlap, so each
//! publish wastes at most one step (of at most the count asked for) per taker. Every installed
//! range is published at most once, so the models assert
//! `lost <= takers * installs * count_max`. (Steps into the epoch the freeze parks the cursor on
//! waste nothing: no segment has that epoch.) The bound is loose for these tiny ranges; the
//! exact accounting checks (`handed_out + remaining == installed`, draining the rest) are what
//! catch a lost id.

#![cfg(loom)]
#![allow(clippy::unwrap_used, reason = "test helpers may panic: a panic is a test failure")]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use idmint_core::{Count, DoubleBuffer, IdRange, InstallError, PreloadRatio, Take};
use loom::sync::Arc;
use loom::thread;

/// Two takers each take twice (one id, then two) while the installer installs three ranges
/// with gaps; some installs find both segments occupied. Switches happen in takes and in
/// installs, racing each other.
#[test]
fn takes_race_installs_and_switches() {
    const COUNT_MAX: u64 = 2;
    explore("takes_race_installs_and_switches", 2, || {
        let buffer = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let buffer = Arc::clone(&buffer);
                thread::spawn(move || {
                    let mut ids = Vec::new();
                    ids.extend(buffer.take_one().0);
                    ids.extend(ids_of(&buffer.take(count(COUNT_MAX))));
                    ids
                })
            })
            .collect();
        let mut installed = Vec::new();
        for r in [range(1, 2), range(3, 5), range(6, 7)] {
            install_unless_full(&buffer, r, &mut installed);
        }
        let returned = join(takers);
        check_served(&buffer, &installed, &returned, 2 * installed.len() as u64 * COUNT_MAX);
    });
}

/// Slot reuse: a thread playing the library installs a one-id range and takes one id, six
/// times, so it publishes six segments and slot 1 is rewritten for epoch 5 while the other
/// taker may still hold the hint of epoch 1, or read its slot mid-rewrite.
#[test]
fn a_slot_rewritten_under_a_stale_taker_is_never_misread() {
    explore("a_slot_rewritten_under_a_stale_taker_is_never_misread", 2, || {
        let buffer = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let stale = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || buffer.take_one().0.into_iter().collect::<Vec<_>>())
        };
        let mut installed = Vec::new();
        let mut ids = Vec::new();
        for i in 0..6 {
            install_unless_full(&buffer, range(2 * i + 1, 2 * i + 2), &mut installed);
            ids.extend(buffer.take_one().0);
        }
        let returned = vec![ids, join(vec![stale]).remove(0)];
        check_served(&buffer, &installed, &returned, 2 * installed.len() as u64);
    });
}

/// The freeze races two takers and an install: afterwards nothing is handed out, and the tail
/// the freeze names for giving back holds no id any taker got, and every id that was not
/// handed out.
#[test]
fn the_freeze_never_gives_back_an_id_it_handed_out() {
    const COUNT_MAX: u64 = 2;
    explore("the_freeze_never_gives_back_an_id_it_handed_out", 3, || {
        let buffer = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let mut installed = Vec::new();
        install_unless_full(&buffer, range(1, 3), &mut installed);
        let takers: Vec<_> = [1, COUNT_MAX]
            .into_iter()
            .map(|n| {
                let buffer = Arc::clone(&buffer);
                thread::spawn(move || {
                    let mut ids = Vec::new();
                    let mut frozen = false;
                    for _ in 0..2 {
                        let take = buffer.take(count(n));
                        // Once a take saw the freeze, every later one gets nothing. The take
                        // that saw it mid-way keeps the ids it got before (with `frozen()`
                        // set, although `Take::frozen` says "no id was taken");
                        // `check_frozen` checks they are not given back.
                        if frozen {
                            assert!(take.frozen() && take.count() == 0, "served after a freeze");
                        }
                        frozen = take.frozen();
                        ids.extend(ids_of(&take));
                    }
                    ids
                })
            })
            .collect();
        let freezer = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || buffer.freeze())
        };
        // Contiguous with the first range, so the whole unissued rest is one tail. It lands
        // before or after the freeze, as the current segment or the next.
        install_unless_full(&buffer, range(3, 5), &mut installed);
        freezer.join().unwrap();
        let returned = join(takers);
        check_frozen(&buffer, &installed, &returned, 2 * installed.len() as u64 * COUNT_MAX);
    });
}

/// A taker drains the current segment and switches while another thread installs the next
/// one (across a gap); a second taker races both. The install lands as `next` or, once the
/// current segment is spent, as the current one: either way no id is repeated or skipped.
#[test]
fn a_switch_when_spent_races_the_install_of_the_next_segment() {
    const COUNT_MAX: u64 = 2;
    explore("a_switch_when_spent_races_the_install_of_the_next_segment", 3, || {
        let buffer = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let mut installed = Vec::new();
        install_unless_full(&buffer, range(1, 2), &mut installed);
        let takers: Vec<_> = [COUNT_MAX, 1]
            .into_iter()
            .map(|n| {
                let buffer = Arc::clone(&buffer);
                thread::spawn(move || ids_of(&buffer.take(count(n))))
            })
            .collect();
        let installer = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || buffer.install(range(4, 6), 0))
        };
        if installer.join().unwrap().is_ok() {
            installed.push(range(4, 6));
        }
        let returned = join(takers);
        check_served(&buffer, &installed, &returned, 2 * installed.len() as u64 * COUNT_MAX);
    });
}

/// A give-back races a take and a switch: one thread takes two ids, gives back the last one
/// and takes one more; another takes one id twice; the main thread installs the next segment
/// (across a gap). The give-back succeeds only where no step came after the giver's, and the
/// ids it returns go to whichever take steps next: no id ends up held by both threads.
#[test]
fn a_give_back_races_a_take_and_a_switch() {
    // Plain std atomics: they count across loom's executions, outside the model.
    static GIVEN_BACK: AtomicUsize = AtomicUsize::new(0);
    static REFUSED: AtomicUsize = AtomicUsize::new(0);
    const COUNT_MAX: u64 = 2;
    explore("a_give_back_races_a_take_and_a_switch", 4, || {
        let buffer = Arc::new(DoubleBuffer::new(PreloadRatio::DEFAULT));
        let mut installed = Vec::new();
        install_unless_full(&buffer, range(1, 4), &mut installed);
        let giver = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || {
                let take = buffer.take(count(COUNT_MAX));
                let mut ids = ids_of(&take);
                if let Some(last) = take.ranges().last() {
                    // The giver drops what it gave back: it no longer holds those ids.
                    if buffer.give_back(range(last.end() - 1, last.end())) {
                        ids.pop();
                        GIVEN_BACK.fetch_add(1, Ordering::Relaxed);
                    } else {
                        REFUSED.fetch_add(1, Ordering::Relaxed);
                    }
                }
                ids.extend(buffer.take_one().0);
                ids
            })
        };
        let taker = {
            let buffer = Arc::clone(&buffer);
            thread::spawn(move || (0..2).filter_map(|_| buffer.take_one().0).collect())
        };
        install_unless_full(&buffer, range(5, 7), &mut installed);
        let returned = join(vec![giver, taker]);
        check_served(&buffer, &installed, &returned, 2 * installed.len() as u64 * COUNT_MAX);
    });
    // Both outcomes must occur, or the model explored only one side of the race.
    let (given_back, refused) =
        (GIVEN_BACK.load(Ordering::Relaxed), REFUSED.load(Ordering::Relaxed));
    assert!(given_back > 0 && refused > 0, "given back {given_back} times, refused {refused}");
}

/// Runs `model` under every schedule with at most `preemptions` preemptions (unless
/// `LOOM_MAX_PREEMPTIONS` asks for another bound) and prints how many it explored.
fn explore(name: &'static str, preemptions: usize, model: fn()) {
    static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(preemptions));
    let bound = builder.preemption_bound;
    let before = EXECUTIONS.load(Ordering::Relaxed);
    builder.check(move || {
        EXECUTIONS.fetch_add(1, Ordering::Relaxed);
        model();
    });
    // Tests run in parallel, so the count is only exact with `--test-threads=1`.
    let executions = EXECUTIONS.load(Ordering::Relaxed) - before;
    eprintln!("{name}: {executions} executions, preemption bound {bound:?}");
}

/// Checks a buffer that was not frozen, after every thread joined: the ids returned are
/// unique, increasing per thread and installed; the rest of what was installed is either
/// still in the buffer (and draining it gives exactly that) or lost to stale retries, at most
/// `lost_max` of them.
fn check_served(
    buffer: &DoubleBuffer,
    installed: &[IdRange],
    returned: &[Vec<u64>],
    lost_max: u64,
) {
    let returned = check_returned(installed, returned);
    let snapshot = buffer.snapshot();
    let total: u64 = installed.iter().map(IdRange::len).sum();
    assert_eq!(snapshot.handed_out + buffer.remaining(), total, "ids unaccounted for");
    let lost = snapshot.handed_out - returned.len() as u64;
    assert!(lost <= lost_max, "{lost} ids lost to stale retries, more than {lost_max}");

    // Nothing handed out may still be in the buffer, and nothing in it may be stuck.
    let remaining = buffer.remaining();
    let mut drained = Vec::new();
    for _ in 0..remaining {
        drained.extend(buffer.take_one().0);
    }
    assert_eq!(drained.len() as u64, remaining, "the buffer kept ids it would not hand out");
    assert_eq!(buffer.take_one().0, None);
    for id in drained {
        assert!(!returned.contains(&id), "id {id} was handed out again after the race");
        assert!(installed.iter().any(|r| r.ids().contains(&id)), "id {id} was never installed");
    }
}

/// Checks a frozen buffer after every thread joined: no take gets anything, and the tail to
/// give back starts above every id returned, ends at the high-water mark and, with the
/// handed-out count, covers everything installed (the ranges are contiguous).
fn check_frozen(
    buffer: &DoubleBuffer,
    installed: &[IdRange],
    returned: &[Vec<u64>],
    lost_max: u64,
) {
    let returned = check_returned(installed, returned);
    assert!(buffer.is_frozen());
    assert_eq!(buffer.take_one(), (None, false));
    assert!(buffer.take(count(1)).frozen());
    assert_eq!(buffer.remaining(), 0);
    let snapshot = buffer.snapshot();
    assert!(snapshot.frozen);
    let total: u64 = installed.iter().map(IdRange::len).sum();
    let tail = buffer.unissued_tail();
    if let Some(tail) = tail {
        // The critical property: an id handed out is never given back.
        if let Some(&highest) = returned.last() {
            assert!(highest < tail.start(), "id {highest} handed out and given back in {tail:?}");
        }
        assert_eq!(tail.end(), snapshot.high_water, "the tail must end at the high-water mark");
    }
    let tail_len = tail.map_or(0, |t| t.len());
    assert_eq!(snapshot.handed_out + tail_len, total, "ids neither handed out nor given back");
    let lost = snapshot.handed_out - returned.len() as u64;
    assert!(lost <= lost_max, "{lost} ids lost to stale retries, more than {lost_max}");
}

/// Checks each thread's ids increase and lie in an installed range, and that no id was
/// returned twice; returns them all, sorted.
fn check_returned(installed: &[IdRange], returned: &[Vec<u64>]) -> BTreeSet<u64> {
    let mut all = BTreeSet::new();
    for ids in returned {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a thread saw ids go down: {ids:?}");
        for &id in ids {
            assert!(installed.iter().any(|r| r.ids().contains(&id)), "id {id} was never installed");
            assert!(all.insert(id), "id {id} was handed out twice: {returned:?}");
        }
    }
    all
}

/// Installs `r`, recording it in `installed`; a full buffer refuses it (the library would
/// give such a range back). Any other refusal is a test bug.
fn install_unless_full(buffer: &DoubleBuffer, r: IdRange, installed: &mut Vec<IdRange>) {
    match buffer.install(r, 0) {
        Ok(()) => installed.push(r),
        Err(InstallError::Full) => {}
        Err(e) => panic!("install of {r:?} refused: {e:?}"),
    }
}

fn join(threads: Vec<thread::JoinHandle<Vec<u64>>>) -> Vec<Vec<u64>> {
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn ids_of(take: &Take) -> Vec<u64> {
    take.ranges().flat_map(|r| r.ids()).collect()
}

fn range(start: u64, end: u64) -> IdRange {
    IdRange::new(start, end).unwrap()
}

fn count(n: u64) -> Count {
    Count::new(n).unwrap()
}

// The ring of pre-made ids (`src/ring.rs`): puts and takes race over slot turns and the two
// cursors. No id may be taken twice, taken without having been put, or lost; and a taker must
// never read a slot whose put is unfinished or that was refilled under it (the first would
// return 0 or an old id, the second an id twice or out of order).

/// One filler puts three ids into a two-slot ring while two takers take twice each: some puts
/// find the ring full, some takes find it empty, and slot 0 is refilled in the schedules where
/// a take finishes before the third put.
#[test]
fn ring_takers_race_the_filler_and_each_other() {
    explore("ring_takers_race_the_filler_and_each_other", 3, || {
        let ring = Arc::new(idmint_core::Ring::new(2).unwrap());
        let filler = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || (1..=3).filter(|&id| ring.put(id)).collect::<Vec<u64>>())
        };
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let ring = Arc::clone(&ring);
                thread::spawn(move || (0..2).filter_map(|_| ring.take()).collect::<Vec<u64>>())
            })
            .collect();
        let put = filler.join().unwrap();
        check_ring(&ring, 1, &put, &join(takers));
    });
}

/// Slot reuse in every schedule: the main thread fills a two-slot ring, takes, and refills it
/// twice, so both slots are rewritten while a stale taker may hold the head position it read
/// before, or the turn of a slot's previous round.
#[test]
fn ring_slot_refilled_under_a_stale_taker_is_never_misread() {
    explore("ring_slot_refilled_under_a_stale_taker_is_never_misread", 5, || {
        let ring = Arc::new(idmint_core::Ring::new(2).unwrap());
        let stale = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || ring.take().into_iter().collect::<Vec<u64>>())
        };
        let mut put = Vec::new();
        let mut taken = Vec::new();
        for id in 1..=2 {
            assert!(ring.put(id), "an empty two-slot ring takes two ids");
            put.push(id);
        }
        for id in 3..=4 {
            taken.extend(ring.take());
            if ring.put(id) {
                put.push(id);
            }
        }
        let returned = vec![taken, join(vec![stale]).remove(0)];
        check_ring(&ring, 1, &put, &returned);
    });
}

/// The ring is built for one filler, but two concurrent putters must not claim one slot: two
/// fillers put two ids each into a two-slot ring while a taker takes twice.
#[test]
fn ring_two_fillers_never_claim_one_slot() {
    explore("ring_two_fillers_never_claim_one_slot", 3, || {
        let ring = Arc::new(idmint_core::Ring::new(2).unwrap());
        let fillers: Vec<_> = [[1, 3], [2, 4]]
            .into_iter()
            .map(|ids| {
                let ring = Arc::clone(&ring);
                thread::spawn(move || ids.into_iter().filter(|&id| ring.put(id)).collect())
            })
            .collect();
        let taker = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || (0..2).filter_map(|_| ring.take()).collect::<Vec<u64>>())
        };
        let put: Vec<u64> = join(fillers).concat();
        check_ring(&ring, 2, &put, &join(vec![taker]));
    });
}

/// The filler's batched put (`put_run`, one CAS for a run of slots) races two takers (one
/// using the checked take): a run of three into a two-slot ring puts what fits, and a second
/// run puts into the slots the takers freed; no taker may read a slot of the run before its
/// id is written.
#[test]
fn ring_run_put_races_takers() {
    explore("ring_run_put_races_takers", 3, || {
        let ring = Arc::new(idmint_core::Ring::new(2).unwrap());
        let filler = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                let first = ring.put_run(1, 3);
                let mut put: Vec<u64> = (1..1 + first).collect();
                let second = ring.put_run(11, 2);
                put.extend(11..11 + second);
                put
            })
        };
        let takers: Vec<_> = (0..2)
            .map(|checked| {
                let ring = Arc::clone(&ring);
                thread::spawn(move || {
                    (0..2)
                        .filter_map(|_| match checked {
                            0 => ring.take(),
                            _ => ring.take_checked(500).map(|(id, _)| id),
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        let put = filler.join().unwrap();
        check_ring(&ring, 1, &put, &join(takers));
    });
}

/// Two putters of runs never claim one slot: runs of two ids each (odd and even) into a
/// two-slot ring while a taker takes twice.
#[test]
fn ring_two_run_putters_never_claim_one_slot() {
    explore("ring_two_run_putters_never_claim_one_slot", 3, || {
        let ring = Arc::new(idmint_core::Ring::new(2).unwrap());
        let fillers: Vec<_> = [1, 4]
            .into_iter()
            .map(|first| {
                let ring = Arc::clone(&ring);
                thread::spawn(move || {
                    let count = ring.put_run(first, 2);
                    (first..first + count).collect::<Vec<u64>>()
                })
            })
            .collect();
        let taker = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || (0..2).filter_map(|_| ring.take()).collect::<Vec<u64>>())
        };
        let put: Vec<u64> = join(fillers).concat();
        let returned = join(vec![taker]);
        // Each putter's run in order (`check_ring` checks residue classes, not runs: modulo 6
        // the ids 1, 2, 4 and 5 are each alone in theirs).
        for run in [1..3, 4..6] {
            let from_run: Vec<u64> =
                returned[0].iter().copied().filter(|id| run.contains(id)).collect();
            assert!(from_run.windows(2).all(|w| w[0] < w[1]), "a run out of order: {returned:?}");
        }
        check_ring(&ring, 6, &put, &returned);
    });
}

/// Checks a ring after every thread joined: each taker saw each filler's ids in increasing
/// order (filler `f` of `fillers` puts the ids `≡ f` modulo `fillers`, increasing), and the ids
/// taken plus the ids still in the ring are exactly the ids put, each once.
fn check_ring(ring: &idmint_core::Ring, fillers: u64, put: &[u64], returned: &[Vec<u64>]) {
    let mut all = BTreeSet::new();
    for ids in returned {
        for f in 0..fillers {
            let from_f: Vec<u64> = ids.iter().copied().filter(|id| id % fillers == f).collect();
            assert!(
                from_f.windows(2).all(|w| w[0] < w[1]),
                "a taker saw ids out of order: {ids:?}"
            );
        }
        for &id in ids {
            assert!(all.insert(id), "id {id} was taken twice: {returned:?}");
        }
    }
    let remaining = ring.len();
    let drained: Vec<u64> = std::iter::from_fn(|| ring.take()).collect();
    assert_eq!(drained.len() as u64, remaining, "the ring's length was off");
    for id in drained {
        assert!(all.insert(id), "id {id} was taken and is still in the ring");
    }
    let put: BTreeSet<u64> = put.iter().copied().collect();
    assert_eq!(all, put, "taken + remaining != put: an id was lost or made up");
}

// The snowflake generator's state word (`src/snowflake_cell.rs`): issuers race each other, a
// clock that moves, a stop and a new incarnation. No id may be issued twice, out of order on
// one thread, after a stop returned, or under a new incarnation with the old one's mark.

/// A small layout: 8 bits of ms, 2 worker bits, 1 sequence bit (two ids a unit), so the
/// issuers spend units and wait within a few steps.
fn cell_layout() -> idmint_core::Layout {
    idmint_core::Layout::new(8, 2, 1, idmint_core::TimeUnit::Millis, 0).unwrap()
}

/// Two issuers issue twice each while the main thread moves the clock a unit on and then
/// stops the cell: ids are unique and increasing per thread, none lies above the state the
/// stop returned (nothing issued after it), and the stop's state is the last id issued.
#[test]
fn snowflake_cell_issuers_race_the_clock_and_a_stop() {
    use idmint_core::snowflake_cell::{IssueCell, Issued};
    explore("snowflake_cell_issuers_race_the_clock_and_a_stop", 3, || {
        let layout = cell_layout();
        let cell = Arc::new(IssueCell::new(&layout, 1).unwrap());
        cell.raise_mark(10);
        let clock = Arc::new(loom::sync::atomic::AtomicU64::new(1));
        let issuers: Vec<_> = (0..2)
            .map(|_| {
                let (cell, clock) = (Arc::clone(&cell), Arc::clone(&clock));
                thread::spawn(move || {
                    let policy = idmint_core::ClockPolicy::STRICT;
                    let now = || clock.load(loom::sync::atomic::Ordering::Acquire);
                    (0..2)
                        .filter_map(|_| match cell.issue(&layout, &policy, 0, now) {
                            Issued::Id(id) => Some(id),
                            _ => None,
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        clock.store(2, loom::sync::atomic::Ordering::Release);
        let last = cell.stop(&layout);
        let returned = join(issuers);
        let mut all = BTreeSet::new();
        for ids in &returned {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "out of order: {returned:?}");
            for &id in ids {
                assert!(all.insert(id), "id {id} issued twice: {returned:?}");
                let parts = layout.decode(id).unwrap();
                let packed = layout.pack(parts.time_units, parts.sequence).unwrap();
                assert!(packed <= last, "id {id} issued after the stop: {returned:?}");
            }
        }
        if let Some(&max) = all.last() {
            let parts = layout.decode(max).unwrap();
            assert_eq!(layout.pack(parts.time_units, parts.sequence), Some(last));
        }
    });
}

/// A new incarnation (a lease held again, as worker 2) races an issuer: no id of worker 1
/// after the stop, ids increasing across the change, and no id of worker 2 while its mark is
/// not written (the old worker's mark must not serve the new word).
#[test]
fn snowflake_cell_a_new_incarnation_never_serves_with_the_old_mark() {
    use idmint_core::snowflake_cell::{IssueCell, Issued};
    explore("snowflake_cell_a_new_incarnation_never_serves_with_the_old_mark", 3, || {
        let layout = cell_layout();
        let cell = Arc::new(IssueCell::new(&layout, 1).unwrap());
        cell.raise_mark(9);
        let clock = Arc::new(loom::sync::atomic::AtomicU64::new(8));
        let issuer = {
            let (cell, clock) = (Arc::clone(&cell), Arc::clone(&clock));
            thread::spawn(move || {
                let policy = idmint_core::ClockPolicy::STRICT;
                let now = || clock.load(loom::sync::atomic::Ordering::Acquire);
                (0..2)
                    .filter_map(|_| match cell.issue(&layout, &policy, 0, now) {
                        Issued::Id(id) => Some(id),
                        _ => None,
                    })
                    .collect::<Vec<u64>>()
            })
        };
        let last = cell.stop(&layout);
        assert!(cell.begin(&layout, 2, layout.pack(8, 1).unwrap()));
        clock.store(9, loom::sync::atomic::Ordering::Release);
        let ids = join(vec![issuer]).remove(0);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "out of order: {ids:?}");
        for id in ids {
            let parts = layout.decode(id).unwrap();
            assert_eq!(parts.worker, 1, "id {id} of worker 2 with no mark written");
            let packed = layout.pack(parts.time_units, parts.sequence).unwrap();
            assert!(packed <= last, "id {id} of worker 1 after the stop");
        }
    });
}
