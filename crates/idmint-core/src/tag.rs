//! Tag names: the key of a segment row (`biz_tag`), parsed once at the edge.
//!
//! `Tag::parse` is the only way to make a user's [`Tag`]; internal code takes the newtype
//! and never re-checks a string. A tag is any UTF-8 text Leaf's `biz_tag` can hold and every
//! backend can store and tell apart: 1 to [`TAG_LEN_MAX`] bytes, no control character, no
//! bidirectional-override character, no leading or trailing whitespace.
//!
//! Internal rows (the key guard of a keyed tag) share the segment table with user tags.
//! They live under [`INTERNAL_PREFIX`], which `Tag::parse` refuses in any ASCII case, so no
//! user input can ever name, serve, create or delete one; [`Tag::internal`] makes them and
//! [`Tag::from_stored`] reads either kind back from a store.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use crate::limits::TAG_LEN_MAX;

/// Prefix of idmint's internal rows in the segment table (compared ignoring ASCII case,
/// since a case-insensitive MySQL collation would treat `IDMINT.KEY.x` as the same row).
pub const INTERNAL_PREFIX: &str = "idmint.key.";

/// A valid tag name: 1 to [`TAG_LEN_MAX`] bytes of UTF-8 that
/// [`Tag::parse`] accepts, or an internal row's name made by [`Tag::internal`].
///
/// Cloning is cheap (a reference count), so generators and maps can share it. A map keyed
/// by `Tag` can be looked up by the name as a `&str` (`Tag: Borrow<str>`): `Hash`, `Eq` and
/// `Ord` are the name's own (derived over `Arc<str>`, which delegates to `str`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(Arc<str>);

/// Why a string is not a valid tag name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TagError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`TAG_LEN_MAX`] bytes.
    TooLong {
        /// Length of the rejected name, in bytes.
        len: usize,
    },
    /// The name holds a character no tag may hold (a control or bidirectional-override
    /// character).
    InvalidChar {
        /// The offending character.
        ch: char,
        /// Its position (0-based, in characters).
        position: usize,
    },
    /// The name starts or ends with whitespace.
    EdgeSpace,
    /// The name lies in idmint's internal namespace ([`INTERNAL_PREFIX`]).
    Reserved,
}

impl Tag {
    /// Parses a user's tag name, refusing anything a backend could not store or tell apart,
    /// and idmint's internal namespace.
    pub fn parse(name: &str) -> Result<Tag, TagError> {
        Tag::check(name)?;
        Ok(Tag(Arc::from(name)))
    }

    /// Whether [`Tag::parse`] would accept `name`, with the same error, without making the
    /// tag (nothing is allocated).
    pub fn check(name: &str) -> Result<(), TagError> {
        check_text(name)?;
        if is_internal_name(name) {
            return Err(TagError::Reserved);
        }
        Ok(())
    }

    /// Makes the internal row `INTERNAL_PREFIX + suffix` (e.g. the key guard of a tag).
    pub fn internal(suffix: &Tag) -> Result<Tag, TagError> {
        let name = format!("{INTERNAL_PREFIX}{suffix}");
        check_text(&name)?;
        Ok(Tag(Arc::from(name)))
    }

    /// Reads a name back from a store: a user's tag or an internal row.
    pub fn from_stored(name: &str) -> Result<Tag, TagError> {
        check_text(name)?;
        Ok(Tag(Arc::from(name)))
    }

    /// Whether this is one of idmint's internal rows, never shown or served as a tag.
    pub fn is_internal(&self) -> bool {
        is_internal_name(&self.0)
    }

    /// The tag name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `name` lies in idmint's internal namespace, in any ASCII case.
#[inline]
pub fn is_internal_name(name: &str) -> bool {
    name.as_bytes()
        .get(..INTERNAL_PREFIX.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(INTERNAL_PREFIX.as_bytes()))
}

fn check_text(name: &str) -> Result<(), TagError> {
    if name.is_empty() {
        return Err(TagError::Empty);
    }
    if name.len() > TAG_LEN_MAX {
        return Err(TagError::TooLong { len: name.len() });
    }
    // Most names are printable ASCII without spaces: no control, bidi or edge-whitespace
    // character can be in them, so one pass over the bytes settles it.
    if name.bytes().all(|b| b.is_ascii_graphic()) {
        return Ok(());
    }
    if let Some((position, ch)) = name.chars().enumerate().find(|(_, ch)| !is_tag_char(*ch)) {
        return Err(TagError::InvalidChar { ch, position });
    }
    if name.starts_with(char::is_whitespace) || name.ends_with(char::is_whitespace) {
        return Err(TagError::EdgeSpace);
    }
    Ok(())
}

/// Control characters (NUL cannot be stored in PostgreSQL text; the rest break logs, tables
/// and terminals) and the characters that reorder displayed text (a tag could otherwise
/// show as another in the dashboard, a log line or the CLI).
fn is_tag_char(ch: char) -> bool {
    !ch.is_control()
        && !matches!(ch, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A map keyed by tags answers a lookup by the name itself, without making a `Tag`: the
/// derived `Hash`, `Eq` and `Ord` of `Tag` are those of its `str`, as `Borrow` requires.
impl Borrow<str> for Tag {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` honours width and alignment, so tags line up in tables.
        f.pad(&self.0)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tag({:?})", &*self.0)
    }
}

impl std::str::FromStr for Tag {
    type Err = TagError;
    fn from_str(s: &str) -> Result<Tag, TagError> {
        Tag::parse(s)
    }
}

/// The rule every message repeats, so a refused name says how to fix it.
pub const TAG_RULE: &str = "a tag is 1 to 128 bytes of UTF-8 without control or \
    bidirectional-override characters, not starting or ending with whitespace, and not \
    starting with idmint.key. (reserved for idmint's internal rows); in a URL path, \
    percent-encode it (/ as %2F)";

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagError::Empty => write!(f, "tag is empty; {TAG_RULE}"),
            TagError::TooLong { len } => {
                write!(f, "tag is {len} bytes long; {TAG_RULE}")
            }
            TagError::InvalidChar { ch, position } => {
                write!(f, "tag has {} at position {position}; {TAG_RULE}", ch.escape_unicode())
            }
            TagError::EdgeSpace => write!(
                f,
                "tag starts or ends with whitespace (MySQL's PAD SPACE collations ignore \
                 trailing spaces, and none shows in a table); {TAG_RULE}"
            ),
            TagError::Reserved => {
                write!(f, "tag starts with {INTERNAL_PREFIX}, idmint's internal rows; {TAG_RULE}")
            }
        }
    }
}

impl std::error::Error for TagError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_any_utf8_a_leaf_row_holds() {
        assert_eq!(Tag::parse("order").map(|t| t.to_string()), Ok("order".to_string()));
        assert!(Tag::parse("a").is_ok());
        assert_eq!(format!("{:<4}|", Tag::parse("ab").unwrap()), "ab  |");
        for name in [
            "Leaf-segment_test.v2:eu",
            "order@v2",
            "user/login",
            "订单",
            "🚀",
            "a b",
            "it's",
            "back\\slash",
            "100%_done",
            "<img src=x onerror=alert(1)>",
            "{hash}tag",
            "idmint.keys",
            "idmint",
            "👩‍👩‍👧",
        ] {
            assert_eq!(Tag::parse(name).map(|t| t.as_str().to_string()), Ok(name.to_string()));
        }
        assert!(Tag::parse(&"x".repeat(TAG_LEN_MAX)).is_ok());
        // 42 three-byte characters and two bytes: 128 bytes, 44 characters.
        let multibyte = format!("{}ab", "订".repeat(42));
        assert_eq!(multibyte.len(), TAG_LEN_MAX);
        assert!(Tag::parse(&multibyte).is_ok());
    }

    /// The check without the ASCII shortcut: every character tested.
    fn check_slowly(name: &str) -> Result<(), TagError> {
        if name.is_empty() {
            return Err(TagError::Empty);
        }
        if name.len() > TAG_LEN_MAX {
            return Err(TagError::TooLong { len: name.len() });
        }
        if let Some((position, ch)) = name.chars().enumerate().find(|(_, ch)| !is_tag_char(*ch)) {
            return Err(TagError::InvalidChar { ch, position });
        }
        if name.starts_with(char::is_whitespace) || name.ends_with(char::is_whitespace) {
            return Err(TagError::EdgeSpace);
        }
        if is_internal_name(name) {
            return Err(TagError::Reserved);
        }
        Ok(())
    }

    proptest::proptest! {
        /// The printable-ASCII shortcut decides every name as the full check does: names
        /// mostly of ASCII (spaces, controls, DEL, `idmint.key.` included) and of any text.
        #[test]
        fn the_ascii_shortcut_decides_as_the_full_check(
            ascii in "(idmint\\.key\\.)?[\\x00-\\x7f]{0,130}",
            any in "\\PC{0,40}|.{0,40}",
        ) {
            for name in [ascii.as_str(), any.as_str()] {
                proptest::prop_assert_eq!(Tag::check(name), check_slowly(name), "{:?}", name);
                proptest::prop_assert_eq!(Tag::parse(name).map(|t| t.to_string()), check_slowly(name).map(|()| name.to_string()));
            }
        }
    }

    #[test]
    fn refuses_with_a_reason() {
        assert_eq!(Tag::parse(""), Err(TagError::Empty));
        assert_eq!(
            Tag::parse(&"x".repeat(TAG_LEN_MAX + 1)),
            Err(TagError::TooLong { len: TAG_LEN_MAX + 1 })
        );
        assert_eq!(
            Tag::parse(&"订".repeat(43)),
            Err(TagError::TooLong { len: 129 }),
            "the bound is in bytes"
        );
        assert_eq!(Tag::parse("a\0b"), Err(TagError::InvalidChar { ch: '\0', position: 1 }));
        assert_eq!(Tag::parse("a\nb"), Err(TagError::InvalidChar { ch: '\n', position: 1 }));
        assert_eq!(Tag::parse("é\u{7f}"), Err(TagError::InvalidChar { ch: '\u{7f}', position: 1 }));
        assert_eq!(
            Tag::parse("ab\u{202E}c"),
            Err(TagError::InvalidChar { ch: '\u{202E}', position: 2 })
        );
        assert_eq!(Tag::parse(" order"), Err(TagError::EdgeSpace));
        assert_eq!(Tag::parse("order "), Err(TagError::EdgeSpace));
        assert_eq!(Tag::parse("\u{3000}"), Err(TagError::EdgeSpace));
        let message = Tag::parse("a\tb").unwrap_err().to_string();
        assert!(message.contains("position 1") && message.contains("\\u{9}"), "{message}");
    }

    #[test]
    fn internal_rows_are_out_of_the_users_namespace() {
        let order = Tag::parse("order").unwrap();
        let guard = Tag::internal(&order).unwrap();
        assert_eq!(guard.as_str(), "idmint.key.order");
        assert!(guard.is_internal() && !order.is_internal());
        for name in ["idmint.key.order", "IDMINT.KEY.order", "Idmint.Key.", "idmint.key."] {
            assert_eq!(Tag::parse(name), Err(TagError::Reserved), "{name}");
            assert!(Tag::from_stored(name).unwrap().is_internal(), "{name}");
        }
        assert_eq!(Tag::from_stored("订单").unwrap(), Tag::parse("订单").unwrap());
        assert!(Tag::internal(&Tag::parse(&"x".repeat(TAG_LEN_MAX)).unwrap()).is_err());
    }

    #[test]
    fn hashes_and_compares_as_its_name() {
        use std::collections::{BTreeMap, HashMap};
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        for name in ["order", "订单", "idmint", &"x".repeat(TAG_LEN_MAX)] {
            let tag = Tag::parse(name).unwrap();
            assert_eq!(state.hash_one(&tag), state.hash_one(name), "{name}");
            let borrowed: &str = tag.borrow();
            assert_eq!(borrowed, name);
        }
        let order = Tag::parse("order").unwrap();
        let hashed = HashMap::from([(order.clone(), 1)]);
        let sorted = BTreeMap::from([(order, 1)]);
        assert_eq!((hashed.get("order"), sorted.get("order")), (Some(&1), Some(&1)));
        assert_eq!((hashed.get("Order"), sorted.get("order ")), (None, None));
    }
}
