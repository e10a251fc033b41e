//! A tag's policy: how a node serves the tag, decided once per request by one lookup
//! ([`Policies::of`]). `plain` serves its ids as they are; `formatted` serves public ids
//! through the tag's format, its internal ids never leaving the node.
//!
//! `strict` serves ids that increase in real time across the cluster ([`crate::strict`]).
//!
//! The policy is the cluster's, not one node's: a node recording a tag's format also records
//! the tag's policy in the store's tag metadata ([`POLICY_NAME`]), and reads every tag's at
//! start, so a node whose configuration lacks a format another node recorded refuses that
//! tag (final, naming the fix) instead of handing out its internal ids. A value this version
//! does not know (a later version's) is refused the same way.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use idmint_core::Tag;
use idmint_store::{
    POLICY_FORMATTED, POLICY_NAME, POLICY_PLAIN, POLICY_STRICT, StoreError, TagMetaStore,
};

use super::TagFormats;
use super::error::{Feature, NodeError};
use crate::format::IdFormat;
use crate::segment::unknown::UnknownTags;

/// How this node serves one tag.
#[derive(Debug, Clone, Copy)]
pub enum TagPolicy<'a> {
    /// Ids as they are: no format, no recorded policy.
    Plain,
    /// Public ids through this format.
    Formatted(&'a IdFormat),
    /// Ids from the tag's one owner at a time ([`crate::strict`]).
    Strict,
    /// A policy recorded for the tag that this node cannot honour (a format it has no
    /// configuration for, or a value it does not know): the tag is refused with this value.
    Refused(&'a str),
}

/// Every tag's policy on this node: the configured formats, the strict tags (learnt at start,
/// at creation here, and when a take finds a tag unknown to the segment store), and the
/// recorded policies this node cannot honour.
#[derive(Debug, Default)]
pub struct Policies {
    formats: TagFormats,
    strict: ArcSwap<HashSet<Tag>>,
    /// Whether `strict` holds any tag: a node without strict tags skips it with one load.
    any_strict: AtomicBool,
    refused: HashMap<Tag, String>,
    /// Names the tag metadata recorded no strict policy for lately: the bound on metadata
    /// lookups unknown names cause (as the segment engine bounds its store lookups).
    pub(crate) unrecorded: UnknownTags,
}

impl Policies {
    /// The policies of a node with `formats` and no recorded policy.
    pub(crate) fn new(formats: TagFormats) -> Policies {
        Policies { formats, ..Policies::default() }
    }

    /// Records `formats`' tags as formatted in `meta`, then reads every tag's recorded
    /// policy: a formatted one without a format here, a strict one when this node serves no
    /// strict tags (`strict_served`), or an unknown value, is refused by this node.
    pub(crate) async fn recorded(
        formats: TagFormats,
        meta: &dyn TagMetaStore,
        strict_served: bool,
    ) -> Result<Policies, StoreError> {
        // An account without idmint's metadata table (Leaf's or Tinyid's own grants, or
        // `create_tables=false`) records and reads no policy: this node then serves what its
        // configuration says, as before policies were recorded.
        let unrecorded = |error: &StoreError| {
            matches!(error, StoreError::Denied { .. } | StoreError::MissingTable { .. })
        };
        for tag in formats.keys() {
            // `false`: a value is there already, read below with every other tag's.
            match meta.compare_and_set_meta(tag, POLICY_NAME, None, POLICY_FORMATTED).await {
                Err(error) if unrecorded(&error) => {
                    tracing::warn!(%tag, %error, "the tag's policy is not recorded in the store: other nodes will not refuse it without its format");
                }
                other => {
                    other?;
                }
            }
        }
        let recorded = match meta.meta_of_every_tag(POLICY_NAME).await {
            Err(error) if unrecorded(&error) => {
                tracing::warn!(%error, "the tags' recorded policies cannot be read: strict tags and other nodes' formats are not known to this node");
                Vec::new()
            }
            other => other?,
        };
        let policies = Policies::new(formats);
        let mut refused = HashMap::new();
        for (tag, value) in recorded {
            match value.as_str() {
                POLICY_FORMATTED if policies.formats.contains_key(&tag) => {}
                POLICY_PLAIN => {}
                POLICY_STRICT if strict_served => policies.learn_strict(tag),
                _ => {
                    refused.insert(tag, value);
                }
            }
        }
        Ok(Policies { refused, ..policies })
    }

    /// The policy of the tag named `name` (as a request names it). On a node without formats,
    /// strict tags or refusals: two lookups in empty maps, which answer without hashing, and
    /// one load.
    #[inline]
    pub fn of(&self, name: &str) -> TagPolicy<'_> {
        if let Some(format) = self.formats.get(name) {
            return TagPolicy::Formatted(format);
        }
        if let Some(value) = self.refused.get(name) {
            return TagPolicy::Refused(value);
        }
        if self.any_strict.load(Ordering::Acquire) && self.strict.load().contains(name) {
            return TagPolicy::Strict;
        }
        TagPolicy::Plain
    }

    /// Serves `tag` as strict from now on.
    pub(crate) fn learn_strict(&self, tag: Tag) {
        self.strict.rcu(|tags| {
            let mut tags = HashSet::clone(tags);
            tags.insert(tag.clone());
            tags
        });
        self.any_strict.store(true, Ordering::Release);
    }

    /// Stops serving `tag` as strict (it was deleted).
    pub(crate) fn forget_strict(&self, tag: &Tag) {
        self.strict.rcu(|tags| {
            let mut tags = HashSet::clone(tags);
            tags.remove(tag);
            tags
        });
    }

    /// The strict tags this node knows.
    pub fn strict_tags(&self) -> Vec<Tag> {
        self.strict.load().iter().cloned().collect()
    }

    /// The configured format of `tag`, if any.
    pub fn format(&self, tag: &Tag) -> Option<&IdFormat> {
        self.formats.get(tag)
    }
}

impl TagPolicy<'_> {
    /// The refusal of a [`TagPolicy::Refused`] tag named `name`, or `Ok` for the others.
    pub fn served(&self, name: &str) -> Result<(), NodeError> {
        match self {
            TagPolicy::Refused(value) => Err(refusal(name, value)),
            _ => Ok(()),
        }
    }
}

/// Why a tag whose recorded policy is `value` is not served here.
pub(crate) fn refusal(name: &str, value: &str) -> NodeError {
    let reason = if value == POLICY_STRICT {
        format!(
            "tag {name} is strict, and this node serves no strict tags: its store holds no \
             leases (a set of databases), or its peers cannot reach it (no address to give \
             them); take its ids from a node that serves strict tags"
        )
    } else if value == POLICY_FORMATTED {
        format!(
            "tag {name} has a public id format on this cluster (policy `formatted` in the \
             store's tag metadata) but this node has no [format.{name}]: add the tag's format \
             to this node's configuration, as on the other nodes, so its internal ids never \
             leave a node"
        )
    } else {
        format!(
            "tag {name} has the policy `{value}` in the store's tag metadata, which this \
             version of idmint does not serve: take its ids from a node of the version that \
             recorded it"
        )
    };
    NodeError::NotConfigured { feature: Feature::TagPolicy, reason }
}
