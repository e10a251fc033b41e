//! 128-bit ids (issue 7): UUID v4 (random), UUID v7 and ULID (time-ordered, monotonic within
//! one state), their text forms and the exact inverses.
//!
//! This module must not read a clock or draw randomness: the caller passes `now_ms` (Unix
//! milliseconds) and a `u128` of fresh randomness per id, so a test can replay any sequence
//! of clock readings and random draws. The `idmint` library feeds it the injectable clock
//! and a CSPRNG.
//!
//! **Monotonic states.** [`Uuid7State`] and [`UlidState`] issue ids that strictly increase
//! within one state, whatever the clock does (an `assert!` checks every id against the
//! last). An id is `unix_ms | random` (plus the version and variant bits for v7, which are
//! the same in every v7 id and so do not change the order). When `now_ms` is after the last
//! id's millisecond, the id takes `now_ms` and fresh random bits. When it is not (the same
//! millisecond, or a clock stepped back), the id keeps the last millisecond and adds
//! `1 + (random & INCREMENT_RANDOM_MASK)` to the last random part: still increasing, and the
//! next id is not the last plus one (guessing it takes up to 2^[`INCREMENT_RANDOM_BITS`]
//! tries). If that addition overflows the random field, the id moves to the last
//! millisecond + 1 with fresh random bits: **borrowed time**, a millisecond the clock has not
//! reached yet. The clock catches up with it; until then ids keep increasing on the borrowed
//! millisecond. Borrowing needs about 2^41 (v7) or 2^47 (ULID) ids in one millisecond from a
//! uniform random start, so in practice it only happens in tests that force it. A
//! millisecond past [`UNIX_MS_MAX`] (year 10889) is refused with [`UuidError::TimeOutOfRange`],
//! never wrapped.
//!
//! **Text.** A UUID is written as RFC 9562's `8-4-4-4-12` lower-case hex
//! ([`UuidFormat::Standard`]) or as 32 lower-case hex digits without dashes
//! ([`UuidFormat::Hex`], what sharding middleware stores); a ULID as 26 characters of
//! Crockford base32, upper case. Decoding is strict: exact length, dashes only where they
//! belong, hex digits in either case (RFC 9562 asks parsers to accept both), ULID characters
//! from Crockford's alphabet in either case (not the look-alikes `I L O U`), and a ULID's
//! first character at most `7` (26 × 5 = 130 bits hold 128).

use std::fmt;

/// Bits of the Unix-millisecond field of a UUID v7 and a ULID.
pub const UNIX_MS_BITS: u32 = 48;
/// Largest millisecond a UUID v7 or a ULID holds (10889-08-02T05:31:50.655Z).
pub const UNIX_MS_MAX: u64 = (1 << UNIX_MS_BITS) - 1;
/// Random bits of a UUID v7 (`rand_a` 12 + `rand_b` 62), the field that counts up within a
/// millisecond.
pub const UUID7_RANDOM_BITS: u32 = 74;
/// Random bits of a ULID.
pub const ULID_RANDOM_BITS: u32 = 80;
/// Random low bits of the increment within one millisecond: the increment is
/// `1 + (random & INCREMENT_RANDOM_MASK)`, so 1 to 2^32.
pub const INCREMENT_RANDOM_BITS: u32 = 32;
/// The mask of [`INCREMENT_RANDOM_BITS`].
pub const INCREMENT_RANDOM_MASK: u128 = (1 << INCREMENT_RANDOM_BITS) - 1;
/// Characters of a UUID in [`UuidFormat::Standard`] form.
pub const UUID_STANDARD_LEN: usize = 36;
/// Characters of a UUID in [`UuidFormat::Hex`] form.
pub const UUID_HEX_LEN: usize = 32;
/// Characters of a ULID.
pub const ULID_LEN: usize = 26;
/// Longest piece of a refused text quoted in an error (the rest is cut, so a huge input
/// does not make a huge message).
pub const ERROR_TEXT_CHARS_MAX: usize = 64;

// Time, version and variant (v7) and the random field fill exactly 128 bits.
const _: () = assert!(UNIX_MS_BITS + 4 + 2 + UUID7_RANDOM_BITS == 128);
const _: () = assert!(UNIX_MS_BITS + ULID_RANDOM_BITS == 128);
// An increment leaves room for at least 2^40 ids per millisecond before time is borrowed.
const _: () = assert!(INCREMENT_RANDOM_BITS + 40 < UUID7_RANDOM_BITS);
const _: () = assert!(UUID7_RANDOM_BITS < ULID_RANDOM_BITS);
const _: () = assert!(ULID_LEN * 5 >= 128 && (ULID_LEN - 1) * 5 < 128);

/// The version field (bits 76..80) of a UUID v4 and v7.
const VERSION_SHIFT: u32 = 76;
const VERSION_MASK: u128 = 0xF << VERSION_SHIFT;
/// The variant field (bits 62..64): `10` is RFC 9562's variant.
const VARIANT_SHIFT: u32 = 62;
const VARIANT_MASK: u128 = 0b11 << VARIANT_SHIFT;
const VARIANT_RFC9562: u128 = 0b10 << VARIANT_SHIFT;
/// `rand_b`, the 62 low bits of a UUID v7.
const RAND_B_BITS: u32 = 62;

const HEX: &[u8; 16] = b"0123456789abcdef";
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Marks a byte that is not a digit in the decode tables.
const NOT_A_DIGIT: u8 = 0xFF;
const HEX_DIGITS: [u8; 256] = digit_table(HEX);
const CROCKFORD_DIGITS: [u8; 256] = digit_table(CROCKFORD);

/// A UUID v4: 122 bits of `random`, version 4 and RFC 9562's variant.
pub fn uuid_v4(random: u128) -> u128 {
    with_version(random, 4)
}

/// A UUID v7 of millisecond `unix_ms` (at most [`UNIX_MS_MAX`]) and the low
/// [`UUID7_RANDOM_BITS`] of `random` (`rand_a`, then `rand_b`).
pub fn uuid_v7(unix_ms: u64, random: u128) -> u128 {
    assert!(unix_ms <= UNIX_MS_MAX, "unix_ms {unix_ms} is past the 48-bit field");
    let random = random & random_mask(UUID7_RANDOM_BITS);
    let rand_a = random >> RAND_B_BITS;
    let rand_b = random & random_mask(RAND_B_BITS);
    let packed = (u128::from(unix_ms) << 80) | (rand_a << 64) | rand_b;
    with_version(packed, 7)
}

/// A ULID of millisecond `unix_ms` (at most [`UNIX_MS_MAX`]) and the low
/// [`ULID_RANDOM_BITS`] of `random`.
pub fn ulid(unix_ms: u64, random: u128) -> u128 {
    assert!(unix_ms <= UNIX_MS_MAX, "unix_ms {unix_ms} is past the 48-bit field");
    (u128::from(unix_ms) << ULID_RANDOM_BITS) | (random & random_mask(ULID_RANDOM_BITS))
}

/// The version field of a UUID (4 for v4, 7 for v7).
pub fn uuid_version(uuid: u128) -> u8 {
    ((uuid & VERSION_MASK) >> VERSION_SHIFT) as u8
}

/// Whether a UUID carries RFC 9562's variant (`10` in bits 62..64).
pub fn uuid_is_rfc9562_variant(uuid: u128) -> bool {
    uuid & VARIANT_MASK == VARIANT_RFC9562
}

/// The Unix millisecond of a UUID v7 (its 48 high bits).
pub fn uuid_v7_unix_ms(uuid: u128) -> u64 {
    (uuid >> 80) as u64
}

/// The Unix millisecond of a ULID (its 48 high bits).
pub fn ulid_unix_ms(ulid: u128) -> u64 {
    (ulid >> ULID_RANDOM_BITS) as u64
}

/// The monotonic state of one UUID v7 generator: ids it issues strictly increase (see the
/// module documentation for the rules and borrowed time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Uuid7State {
    last: Monotonic<UUID7_RANDOM_BITS>,
}

impl Uuid7State {
    /// A state that has issued nothing.
    pub const fn new() -> Uuid7State {
        Uuid7State { last: Monotonic::NEW }
    }

    /// The next UUID v7 at clock reading `now_ms`, using `random` as fresh randomness.
    pub fn next(&mut self, now_ms: u64, random: u128) -> Result<u128, UuidError> {
        let (unix_ms, random) = self.last.step(now_ms, random)?;
        Ok(uuid_v7(unix_ms, random))
    }

    /// The millisecond of the last id issued, if any: ahead of the clock while on borrowed
    /// time.
    pub fn last_unix_ms(&self) -> Option<u64> {
        self.last.last.map(|(ms, _)| ms)
    }
}

/// The monotonic state of one ULID generator: ids it issues strictly increase (see the
/// module documentation for the rules and borrowed time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UlidState {
    last: Monotonic<ULID_RANDOM_BITS>,
}

impl UlidState {
    /// A state that has issued nothing.
    pub const fn new() -> UlidState {
        UlidState { last: Monotonic::NEW }
    }

    /// The next ULID at clock reading `now_ms`, using `random` as fresh randomness.
    pub fn next(&mut self, now_ms: u64, random: u128) -> Result<u128, UuidError> {
        let (unix_ms, random) = self.last.step(now_ms, random)?;
        Ok(ulid(unix_ms, random))
    }

    /// The millisecond of the last id issued, if any: ahead of the clock while on borrowed
    /// time.
    pub fn last_unix_ms(&self) -> Option<u64> {
        self.last.last.map(|(ms, _)| ms)
    }
}

/// How a UUID is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UuidFormat {
    /// RFC 9562's `8-4-4-4-12` lower-case hex, 36 characters.
    #[default]
    Standard,
    /// 32 lower-case hex digits without dashes (sharding middleware's form).
    Hex,
}

impl UuidFormat {
    /// The names [`UuidFormat::parse`] accepts.
    pub const NAMES: [&'static str; 2] = ["standard", "hex"];

    /// `standard` or `hex`.
    pub fn parse(name: &str) -> Result<UuidFormat, UuidError> {
        match name {
            "standard" => Ok(UuidFormat::Standard),
            "hex" => Ok(UuidFormat::Hex),
            other => Err(UuidError::UnknownFormat(shorten(other))),
        }
    }

    /// The format's name.
    pub fn name(self) -> &'static str {
        match self {
            UuidFormat::Standard => "standard",
            UuidFormat::Hex => "hex",
        }
    }

    /// Characters of a UUID in this form.
    pub fn text_len(self) -> usize {
        match self {
            UuidFormat::Standard => UUID_STANDARD_LEN,
            UuidFormat::Hex => UUID_HEX_LEN,
        }
    }

    /// `uuid` written in this form.
    pub fn encode(self, uuid: u128) -> String {
        let mut text = [0u8; UUID_STANDARD_LEN];
        let mut at = 0;
        for (i, byte) in uuid.to_be_bytes().into_iter().enumerate() {
            if self == UuidFormat::Standard && matches!(i, 4 | 6 | 8 | 10) {
                text[at] = b'-';
                at += 1;
            }
            text[at] = HEX[usize::from(byte >> 4)];
            text[at + 1] = HEX[usize::from(byte & 0xF)];
            at += 2;
        }
        ascii_string(&text[..at])
    }

    /// The UUID `text` stands for, in this form exactly.
    pub fn decode(self, text: &str) -> Result<u128, UuidError> {
        let not = |reason| UuidError::NotAUuid { text: shorten(text), format: self, reason };
        if text.len() != self.text_len() {
            return Err(not(match self {
                UuidFormat::Standard => "it is not 36 characters long (8-4-4-4-12 hex digits)",
                UuidFormat::Hex => "it is not 32 characters long (32 hex digits)",
            }));
        }
        let mut uuid: u128 = 0;
        for (at, byte) in text.bytes().enumerate() {
            let dash_here = self == UuidFormat::Standard && matches!(at, 8 | 13 | 18 | 23);
            if self == UuidFormat::Standard && (dash_here || byte == b'-') {
                if !(dash_here && byte == b'-') {
                    return Err(not("a dash is missing or out of place (8-4-4-4-12)"));
                }
                continue;
            }
            let digit = HEX_DIGITS[usize::from(byte)];
            if digit == NOT_A_DIGIT {
                return Err(not("it has a character that is not a hex digit"));
            }
            uuid = (uuid << 4) | u128::from(digit);
        }
        Ok(uuid)
    }
}

impl fmt::Display for UuidFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `ulid` as 26 characters of Crockford base32, upper case.
pub fn ulid_encode(ulid: u128) -> String {
    let mut text = [0u8; ULID_LEN];
    for (digit, slot) in text.iter_mut().enumerate() {
        // 5 bits, an index of the alphabet; the first digit holds the top 3 bits.
        let value = (ulid >> (5 * (ULID_LEN - 1 - digit))) & 0x1F;
        *slot = CROCKFORD[value as usize];
    }
    ascii_string(&text)
}

/// The ULID `text` stands for: 26 Crockford base32 characters, either case.
pub fn ulid_decode(text: &str) -> Result<u128, UuidError> {
    let not = |reason| UuidError::NotAUlid { text: shorten(text), reason };
    if text.len() != ULID_LEN {
        return Err(not("it is not 26 characters long"));
    }
    let mut ulid: u128 = 0;
    for (at, byte) in text.bytes().enumerate() {
        let digit = CROCKFORD_DIGITS[usize::from(byte)];
        if digit == NOT_A_DIGIT {
            return Err(not(
                "it has a character outside Crockford's base32 (0-9, A-Z less I L O U)",
            ));
        }
        if at == 0 && digit > 7 {
            return Err(not("it is above 7ZZZZZZZZZZZZZZZZZZZZZZZZZ, the largest ULID"));
        }
        ulid = (ulid << 5) | u128::from(digit);
    }
    Ok(ulid)
}

/// Why a UUID or ULID could not be made, or a text not read as one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UuidError {
    /// A format name that is not one of [`UuidFormat::NAMES`].
    UnknownFormat(String),
    /// The text is not a UUID in the given form.
    NotAUuid {
        /// The text (at most [`ERROR_TEXT_CHARS_MAX`] characters of it).
        text: String,
        /// The form it was read as.
        format: UuidFormat,
        /// What is wrong.
        reason: &'static str,
    },
    /// The text is not a ULID.
    NotAUlid {
        /// The text (at most [`ERROR_TEXT_CHARS_MAX`] characters of it).
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The next id's millisecond is past [`UNIX_MS_MAX`]: the clock reads after the year
    /// 10889, or the state borrowed time up to it.
    TimeOutOfRange {
        /// The millisecond the id would have had.
        unix_ms: u64,
    },
}

impl fmt::Display for UuidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UuidError::UnknownFormat(name) => write!(
                f,
                "{name:?} is not a UUID format; use one of {}",
                UuidFormat::NAMES.join(", ")
            ),
            UuidError::NotAUuid { text, format, reason } => {
                write!(f, "{text:?} is not a UUID in the {format} form: {reason}")
            }
            UuidError::NotAUlid { text, reason } => write!(f, "{text:?} is not a ULID: {reason}"),
            UuidError::TimeOutOfRange { unix_ms } => write!(
                f,
                "millisecond {unix_ms} does not fit the 48-bit time field of a UUID v7 or ULID \
                 (at most {UNIX_MS_MAX}); check the clock"
            ),
        }
    }
}

impl std::error::Error for UuidError {}

/// The last `(unix_ms, random)` issued, with the rules of the module documentation;
/// `RANDOM_BITS` wide random parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Monotonic<const RANDOM_BITS: u32> {
    last: Option<(u64, u128)>,
}

impl<const RANDOM_BITS: u32> Monotonic<RANDOM_BITS> {
    const NEW: Monotonic<RANDOM_BITS> = Monotonic { last: None };
    const MASK: u128 = random_mask(RANDOM_BITS);

    fn step(&mut self, now_ms: u64, random: u128) -> Result<(u64, u128), UuidError> {
        let next = match self.last {
            Some((last_ms, last_random)) if now_ms <= last_ms => {
                let increment = 1 + (random & INCREMENT_RANDOM_MASK);
                match last_random.checked_add(increment).filter(|r| *r <= Self::MASK) {
                    Some(counted) => (last_ms, counted),
                    // The random field is spent: borrow the next millisecond.
                    None => (last_ms + 1, random & Self::MASK),
                }
            }
            _ => (now_ms, random & Self::MASK),
        };
        if next.0 > UNIX_MS_MAX {
            return Err(UuidError::TimeOutOfRange { unix_ms: next.0 });
        }
        // Crash before repeating: `(ms, random)` order is the ids' order.
        if let Some(last) = self.last {
            assert!(next > last, "id {next:?} is not above the last one {last:?}");
        }
        self.last = Some(next);
        Ok(next)
    }
}

const fn random_mask(bits: u32) -> u128 {
    (1 << bits) - 1
}

/// `uuid` with the version field set to `version` and RFC 9562's variant.
fn with_version(uuid: u128, version: u128) -> u128 {
    (uuid & !VERSION_MASK & !VARIANT_MASK) | (version << VERSION_SHIFT) | VARIANT_RFC9562
}

/// Each byte's digit value in `alphabet` (upper and lower case alike), or [`NOT_A_DIGIT`].
const fn digit_table(alphabet: &[u8]) -> [u8; 256] {
    let mut table = [NOT_A_DIGIT; 256];
    let mut i = 0;
    while i < alphabet.len() {
        let byte = alphabet[i];
        table[byte as usize] = i as u8;
        table[byte.to_ascii_lowercase() as usize] = i as u8;
        table[byte.to_ascii_uppercase() as usize] = i as u8;
        i += 1;
    }
    table
}

/// `bytes` as a `String`: one allocation and one validation, not a push per character.
fn ascii_string(bytes: &[u8]) -> String {
    // Every byte comes from an ASCII alphabet (hex, Crockford, '-'), and ASCII is UTF-8.
    String::from_utf8(bytes.to_vec()).expect("ASCII text is UTF-8")
}

/// At most [`ERROR_TEXT_CHARS_MAX`] characters of `text`, for an error message.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(ERROR_TEXT_CHARS_MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // RFC 9562 appendix A.6: the example UUID v7 of 2022-02-22T19:22:22Z.
        let example = 0x017F22E2_79B0_7CC3_98C4_DC0C0C07398F_u128;
        let rand_a = 0xCC3_u128;
        let rand_b = 0x18C4_DC0C0C07398F_u128;
        assert_eq!(uuid_v7(0x017F22E279B0, (rand_a << 62) | rand_b), example);
        assert_eq!(UuidFormat::Standard.encode(example), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
        assert_eq!(UuidFormat::Hex.encode(example), "017f22e279b07cc398c4dc0c0c07398f");
        assert_eq!(uuid_v7_unix_ms(example), 0x017F22E279B0);
        assert_eq!(uuid_version(example), 7);
        assert!(uuid_is_rfc9562_variant(example));
        // RFC 9562 appendix A.3's UUID v4.
        let v4 = UuidFormat::Standard.decode("919108f7-52d1-4320-9bac-f847db4148a8");
        assert_eq!(v4, Ok(uuid_v4(0x919108f7_52d1_4320_9bac_f847db4148a8)));
        assert_eq!(uuid_version(uuid_v4(u128::MAX)), 4);
        assert_eq!(uuid_version(uuid_v4(0)), 4);
        assert!(uuid_is_rfc9562_variant(uuid_v4(u128::MAX)) && uuid_is_rfc9562_variant(0x8 << 60));
        // The ULID specification's example (its time part, 01ARZ3NDEK, is 1 469 922 850 259).
        let id = ulid_decode("01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap();
        assert_eq!(ulid_encode(id), "01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(ulid_unix_ms(id), 1_469_922_850_259);
        assert_eq!(ulid_decode("01arz3ndektsv4rrffq69g5fav"), Ok(id));
        assert_eq!(ulid_encode(u128::MAX), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(ulid_encode(0), "0".repeat(ULID_LEN));
        assert_eq!(ulid(UNIX_MS_MAX, u128::MAX), u128::MAX);
    }

    #[test]
    fn strict_decoding() {
        let good = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
        assert!(UuidFormat::Standard.decode(&good.to_uppercase()).is_ok());
        for bad in [
            "",
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398",
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398f0",
            "017f22e279b0-7cc3-98c4-dc0c0c07398f-",
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398g",
            "+17f22e2-79b0-7cc3-98c4-dc0c0c07398f",
            "017f22e2-79b0-7cc3-98c4-dc0c0c0739é",
            "017f22e279b07cc398c4dc0c0c07398f",
        ] {
            assert!(UuidFormat::Standard.decode(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "017f22e2-79b0-7cc3-98c4-dc0c0c07",
            "017f22e279b07cc398c4dc0c0c07398",
            "x".repeat(32).as_str(),
        ] {
            assert!(UuidFormat::Hex.decode(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "",
            "01ARZ3NDEKTSV4RRFFQ69G5FA",
            "81ARZ3NDEKTSV4RRFFQ69G5FAV",
            "01ARZ3NDEKTSV4RRFFQ69G5FAU",
            "01ARZ3NDEKTSV4RRFFQ69G5FA-",
        ] {
            assert!(ulid_decode(bad).is_err(), "{bad:?}");
        }
        let long = "z".repeat(10_000);
        let message = UuidFormat::Hex.decode(&long).map_err(|e| e.to_string());
        assert!(message.is_err_and(|m| m.len() < 200));
    }

    #[test]
    fn format_names() {
        assert_eq!(UuidFormat::parse("hex"), Ok(UuidFormat::Hex));
        assert_eq!(UuidFormat::parse("standard"), Ok(UuidFormat::Standard));
        let unknown = UuidFormat::parse("braced").map_err(|e| e.to_string());
        assert!(unknown.is_err_and(|e| e.contains("standard, hex")));
    }

    #[test]
    fn a_state_counts_up_within_a_millisecond_and_borrows_when_spent() {
        let mut state = UlidState::new();
        assert_eq!(state.next(1_000, 5), Ok(ulid(1_000, 5)));
        // Same millisecond: 5 + 1 + 2.
        assert_eq!(state.next(1_000, 2), Ok(ulid(1_000, 8)));
        // Clock stepped back: still the last millisecond, counting up.
        assert_eq!(state.next(990, 0), Ok(ulid(1_000, 9)));
        // A later millisecond: fresh random bits, even below the last ones.
        assert_eq!(state.next(1_001, 3), Ok(ulid(1_001, 3)));
        // The random field at its largest: the next id borrows 1 002.
        let top = random_mask(ULID_RANDOM_BITS);
        assert_eq!(state.next(1_002, top), Ok(ulid(1_002, top)));
        assert_eq!(state.next(1_002, 7), Ok(ulid(1_003, 7)));
        assert_eq!(state.last_unix_ms(), Some(1_003));
        assert_eq!(state.next(1_002, 0), Ok(ulid(1_003, 8)));

        let mut v7 = Uuid7State::new();
        let top = random_mask(UUID7_RANDOM_BITS);
        assert_eq!(v7.next(50, top), Ok(uuid_v7(50, top)));
        assert_eq!(v7.next(50, 1), Ok(uuid_v7(51, 1)));
        assert!(uuid_v7(50, top) < uuid_v7(51, 1));
    }

    #[test]
    fn time_past_48_bits_is_refused() {
        let mut state = Uuid7State::new();
        assert_eq!(
            state.next(UNIX_MS_MAX + 1, 0),
            Err(UuidError::TimeOutOfRange { unix_ms: UNIX_MS_MAX + 1 })
        );
        let top = random_mask(UUID7_RANDOM_BITS);
        assert!(state.next(UNIX_MS_MAX, top).is_ok());
        assert_eq!(
            state.next(UNIX_MS_MAX, 0),
            Err(UuidError::TimeOutOfRange { unix_ms: UNIX_MS_MAX + 1 })
        );
        // Refusing changes nothing: the state still stands at its last id.
        assert_eq!(state.last_unix_ms(), Some(UNIX_MS_MAX));
    }
}
