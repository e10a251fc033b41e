//! [`NodeError`]: every refusal of a [`crate::Node`] operation, typed, so each transport maps
//! it to its own status in one place (the server's `error.rs`). Messages name the problem
//! and the fix; this file knows no status code.

use idmint_core::{TagError, ValueError};
use idmint_store::StoreError;

use crate::format::FormatError;
use crate::segment::ByNameError;
use crate::segment::Error;
use crate::sequence::SequenceError;
use crate::snowflake::SnowflakeError;
use crate::uuid::UuidsError;
use idmint_core::Tag;

/// Why a [`crate::Node`] operation did not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The segment engine refused (unknown tag, store down, shutting down, ...).
    #[error(transparent)]
    Segment(#[from] Error),
    /// The snowflake generator refused, or refused to start for a reason only the operator
    /// ends (no worker id free, the layout's time run out).
    #[error(transparent)]
    Snowflake(#[from] SnowflakeError),
    /// The sequence engine refused.
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    /// The node serves no snowflake ids yet: its generator did not start, for a reason that
    /// passes by itself (the worker store not reachable so far), and the start is retried in
    /// the background; the message gives the last failure.
    #[error("{0}")]
    SnowflakeNotRunning(String),
    /// The node serves no sequences yet (Redis not reachable so far; it is retried), with
    /// the reason.
    #[error("{0}")]
    SequencesNotRunning(String),
    /// The node is not configured to serve this kind of id: snowflake ids disabled, on a
    /// store that cannot hold worker leases (Flicker, several databases), or configured so
    /// that the generator cannot run; sequences without
    /// Redis, with a bad Redis URL, or without one SQL store for their ceilings. Final until
    /// the node's configuration changes; the message says how.
    #[error("{reason}")]
    NotConfigured {
        /// What is not served.
        feature: Feature,
        /// Why, and how to configure it.
        reason: String,
    },
    /// A tag's public id format refused (an id past its width, a text not of the format).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// No UUID v7 or ULID: the clock is past their 48-bit time field.
    #[error(transparent)]
    Uuids(#[from] UuidsError),
    /// A name that is not a tag.
    #[error(transparent)]
    Tag(#[from] TagError),
    /// A value out of range (a count, step, start id or description).
    #[error(transparent)]
    Value(#[from] ValueError),
    /// Ranges of internal ids were asked of a tag with a public id format: its internal ids
    /// do not leave the node.
    #[error(
        "tag {0} has a public id format ([format.{0}]): its internal ids do not leave the \
         server, so it is not leased in ranges; take its public ids with NextIds or GET \
         /v1/segment/{0}"
    )]
    FormattedTag(Tag),
    /// Ranges were asked of a strict tag: a range held by a client would be handed out after
    /// ids other nodes answered later, breaking the tag's real-time order.
    #[error(
        "tag {0} is strict (its ids increase in real time across the cluster): it is not \
         leased in ranges, since ids cached by a client would be handed out out of order; \
         take its ids with NextIds or GET /v1/segment/{0}"
    )]
    StrictTag(Tag),
    /// The timestamp oracle did not answer in time: its owner is not reachable, or its
    /// lease is passing to another node, or the store does not answer. Passes by itself.
    #[error("the timestamp oracle is unavailable: {0}")]
    TsoUnavailable(String),
    /// Not an id (above 2^63-1), or not an id of the layout.
    #[error("{0}")]
    BadId(String),
    /// Not a layout preset.
    #[error("{0}")]
    BadLayout(String),
    /// Leases given back that are not ranges, too many, or not this node's.
    #[error("{0}")]
    BadLease(String),
    /// Not an encoding name.
    #[error("{0}")]
    BadEncoding(String),
    /// The text is not an id of the tag's format or of the encoding.
    #[error("{0}")]
    NotAnId(String),
    /// A decode asked for neither or both of a tag and an encoding.
    #[error("{0}")]
    DecodeHow(String),
    /// Tinyid's routes were called on a node that serves no Tinyid database.
    #[error(
        "this node serves no Tinyid database: set [tinyid] enabled = true (and tinyid.store to \
         Tinyid's mysql:// URL if it is not the main store)"
    )]
    TinyidNotServed,
    /// A Tinyid `biz_type` with no `tiny_id_info` row of exactly that name.
    #[error(
        "biz_type {0} has no row in tiny_id_info (names compare exactly: case and accents \
         count); add the row with Tinyid's SQL (idmint serves Tinyid's rows but never creates \
         them)"
    )]
    UnknownBizType(Tag),
    /// A name that is neither a tag of the segment store nor a `biz_type` of the Tinyid
    /// database the node serves.
    #[error(
        "{0} is neither a tag nor a Tinyid biz_type; create a tag with POST /v1/tags \
         {{\"tag\": \"{0}\"}} (or `idmint tag create {0}`), or add a biz_type to tiny_id_info \
         with Tinyid's SQL and take its ids with /tinyid/id/nextId?bizType={0}&token=TOKEN"
    )]
    UnknownName(Tag),
    /// A tag admin change named a Tinyid `biz_type` (and no tag): Tinyid's rows are changed
    /// with Tinyid's SQL, not through idmint.
    #[error(
        "{0} is not a tag but a Tinyid biz_type (a row of tiny_id_info), which idmint serves \
         on /tinyid/id/* but does not administer: change its row with Tinyid's SQL"
    )]
    BizTypeNotAdministered(Tag),
}

impl From<ByNameError> for NodeError {
    /// A bad name is the parse's refusal, as when the transport parsed it; the rest is the
    /// segment engine's.
    fn from(error: ByNameError) -> NodeError {
        match error {
            ByNameError::BadTag(error) => NodeError::Tag(error),
            ByNameError::Segment(error) => NodeError::Segment(error),
        }
    }
}

/// A kind of id a node serves only when configured for it ([`NodeError::NotConfigured`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// Snowflake ids (and the cached ring).
    Snowflake,
    /// Sequences (Redis counters under SQL ceilings).
    Sequences,
    /// A tag whose recorded policy this node cannot honour ([`crate::node::TagPolicy`]).
    TagPolicy,
    /// The timestamp oracle.
    Tso,
}

/// Why a [`crate::NodeBuilder`] could not start a node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeStartError {
    /// The segment store did not open.
    #[error("cannot open the store {url}")]
    OpenStore {
        /// The store's URL, password removed.
        url: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The witness store did not open, or cannot keep marks.
    #[error("cannot open the witness {url}")]
    OpenWitness {
        /// The witness's URL, password removed.
        url: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The segment engine did not start (its data directory is damaged or locked).
    #[error("cannot start serving")]
    Segments(#[source] Error),
    /// A tag's format key differs from the one recorded in the store, or could not be checked.
    #[error("cannot serve tag {tag} under its key")]
    FormatKey {
        /// The tag.
        tag: Tag,
        /// Why.
        #[source]
        source: FormatError,
    },
    /// The tags' policies could not be recorded or read in the store's tag metadata.
    #[error("cannot record or read the tags' policies in the store")]
    TagPolicies(#[source] StoreError),
    /// The ring of pre-made snowflake ids did not start.
    #[error("cannot start the cached snowflake ring")]
    CachedRing(#[source] SnowflakeError),
    /// The parts handed to the builder do not fit the configuration; the message says how.
    #[error("{0}")]
    Parts(String),
    /// Tinyid's `biz_type`s are configured and their engine did not start (its tokens could
    /// not be read, or its data directory is damaged or locked).
    #[error("cannot serve Tinyid's biz_types")]
    Tinyid(#[source] Error),
    /// Sequences are configured and their marks file is damaged or locked.
    #[error("cannot serve sequences")]
    Sequences(#[source] SequenceError),
}
