//! What the direct calls answer: a tag's public ids (numbers, or texts for a tag whose
//! template renders text) and a sequence's numbers. Plain data, no I/O.

use std::fmt;

/// Ids as a server's public format gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicIds {
    /// Numbers: the internal ids of a plain tag, or a keyed tag's permuted ids.
    Numbers(Vec<u64>),
    /// Texts: a tag whose template renders text (e.g. `ORD-{id:base36:8}`).
    Texts(Vec<String>),
}

impl PublicIds {
    /// How many ids.
    pub fn len(&self) -> usize {
        match self {
            PublicIds::Numbers(ids) => ids.len(),
            PublicIds::Texts(ids) => ids.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each id as it prints: a number in decimal, a text as is.
    pub fn iter(&self) -> impl Iterator<Item = PublicId<'_>> + '_ {
        let numbers = match self {
            PublicIds::Numbers(ids) => ids.as_slice(),
            PublicIds::Texts(_) => &[],
        };
        let texts = match self {
            PublicIds::Texts(ids) => ids.as_slice(),
            PublicIds::Numbers(_) => &[],
        };
        numbers
            .iter()
            .map(|id| PublicId::Number(*id))
            .chain(texts.iter().map(|text| PublicId::Text(text)))
    }
}

/// One public id, borrowed from [`PublicIds`]; `Display` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicId<'a> {
    /// A number.
    Number(u64),
    /// A text.
    Text(&'a str),
}

impl fmt::Display for PublicId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublicId::Number(id) => write!(f, "{id}"),
            PublicId::Text(text) => f.write_str(text),
        }
    }
}

/// Numbers of a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceIds {
    /// The sequence's name.
    pub name: String,
    /// A daily sequence's period (e.g. `20261125`); `None` for a plain sequence.
    pub period: Option<String>,
    /// The numbers, increasing, or a formatted sequence's texts.
    pub ids: PublicIds,
}
