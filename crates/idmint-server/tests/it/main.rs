//! idmint-server's integration tests: a real server on `127.0.0.1:0`, driven over HTTP.

#![allow(clippy::unwrap_used, reason = "test helpers may panic: a panic is a test failure")]

mod alerts;
mod api;
mod architecture;
mod auth;
mod auth_fuzz;
mod dashboard;
mod formats;
mod grpc;
mod grpc_ops;
mod leaf;
mod openapi;
mod ops;
mod outage;
mod rebinding;
#[cfg(feature = "redis")]
#[path = "../../../idmint-store/tests/it/redis/keys.rs"]
mod redis_keys;
#[cfg(feature = "redis")]
mod sequences;
mod snowflake;
mod strict;
mod support;
mod tags;
mod tinyid;
mod uuids;
