//! idmint-client: ids from idmint servers, handed out in the caller's process.
//!
//! ```no_run
//! # async fn example() -> Result<(), idmint_client::ClientError> {
//! let client = idmint_client::Client::connect(["http://10.0.0.1:8080", "http://10.0.0.2:8080"]).await?;
//! let order_id = client.next_id("order").await?;    // from a local lease: no call per id
//! let orders = client.tag("order")?;                // a handle: no parsing or lookup per id
//! let next = orders.try_next_id();                  // synchronous, lock-free; None when empty
//! client.close().await;                             // unused ids go back to the servers
//! # let _ = (order_id, next); Ok(()) }
//! ```
//!
//! The client is the embeddable engine, `idmint::Segments`, over a remote store: each
//! tag's ids come from a local double buffer (an atomic step per id, no lock, no await, no
//! call), fed in the background by ranges *leased* from a server (gRPC NextRange, or its
//! HTTP route). A lease's size follows the measured rate (`rate × lease_duration`, within
//! `[min_lease, BATCH_COUNT_MAX]`), so a busy client calls a server about once per lease
//! duration. Every wait is bounded; a failed lease request answers fast errors while the
//! buffer is empty.
//!
//! - **Failover**: servers are tried in order from the last one that answered; a server that
//!   fails is tried last for a backoff. Each call is bounded (a timeout per attempt, at most
//!   [`CALL_ATTEMPTS_MAX`] attempts, a deadline below the engine's own bound). Errors that
//!   are the caller's (unknown tag, bad count, missing token) are not retried elsewhere.
//! - **Increasing per client**: across servers a tag's ranges are unique but not ordered; the
//!   client skips leases below the ids it already served, so its ids of a tag keep
//!   increasing after a failover too.
//! - **Give-back**: [`Client::close`] freezes the buffers and returns each tag's unused ids
//!   to the server that leased them (ReturnRange, proven by the lease's proof); the server
//!   takes them back when it can prove it safe. Ids are never repeated either way.
//! - **Transports**: [`Transport::Auto`] (gRPC, HTTP for a server that does not speak gRPC),
//!   [`Transport::Grpc`], [`Transport::Http`]. An optional bearer token goes with every call.
//! - Snowflake ids come from a local batch fetched ahead ([`Client::next_snowflake_id`]);
//!   sequences ([`Client::next_sequence_ids`]) and public ids of formatted tags
//!   ([`Client::public_ids`], [`Client::stream_ids`]) are direct calls.
//!
//! This crate holds the wire and the failover, no id logic: what keeps ids unique is the
//! server's store and the engine's buffer. It spawns tasks only through the engine and its
//! own `TaskTracker`, all stopped by [`Client::close`].

mod client;
mod endpoints;
mod error;
mod ids;
mod limits;
mod owners;
mod remote;
mod snowflake;
mod stream;
mod wire;

pub use client::{AsTag, Client, ClientBuilder, TagIds};
pub use endpoints::Transport;
pub use error::ClientError;
pub use idmint_core::Tag;
pub use ids::{PublicId, PublicIds, SequenceIds};
pub use limits::{
    ALLOCATE_ROUNDS_MAX, CALL_ATTEMPTS_MAX, CALL_DEADLINE_MS_MAX, CALL_TIMEOUT_MS_DEFAULT,
    CALL_TIMEOUT_MS_MAX, CALL_TIMEOUT_MS_MIN, DOWN_BACKOFF_MS_MAX, DOWN_BACKOFF_MS_MIN,
    ENDPOINTS_MAX, GRPC_MESSAGE_BYTES_MAX, LEASE_DURATION_S_DEFAULT, LEASE_DURATION_S_MAX,
    MIN_LEASE_DEFAULT, QUEUED_LEASES_MAX, RECENT_LEASES_MAX, SNOWFLAKE_BATCH_MAX,
    SNOWFLAKE_BATCH_MIN, SNOWFLAKE_TTL_MS, STORE_CALL_MARGIN_MS, STREAM_CHUNK_IDS,
    STREAM_COUNT_MAX, STREAM_REOPENS_MAX, TOKEN_LEN_MAX,
};
pub use stream::IdStream;
