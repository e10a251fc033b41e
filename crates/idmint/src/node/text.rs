//! [`PublicText`]: one id as the text a route answers, the decimal id written in place.
//!
//! Leaf's route answers every id as text, so the text is part of each take. A decimal id is
//! written where it is read (`itoa`, two digits a step), with no allocation and no `fmt`
//! machinery, which together cost more than the take (docs/PERFORMANCE.md). A tag with a text
//! template renders into a `String` as before.

use std::fmt;

/// One public id as text: the decimal id, or a tag's template rendering of it. Read it with
/// [`PublicText::with_str`] (or `Display`, `Into<String>`).
///
/// A decimal id is kept as the number and written out where it is read, into a buffer on the
/// reader's stack: writing the digits into this value and moving it to the caller cost a
/// stalled store-to-load forward per take (measured), and every reader copies the text once
/// anyway (into a response body, a protobuf string).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicText(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// The decimal id.
    Decimal(u64),
    /// A template's rendering.
    Rendered(String),
}

impl PublicText {
    /// The decimal text of `id`.
    #[inline]
    pub fn decimal(id: u64) -> PublicText {
        PublicText(Repr::Decimal(id))
    }

    /// The text as rendered by a template.
    pub fn rendered(text: String) -> PublicText {
        PublicText(Repr::Rendered(text))
    }

    /// Calls `read` with the text: a decimal id's digits written on the stack (`itoa`, two
    /// digits a step, no allocation), a rendering as it is.
    #[inline]
    pub fn with_str<R>(&self, read: impl FnOnce(&str) -> R) -> R {
        match &self.0 {
            // An id that fits 32 bits (most segment ids) is written with 32-bit arithmetic,
            // which is shorter than the 64-bit division chain.
            Repr::Decimal(id) => match u32::try_from(*id) {
                Ok(small) => read(itoa::Buffer::new().format(small)),
                Err(_) => read(itoa::Buffer::new().format(*id)),
            },
            Repr::Rendered(text) => read(text),
        }
    }
}

impl fmt::Display for PublicText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_str(|text| f.write_str(text))
    }
}

impl fmt::Debug for PublicText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_str(|text| fmt::Debug::fmt(text, f))
    }
}

impl PartialEq<&str> for PublicText {
    fn eq(&self, other: &&str) -> bool {
        self.with_str(|text| text == *other)
    }
}

impl From<PublicText> for String {
    fn from(text: PublicText) -> String {
        match text.0 {
            Repr::Decimal(id) => itoa::Buffer::new().format(id).to_owned(),
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
            assert_eq!(text.with_str(str::to_owned), id.to_string());
            assert_eq!(text.to_string(), id.to_string());
            assert_eq!(String::from(text), id.to_string());
        }
        assert_eq!(String::from(PublicText::rendered("C-1".into())), "C-1");
    }
}
