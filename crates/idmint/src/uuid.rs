//! The UUID and ULID generator of a node: UUID v4 (random), UUID v7 and ULID (time-ordered,
//! strictly increasing within this generator), from the injected [`Clock`] and the
//! thread-local CSPRNG.
//!
//! The rules live in `idmint_core::uuid` (pure: the clock reading and the random bits are
//! arguments); this file only feeds them. The v7 and ULID states sit behind one
//! `std::sync::Mutex` each, held for at most [`UUID_LOCK_CHUNK`] ids at a time with no
//! await, no I/O and no random draw inside: the random bits of a chunk are drawn before the
//! lock (the CSPRNG reseeds from the OS every 64 KiB, a system call kept out of the critical
//! section). A v4 needs no state and takes no lock.
//!
//! Unlike the 64-bit engines, these ids need no store: 74 (v7), 80 (ULID) or 122 (v4)
//! random bits make a collision between nodes negligible, and within one generator v7 and
//! ULID ids strictly increase, whatever the clock does (see `idmint_core::uuid` for the rules
//! and the borrowed-time case).

use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::Count;
use idmint_core::uuid::{UNIX_MS_MAX, UlidState, Uuid7State, uuid_v4};
pub use idmint_core::uuid::{UuidError, UuidFormat};
use rand::Rng;

use crate::clock::Clock;

/// Bounds of the UUID engine.
pub mod limits {
    pub use super::UUID_LOCK_CHUNK;
}

/// Most ids made under one hold of a state's lock: bounds how long another thread waits,
/// and the random bits drawn ahead of it (16 bytes each, on the stack).
pub const UUID_LOCK_CHUNK: usize = 256;

/// Why no UUID v7 or ULID could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UuidsError {
    /// The clock reads past the 48-bit millisecond field (after the year 10889), or the
    /// generator borrowed time up to its end.
    #[error(
        "the clock reads millisecond {unix_ms}, past the largest a UUID v7 or ULID holds \
         ({UNIX_MS_MAX}); set the machine's clock right"
    )]
    ClockOutOfRange {
        /// The millisecond the next id would have had.
        unix_ms: u64,
    },
}

/// UUID v4, UUID v7 and ULID ids of one node. Share it (`Arc<Uuids>`): ids from one
/// generator are unique and, for v7 and ULID, strictly increasing in the order calls take
/// the lock.
#[derive(Debug)]
pub struct Uuids {
    clock: Arc<dyn Clock>,
    v7: Mutex<Uuid7State>,
    ulid: Mutex<UlidState>,
}

impl Uuids {
    /// A generator reading time from `clock` (`SystemClock` in service, `ManualClock` in
    /// tests).
    pub fn new(clock: Arc<dyn Clock>) -> Uuids {
        Uuids { clock, v7: Mutex::new(Uuid7State::new()), ulid: Mutex::new(UlidState::new()) }
    }

    /// One UUID v4.
    pub fn next_v4(&self) -> u128 {
        uuid_v4(random_u128(&mut rand::rng()))
    }

    /// `count` UUID v4 ids.
    pub fn v4(&self, count: Count) -> Vec<u128> {
        let mut rng = rand::rng();
        (0..count.get()).map(|_| uuid_v4(random_u128(&mut rng))).collect()
    }

    /// One UUID v7, above every v7 this generator made before.
    pub fn next_v7(&self) -> Result<u128, UuidsError> {
        let random = random_u128(&mut rand::rng());
        let now_ms = self.clock.now_ms();
        lock(&self.v7).next(now_ms, random).map_err(out_of_range)
    }

    /// `count` UUID v7 ids, increasing, above every v7 this generator made before.
    pub fn v7(&self, count: Count) -> Result<Vec<u128>, UuidsError> {
        self.batch(count, &self.v7, Uuid7State::next)
    }

    /// One ULID, above every ULID this generator made before.
    pub fn next_ulid(&self) -> Result<u128, UuidsError> {
        let random = random_u128(&mut rand::rng());
        let now_ms = self.clock.now_ms();
        lock(&self.ulid).next(now_ms, random).map_err(out_of_range)
    }

    /// `count` ULIDs, increasing, above every ULID this generator made before.
    pub fn ulid(&self, count: Count) -> Result<Vec<u128>, UuidsError> {
        self.batch(count, &self.ulid, UlidState::next)
    }

    /// `count` ids of `state`, [`UUID_LOCK_CHUNK`] per hold of its lock: the chunk's random
    /// bits drawn and the clock read before the lock is taken.
    fn batch<S>(
        &self,
        count: Count,
        state: &Mutex<S>,
        next: fn(&mut S, u64, u128) -> Result<u128, UuidError>,
    ) -> Result<Vec<u128>, UuidsError> {
        // A count is at most BATCH_COUNT_MAX, so this allocation is bounded.
        let total = count.get() as usize;
        let mut ids = Vec::with_capacity(total);
        let mut rng = rand::rng();
        let mut random = [0u128; UUID_LOCK_CHUNK];
        while ids.len() < total {
            let chunk = &mut random[..(total - ids.len()).min(UUID_LOCK_CHUNK)];
            chunk.iter_mut().for_each(|r| *r = random_u128(&mut rng));
            let now_ms = self.clock.now_ms();
            let mut state = lock(state);
            for &r in chunk.iter() {
                ids.push(next(&mut state, now_ms, r).map_err(out_of_range)?);
            }
        }
        Ok(ids)
    }
}

/// A state's lock. A panic while it was held (the core's "not above the last id" assert)
/// left the state unchanged, so a poisoned lock is still a valid state.
fn lock<S>(state: &Mutex<S>) -> std::sync::MutexGuard<'_, S> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn random_u128(rng: &mut impl Rng) -> u128 {
    (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())
}

fn out_of_range(error: UuidError) -> UuidsError {
    match error {
        UuidError::TimeOutOfRange { unix_ms } => UuidsError::ClockOutOfRange { unix_ms },
        // The states refuse nothing else; kept typed rather than assumed.
        _ => UuidsError::ClockOutOfRange { unix_ms: UNIX_MS_MAX + 1 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use idmint_core::uuid::{ulid_unix_ms, uuid_v7_unix_ms, uuid_version};

    #[test]
    fn ids_follow_the_injected_clock_and_increase_when_it_steps_back() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let uuids = Uuids::new(clock.clone());
        let first = uuids.v7(Count::new(1_000).unwrap()).unwrap();
        assert!(first.iter().all(|&id| uuid_v7_unix_ms(id) == 1_700_000_000_000));
        assert!(first.windows(2).all(|w| w[0] < w[1]));
        clock.step_back(60_000);
        let after = uuids.next_v7().unwrap();
        assert!(after > first[999] && uuid_v7_unix_ms(after) == 1_700_000_000_000);
        clock.advance(120_000);
        let later = uuids.ulid(Count::new(600).unwrap()).unwrap();
        assert!(later.iter().all(|&id| ulid_unix_ms(id) == 1_700_000_060_000));
        assert!(later.windows(2).all(|w| w[0] < w[1]));
        assert!(uuids.v4(Count::new(3).unwrap()).iter().all(|&id| uuid_version(id) == 4));
        assert_ne!(uuids.next_v4(), uuids.next_v4());
    }

    #[test]
    fn a_clock_past_48_bits_is_refused() {
        let uuids = Uuids::new(Arc::new(ManualClock::new(UNIX_MS_MAX + 1)));
        let refused = UuidsError::ClockOutOfRange { unix_ms: UNIX_MS_MAX + 1 };
        assert_eq!(uuids.next_v7(), Err(refused.clone()));
        assert_eq!(uuids.ulid(Count::ONE), Err(refused));
        assert_eq!(uuids.v4(Count::ONE).len(), 1);
    }
}
