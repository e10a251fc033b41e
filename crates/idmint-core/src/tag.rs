//! Tag names: the key of a segment row (`biz_tag`), parsed once at the edge.
//!
//! `Tag::parse` is the only way to make a [`Tag`]; internal code takes the newtype and never
//! re-checks a string.

use std::fmt;
use std::sync::Arc;

use crate::limits::TAG_LEN_MAX;

/// A valid tag name: 1 to [`TAG_LEN_MAX`] characters of `A-Z a-z 0-9 _ . : -`.
///
/// Cloning is cheap (a reference count), so generators and maps can share it.
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
    /// The name holds a character outside `A-Z a-z 0-9 _ . : -`.
    InvalidChar {
        /// The offending character.
        ch: char,
        /// Its position (0-based, in characters).
        position: usize,
    },
}

impl Tag {
    /// Parses a tag name, refusing anything outside the allowed alphabet and length.
    pub fn parse(name: &str) -> Result<Tag, TagError> {
        if name.is_empty() {
            return Err(TagError::Empty);
        }
        if let Some((position, ch)) = name.chars().enumerate().find(|(_, ch)| !is_tag_char(*ch)) {
            return Err(TagError::InvalidChar { ch, position });
        }
        // All characters are ASCII now, so bytes == characters.
        if name.len() > TAG_LEN_MAX {
            return Err(TagError::TooLong { len: name.len() });
        }
        Ok(Tag(Arc::from(name)))
    }

    /// The tag name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_tag_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | ':' | '-')
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

const TAG_RULE: &str = "a tag is 1 to 128 characters of A-Z a-z 0-9 _ . : -";

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagError::Empty => write!(f, "tag is empty; {TAG_RULE}"),
            TagError::TooLong { len } => {
                write!(f, "tag is {len} characters long; {TAG_RULE}")
            }
            TagError::InvalidChar { ch, position } => {
                write!(f, "tag has {ch:?} at position {position}; {TAG_RULE}")
            }
        }
    }
}

impl std::error::Error for TagError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_alphabet_and_the_bounds() {
        assert_eq!(Tag::parse("order").map(|t| t.to_string()), Ok("order".to_string()));
        assert!(Tag::parse("a").is_ok());
        assert_eq!(format!("{:<4}|", Tag::parse("ab").unwrap()), "ab  |");
        assert!(Tag::parse("Leaf-segment_test.v2:eu").is_ok());
        assert!(Tag::parse(&"x".repeat(TAG_LEN_MAX)).is_ok());
    }

    #[test]
    fn refuses_with_a_reason() {
        assert_eq!(Tag::parse(""), Err(TagError::Empty));
        assert_eq!(
            Tag::parse(&"x".repeat(TAG_LEN_MAX + 1)),
            Err(TagError::TooLong { len: TAG_LEN_MAX + 1 })
        );
        assert_eq!(Tag::parse("a b"), Err(TagError::InvalidChar { ch: ' ', position: 1 }));
        assert_eq!(Tag::parse("ordré"), Err(TagError::InvalidChar { ch: 'é', position: 4 }));
        assert_eq!(Tag::parse("a/b"), Err(TagError::InvalidChar { ch: '/', position: 1 }));
        let message = Tag::parse("a b").unwrap_err().to_string();
        assert!(message.contains("position 1") && message.contains("A-Z"), "{message}");
    }
}
