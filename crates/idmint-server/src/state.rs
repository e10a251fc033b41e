//! What every handler shares: the [`Node`] and what only a transport needs (tokens,
//! limits). The router holds it as one `Arc`. (Requests in flight per client address are
//! counted per connection, in `limits.rs`.)

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use idmint::Node;
use idmint::strict::Owner;

use crate::auth::Auth;
use crate::limits::HttpLimits;

/// The answer header (HTTP) and metadata key (gRPC) naming the node that answered a take of
/// a strict tag, as its peers reach it (its gRPC URL).
pub const NODE_KEY: HeaderName = HeaderName::from_static("idmint-node");

/// The answer header (HTTP) and metadata key (gRPC) naming a strict tag's owner as the
/// answering node knows it, in the form of [`NODE_KEY`]: a client that has seen a server
/// name itself so asks that server directly.
pub const OWNER_KEY: HeaderName = HeaderName::from_static("idmint-owner");

/// The state as the router holds it: one `Arc`, cloned once per request and extractor.
pub type SharedState = Arc<AppState>;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The node: every engine and every operation the transports call.
    pub node: Arc<Node>,
    /// The admin token and the client tokens ([`Auth::open`]: none, loopback only).
    pub auth: Arc<Auth>,
    /// Connection and request limits.
    pub http_limits: HttpLimits,
    /// `true` once the server began draining ([`crate::serve`]'s shutdown completed): the
    /// gRPC health service then answers NOT_SERVING and ends its `Watch` streams, which
    /// would otherwise hold the drain open.
    pub draining: Arc<tokio::sync::watch::Sender<bool>>,
    /// This node's name as [`NODE_KEY`] gives it, made once (none without strict tags).
    node_name: Option<HeaderValue>,
}

impl AppState {
    /// The state of a transport serving `node`: no tokens (loopback only), the default
    /// limits. Set the other fields to change them.
    pub fn new(node: Arc<Node>) -> AppState {
        let node_name = node.strict_peer().and_then(|peer| peer.grpc_url.parse().ok());
        AppState {
            node_name,
            node,
            auth: Arc::new(Auth::open()),
            http_limits: HttpLimits::default(),
            draining: Arc::new(tokio::sync::watch::Sender::new(false)),
        }
    }

    /// For a strict tag named `name`: the `idmint-node` and `idmint-owner` pairs an answer
    /// carries (a hint: `None` for other tags and while the owner is unknown). The owner's
    /// own answers cost two reference counts, no allocation.
    pub fn strict_owner(&self, name: &str) -> Option<[(HeaderName, HeaderValue); 2]> {
        let node = self.node_name.as_ref()?;
        let owner = match self.node.strict_owner(name)? {
            Owner::This => node.clone(),
            Owner::Other(peer) => peer.grpc_url.parse().ok()?,
        };
        Some([(NODE_KEY, node.clone()), (OWNER_KEY, owner)])
    }
}
