//! idmint-core's integration tests: one binary, one module per concern.

mod buffer_model;
