//! idmint's integration tests: one binary, one module per concern.

mod serving;
mod simulation;
mod test_store;
