//! The library's typed errors. Only the server maps them to HTTP statuses.

use idmint_core::Tag;
use idmint_store::StoreError;

/// Why the library could not answer with ids (or complete an admin call).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tag has no row in the store.
    #[error("tag {0} does not exist; create it with `idmint tag create {0}`")]
    UnknownTag(Tag),
    /// No ids could be handed out within the bound: the store is slow, down, or went
    /// backwards. Nothing was guessed; retry later. (A spent tag is not this: it is the final
    /// `Store(StoreError::Exhausted)`.)
    #[error("tag {tag} is unavailable: {reason}")]
    Unavailable {
        /// The tag.
        tag: Tag,
        /// What went wrong, for the operator.
        reason: String,
    },
    /// The node already serves `TAG_COUNT_MAX` tags.
    #[error("this node already serves {0} tags, the most it serves; delete unused tags")]
    TooManyTags(usize),
    /// The node is shutting down and hands out no more ids.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The node's local state (the high-water file of its data directory) cannot be read or
    /// written; the message names the file and the fix.
    #[error("local state: {0}")]
    LocalState(String),
    /// An admin call failed in the store; or, as `StoreError::Exhausted`, the tag's ids are
    /// spent (its next range would pass the largest id): final, a retry cannot succeed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
