//! A tag's policy: how a node serves the tag, decided once per request by one lookup
//! ([`Policies::of`]). `plain` serves its ids as they are; `formatted` serves public ids
//! through the tag's format, its internal ids never leaving the node.
//!
//! The policy is the cluster's, not one node's: a node recording a tag's format also records
//! the tag's policy in the store's tag metadata ([`POLICY_NAME`]), and reads every tag's at
//! start, so a node whose configuration lacks a format another node recorded refuses that
//! tag (final, naming the fix) instead of handing out its internal ids. A value this version
//! does not know (a later version's) is refused the same way.

use std::collections::HashMap;

use idmint_core::Tag;
use idmint_store::{StoreError, TagMetaStore};

use super::TagFormats;
use super::error::{Feature, NodeError};
use crate::format::IdFormat;

/// The tag-metadata name of a tag's policy.
pub const POLICY_NAME: &str = "policy";
/// The recorded policy of a tag with a public id format.
pub const POLICY_FORMATTED: &str = "formatted";

/// How this node serves one tag.
#[derive(Debug, Clone, Copy)]
pub enum TagPolicy<'a> {
    /// Ids as they are: no format, no recorded policy.
    Plain,
    /// Public ids through this format.
    Formatted(&'a IdFormat),
    /// A policy recorded for the tag that this node cannot honour (a format it has no
    /// configuration for, or a value it does not know): the tag is refused with this value.
    Refused(&'a str),
}

/// Every tag's policy on this node: the configured formats, and the recorded policies this
/// node cannot honour.
#[derive(Debug, Default)]
pub struct Policies {
    formats: TagFormats,
    refused: HashMap<Tag, String>,
}

impl Policies {
    /// The policies of a node with `formats` and no recorded policy it cannot honour.
    pub(crate) fn new(formats: TagFormats) -> Policies {
        Policies { formats, refused: HashMap::new() }
    }

    /// Records `formats`' tags as formatted in `meta`, then reads every tag's recorded
    /// policy: a recorded one without a format here is refused by this node.
    pub(crate) async fn recorded(
        formats: TagFormats,
        meta: &dyn TagMetaStore,
    ) -> Result<Policies, StoreError> {
        for tag in formats.keys() {
            // `false`: a value is there already, read below with every other tag's.
            meta.compare_and_set_meta(tag, POLICY_NAME, None, POLICY_FORMATTED).await?;
        }
        let recorded = meta.meta_of_every_tag(POLICY_NAME).await?;
        let refused = recorded
            .into_iter()
            .filter(|(tag, value)| !(formats.contains_key(tag) && value == POLICY_FORMATTED))
            .collect();
        Ok(Policies { formats, refused })
    }

    /// The policy of the tag named `name` (as a request names it). Two lookups in maps that
    /// are empty on a node without formats, which answer without hashing.
    #[inline]
    pub fn of(&self, name: &str) -> TagPolicy<'_> {
        if let Some(format) = self.formats.get(name) {
            return TagPolicy::Formatted(format);
        }
        match self.refused.get(name) {
            Some(value) => TagPolicy::Refused(value),
            None => TagPolicy::Plain,
        }
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
fn refusal(name: &str, value: &str) -> NodeError {
    let reason = if value == POLICY_FORMATTED {
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
