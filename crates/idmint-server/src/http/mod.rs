//! The HTTP routes, one module per group, each calling only [`idmint::Node`] (through the
//! shared state) and rendering JSON or text; `shared` holds what they share (parameters,
//! schema snippets, common bodies). No route module imports another route module
//! (`tests/it/architecture.rs`).

pub(crate) mod decode;
pub(crate) mod leases;
pub(crate) mod monitor;
pub(crate) mod segment;
pub(crate) mod sequences;
pub(crate) mod shared;
pub(crate) mod snowflake;
pub(crate) mod status;
pub(crate) mod tags;
pub(crate) mod tinyid;
pub(crate) mod tso;
pub(crate) mod uuids;
