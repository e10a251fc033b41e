//! [`Registry`]: the tags a [`Segments`](super::engine::Segments) serves, by name. One immutable snapshot per
//! change (the `Segments` swap it whole behind an `ArcSwap`); every segment request looks its
//! tag up in it by the name the request carries, a `&str`.
//!
//! An open-addressing table of entry numbers over the entries, made again on each change
//! (copy-on-write, as the map it replaces was cloned; at most `TAG_COUNT_MAX` entries). A
//! lookup hashes the name once with foldhash under the registry's random seed (kept across
//! changes, random per process), then compares the stored 64-bit hash and the name's bytes
//! inline: no call to `memcmp`, no SipHash (ARCHITECTURE.md, "The tag registry's hasher";
//! docs/PERFORMANCE.md, "Segment ids: the take in process").
//!
//! Must hold: a name has at most one entry (a second generator of a tag would hand its ids
//! out again), so `with` replaces, and a lookup finds every name it holds (`same_bytes` is
//! exact; tested against `==`). The table is never more than half full, so a probe ends.

use std::hash::{BuildHasher, Hasher};

use foldhash::fast::RandomState;
use idmint_core::Tag;

/// The served tags: each tag's value (in service, its generator), found by name.
pub(crate) struct Registry<V> {
    entries: Vec<Entry<V>>,
    /// Entry number + 1 per slot, 0 for an empty slot; a power of two at least twice
    /// `entries.len()` (or empty when there are no entries).
    slots: Box<[u32]>,
    hasher: RandomState,
}

struct Entry<V> {
    hash: u64,
    tag: Tag,
    value: V,
}

impl<V> Default for Registry<V> {
    fn default() -> Self {
        Registry { entries: Vec::new(), slots: Box::default(), hasher: RandomState::default() }
    }
}

impl<V: Clone> Registry<V> {
    /// The value of the tag named `name`, if the registry holds it.
    #[inline(always)]
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        self.entry(name).map(|entry| &entry.value)
    }

    /// The number of the entry of the tag named `name` (for [`Registry::at`]), if the
    /// registry holds it. Valid in this registry only: a change makes a new one.
    #[inline(always)]
    pub(crate) fn find(&self, name: &str) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let hash = self.hash(name);
        let mask = self.slots.len() - 1;
        let mut slot = hash as usize & mask;
        // Bounded by the table's size; at least half the slots are empty, so it ends sooner.
        for _ in 0..self.slots.len() {
            let number = (*self.slots.get(slot)? as usize).checked_sub(1)?;
            let entry = self.entries.get(number)?;
            if entry.hash == hash && same_bytes(entry.tag.as_str().as_bytes(), name.as_bytes()) {
                return Some(number);
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// The tag and value of entry `number` ([`Registry::find`]), if there is one.
    #[inline(always)]
    pub(crate) fn at(&self, number: usize) -> Option<(&Tag, &V)> {
        self.entries.get(number).map(|entry| (&entry.tag, &entry.value))
    }

    /// The entry of the tag named `name`.
    #[inline(always)]
    fn entry(&self, name: &str) -> Option<&Entry<V>> {
        self.entries.get(self.find(name)?)
    }

    /// The name's bytes through foldhash under the registry's seed: one `write` and the
    /// `finish` (not `Hash for str`, whose extra `0xff` costs a multiply per lookup).
    #[inline(always)]
    fn hash(&self, name: &str) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(name.as_bytes());
        hasher.finish()
    }

    /// How many tags it holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every tag and its value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Tag, &V)> {
        self.entries.iter().map(|e| (&e.tag, &e.value))
    }

    /// Every value.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|e| &e.value)
    }

    /// A copy with `tag` holding `value` (replacing the tag's value if it has one).
    pub(crate) fn with(&self, tag: Tag, value: V) -> Registry<V> {
        let hash = self.hash(tag.as_str());
        let mut entries: Vec<Entry<V>> =
            self.entries.iter().filter(|e| e.tag != tag).cloned().collect();
        entries.push(Entry { hash, tag, value });
        Registry::build(entries, self.hasher.clone())
    }

    /// A copy without `tag`.
    pub(crate) fn without(&self, tag: &Tag) -> Registry<V> {
        let entries = self.entries.iter().filter(|e| e.tag != *tag).cloned().collect();
        Registry::build(entries, self.hasher.clone())
    }

    fn build(entries: Vec<Entry<V>>, hasher: RandomState) -> Registry<V> {
        if entries.is_empty() {
            return Registry { entries, slots: Box::default(), hasher };
        }
        let size = (entries.len() * 2).next_power_of_two();
        assert!(u32::try_from(entries.len()).is_ok(), "registry of {} tags", entries.len());
        let mut slots = vec![0u32; size].into_boxed_slice();
        let mask = size - 1;
        for (number, entry) in (1u32..).zip(&entries) {
            let start = entry.hash as usize;
            let free = (0..size).map(|i| (start + i) & mask).find(|&slot| slots[slot] == 0);
            // At most half the slots are taken.
            let Some(slot) = free else { unreachable!("a registry table with no free slot") };
            slots[slot] = number;
        }
        Registry { entries, slots, hasher }
    }
}

impl<V: Clone> Clone for Entry<V> {
    fn clone(&self) -> Entry<V> {
        Entry { hash: self.hash, tag: self.tag.clone(), value: self.value.clone() }
    }
}

/// `a == b`, inline: tag names are short (at most 128 bytes), and a call to `memcmp` cost a
/// third of a lookup. Compares 8-byte words, the last one overlapping; below 8 bytes, the
/// first and last 4 (overlapping); below 4, byte by byte.
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if let (Some(a_last), Some(b_last)) = (a.last_chunk::<8>(), b.last_chunk::<8>()) {
        let (a_words, _) = a.as_chunks::<8>();
        let (b_words, _) = b.as_chunks::<8>();
        return a_last == b_last && a_words.iter().zip(b_words).all(|(x, y)| x == y);
    }
    let heads = (a.first_chunk::<4>(), b.first_chunk::<4>());
    let tails = (a.last_chunk::<4>(), b.last_chunk::<4>());
    if let ((Some(a_head), Some(b_head)), (Some(a_tail), Some(b_tail))) = (heads, tails) {
        return a_head == b_head && a_tail == b_tail;
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn finds_every_name_it_holds_once_and_no_other() {
        let name = |i: usize| match i % 3 {
            0 => format!("t{i}"),
            1 => format!("订单-{i}-{}", "x".repeat(i % 90)),
            _ => format!("{i:0>128}"),
        };
        let mut registry = Registry::default();
        assert_eq!(registry.get("t0"), None);
        for i in 0..600 {
            registry = registry.with(Tag::parse(&name(i)).unwrap(), i);
        }
        // Replacing keeps one entry per name.
        registry = registry.with(Tag::parse("t0").unwrap(), 1_000);
        assert_eq!(registry.len(), 600);
        for i in 0..600 {
            let want = if i == 0 { 1_000 } else { i };
            assert_eq!(registry.get(&name(i)), Some(&want), "{}", name(i));
            assert_eq!(registry.get(&format!("{} ", name(i))), None);
        }
        assert_eq!(registry.get("T0"), None);
        assert_eq!(registry.get(""), None);
        for i in (0..600).step_by(2) {
            registry = registry.without(&Tag::parse(&name(i)).unwrap());
        }
        assert_eq!(registry.len(), 300);
        for i in 0..600 {
            assert_eq!(registry.get(&name(i)).is_some(), i % 2 == 1, "{}", name(i));
        }
        let mut held: Vec<usize> = registry.values().copied().collect();
        held.sort_unstable();
        assert_eq!(held, (1..600).step_by(2).collect::<Vec<_>>());
    }

    proptest! {
        #[test]
        fn same_bytes_is_equality(a in proptest::collection::vec(any::<u8>(), 0..140),
                                  flip in any::<prop::sample::Index>(), bit in 0u8..8) {
            prop_assert!(same_bytes(&a, &a.clone()));
            if !a.is_empty() {
                let mut b = a.clone();
                b[flip.index(a.len())] ^= 1 << bit;
                prop_assert!(!same_bytes(&a, &b));
                prop_assert!(!same_bytes(&a, &a[..a.len() - 1]));
            }
        }

        #[test]
        fn same_bytes_agrees_with_eq(a in proptest::collection::vec(0u8..3, 0..20),
                                     b in proptest::collection::vec(0u8..3, 0..20)) {
            prop_assert_eq!(same_bytes(&a, &b), a == b);
        }
    }
}
