//! idmint-server: the HTTP and gRPC faces of an [`idmint::Node`], adapters only.
//!
//! The router (`router.rs`) and the OpenAPI document (`openapi.rs`) sit at the top; below
//! them one module per group of HTTP routes (`http/`: segment, tags, leases, snowflake,
//! decode, sequences, uuids, status with the dashboard and metrics) and one for gRPC
//! (`grpc.rs`), each parsing its input, calling one [`idmint::Node`] operation and rendering
//! the answer; what the HTTP routes share is in the leaf `http/shared.rs`. Below those: the
//! shared state (`state.rs`), the mapping of every error to an HTTP status and a gRPC code
//! (`error.rs`, nowhere else), bearer tokens (`auth.rs`), limits (`limits.rs`), Prometheus
//! metrics (`metrics.rs`, `histograms.rs`), JSON bodies on hyper's own error answers
//! (`parse_errors.rs`), the configuration file and its precedence (`config/`) and its
//! conversion into the node's typed configuration (`node_config.rs`), and serving with
//! graceful shutdown (here).
//!
//! It must not hold id logic or touch a store directly: every rule lives in
//! [`idmint::Node`]. It is the only crate that knows HTTP status codes. No route module
//! imports another, the gRPC module imports none, protobuf types stay in the gRPC module,
//! and the modules import each other without a circle (`tests/it/architecture.rs`).

mod auth;
mod config;
mod error;
mod grpc;
mod histograms;
mod http;
mod limits;
mod metrics;
mod middleware;
mod node_config;
mod openapi;
mod parse_errors;
mod process;
mod router;
pub mod routes;
mod state;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use auth::{Auth, Client, Token, check_exposure};
pub use config::{
    ADMIN_TOKEN_ENV, AuthSection, ClientSection, ConfigError, ConfigErrors, EffectiveConfig,
    FILE_PROBLEMS_MAX, FLAG_KEYS, FileConfig, FormatSection, LimitsSection, OTHER_VARIABLES,
    Overrides, SECRET_MASK, Secret, SecretUrl, SegmentSection, Settings, SnowflakeSection,
    TEST_VARIABLE_PREFIX, TagFormat, VARIABLE_PREFIX, env_var,
};
pub use error::{ApiError, GRPC_CODE_KEY};
pub use grpc::{
    GRPC_METHODS, GRPC_ROUTE, GRPC_ROUTES, GrpcPeerLink, HEALTH_CHECK_WAIT_MS, HEALTH_ROUTE,
    HEALTH_SERVICES, HEALTH_WATCH_POLL_MS, PEER_CALL_TIMEOUT_MS, REFLECTION_ROUTE,
    REFLECTION_V1ALPHA_ROUTE, STREAM_CHUNK_DEFAULT, STREAM_COUNT_MAX,
};
pub use histograms::{DURATION_BUCKETS_S, HISTOGRAM_SERIES_MAX, OTHER_LABEL_VALUE};
pub use http::status::DASHBOARD_HTML;
pub use limits::{
    CLIENT_CONNECTIONS_DEFAULT, CLIENT_CONNECTIONS_MAX, CONNECTIONS_FOR_DESCRIPTORS_MIN,
    CONNECTIONS_REFUSED_METRIC, ClientAddr, DESCRIPTORS_RESERVED_BASE, HttpLimits, LimitedListener,
    METRICS_TAGS_DEFAULT, METRICS_TAGS_MAX, REQUEST_BODY_BYTES_MAX,
};
pub use node_config::node_config;
pub use router::{Serves, router, router_for};
pub use routes::{admin_routes, monitor_routes, tag_routes};
pub use state::{AppState, SharedState};

/// Serves `state` on `listener`, HTTP and gRPC on one port, within `state.http_limits`
/// (connections, idle time, requests per client, request time), until `shutdown` completes,
/// then, in that order: stops accepting, drains in-flight requests, and shuts the node down
/// ([`idmint::Node::shutdown`]: freeze every generator, give unissued ids back to the store,
/// close the snowflake ring, stop the snowflake generator, the node's loops and the
/// sequences).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_split(listener, None, state, shutdown).await
}

/// [`serve`], with the gRPC service on its own listener when `grpc` is given (the HTTP
/// listener then serves HTTP only). Both stop accepting on `shutdown` and drain before the
/// library shuts down.
pub async fn serve_split(
    http: TcpListener,
    grpc: Option<TcpListener>,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use futures_util::FutureExt;
    let node = Arc::clone(&state.node);
    let http_limits = state.http_limits;
    let state: SharedState = Arc::new(state);
    // Draining starts when `shutdown` completes: the health service says so first, and
    // ends its Watch streams so that they do not hold the drain open.
    let draining = Arc::clone(&state.draining);
    let shutdown = async move {
        shutdown.await;
        draining.send_replace(true);
    }
    .boxed()
    .shared();
    let serves = if grpc.is_some() { Serves::Http } else { Serves::HttpAndGrpc };
    let http_served =
        serve_one(http, &http_limits, router_for(Arc::clone(&state), serves), shutdown.clone());
    let grpc_served = async {
        match grpc {
            Some(listener) => {
                let router = router_for(Arc::clone(&state), Serves::Grpc);
                serve_one(listener, &http_limits, router, shutdown.clone()).await
            }
            None => Ok(()),
        }
    };
    let (http_served, grpc_served) = tokio::join!(http_served, grpc_served);
    // The transports drained: the node stops its engines and loops, in its order.
    node.shutdown().await;
    http_served.and(grpc_served)
}

/// One listener, until `shutdown`: stops accepting, then drains its requests.
async fn serve_one(
    listener: TcpListener,
    limits: &HttpLimits,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // hyper's own 400/414/431 answers get JSON bodies too (parse_errors.rs).
    let listener = parse_errors::JsonParseErrors(LimitedListener::new(listener, limits));
    let app = router.into_make_service_with_connect_info::<ClientAddr>();
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

/// The README's Rust examples, compiled as doc-tests so they hold as written (this crate's
/// dev-dependencies hold both the library and the client they use).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;
