//! UUID v4/v7 and ULID against a model: every 128-bit value round-trips through each text
//! form, text order is id order, the version and variant bits are always right, decoding
//! arbitrary text never panics, and one monotonic state fed 1 000 000 clock readings that
//! repeat milliseconds and step back (and random draws that force the random field to
//! overflow) issues strictly increasing ids whose millisecond is exactly what the rules say.
//!
//! The simulation prints its seed; replay one with
//! `IDMINT_SIM_SEED=<seed> cargo test -p idmint-core --test it uuid_model -- --nocapture`.

use std::time::{SystemTime, UNIX_EPOCH};

use idmint_core::uuid::{
    ULID_RANDOM_BITS, UNIX_MS_MAX, UUID7_RANDOM_BITS, UlidState, Uuid7State, UuidError, UuidFormat,
    ulid, ulid_decode, ulid_encode, ulid_unix_ms, uuid_is_rfc9562_variant, uuid_v4, uuid_v7,
    uuid_v7_unix_ms, uuid_version,
};
use proptest::prelude::*;

/// Ids each simulation draws from one state.
const SIMULATED_IDS: u64 = 1_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_value_round_trips_in_every_form(id in any::<u128>()) {
        for format in [UuidFormat::Standard, UuidFormat::Hex] {
            let text = format.encode(id);
            prop_assert_eq!(text.len(), format.text_len());
            prop_assert!(!text.chars().any(|c| c.is_ascii_uppercase()), "{}", text);
            prop_assert_eq!(format.decode(&text), Ok(id));
            prop_assert_eq!(format.decode(&text.to_uppercase()), Ok(id));
        }
        let text = ulid_encode(id);
        prop_assert_eq!(text.len(), 26);
        prop_assert_eq!(ulid_decode(&text), Ok(id));
        prop_assert_eq!(ulid_decode(&text.to_lowercase()), Ok(id));
    }

    #[test]
    fn text_order_is_id_order(a in any::<u128>(), b in any::<u128>()) {
        for format in [UuidFormat::Standard, UuidFormat::Hex] {
            prop_assert_eq!(format.encode(a).cmp(&format.encode(b)), a.cmp(&b));
        }
        prop_assert_eq!(ulid_encode(a).cmp(&ulid_encode(b)), a.cmp(&b));
    }

    #[test]
    fn version_and_variant_bits_are_always_right(
        random in any::<u128>(),
        unix_ms in 0..=UNIX_MS_MAX,
    ) {
        let v4 = uuid_v4(random);
        prop_assert_eq!(uuid_version(v4), 4);
        prop_assert!(uuid_is_rfc9562_variant(v4));
        // Only the 6 version and variant bits change.
        prop_assert_eq!((v4 ^ random).count_ones() <= 6, true);
        let v7 = uuid_v7(unix_ms, random);
        prop_assert_eq!(uuid_version(v7), 7);
        prop_assert!(uuid_is_rfc9562_variant(v7));
        prop_assert_eq!(uuid_v7_unix_ms(v7), unix_ms);
        prop_assert_eq!(ulid_unix_ms(ulid(unix_ms, random)), unix_ms);
        // The text forms carry the version where RFC 9562 puts it.
        let text = UuidFormat::Standard.encode(v7);
        prop_assert_eq!(&text[14..15], "7");
        prop_assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"), "{}", text);
    }

    #[test]
    fn decoding_any_text_answers_without_panicking(text in "\\PC{0,40}") {
        for format in [UuidFormat::Standard, UuidFormat::Hex] {
            if let Ok(id) = format.decode(&text) {
                prop_assert_eq!(format.encode(id), text.to_lowercase());
            }
        }
        if let Ok(id) = ulid_decode(&text) {
            prop_assert_eq!(ulid_encode(id), text.to_uppercase());
        }
    }

    #[test]
    fn a_state_increases_over_any_clock_and_randomness(
        steps in proptest::collection::vec((-3i64..4, any::<u128>(), any::<bool>()), 1..200),
    ) {
        let (mut v7, mut ulids) = (Uuid7State::new(), UlidState::new());
        let (mut now_ms, mut last_v7, mut last_ulid) = (1_000_000u64, None, None);
        for (delta, random, saturate) in steps {
            now_ms = now_ms.saturating_add_signed(delta);
            // Saturated random bits make the next id of the same millisecond borrow time.
            let random = if saturate { u128::MAX } else { random };
            let id = v7.next(now_ms, random).unwrap();
            prop_assert!(last_v7.is_none_or(|last| id > last));
            last_v7 = Some(id);
            let id = ulids.next(now_ms, random).unwrap();
            prop_assert!(last_ulid.is_none_or(|last| id > last));
            last_ulid = Some(id);
        }
    }
}

#[test]
fn one_million_uuid_v7_increase_through_repeated_and_backward_clocks() {
    let seed = seed();
    println!("uuid v7 simulation seed {seed} (replay: IDMINT_SIM_SEED={seed})");
    let mut state = Uuid7State::new();
    let outcome = simulate(seed, UUID7_RANDOM_BITS, |now_ms, random| {
        let id = state.next(now_ms, random)?;
        assert_eq!(uuid_version(id), 7, "seed {seed}");
        assert!(uuid_is_rfc9562_variant(id), "seed {seed}");
        Ok((id, uuid_v7_unix_ms(id)))
    });
    println!("  {outcome:?}");
    outcome.assert_covers_every_case(seed);
}

#[test]
fn one_million_ulids_increase_through_repeated_and_backward_clocks() {
    let seed = seed();
    println!("ulid simulation seed {seed} (replay: IDMINT_SIM_SEED={seed})");
    let mut state = UlidState::new();
    let outcome = simulate(seed, ULID_RANDOM_BITS, |now_ms, random| {
        let id = state.next(now_ms, random)?;
        Ok((id, ulid_unix_ms(id)))
    });
    println!("  {outcome:?}");
    outcome.assert_covers_every_case(seed);
}

/// How often each rule applied in one simulation.
#[derive(Debug, Default)]
struct Outcome {
    /// The clock moved forward: the id took its millisecond.
    fresh: u64,
    /// The same millisecond or a clock behind: the id kept the last millisecond.
    counted: u64,
    /// The random field overflowed: the id borrowed the next millisecond.
    borrowed: u64,
    /// Clock readings behind the last id's millisecond.
    clock_behind: u64,
}

impl Outcome {
    fn assert_covers_every_case(&self, seed: u64) {
        assert_eq!(self.fresh + self.counted + self.borrowed, SIMULATED_IDS, "seed {seed}");
        assert!(self.fresh > 1_000 && self.counted > 1_000, "seed {seed}: {self:?}");
        assert!(self.borrowed > 100 && self.clock_behind > 1_000, "seed {seed}: {self:?}");
    }
}

/// Draws [`SIMULATED_IDS`] ids from `next(now_ms, random)` (the id and its millisecond) on a
/// seeded clock that mostly repeats milliseconds, sometimes moves on and sometimes steps
/// back, with random draws that now and then fill the `random_bits` field to the top (so the
/// next id of that millisecond overflows it); asserts every id is above the last and has
/// the millisecond the rules give.
fn simulate(
    seed: u64,
    random_bits: u32,
    mut next: impl FnMut(u64, u128) -> Result<(u128, u64), UuidError>,
) -> Outcome {
    let mut rng = Rng(seed);
    let mut outcome = Outcome::default();
    let mut now_ms: u64 = 1_750_000_000_000 + rng.below(1_000_000_000);
    let (mut last_id, mut last_ms) = (None::<u128>, 0u64);
    let top = (1u128 << random_bits) - 1;
    for i in 0..SIMULATED_IDS {
        // Forward by about 0.7 ms per id on average, so the clock catches up after each step
        // back.
        now_ms = match rng.below(10_000) {
            0..7_000 => now_ms,
            7_000..9_500 => now_ms + 1 + rng.below(3),
            9_500..9_900 => now_ms.saturating_sub(1 + rng.below(5)),
            9_900..9_999 => now_ms + 1 + rng.below(100),
            // A big step back (NTP, an operator): one to three seconds.
            _ => now_ms.saturating_sub(1_000 + rng.below(2_000)),
        };
        let random = match rng.below(200) {
            // The field at (or just below) its top: the next counted id overflows it.
            0 => top - u128::from(rng.below(2)),
            _ => u128::from(rng.next()) << 64 | u128::from(rng.next()),
        };
        let (id, ms) =
            next(now_ms, random).unwrap_or_else(|e| panic!("seed {seed}, id {i}: refused: {e}"));
        if let Some(last) = last_id {
            assert!(id > last, "seed {seed}, id {i}: {id:#x} is not above {last:#x}");
            if now_ms <= last_ms {
                outcome.clock_behind += u64::from(now_ms < last_ms);
                assert!(ms == last_ms || ms == last_ms + 1, "seed {seed}, id {i}: ms {ms}");
                if ms == last_ms { outcome.counted += 1 } else { outcome.borrowed += 1 }
            } else {
                assert_eq!(ms, now_ms, "seed {seed}, id {i}: a clock ahead gives its ms");
                outcome.fresh += 1;
            }
        } else {
            assert_eq!(ms, now_ms);
            outcome.fresh += 1;
        }
        (last_id, last_ms) = (Some(id), ms);
    }
    outcome
}

/// `IDMINT_SIM_SEED`, or one drawn from the time and process.
fn seed() -> u64 {
    if let Some(seed) = std::env::var("IDMINT_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return seed;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    Rng(now ^ u64::from(std::process::id())).next()
}

/// splitmix64: every choice of the simulation, replayable from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
