//! The node's health and state: `/health`, `/ready`, `/metrics` (Prometheus text), the
//! dashboard page at `/` and the JSON it polls, `GET /v1/status`.
//!
//! The page is one self-contained file (HTML, CSS and script embedded in the binary, nothing
//! fetched from elsewhere). It shows each tag's two segments (like Leaf's `/cache`), step,
//! rate, runway and a sparkline of its rate over the last five minutes (kept by the node,
//! one rate per 5 s, `TagStatus::rate_history_per_s`); the snowflake worker and its lease;
//! sequences; and store health. It refreshes itself every two seconds. It is read-only
//! unless an admin token is entered (kept in the tab's session storage only), and then
//! offers tag create, step change and delete through the same admin routes as any client,
//! so it needs no privilege of its own.
//!
//! This file shapes JSON and serves the page; what it reports is [`idmint::Node::status`]
//! and the node's readiness ([`idmint::Node::readiness`], [`idmint::Node::engine_ready`]);
//! it holds no id logic and decides no status.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use idmint::node::{Engine, EngineReadiness, NodeError, SequencesStatus};
use idmint::snowflake::SnowflakeStatus;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, EngineState, ErrorBody, NotReadyBody, Refusal};
use crate::http::shared::{ApiQuery, STORE_500, TagBody};
use crate::state::SharedState;

/// The page, embedded at build time.
pub const DASHBOARD_HTML: &str = include_str!("../dashboard.html");

/// Whether the node is alive or ready, and its store.
#[derive(Serialize, ToSchema)]
#[schema(as = Status)]
pub(crate) struct StatusBody {
    /// `ok` (liveness) or `ready`.
    status: &'static str,
    /// Store URL, password removed.
    store: String,
}

/// Liveness
///
/// The process answers.
#[utoipa::path(
    get,
    path = "/health",
    tag = "service",
    operation_id = "health",
    responses((status = 200, description = "The process answers", body = StatusBody))
)]
pub(crate) async fn health(State(app): State<SharedState>) -> Json<StatusBody> {
    Json(StatusBody { status: "ok", store: app.node.store_description() })
}

/// Whether the node is ready, and each engine's state.
#[derive(Serialize, ToSchema)]
#[schema(as = Ready)]
pub(crate) struct ReadyBody {
    /// `ready`.
    status: &'static str,
    /// Store URL, password removed.
    store: String,
    /// Every engine the node runs (or the ones `engine=` names), ready or not.
    engines: Vec<EngineState>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReadyQuery {
    /// Probe these engines only, comma-separated: `segment`, `snowflake`, `tinyid`,
    /// `sequences`. Each must be ready, whether or not the node's readiness waits for it;
    /// one the node does not run answers why (e.g. 501 `snowflake_not_configured`).
    engine: Option<String>,
}

/// Readiness: the engines this deployment uses can serve now
///
/// Waits for the engines of `ready_engines`: by default segments (the store answers), plus
/// the snowflake generator when a `[snowflake]` key is set (file or `IDMINT_SNOWFLAKE_*`),
/// Tinyid when enabled and sequences when Redis is configured. So a segment-only node is
/// ready as soon as its store answers, while its snowflake generator (on by default) settles.
/// The body lists every engine the node runs, `ready`, whether it `gates` the answer, and
/// why not (`code`, `message`). `?engine=snowflake` (or `segment`, `tinyid`, `sequences`, or
/// a list) probes those engines alone.
///
/// A snowflake generator whose lease is not proven, or whose clock is behind its last id or
/// its persisted time mark beyond the tolerance, answers 503 `worker_lease_not_proven` or
/// `clock_behind`; a worker id leased a moment ago, until the clock passes the floor above
/// any earlier holder's ids, 503 `lease_settling` with `Retry-After`; a clock off the
/// store's past half of `snowflake.lease_margin_ms`, 501 `clock_skew`. Not ready, the body
/// is an error body with the engines beside it.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "service",
    operation_id = "ready",
    params(ReadyQuery),
    responses(
        (status = 200, description = "Ready: every engine waited for can serve", body = ReadyBody),
        (status = 400, description = "bad_query: `engine` names no engine", body = ErrorBody),
        (status = 500, description = STORE_500, body = NotReadyBody),
        (status = 501, description = "clock_skew: the clock is off the store's past half the \
            lease margin; or, with `engine=`, an engine this node does not run \
            (`snowflake_not_configured`, `sequences_not_configured`, `worker_ids_exhausted`)",
            body = NotReadyBody),
        (status = 503, description = READY_503, body = NotReadyBody),
    )
)]
pub(crate) async fn ready(
    State(app): State<SharedState>,
    ApiQuery(query): ApiQuery<ReadyQuery>,
) -> Result<Json<ReadyBody>, ApiError> {
    let mut engines = Vec::new();
    let mut blocking = None;
    match query.engine {
        Some(text) => {
            let asked = Engine::parse_list(&text).map_err(|reason| {
                ApiError::bad_request("bad_query", format!("engine: {reason}"))
            })?;
            for engine in asked {
                let state = app.node.engine_ready(engine).await;
                add(&mut engines, &mut blocking, engine, true, state);
            }
        }
        None => {
            for EngineReadiness { engine, gates, state } in app.node.readiness().await {
                add(&mut engines, &mut blocking, engine, gates, state);
            }
        }
    }
    match blocking {
        Some((engine, refusal)) => Err(ApiError::NotReady { engine, refusal, engines }),
        None => {
            Ok(Json(ReadyBody { status: "ready", store: app.node.store_description(), engines }))
        }
    }
}

/// Lists `engine`'s state; the first refusal of an engine that gates is the answer's.
fn add(
    engines: &mut Vec<EngineState>,
    blocking: &mut Option<(Engine, Refusal)>,
    engine: Engine,
    gates: bool,
    state: Result<(), NodeError>,
) {
    let (listed, refusal) = EngineState::new(engine, gates, state);
    engines.push(listed);
    if gates
        && blocking.is_none()
        && let Some(refusal) = refusal
    {
        *blocking = Some((engine, refusal));
    }
}

/// `/ready`'s 503.
const READY_503: &str = "An engine the readiness waits for cannot serve now: the store did \
    not answer (`unavailable`), `shutting_down`, `lease_settling` (with `Retry-After`), \
    `clock_behind`, `worker_lease_not_proven`, `snowflake_not_running`, \
    `sequences_not_running` or `sequence_unavailable`";

/// `GET /`: the dashboard page.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    summary = "The dashboard",
    description = "One self-contained HTML page (no CDN): tags with their two segments, step, \
        rate, runway and a sparkline; snowflake; sequences; store health. It polls \
        /v1/status every 2 s (`?refresh_ms=N`). Read-only until an admin token is entered.",
    responses(
        (status = 200, description = "The page", content_type = "text/html", body = String),
    )
)]
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Everything is inline; nothing may be loaded from elsewhere.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        DASHBOARD_HTML,
    )
}

/// The node at a glance.
#[derive(Serialize, ToSchema)]
#[schema(as = StatusBody)]
pub(crate) struct NodeStatusBody {
    version: &'static str,
    /// When this answer was made, ms since the Unix epoch.
    time_ms: u64,
    store: StoreBody,
    auth: AuthBody,
    limits: LimitsBody,
    /// Every tag of the store, with this node's segments for the tags it serves (`kind`
    /// `segment`), the strict tags (`kind` `strict`, `max_id` the first id above their
    /// ceiling), then, with `[tinyid]` enabled, every `biz_type` of Tinyid's
    /// `tiny_id_info` alike (`kind` `tinyid`, with `delta` and `remainder`).
    tags: Vec<TagBody>,
    /// The Tinyid database, when the node serves one (`[tinyid]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    tinyid: Option<StoreBody>,
    snowflake: SnowflakeBody,
    sequences: SequencesBody,
}

#[derive(Serialize, ToSchema)]
struct StoreBody {
    description: String,
    up: bool,
    /// Why the store is reported down.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl StoreBody {
    /// A store of `description`, up unless it answered `error`.
    fn new(description: String, error: Option<String>) -> StoreBody {
        StoreBody { description, up: error.is_none(), error }
    }
}

#[derive(Serialize, ToSchema)]
struct AuthBody {
    /// Whether admin routes need the admin token (else: loopback only, open).
    admin_token: bool,
    /// How many client tokens guard tags.
    clients: usize,
}

/// The connection limits in force: as configured, or lowered at start to what the file
/// descriptor limit leaves (docs/operations.md, "File descriptors").
#[derive(Serialize, ToSchema)]
struct LimitsBody {
    connections_max: usize,
    client_connections_max: usize,
}

#[derive(Serialize, ToSchema, Default)]
struct SnowflakeBody {
    running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<u64>,
    /// Until when the worker lease is proven; `null` for static and ordinal worker ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mark_ms: Option<u64>,
    /// This node's clock minus its worker store's at the last measurement, in ms; absent
    /// without a worker store or before the first measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_offset_ms: Option<i64>,
    rollbacks: u64,
    waits: u64,
    /// Ids in the cached ring, when the node serves from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    ring_ids: Option<u64>,
}

#[derive(Serialize, ToSchema)]
struct SequencesBody {
    running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    items: Vec<SequenceItem>,
    raises: u64,
    reseeds: u64,
}

#[derive(Serialize, ToSchema)]
struct SequenceItem {
    name: String,
    daily: bool,
    period: String,
    cur: u64,
    max: u64,
    room: u64,
    recent_per_s: u64,
}

/// `GET /v1/status`: what the dashboard shows.
#[utoipa::path(
    get,
    path = "/v1/status",
    tag = "operations",
    summary = "The node at a glance",
    description = "Store health, every tag of the store with the segments this node holds \
        (with `[tinyid]`, Tinyid's `biz_type`s too, `kind` `tinyid`), the snowflake worker and \
        lease, and sequences. A store or Redis that does not answer \
        within 1 s is reported down in the body, not as an error.",
    responses((status = 200, description = "The node's status", body = NodeStatusBody))
)]
pub(crate) async fn status(State(app): State<SharedState>) -> Json<NodeStatusBody> {
    let status = app.node.status().await;
    // Strict tags have no segment row: listed from their leases, bounded as the rest.
    let limit = std::time::Duration::from_secs(1);
    let strict = tokio::time::timeout(limit, app.node.list_strict_tags());
    let strict = strict.await.ok().and_then(Result::ok).unwrap_or_default();
    let (tinyid_views, tinyid_store) = match status.tinyid {
        Some(t) => (t.biz_types, Some(StoreBody::new(t.store, t.store_error))),
        None => (Vec::new(), None),
    };
    Json(NodeStatusBody {
        version: env!("CARGO_PKG_VERSION"),
        time_ms: status.time_ms,
        store: StoreBody::new(status.store, status.store_error),
        auth: AuthBody {
            admin_token: app.auth.has_admin_token(),
            clients: app.auth.clients().len(),
        },
        limits: LimitsBody {
            connections_max: app.http_limits.connections_max,
            client_connections_max: app.http_limits.client_connections_max,
        },
        tags: status
            .tags
            .into_iter()
            .map(|(record, tag)| TagBody::new(record, tag))
            .chain(strict.into_iter().map(TagBody::strict))
            .chain(tinyid_views.into_iter().map(TagBody::biz_type))
            .collect(),
        tinyid: tinyid_store,
        snowflake: snowflake(status.snowflake, status.ring_ids),
        sequences: sequences(status.sequences),
    })
}

fn snowflake(status: Result<SnowflakeStatus, String>, ring_ids: Option<u64>) -> SnowflakeBody {
    match status {
        Ok(s) => SnowflakeBody {
            running: true,
            reason: None,
            layout: Some(s.space),
            worker: Some(s.worker),
            lease_until_ms: s.lease_until_ms,
            mark_ms: Some(s.mark_ms),
            clock_offset_ms: s.clock_offset_ms,
            rollbacks: s.rollbacks,
            waits: s.waits,
            ring_ids,
        },
        Err(reason) => SnowflakeBody { reason: Some(reason), ..SnowflakeBody::default() },
    }
}

fn sequences(status: SequencesStatus) -> SequencesBody {
    SequencesBody {
        running: status.running,
        reason: status.reason,
        items: status
            .items
            .into_iter()
            .map(|(record, s)| SequenceItem {
                name: record.name.to_string(),
                daily: record.daily,
                period: s.period,
                cur: s.cur,
                max: s.max,
                room: s.max.saturating_sub(s.cur),
                recent_per_s: s.recent_per_s,
            })
            .collect(),
        raises: status.raises,
        reseeds: status.reseeds,
    }
}

/// `GET /metrics`: reads the state series, then renders everything as Prometheus text.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics",
    description = "Prometheus text format 0.0.4: per tag ids issued, refills and their \
        latency histogram, step, remaining ids and runway; the snowflake worker, lease and \
        clock rollbacks; sequence room, raises and reseeds; HTTP requests and latency by route, \
        method and status. docs/operations.md lists every series.",
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain", body = String),
    )
)]
pub(crate) async fn scrape(State(app): State<SharedState>) -> Response {
    let body = crate::metrics::render(&app).await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}
