//! The [`PeerLink`] seam: how a node hands a take to another node of its cluster, so the
//! library names no transport (the server implements it over the nodes' gRPC API). Strict
//! tags and the timestamp oracle use it: a node that does not own a strict tag (or the oracle)
//! forwards its takes to the owner.

use async_trait::async_trait;
use idmint_core::{Count, Tag};

/// A batch of public ids: numbers (a plain or strict tag, or a numeric template with a key)
/// or texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicIds {
    /// Ids, or a keyed tag's permuted ids.
    Numbers(Vec<u64>),
    /// A text template's rendering of each id.
    Texts(Vec<String>),
}

/// Another node, as its peers reach it: the base URL of its gRPC API
/// (`http://10.0.0.7:9090`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The gRPC API's base URL.
    pub grpc_url: String,
}

/// Why a take on a peer did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The peer answered with a refusal that would not pass by asking again (an unknown tag,
    /// a bad count, a policy it cannot honour): the code and message are the peer's.
    #[error("the peer {peer} refused ({code}): {message}")]
    Refused {
        /// The peer.
        peer: String,
        /// The peer's code, as its transport names it.
        code: String,
        /// The peer's message.
        message: String,
    },
    /// The peer did not answer, or answered that it cannot serve now (down, unreachable,
    /// timed out, shutting down): another attempt, later or elsewhere, may succeed.
    #[error("the peer {peer} did not serve: {reason}")]
    Unreachable {
        /// The peer.
        peer: String,
        /// What happened.
        reason: String,
    },
}

/// The fence token a forwarded take carries: the token of the lease row the forwarder found
/// `peer` holding. The peer serves the take only under that very holding (a holder that lost
/// it, or a row taken over since, refuses), so a take never reaches a stale owner's ids.
pub type FenceToken = u64;

/// A node's way to its peers. Implementations bound every call in time and reuse their
/// connections; they never retry a take on their own (a take that reached the peer may have
/// been served even when its answer was lost: the caller decides).
#[async_trait]
pub trait PeerLink: Send + Sync + 'static {
    /// `count` ids of `tag` taken on `peer` and answered as that node serves the tag (its
    /// policy applies there); with `fence`, only while `peer` holds the tag's lease under
    /// that token.
    async fn next_ids(
        &self,
        peer: &Peer,
        tag: &Tag,
        count: Count,
        fence: Option<FenceToken>,
    ) -> Result<PublicIds, PeerError>;

    /// `count` timestamps of the oracle taken on `peer` while it holds the oracle's lease
    /// under `fence`: the first of them (the others follow it one by one).
    async fn timestamps(
        &self,
        peer: &Peer,
        count: Count,
        fence: Option<FenceToken>,
    ) -> Result<u64, PeerError>;
}
