//! String encodings of numeric ids (issue 7): decimal, base36, base62 and Crockford base32,
//! each with an optional fixed width (zero-padded with the alphabet's first digit), and
//! their exact inverses.
//!
//! Every encoding is a positional numeral system over its alphabet, so it is one to one:
//! distinct ids give distinct strings of one width, and [`Encoding::decode`] gives the id
//! back. A width too small for an id is an error, never a truncation, so a fixed width can
//! not make two ids alike. Decoding is strict: no sign, no empty string, no digit outside
//! the alphabet, no value past [`ENCODED_ID_MAX`]; Crockford decoding alone also accepts
//! lower case and the look-alikes `I`/`L` (as 1) and `O` (as 0), as its specification asks.

use std::fmt;

/// Largest id an encoding accepts: ids fit a signed 64-bit integer (`u63`).
pub const ENCODED_ID_MAX: u64 = i64::MAX as u64;
/// Widest fixed width accepted (decimal `u63` needs 19 digits; more is only padding).
pub const ENCODED_WIDTH_MAX: usize = 32;

const BASE36: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// How a numeric id is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `0-9`.
    Decimal,
    /// `0-9a-z`, lower case.
    Base36,
    /// `0-9A-Za-z`, case-sensitive.
    Base62,
    /// Crockford's base32: `0-9A-Z` without `I L O U`, upper case.
    Crockford32,
}

/// Why an id could not be encoded or a string decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodingError {
    /// The id is above [`ENCODED_ID_MAX`].
    IdTooLarge(u64),
    /// The width is 0 or above [`ENCODED_WIDTH_MAX`].
    BadWidth(usize),
    /// The id needs more digits than the width allows.
    TooWide {
        /// The id.
        id: u64,
        /// The fixed width.
        width: usize,
        /// Digits it needs.
        needs: usize,
    },
    /// The text is not an id in this encoding.
    NotAnId {
        /// The text.
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// An encoding name that is not one of [`Encoding::NAMES`].
    UnknownEncoding(String),
}

impl Encoding {
    /// The names [`Encoding::parse`] accepts.
    pub const NAMES: [&'static str; 4] = ["decimal", "base36", "base62", "crockford32"];

    /// `decimal`, `base36`, `base62` or `crockford32`.
    pub fn parse(name: &str) -> Result<Encoding, EncodingError> {
        match name {
            "decimal" | "dec" => Ok(Encoding::Decimal),
            "base36" => Ok(Encoding::Base36),
            "base62" => Ok(Encoding::Base62),
            "crockford32" | "crockford" | "base32" => Ok(Encoding::Crockford32),
            other => Err(EncodingError::UnknownEncoding(other.to_string())),
        }
    }

    /// The encoding's name.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Decimal => "decimal",
            Encoding::Base36 => "base36",
            Encoding::Base62 => "base62",
            Encoding::Crockford32 => "crockford32",
        }
    }

    fn alphabet(self) -> &'static [u8] {
        match self {
            Encoding::Decimal => b"0123456789",
            Encoding::Base36 => BASE36,
            Encoding::Base62 => BASE62,
            Encoding::Crockford32 => CROCKFORD,
        }
    }

    fn radix(self) -> u64 {
        self.alphabet().len() as u64
    }

    /// Digits `id` needs (at least 1).
    pub fn digits(self, id: u64) -> usize {
        let radix = self.radix();
        let (mut n, mut digits) = (id / radix, 1);
        while n > 0 {
            n /= radix;
            digits += 1;
        }
        digits
    }

    /// Digits the largest id ([`ENCODED_ID_MAX`]) needs: a width at least this holds every
    /// id.
    pub fn digits_max(self) -> usize {
        self.digits(ENCODED_ID_MAX)
    }

    /// `id` written in this encoding, zero-padded to `width` if given.
    pub fn encode(self, id: u64, width: Option<usize>) -> Result<String, EncodingError> {
        if id > ENCODED_ID_MAX {
            return Err(EncodingError::IdTooLarge(id));
        }
        let needs = self.digits(id);
        let len = match width {
            None => needs,
            Some(w) if w == 0 || w > ENCODED_WIDTH_MAX => return Err(EncodingError::BadWidth(w)),
            Some(w) if w < needs => return Err(EncodingError::TooWide { id, width: w, needs }),
            Some(w) => w,
        };
        let mut out = vec![self.alphabet()[0]; len];
        // A constant radix per arm lets the compiler turn each division into a multiply.
        match self {
            Encoding::Decimal => write_digits::<10>(self.alphabet(), id, &mut out),
            Encoding::Base36 => write_digits::<36>(BASE36, id, &mut out),
            Encoding::Base62 => write_digits::<62>(BASE62, id, &mut out),
            Encoding::Crockford32 => write_digits::<32>(CROCKFORD, id, &mut out),
        }
        // Every byte comes from an ASCII alphabet, so this never fails.
        String::from_utf8(out).map_err(|_| EncodingError::NotAnId {
            text: String::new(),
            reason: "an alphabet is not ASCII",
        })
    }

    /// The id `text` stands for (leading zeros allowed, so fixed-width strings decode).
    pub fn decode(self, text: &str) -> Result<u64, EncodingError> {
        let not = |reason| EncodingError::NotAnId { text: text.to_string(), reason };
        if text.is_empty() {
            return Err(not("it is empty"));
        }
        let radix = self.radix();
        let mut id: u64 = 0;
        for byte in text.bytes() {
            let digit =
                self.digit(byte).ok_or_else(|| not("it has a character outside the alphabet"))?;
            id = id
                .checked_mul(radix)
                .and_then(|id| id.checked_add(digit))
                .filter(|id| *id <= ENCODED_ID_MAX)
                .ok_or_else(|| not("it is larger than the largest id"))?;
        }
        Ok(id)
    }

    fn digit(self, byte: u8) -> Option<u64> {
        let found = |alphabet: &[u8], b: u8| alphabet.iter().position(|&a| a == b);
        let index = match self {
            Encoding::Decimal | Encoding::Base62 => found(self.alphabet(), byte),
            Encoding::Base36 => found(BASE36, byte.to_ascii_lowercase()),
            Encoding::Crockford32 => match byte.to_ascii_uppercase() {
                b'O' => Some(0),
                b'I' | b'L' => Some(1),
                b => found(CROCKFORD, b),
            },
        };
        index.map(|i| i as u64)
    }
}

/// Writes `id` in base `RADIX` into the tail of `out` (already filled with the zero digit,
/// and long enough: checked by the caller).
fn write_digits<const RADIX: u64>(alphabet: &[u8], id: u64, out: &mut [u8]) {
    assert_eq!(alphabet.len() as u64, RADIX, "alphabet and radix disagree");
    let mut n = id;
    for slot in out.iter_mut().rev() {
        // The remainder is below the radix, an index of the alphabet.
        *slot = alphabet[(n % RADIX) as usize];
        n /= RADIX;
        if n == 0 {
            break;
        }
    }
    assert!(n == 0, "an id was cut to fit its width");
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for EncodingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodingError::IdTooLarge(id) => {
                write!(f, "{id} is above {ENCODED_ID_MAX}, the largest id")
            }
            EncodingError::BadWidth(width) => {
                write!(f, "a width of {width}; use 1 to {ENCODED_WIDTH_MAX}")
            }
            EncodingError::TooWide { id, width, needs } => write!(
                f,
                "{id} needs {needs} digits, more than the width {width}; widen it (a fixed \
                 width must hold the largest id the tag can reach)"
            ),
            EncodingError::NotAnId { text, reason } => write!(f, "{text:?} is not an id: {reason}"),
            EncodingError::UnknownEncoding(name) => {
                write!(f, "{name:?} is not an encoding; use one of {}", Encoding::NAMES.join(", "))
            }
        }
    }
}

impl std::error::Error for EncodingError {}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Encoding; 4] =
        [Encoding::Decimal, Encoding::Base36, Encoding::Base62, Encoding::Crockford32];

    #[test]
    fn known_values_and_bounds() {
        assert_eq!(Encoding::Base36.encode(35, None), Ok("z".into()));
        assert_eq!(Encoding::Base36.encode(36, Some(4)), Ok("0010".into()));
        assert_eq!(Encoding::Base62.encode(61, None), Ok("z".into()));
        assert_eq!(Encoding::Base62.encode(62, None), Ok("10".into()));
        assert_eq!(Encoding::Crockford32.encode(31, None), Ok("Z".into()));
        assert_eq!(Encoding::Crockford32.decode("o1iL"), Ok(32 * 32 + 32 + 1));
        assert_eq!(Encoding::Decimal.encode(ENCODED_ID_MAX, None), Ok(i64::MAX.to_string()));
        assert_eq!(Encoding::Decimal.digits_max(), 19);
        assert_eq!(Encoding::Base62.digits_max(), 11);
        assert_eq!(Encoding::Crockford32.digits_max(), 13);
        for encoding in ALL {
            let max = encoding.encode(ENCODED_ID_MAX, None).unwrap_or_default();
            assert_eq!(encoding.decode(&max), Ok(ENCODED_ID_MAX));
            assert_eq!(encoding.encode(0, Some(3)).map(|s| s.len()), Ok(3));
            assert!(matches!(
                encoding.encode(ENCODED_ID_MAX + 1, None),
                Err(EncodingError::IdTooLarge(_))
            ));
            assert!(matches!(encoding.encode(1, Some(0)), Err(EncodingError::BadWidth(0))));
            let too_wide = encoding.encode(ENCODED_ID_MAX, Some(encoding.digits_max() - 1));
            assert!(matches!(too_wide, Err(EncodingError::TooWide { .. })), "{encoding}");
            for bad in ["", "-1", "1 2", "é"] {
                assert!(encoding.decode(bad).is_err(), "{encoding} {bad:?}");
            }
            // One past the largest id is refused, not wrapped.
            let past = format!("{}0", max);
            assert!(encoding.decode(&past).is_err(), "{encoding} {past}");
        }
        assert_eq!(Encoding::parse("base62"), Ok(Encoding::Base62));
        let unknown = Encoding::parse("base64").map_err(|e| e.to_string());
        assert!(unknown.is_err_and(|e| e.contains("decimal, base36, base62, crockford32")));
    }
}
