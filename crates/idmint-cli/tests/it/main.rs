//! idmint-cli's integration tests: the real `idmint` binary in a temporary directory.

#![allow(clippy::unwrap_used, reason = "test helpers may panic: a panic is a test failure")]

mod admin;
mod auth;
mod chaos;
mod cli;
mod docs;
mod drain;
mod fds;
mod formats;
mod grants;
mod grpc;
mod multinode;
mod ops;
#[cfg(feature = "redis")]
mod sequences;
mod uuids;
