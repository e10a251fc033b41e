//! Ranges leased to remote clients, and the proof that lets a client give back what it did
//! not use.
//!
//! A server hands a client whole ranges of a tag's ids (`Segments::lease`); the client hands
//! them out in its own process. When the client stops it may return the unused ids
//! (`Segments::take_back`), which the tag's buffer takes back only when that is provably
//! safe (`DoubleBuffer::give_back`: they are the last ids it handed out of its current
//! segment and none of them was given back before). The buffer cannot tell *who* took the
//! ids, so each leased range carries a proof: SipHash-2-4 of (tag, start, end) under a
//! 128-bit key drawn at start from the CSPRNG and never shown. A range with a wrong proof
//! (another node's, a previous process's, a forged one) is refused: a caller cannot return
//! ids another client is using.
//!
//! This file must not decide what is safe to take back; the buffer does.

use std::hash::Hasher;

use idmint_core::{IdRange, Tag};
use rand::Rng;
use siphasher::sip::SipHasher24;

/// A range of ids leased to a client, with this node's proof that it leased exactly it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeLease {
    /// The ids, `[start, end)`.
    pub range: IdRange,
    /// SipHash-2-4 of the tag and the range under this node's lease key. Opaque to clients.
    pub proof: u64,
}

/// Why leased ids were not taken back. Nothing was changed: the ids are wasted, never
/// handed out twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TakeBackError {
    /// A lease's proof is not this node's: leased by another node or an earlier process, or
    /// forged.
    #[error(
        "lease [{start}, {end}) of tag {tag} was not leased by this node (a proof from another node or an earlier start); nothing taken back"
    )]
    NotOurs {
        /// The tag.
        tag: Tag,
        /// The lease's first id.
        start: u64,
        /// The lease's end (exclusive).
        end: u64,
    },
    /// The ids given back are not covered by the leases (they must be contiguous,
    /// increasing and contain `[start, end)`).
    #[error(
        "ids [{start}, {end}) are not covered by the leases sent; send the leases NextRange answered, in order"
    )]
    NotCovered {
        /// First id given back.
        start: u64,
        /// End of the ids given back (exclusive).
        end: u64,
    },
}

/// The key leases are proven with: one per process, random.
pub(crate) struct LeaseKey {
    k0: u64,
    k1: u64,
}

impl LeaseKey {
    /// A fresh key from the thread-local CSPRNG.
    pub(crate) fn random() -> LeaseKey {
        let mut rng = rand::rng();
        LeaseKey { k0: rng.next_u64(), k1: rng.next_u64() }
    }

    /// Leases `range` of `tag`.
    pub(crate) fn lease(&self, tag: &Tag, range: IdRange) -> RangeLease {
        RangeLease { range, proof: self.proof(tag, range) }
    }

    /// The ids `[start, end)` if `leases` are this key's, contiguous and cover them.
    pub(crate) fn check(
        &self,
        tag: &Tag,
        start: u64,
        end: u64,
        leases: &[RangeLease],
    ) -> Result<IdRange, TakeBackError> {
        for lease in leases {
            if lease.proof != self.proof(tag, lease.range) {
                return Err(TakeBackError::NotOurs {
                    tag: tag.clone(),
                    start: lease.range.start(),
                    end: lease.range.end(),
                });
            }
        }
        let contiguous = leases.windows(2).all(|w| w[0].range.end() == w[1].range.start());
        let covered = match (leases.first(), leases.last()) {
            (Some(first), Some(last)) => first.range.start() <= start && end <= last.range.end(),
            _ => false,
        };
        match IdRange::new(start, end) {
            Some(range) if contiguous && covered => Ok(range),
            _ => Err(TakeBackError::NotCovered { start, end }),
        }
    }

    fn proof(&self, tag: &Tag, range: IdRange) -> u64 {
        let mut hasher = SipHasher24::new_with_keys(self.k0, self.k1);
        // Length-prefixed, so no two (tag, range) triples hash the same input bytes.
        hasher.write_u64(tag.as_str().len() as u64);
        hasher.write(tag.as_str().as_bytes());
        hasher.write_u64(range.start());
        hasher.write_u64(range.end());
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> IdRange {
        IdRange::new(start, end).expect("range")
    }

    #[test]
    fn proofs_bind_the_key_the_tag_and_the_range() {
        let key = LeaseKey::random();
        let order = Tag::parse("order").expect("tag");
        let user = Tag::parse("user").expect("tag");
        let lease = key.lease(&order, range(100, 200));
        assert_eq!(key.check(&order, 150, 200, &[lease]), Ok(range(150, 200)));
        assert!(matches!(key.check(&user, 150, 200, &[lease]), Err(TakeBackError::NotOurs { .. })));
        let other = LeaseKey::random();
        assert!(matches!(
            other.check(&order, 150, 200, &[lease]),
            Err(TakeBackError::NotOurs { .. })
        ));
        let widened = RangeLease { range: range(100, 300), ..lease };
        assert!(matches!(
            key.check(&order, 150, 300, &[widened]),
            Err(TakeBackError::NotOurs { .. })
        ));
        assert_eq!(
            key.check(&order, 150, 201, &[lease]),
            Err(TakeBackError::NotCovered { start: 150, end: 201 })
        );
        assert_eq!(
            key.check(&order, 99, 150, &[lease]),
            Err(TakeBackError::NotCovered { start: 99, end: 150 })
        );
        assert_eq!(
            key.check(&order, 150, 150, &[lease]),
            Err(TakeBackError::NotCovered { start: 150, end: 150 })
        );
        assert_eq!(
            key.check(&order, 150, 200, &[]),
            Err(TakeBackError::NotCovered { start: 150, end: 200 })
        );
    }

    #[test]
    fn contiguous_leases_cover_a_range_across_them_and_gaps_do_not() {
        let key = LeaseKey::random();
        let tag = Tag::parse("order").expect("tag");
        let a = key.lease(&tag, range(100, 200));
        let b = key.lease(&tag, range(200, 300));
        let c = key.lease(&tag, range(400, 500));
        assert_eq!(key.check(&tag, 150, 300, &[a, b]), Ok(range(150, 300)));
        assert!(key.check(&tag, 150, 450, &[a, c]).is_err());
        assert!(key.check(&tag, 150, 300, &[b, a]).is_err());
    }
}
