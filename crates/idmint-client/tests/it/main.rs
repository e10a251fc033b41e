//! idmint-client against real servers (`idmint_server::serve` on loopback ports, each on its
//! own runtime): failover with a server killed under load, many tasks, the give-back at
//! close, the HTTP transport and its fallback, the typed errors and their bounds, the
//! snowflake cache and the public-id calls.

mod errors;
mod failover;
mod give_back;
mod http;
mod public;
mod strict;
mod support;
mod tasks;
