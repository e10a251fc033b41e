//! Snowflake layouts and the generator step, checked against their promises: every valid
//! layout (the presets included) composes and decodes losslessly, exactly the invalid ones are
//! refused, and a generator stepped through any sequence of clock readings (forward, equal,
//! a little back, far back, to the end of time) issues strictly increasing states, never runs
//! ahead of the clock by more than its borrow, and waits or refuses exactly when its policy
//! says so; under a power-of-two vibration its sequence counts on modulo the span, so
//! `id % N` shards evenly.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idmint_core::limits::{ID_MAX, LAYOUT_BITS_MAX, LAYOUT_END_MS_MAX, LAYOUT_FIELD_BITS_MAX};
use idmint_core::snowflake::{
    ClockPolicy, Layout, LayoutError, PRESETS, Parts, Start, Step, TimeUnit, start_floor, step,
};
use proptest::prelude::*;

fn unit() -> impl Strategy<Value = TimeUnit> {
    prop_oneof![Just(TimeUnit::Millis), Just(TimeUnit::TenMillis), Just(TimeUnit::Seconds)]
}

/// Any valid layout: field widths that fit 63 bits, and an epoch anywhere that leaves room for
/// the whole time range; or one of the presets.
fn layout() -> impl Strategy<Value = Layout> {
    let random = (1u32..=LAYOUT_FIELD_BITS_MAX, any::<u32>(), any::<u32>(), unit(), any::<u64>())
        .prop_filter_map("time range past the end", |(time, seq, worker, unit, epoch)| {
            let sequence = 1 + seq % (LAYOUT_BITS_MAX - time);
            let worker = worker % (LAYOUT_BITS_MAX - time - sequence + 1);
            let span = (1u64 << time).checked_mul(unit.millis())?;
            let epoch = epoch % (LAYOUT_END_MS_MAX.checked_sub(span)? + 1);
            Layout::new(time, worker, sequence, unit, epoch).ok()
        });
    prop_oneof![3 => random, 1 => prop::sample::select(PRESETS.map(|(_, l)| l).to_vec())]
}

/// A layout small enough that a random walk spends sequences and reaches the end of time.
fn small_layout() -> impl Strategy<Value = Layout> {
    (4u32..=12, 0u32..=4, 1u32..=3, unit(), 0u64..2_000_000_000_000).prop_map(
        |(time, worker, sequence, unit, epoch)| {
            Layout::new(time, worker, sequence, unit, epoch).expect("small layouts are valid")
        },
    )
}

fn policy() -> impl Strategy<Value = ClockPolicy> {
    (0u64..5, prop::option::of(0u64..7))
        .prop_map(|(tolerance_units, borrow)| ClockPolicy { tolerance_units, borrow })
}

/// One reading of the clock, relative to the previous one.
#[derive(Debug, Clone)]
enum Clock {
    Forward(u64),
    /// The same reading `n` times in a row: spends the sequence.
    Same(u16),
    /// Back by at most the tolerance.
    SmallBack(u64),
    /// Back by up to tolerance + borrow + 10.
    BigBack(u64),
    /// Forward to a few units before the end of time.
    NearEnd(u64),
}

fn clock() -> impl Strategy<Value = Clock> {
    prop_oneof![
        8 => (1u64..4).prop_map(Clock::Forward),
        8 => (1u16..20).prop_map(Clock::Same),
        4 => (0u64..5).prop_map(Clock::SmallBack),
        3 => (1u64..20).prop_map(Clock::BigBack),
        1 => (0u64..4).prop_map(Clock::NearEnd),
    ]
}

/// Field widths anywhere up to 70 bits, or around the 63-bit total with small time fields (so
/// the epoch rarely matters).
fn widths() -> impl Strategy<Value = (u32, u32, u32)> {
    let around_63 = (0u32..=40, 0u32..=20, 61u32..=65).prop_map(|(time, sequence, total)| {
        (time, total.saturating_sub(time + sequence), sequence)
    });
    prop_oneof![(0u32..70, 0u32..70, 0u32..70), around_63]
}

/// What `step` must answer, from its documented rules: at a new unit issue at the clock with
/// the vibrated first sequence; otherwise the smallest state above `last` is issued if within
/// the borrow of the clock, waited for if the clock is behind by at most borrow + tolerance,
/// refused beyond.
fn expected(layout: &Layout, last: u64, now: u64, policy: &ClockPolicy, vibration: u64) -> Step {
    let (last_time, last_sequence) = layout.unpack(last);
    let first = (last_sequence + 1) % (vibration.min(layout.max_sequence()) + 1);
    let pack = |time, sequence| match layout.pack(time, sequence) {
        Some(packed) => Step::Issue { packed },
        None => Step::Exhausted,
    };
    if now > last_time {
        return pack(now, first);
    }
    let (time, sequence) = if last_sequence == layout.max_sequence() {
        (last_time + 1, first)
    } else {
        (last_time, last_sequence + 1)
    };
    let lead_max = policy.borrow.unwrap_or(0);
    if time > layout.max_time_units() {
        Step::Exhausted
    } else if last_time - now > lead_max + policy.tolerance_units {
        Step::Refuse { behind_units: last_time - now }
    } else if time <= now + lead_max {
        pack(time, sequence)
    } else {
        Step::WaitUntil { units: time - lead_max }
    }
}

proptest! {
    /// Every field value in range composes to an id below 2^63 that decodes to exactly those
    /// fields; one field out of range composes to nothing.
    #[test]
    fn compose_and_decode_round_trip(
        layout in layout(),
        (t, w, s) in (any::<u64>(), any::<u64>(), any::<u64>()),
    ) {
        let time_units = t % (layout.max_time_units() + 1);
        let worker = w % (layout.max_worker() + 1);
        let sequence = s % (layout.max_sequence() + 1);
        let id = layout.compose(time_units, worker, sequence).unwrap();
        prop_assert!(id <= ID_MAX);
        let total = layout.time_bits() + layout.worker_bits() + layout.sequence_bits();
        prop_assert_eq!(id >> total, 0);
        let timestamp_ms = layout.epoch_ms() + time_units * layout.unit().millis();
        let parts = Parts { time_units, timestamp_ms, worker, sequence };
        prop_assert_eq!(layout.decode(id), Some(parts));
        prop_assert_eq!(layout.to_units(timestamp_ms), Some(time_units));
        prop_assert_eq!(layout.timestamp_ms(time_units), Some(timestamp_ms));
        let packed = layout.pack(time_units, sequence).unwrap();
        prop_assert_eq!(layout.compose_packed(packed, worker), Some(id));
        prop_assert_eq!(layout.compose(layout.max_time_units() + 1, worker, sequence), None);
        prop_assert_eq!(layout.compose(time_units, layout.max_worker() + 1, sequence), None);
        prop_assert_eq!(layout.compose(time_units, worker, layout.max_sequence() + 1), None);
        if total < LAYOUT_BITS_MAX {
            prop_assert_eq!(layout.decode(id | 1 << total), None);
        }
        prop_assert!(layout.expires_at_ms() <= LAYOUT_END_MS_MAX);
        prop_assert!(timestamp_ms < layout.expires_at_ms());
    }

    /// For one worker, ids order as `(time, sequence)` do: a generator whose states increase
    /// issues increasing ids.
    #[test]
    fn ids_order_as_their_states(
        layout in layout(), (a, b) in (any::<u64>(), any::<u64>()), w in any::<u64>(),
    ) {
        let worker = w % (layout.max_worker() + 1);
        let state = |x: u64| {
            let x = x % ((layout.max_time_units() + 1) << layout.sequence_bits());
            layout.unpack(x)
        };
        let ((ta, sa), (tb, sb)) = (state(a), state(b));
        let id_a = layout.compose(ta, worker, sa).unwrap();
        let id_b = layout.compose(tb, worker, sb).unwrap();
        prop_assert_eq!(id_a.cmp(&id_b), (ta, sa).cmp(&(tb, sb)));
    }

    /// `Layout::new` accepts exactly the layouts that fit (checked in 128-bit arithmetic) and
    /// names the first rule a refused one breaks.
    #[test]
    fn exactly_the_invalid_layouts_are_refused(
        (time, worker, sequence) in widths(), unit in unit(),
        epoch in prop_oneof![any::<u64>(), 0u64..4_000_000_000_000, Just(u64::MAX)],
        near_end in prop::option::of(0u64..3),
    ) {
        // Sometimes put the end of the time range right at the limit (0), past it (1, 2).
        let span = 1u128.checked_shl(time).map(|p| p * u128::from(unit.millis()));
        let epoch = match (near_end, span) {
            (Some(d), Some(span)) if span <= u128::from(LAYOUT_END_MS_MAX) => {
                (LAYOUT_END_MS_MAX - span as u64).saturating_add(d)
            }
            _ => epoch,
        };
        let want = if time == 0 {
            Err(LayoutError::NoTimeBits)
        } else if sequence == 0 {
            Err(LayoutError::NoSequenceBits)
        } else if let Some((field, bits)) = [("time", time), ("worker", worker), ("sequence", sequence)]
            .into_iter()
            .find(|(_, bits)| *bits > 62)
        {
            Err(LayoutError::FieldTooWide { field, bits })
        } else if time + worker + sequence > 63 {
            Err(LayoutError::TooWide { time_bits: time, worker_bits: worker, sequence_bits: sequence })
        } else if u128::from(epoch) + span.unwrap() > i64::MAX as u128 {
            Err(LayoutError::TimeOverflows { time_bits: time, unit, epoch_ms: epoch })
        } else {
            Ok(())
        };
        let got = Layout::new(time, worker, sequence, unit, epoch);
        prop_assert_eq!(got.map(|_| ()), want);
        if let Err(e) = got {
            prop_assert!(e.to_string().contains("use"), "no fix named in {}", e);
        }
    }

    /// A generator driven by a random walk of its clock: every answer is the one the rules
    /// give; issued states strictly increase, stay within the layout and within the borrow of
    /// the clock; a wait ends exactly at the unit it names; ids never repeat.
    #[test]
    fn the_step_follows_its_rules_whatever_the_clock_does(
        layout in small_layout(),
        policy in policy(),
        vibration in prop_oneof![0u64..5, Just(7u64), Just(255u64)],
        start in any::<u64>(),
        walk in prop::collection::vec(clock(), 1..150),
    ) {
        let end = layout.max_time_units();
        let worker = layout.max_worker();
        let mut now = start % (end / 2 + 1);
        let mut last = 0;
        let mut ids = BTreeSet::new();
        for reading in walk {
            let repeats = match reading {
                Clock::Forward(d) => { now += d; 1 }
                Clock::Same(n) => n,
                Clock::SmallBack(d) => { now = now.saturating_sub(d.min(policy.tolerance_units)); 1 }
                Clock::BigBack(d) => { now = now.saturating_sub(d); 1 }
                Clock::NearEnd(d) => { now = now.max(end.saturating_sub(d)); 1 }
            };
            for _ in 0..repeats {
                let got = step(&layout, last, now, &policy, vibration);
                prop_assert_eq!(got, expected(&layout, last, now, &policy, vibration),
                    "last {:?}, now {}", layout.unpack(last), now);
                match got {
                    Step::Issue { packed } => {
                        let (time, sequence) = layout.unpack(packed);
                        prop_assert!(packed > last, "not increasing");
                        prop_assert!(time <= end && sequence <= layout.max_sequence());
                        prop_assert!(time <= now + policy.borrow.unwrap_or(0), "lead past the borrow");
                        if time > layout.unpack(last).0 {
                            prop_assert!(sequence <= vibration, "first sequence {}", sequence);
                        }
                        // Even sharding: modulo a power-of-two span the sequence counts on by
                        // one from the last id, whatever moved the time.
                        let span = vibration.min(layout.max_sequence()) + 1;
                        if span.is_power_of_two() {
                            let after = (layout.unpack(last).1 + 1) % span;
                            prop_assert_eq!(sequence % span, after, "not a counter mod {}", span);
                        }
                        let id = layout.compose_packed(packed, worker).unwrap();
                        prop_assert!(ids.last().is_none_or(|&prev| prev < id));
                        prop_assert!(ids.insert(id));
                        last = packed;
                    }
                    Step::WaitUntil { units } => {
                        prop_assert!(units > now && units - now <= policy.tolerance_units + 1);
                        // The wait is tight: at `units` the step issues, a unit earlier not.
                        let at = step(&layout, last, units, &policy, vibration);
                        prop_assert!(matches!(at, Step::Issue { .. }), "{:?} after the wait", at);
                        let before = step(&layout, last, units - 1, &policy, vibration);
                        prop_assert!(!matches!(before, Step::Issue { .. }), "waited too long");
                        now = units; // the caller sleeps, then retries
                    }
                    Step::Refuse { behind_units } => {
                        prop_assert_eq!(behind_units, layout.unpack(last).0 - now);
                        break;
                    }
                    Step::Exhausted => {
                        break;
                    }
                }
            }
        }
    }

    /// A restart never issues at or below the persisted mark: it starts above it, waits for
    /// the unit after it within tolerance, or refuses.
    #[test]
    fn a_restart_never_issues_at_or_below_the_mark(
        layout in small_layout(), policy in policy(), mark in any::<u64>(), now in any::<u64>(),
    ) {
        let end = layout.max_time_units();
        let mark = mark % (end + 1);
        let now = now % (end + 3);
        match start_floor(&layout, mark, now, &policy) {
            Start::Ready { last } => {
                prop_assert!(now > mark && mark < end);
                match step(&layout, last, now, &policy, 0) {
                    Step::Issue { packed } => prop_assert!(layout.unpack(packed).0 > mark),
                    other => prop_assert_eq!(other, Step::Exhausted),
                }
            }
            Start::WaitUntil { units } => {
                prop_assert!(now <= mark && mark - now <= policy.tolerance_units);
                prop_assert_eq!(units, mark + 1);
                let ready = start_floor(&layout, mark, units, &policy);
                prop_assert!(matches!(ready, Start::Ready { .. }), "{:?} after the wait", ready);
            }
            Start::Refuse { behind_units } => {
                prop_assert!(now <= mark && behind_units == mark - now);
                prop_assert!(behind_units > policy.tolerance_units);
            }
            Start::Exhausted => prop_assert_eq!(mark, end),
        }
    }
}

/// Threads share one state in one atomic and step it in a CAS loop, as the `idmint` library
/// does, against a shared clock they push forward when told to wait and knock back now and
/// then: no id is issued twice.
#[test]
fn threads_stepping_one_atomic_state_never_share_an_id() {
    let layout = Layout::new(30, 4, 3, TimeUnit::Millis, 0).unwrap();
    let policy = ClockPolicy { tolerance_units: 2, borrow: Some(3) };
    let state = Arc::new(AtomicU64::new(0));
    let clock = Arc::new(AtomicU64::new(1_000));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (state, clock) = (Arc::clone(&state), Arc::clone(&clock));
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                // Bounded, so a livelock fails the test instead of hanging it.
                for i in 0u64..2_000_000 {
                    if ids.len() == 20_000 {
                        break;
                    }
                    if i % 997 == t {
                        // The clock steps back.
                        let back = |c: u64| Some(c.saturating_sub(3));
                        _ = clock.fetch_update(Ordering::Relaxed, Ordering::Relaxed, back);
                    }
                    let last = state.load(Ordering::Acquire);
                    let now = clock.load(Ordering::Relaxed);
                    match step(&layout, last, now, &policy, 3) {
                        Step::Issue { packed } => {
                            if state
                                .compare_exchange(last, packed, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                            {
                                ids.push(layout.compose_packed(packed, 7).unwrap());
                            }
                        }
                        // Time passes while the thread sleeps.
                        Step::WaitUntil { units } => {
                            clock.fetch_max(units, Ordering::Relaxed);
                        }
                        // The library re-reads the clock; here time moves on meanwhile.
                        Step::Refuse { .. } => {
                            clock.fetch_add(1, Ordering::Relaxed);
                        }
                        Step::Exhausted => panic!("30 bits of time do not run out here"),
                    }
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for thread in threads {
        let ids = thread.join().unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a thread saw ids go down");
        assert_eq!(ids.len(), 20_000, "a thread starved");
        all.extend(ids);
    }
    let issued = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), issued, "an id was issued twice");
}
