//! [`PublicText`]: one id as the text a route answers, the decimal id written in place.
//!
//! Leaf's route answers every id as text, so the text is part of each take. A decimal id is
//! at most 20 digits: it is written into the value itself (`itoa`, two digits a step), with
//! no allocation and no `fmt` machinery, which together cost more than the take
//! (docs/PERFORMANCE.md). A tag with a text template renders into a `String` as before.

use std::fmt;

/// Digits of `u64::MAX`: the longest decimal id.
const DECIMAL_LEN_MAX: usize = 20;

/// One public id as text: the decimal id, or a tag's template rendering of it. Read it with
/// [`PublicText::as_str`] (or `Display`, `Into<String>`).
#[derive(Clone)]
pub struct PublicText(Repr);

#[derive(Clone)]
enum Repr {
    /// The decimal id: its digits are `digits[start..]`.
    Decimal { digits: [u8; DECIMAL_LEN_MAX], start: u8 },
    /// A template's rendering.
    Rendered(String),
}

impl PublicText {
    /// The decimal text of `id`.
    #[inline]
    pub fn decimal(id: u64) -> PublicText {
        let mut buffer = itoa::Buffer::new();
        let text = buffer.format(id).as_bytes();
        let mut digits = [0; DECIMAL_LEN_MAX];
        let start = DECIMAL_LEN_MAX - text.len();
        digits[start..].copy_from_slice(text);
        // `start` < 20: a u64 has at least one digit.
        PublicText(Repr::Decimal { digits, start: start as u8 })
    }

    /// The text as rendered by a template.
    pub fn rendered(text: String) -> PublicText {
        PublicText(Repr::Rendered(text))
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Decimal { digits, start } => {
                // Only ASCII digits are ever written here (`decimal`), so this never fails.
                std::str::from_utf8(&digits[usize::from(*start)..]).unwrap_or_default()
            }
            Repr::Rendered(text) => text,
        }
    }
}

impl fmt::Display for PublicText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for PublicText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for PublicText {
    fn eq(&self, other: &PublicText) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for PublicText {}

impl PartialEq<&str> for PublicText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<PublicText> for String {
    fn from(text: PublicText) -> String {
        match text.0 {
            Repr::Decimal { .. } => text.as_str().to_owned(),
            Repr::Rendered(text) => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length of decimal id, the extremes included, reads as `to_string` writes it.
    #[test]
    fn decimal_text_is_the_ids_decimal() {
        let mut ids = vec![0, 1, 9, 10, 99, 100, u64::MAX, u64::MAX - 1, 1 << 53];
        ids.extend((0..20).map(|n| 10u64.pow(n)));
        ids.extend((1..20).map(|n| 10u64.pow(n) - 1));
        for id in ids {
            let text = PublicText::decimal(id);
            assert_eq!(text.as_str(), id.to_string());
            assert_eq!(text.to_string(), id.to_string());
            assert_eq!(String::from(text), id.to_string());
        }
        assert_eq!(String::from(PublicText::rendered("C-1".into())), "C-1");
    }
}
