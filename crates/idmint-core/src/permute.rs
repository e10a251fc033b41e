//! Non-guessable public ids (issue 7): a keyed permutation of `1..2^bits` that maps each
//! internal id to a public id of the same width, one to one.
//!
//! The permutation is a Feistel network of [`FEISTEL_ROUNDS`] rounds over `bits` bits, split
//! as FF1 splits it (`u = bits / 2` high bits, `v = bits - u` low bits, alternating which
//! half is mixed so odd widths work). Each round XORs one half with SipHash-1-3 of the other
//! half under a round key; the round keys are SipHash-2-4 of the round number and the width
//! under the tag's 128-bit key, so two widths under one key are unrelated permutations.
//! Zero is kept out of both sides by cycle walking: the one id whose image would be 0 takes
//! the image of 0 instead, so `1..2^bits` maps onto `1..2^bits` exactly.
//!
//! What it protects: consecutive internal ids give unrelated-looking public ids, so a
//! client who sees some of them cannot tell how many were issued between two of its own, nor
//! guess the next one, without the key. The owner of the key maps back with
//! [`Permutation::backward`]. What it does not: it is not a signature (any number in range is
//! some id, so a forged one cannot be told from a real one without a lookup), and it hides
//! order, not existence; a small width lets a client enumerate the whole space.
//!
//! A Feistel network is a permutation whatever its round function, so uniqueness does not
//! depend on SipHash's strength; only the secrecy does.

use std::fmt;
use std::hash::Hasher;

use siphasher::sip::{SipHasher13, SipHasher24};

/// Feistel rounds (FF1 uses 10, FF3-1 8).
pub const FEISTEL_ROUNDS: usize = 8;
/// Narrowest permutation: below this a client can enumerate the space in moments.
pub const PERMUTE_BITS_MIN: u32 = 16;
/// Widest permutation: public ids fit a signed 64-bit integer, like every id.
pub const PERMUTE_BITS_MAX: u32 = 63;
/// Key length in bytes (a SipHash key).
pub const PERMUTE_KEY_BYTES: usize = 16;

const _: () = assert!(PERMUTE_BITS_MIN >= 2 && PERMUTE_BITS_MAX <= 63);
// A half fits the 4 bytes the round function hashes.
const _: () = assert!(PERMUTE_BITS_MAX - PERMUTE_BITS_MAX / 2 <= 32);
const _: () = assert!(FEISTEL_ROUNDS.is_multiple_of(2), "the halves end at their starting widths");

/// A 128-bit permutation key. Its `Debug` never shows the bytes, so a key cannot reach a
/// log by accident; it has no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct PermuteKey([u8; PERMUTE_KEY_BYTES]);

/// Why a key, a width or an id was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermuteError {
    /// The key text is not 32 hex digits. The text itself is not kept.
    BadKey {
        /// Characters given.
        len: usize,
    },
    /// The width is outside `PERMUTE_BITS_MIN..=PERMUTE_BITS_MAX`.
    BadBits(u32),
    /// The id is 0 or does not fit the width: the tag has used up its public id space.
    OutOfRange {
        /// The id.
        id: u64,
        /// The permutation's width.
        bits: u32,
    },
}

/// A keyed permutation of `1..=2^bits - 1`.
#[derive(Clone)]
pub struct Permutation {
    bits: u32,
    high_bits: u32,
    low_bits: u32,
    round_keys: [(u64, u64); FEISTEL_ROUNDS],
    fingerprint: u64,
}

impl PermuteKey {
    /// A key from 32 hex digits (e.g. the output of `openssl rand -hex 16`).
    pub fn parse_hex(text: &str) -> Result<PermuteKey, PermuteError> {
        let text = text.trim();
        let bad = || PermuteError::BadKey { len: text.chars().count() };
        if text.len() != 2 * PERMUTE_KEY_BYTES || !text.is_ascii() {
            return Err(bad());
        }
        let mut key = [0u8; PERMUTE_KEY_BYTES];
        for (byte, pair) in key.iter_mut().zip(text.as_bytes().chunks(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(PermuteKey(key))
    }

    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; PERMUTE_KEY_BYTES]) -> PermuteKey {
        PermuteKey(bytes)
    }

    fn halves(&self) -> (u64, u64) {
        let (k0, k1) = self.0.split_at(8);
        // Both halves are 8 bytes long: the key has 16.
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        (word(k0), word(k1))
    }
}

impl fmt::Debug for PermuteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PermuteKey(***)")
    }
}

impl Permutation {
    /// The permutation of `bits`-bit ids under `key`.
    pub fn new(key: &PermuteKey, bits: u32) -> Result<Permutation, PermuteError> {
        if !(PERMUTE_BITS_MIN..=PERMUTE_BITS_MAX).contains(&bits) {
            return Err(PermuteError::BadBits(bits));
        }
        let (k0, k1) = key.halves();
        let derive = |label: u64| {
            let mut h = SipHasher24::new_with_keys(k0, k1);
            h.write_u64(label);
            h.write_u32(bits);
            h.finish()
        };
        let mut round_keys = [(0, 0); FEISTEL_ROUNDS];
        for (round, slot) in round_keys.iter_mut().enumerate() {
            let round = round as u64;
            *slot = (derive(2 * round), derive(2 * round + 1));
        }
        // A label no round uses: the fingerprint tells keys apart without revealing them.
        let fingerprint = derive(u64::MAX);
        let high_bits = bits / 2;
        Ok(Permutation { bits, high_bits, low_bits: bits - high_bits, round_keys, fingerprint })
    }

    /// The width in bits.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The largest id either side: `2^bits - 1`.
    pub fn max_id(&self) -> u64 {
        mask(self.bits)
    }

    /// A 64-bit digest of the key and width, safe to store and show: it tells whether two
    /// nodes (or two runs) permute alike, and says nothing useful about the key.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The public id of internal id `id` (`1..=max_id()`).
    pub fn forward(&self, id: u64) -> Result<u64, PermuteError> {
        self.check(id)?;
        let public = match self.encrypt(id) {
            // Cycle walking: `id` is not 0, so the image of 0 is not 0.
            0 => self.encrypt(0),
            public => public,
        };
        assert!(public != 0 && public <= self.max_id(), "a permutation left its range");
        Ok(public)
    }

    /// The internal id of public id `public` (`1..=max_id()`).
    pub fn backward(&self, public: u64) -> Result<u64, PermuteError> {
        self.check(public)?;
        let id = match self.decrypt(public) {
            0 => self.decrypt(0),
            id => id,
        };
        assert!(id != 0 && id <= self.max_id(), "a permutation left its range");
        Ok(id)
    }

    fn check(&self, id: u64) -> Result<(), PermuteError> {
        if id == 0 || id > self.max_id() {
            return Err(PermuteError::OutOfRange { id, bits: self.bits });
        }
        Ok(())
    }

    /// The raw Feistel permutation of `0..2^bits` (FF1's split and alternation).
    fn encrypt(&self, x: u64) -> u64 {
        let (u, v) = (self.high_bits, self.low_bits);
        let (mut a, mut b) = (x >> v, x & mask(v));
        for (round, key) in self.round_keys.iter().enumerate() {
            let width = if round % 2 == 0 { u } else { v };
            let c = a ^ (round_function(*key, b) & mask(width));
            a = b;
            b = c;
        }
        (a << v) | b
    }

    fn decrypt(&self, y: u64) -> u64 {
        let (u, v) = (self.high_bits, self.low_bits);
        let (mut a, mut b) = (y >> v, y & mask(v));
        for (round, key) in self.round_keys.iter().enumerate().rev() {
            let width = if round % 2 == 0 { u } else { v };
            let previous_a = b ^ (round_function(*key, a) & mask(width));
            b = a;
            a = previous_a;
        }
        (a << v) | b
    }
}

impl fmt::Debug for Permutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Permutation {{ bits: {}, fingerprint: {:016x} }}", self.bits, self.fingerprint)
    }
}

impl fmt::Display for PermuteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PermuteError::BadKey { len } => write!(
                f,
                "the key is {len} characters, not {} hex digits; make one with `openssl rand \
                 -hex {PERMUTE_KEY_BYTES}` and keep it secret",
                2 * PERMUTE_KEY_BYTES
            ),
            PermuteError::BadBits(bits) => write!(
                f,
                "a permutation of {bits} bits; use {PERMUTE_BITS_MIN} to {PERMUTE_BITS_MAX}"
            ),
            PermuteError::OutOfRange { id, bits } => write!(
                f,
                "{id} is outside 1..={} (a {bits}-bit permutation); the tag has used up its \
                 public ids: move it to a wider permutation under a new tag",
                mask(*bits)
            ),
        }
    }
}

impl std::error::Error for PermuteError {}

/// SipHash-1-3 of a half under a round key. A half has at most 32 bits (`bits <= 63`), so
/// it is hashed as 4 bytes: one SipHash block, the cheapest input.
fn round_function((k0, k1): (u64, u64), half: u64) -> u64 {
    let mut h = SipHasher13::new_with_keys(k0, k1);
    h.write_u32(half as u32);
    h.finish()
}

fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> PermuteKey {
        PermuteKey::from_bytes([byte; PERMUTE_KEY_BYTES])
    }

    #[test]
    fn keys_parse_from_hex_and_never_print() {
        let k = PermuteKey::parse_hex("000102030405060708090a0b0c0d0e0F").expect("32 hex digits");
        assert_eq!(k.0[15], 15);
        assert_eq!(format!("{k:?}"), "PermuteKey(***)");
        for bad in ["", "00", "zz0102030405060708090a0b0c0d0e0f", "é0102030405060708090a0b0c0d0e0"]
        {
            let err = PermuteKey::parse_hex(bad).expect_err(bad).to_string();
            assert!(err.contains("openssl rand -hex 16") && !err.contains("zz"), "{err}");
        }
    }

    #[test]
    fn widths_ids_and_fingerprints() {
        assert_eq!(Permutation::new(&key(1), 15).err(), Some(PermuteError::BadBits(15)));
        assert_eq!(Permutation::new(&key(1), 64).err(), Some(PermuteError::BadBits(64)));
        let p = Permutation::new(&key(1), 63).expect("63 bits");
        assert_eq!(p.max_id(), i64::MAX as u64);
        for id in [1, 2, 3, i64::MAX as u64] {
            let public = p.forward(id).expect("in range");
            assert_eq!(p.backward(public), Ok(id));
        }
        assert!(matches!(p.forward(0), Err(PermuteError::OutOfRange { .. })));
        let narrow = Permutation::new(&key(1), 16).expect("16 bits");
        assert!(narrow.forward(1 << 16).is_err() && narrow.backward(0).is_err());
        // The fingerprint depends on the key and the width, so either change is seen.
        let other_key = Permutation::new(&key(2), 63).expect("63 bits");
        let other_width = Permutation::new(&key(1), 62).expect("62 bits");
        assert_ne!(p.fingerprint(), other_key.fingerprint());
        assert_ne!(p.fingerprint(), other_width.fingerprint());
        assert!(!format!("{p:?}").contains("round_keys"));
    }

    #[test]
    fn odd_and_even_widths_are_bijections_on_a_small_space() {
        for bits in [16, 17] {
            let p = Permutation::new(&key(7), bits).expect("width");
            let mut seen = vec![false; 1 << bits];
            for id in 1..=p.max_id() {
                let public = p.forward(id).expect("in range");
                assert!(!seen[public as usize], "{bits} bits: {public} twice");
                seen[public as usize] = true;
                assert_eq!(p.backward(public), Ok(id));
            }
            assert!(!seen[0]);
        }
    }
}
