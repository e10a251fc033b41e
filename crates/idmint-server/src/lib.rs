//! idmint-server: the HTTP face of idmint.
//!
//! This crate owns the routes (Meituan Leaf's, byte-compatible, and the native `/v1` API),
//! the mapping of every library error to an HTTP status (in `error.rs`, nowhere else), the
//! OpenAPI document generated from the handlers (`openapi.rs`), the configuration file and
//! its precedence (`config.rs`), bearer tokens (`auth.rs`), limits (`limits.rs`), Prometheus
//! metrics (`metrics.rs`), the dashboard (`dashboard.rs`), the gRPC service (`grpc.rs`,
//! `idmint.v1.IdMint`, on the HTTP port or its own) with the HTTP twins of its range calls
//! (`leases.rs`), JSON bodies on hyper's own error answers (`parse_errors.rs`), and serving
//! with graceful shutdown.
//!
//! It must not hold id logic or touch a store directly: ids and tags come from
//! [`idmint::Segments`], [`idmint::Snowflake`], [`idmint::Sequences`] and
//! [`idmint::Uuids`]. It is the only crate that knows HTTP status codes.

mod auth;
mod config;
mod dashboard;
mod error;
mod formats;
mod grpc;
mod histograms;
mod leases;
mod limits;
mod metrics;
mod openapi;
mod parse_errors;
mod routes;
mod sequences;
mod uuids;

use std::future::Future;
use std::sync::Arc;

use idmint::{CachedSnowflake, Segments, Snowflake};
use tokio::net::TcpListener;

pub use auth::{ADMIN_ROUTES, Auth, Client, TAG_ROUTES, Token, check_exposure};
pub use config::{
    ADMIN_TOKEN_ENV, AuthSection, ClientSection, ConfigError, ConfigErrors, EffectiveConfig,
    FILE_PROBLEMS_MAX, FileConfig, FormatSection, LimitsSection, Overrides, SECRET_MASK, Secret,
    SecretUrl, SegmentSection, Settings, SnowflakeSection, TagFormat, env_var,
};
pub use dashboard::DASHBOARD_HTML;
pub use error::{ApiError, GRPC_CODE_KEY};
pub use formats::TagFormats;
pub use grpc::{GRPC_ROUTE, RETURN_LEASES_MAX, STREAM_CHUNK_DEFAULT, STREAM_COUNT_MAX};
pub use histograms::{DURATION_BUCKETS_S, HISTOGRAM_SERIES_MAX, OTHER_LABEL_VALUE};
pub use limits::{
    CLIENT_CONNECTIONS_DEFAULT, CLIENT_CONNECTIONS_MAX, CONNECTIONS_REFUSED_METRIC, ClientAddr,
    ClientGate, HttpLimits, LimitedListener,
};
pub use metrics::{METRICS_TAGS_DEFAULT, METRICS_TAGS_MAX};
pub use routes::{Serves, router, router_for};
pub use sequences::SequenceSlot;

/// Largest request body accepted, in bytes (admin JSON bodies are a few hundred bytes).
pub const REQUEST_BODY_BYTES_MAX: usize = 64 * 1024;

/// The state as the router holds it: one `Arc`, cloned once per request and extractor.
pub type SharedState = Arc<AppState>;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Segment-mode ids of the configured store.
    pub segments: Arc<Segments>,
    /// Largest `count` a batch request may ask for (at most `BATCH_COUNT_MAX`).
    pub batch_count_max: u64,
    /// The snowflake generator, or why it is not running (its routes answer 503 with it).
    pub snowflake: Result<Arc<Snowflake>, String>,
    /// The ring of pre-made ids over that generator (`snowflake.cached`): when present, the
    /// snowflake routes take their ids from it.
    pub snowflake_cached: Option<Arc<CachedSnowflake>>,
    /// The sequence engine, once it runs (its routes answer 503 with the reason until then).
    pub sequences: SequenceSlot,
    /// Public id formats of segment tags (`[format.TAG]`); a tag without one serves its ids
    /// as they are. Keys must be claimed ([`idmint::format::claim_key`]) before serving.
    pub formats: Arc<TagFormats>,
    /// UUID v4/v7 and ULID ids of this node (`/v1/uuid`, `/v1/ulid`): no store, no tag.
    pub uuids: Arc<idmint::Uuids>,
    /// The admin token and the client tokens ([`Auth::open`]: none, loopback only).
    pub auth: Arc<Auth>,
    /// Connection and request limits.
    pub http_limits: HttpLimits,
    /// Requests in flight per client address.
    pub clients: Arc<ClientGate>,
}

impl AppState {
    /// The state of a node serving `segments` and nothing else: the largest batch limit, no
    /// snowflake generator, no sequences, no public id formats, no tokens (loopback only),
    /// the default limits. Set the other fields to serve more.
    pub fn new(segments: Arc<Segments>) -> AppState {
        AppState {
            segments,
            batch_count_max: idmint_core::limits::BATCH_COUNT_MAX,
            snowflake: Err("snowflake ids are not configured on this node".to_string()),
            snowflake_cached: None,
            sequences: SequenceSlot::not_running("sequences are not configured on this node"),
            formats: Arc::default(),
            uuids: Arc::new(idmint::Uuids::new(Arc::new(idmint::SystemClock))),
            auth: Arc::new(Auth::open()),
            http_limits: HttpLimits::default(),
            clients: Arc::default(),
        }
    }
}

/// Serves `state` on `listener`, HTTP and gRPC on one port, within `state.http_limits`
/// (connections, idle time, requests per client, request time), until `shutdown` completes,
/// then, in that order: stops accepting, drains in-flight requests, and shuts the library
/// down (freeze every generator, give unissued ids back to the store, stop background
/// tasks).
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
    let segments = Arc::clone(&state.segments);
    let snowflake = state.snowflake.clone().ok();
    let sequences = state.sequences.clone();
    let http_limits = state.http_limits;
    let state: SharedState = Arc::new(state);
    let shutdown = shutdown.boxed().shared();
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
    segments.shutdown().await;
    if let Some(snowflake) = snowflake {
        snowflake.shutdown().await;
    }
    if let Some(sequences) = sequences.running() {
        sequences.shutdown().await;
    }
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
