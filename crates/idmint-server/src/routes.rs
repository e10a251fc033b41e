//! The routes: Meituan Leaf's (`/api/segment/get/{tag}`, byte-compatible) and the native JSON
//! API under `/v1`, plus `/health`, `/ready`, `/openapi.json`, `/metrics`, the dashboard at
//! `/` and its `/v1/status`.
//!
//! Handlers parse their input into idmint's newtypes, call the library, and shape JSON;
//! they hold no id logic and never choose a status code (that is `error.rs`'s job).

use axum::extract::rejection::{JsonRejection, QueryRejection, RawPathParamsRejection};
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Query, RawPathParams, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use std::sync::Arc;

use idmint::Snowflake;
use idmint::segment::TagStatus;
use idmint::snowflake::SnowflakeError;
use idmint_core::snowflake::{Layout, Parts, UtcMs};
use idmint_core::{Count, Description, SegmentSnapshot, StartId, Step, Tag};
use idmint_store::{TagRecord, TagSpec};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::RouteTag;
use crate::error::ErrorBody;
use crate::formats::{FormatBody, IdsAs};
use crate::openapi::{
    DecimalId, FORBIDDEN, IdText, SNOWFLAKE_500, SNOWFLAKE_503, STORE_500, STORE_503, TAG_PARAM,
    TagName, UNAUTHORIZED,
};
use crate::{ApiError, AppState, REQUEST_BODY_BYTES_MAX, SharedState};

/// What one listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// The HTTP routes and the gRPC service on one port (the default).
    HttpAndGrpc,
    /// The HTTP routes only (gRPC has its own port, `--grpc-listen`).
    Http,
    /// The gRPC service only.
    Grpc,
}

/// The API as an axum router over `state`: the HTTP routes and the gRPC service.
pub fn router(state: AppState) -> Router {
    router_for(Arc::new(state), Serves::HttpAndGrpc)
}

/// The router of one listener: what it `serves`, over the shared state, behind the one
/// middleware every request passes.
pub fn router_for(state: SharedState, serves: Serves) -> Router {
    // The recorder first, so the library's first refill is already measured.
    crate::metrics::handle();
    // One reference count per request and extractor, not one per field: the state is
    // shared, and every field's count would bounce between cores on each request.
    let routes = match serves {
        Serves::HttpAndGrpc => http_routes().merge(crate::grpc::grpc_router(Arc::clone(&state))),
        Serves::Http => http_routes(),
        Serves::Grpc => crate::grpc::grpc_router(Arc::clone(&state)),
    };
    routes
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), around))
        .with_state(state)
}

/// Every HTTP route.
fn http_routes() -> Router<SharedState> {
    Router::new()
        .route("/api/segment/get/{tag}", get(leaf_segment))
        .route("/v1/segment/{tag}", get(segment_ids))
        .route("/v1/segment/{tag}/ranges", get(crate::leases::lease_ranges))
        .route("/v1/segment/{tag}/return", post(crate::leases::return_ranges))
        .route("/v1/decode", get(crate::formats::decode))
        .route("/v1/tags", get(list_tags).post(create_tag))
        .route("/v1/tags/{tag}", get(get_tag).patch(set_step).delete(delete_tag))
        .route("/api/snowflake/get/{key}", get(leaf_snowflake))
        .route("/decodeSnowflakeId", get(leaf_decode))
        .route("/v1/snowflake", get(snowflake_ids))
        .route("/v1/snowflake/{id}", get(snowflake_decode))
        .route("/v1/seq/{name}", get(crate::sequences::seq_ids))
        .route("/v1/seqs", get(crate::sequences::list_seqs).post(crate::sequences::create_seq))
        .route(
            "/v1/seqs/{name}",
            get(crate::sequences::get_seq).delete(crate::sequences::delete_seq),
        )
        .route("/v1/uuid", get(crate::uuids::uuid_ids))
        .route("/v1/ulid", get(crate::uuids::ulid_ids))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/openapi.json", get(openapi))
        .route("/metrics", get(crate::metrics::scrape))
        .route("/", get(crate::dashboard::page))
        .route("/v1/status", get(crate::dashboard::status))
}

/// What every request passes through, once (one middleware, so one boxed future and one
/// service clone per request): the per-client limit and the request timeout, the tokens,
/// the handler, errors made JSON, and last the metrics, which see every answer (401s, 429s
/// and timeouts included).
async fn around(
    State(app): State<SharedState>,
    route: Option<MatchedPath>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let route = route.as_ref().map(MatchedPath::as_str);
    // Authorisation follows the route the request resolved to, never a header the client
    // picks: the gRPC route's methods check their tokens from the metadata (grpc.rs), every
    // other route is checked here. The content type only shapes the errors answered where
    // no route matched (`no_route`).
    let grpc_route = route == Some(crate::grpc::GRPC_ROUTE);
    let grpc_shaped = grpc_route || (route.is_none() && crate::grpc::is_grpc(request.headers()));
    let response = match crate::limits::admit(&app, &request) {
        Err(refused) if grpc_shaped => crate::grpc::error_response(refused),
        Err(refused) => refused.into_response(),
        Ok(_pass) if grpc_route => {
            // gRPC answers statuses, never JSON; the timeout bounds the time to the first
            // message.
            crate::limits::bounded_or(
                &app.http_limits,
                next.run(request),
                crate::grpc::error_response,
            )
            .await
        }
        Ok(_pass) => {
            crate::limits::bounded(&app.http_limits, async {
                let checked = match route {
                    Some(route) => crate::grpc::refuse_on_http_route(request.headers())
                        .and_then(|()| crate::auth::check(&app, route, params, &mut request)),
                    None => Ok(()),
                };
                match checked {
                    Ok(()) => crate::error::json_errors(next.run(request).await).await,
                    Err(error) => error.into_response(),
                }
            })
            .await
        }
    };
    crate::metrics::record_http(route, &method, response.status().as_u16(), started);
    response
}

/// Next id of a tag (Meituan Leaf compatible)
///
/// Leaf's segment route, byte-compatible: `200 text/plain` with the decimal id. Errors are
/// non-200 with a JSON body, never `0` or a negative number.
#[utoipa::path(
    get,
    path = "/api/segment/get/{tag}",
    tag = "leaf",
    operation_id = "leafSegmentGet",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    responses(
        (status = 200, description = "The id in decimal; for a tag with a [format.TAG] section, \
            its public id as the template renders it (a permuted number with a key)",
            body = IdText, content_type = "text/plain"),
        (status = 400, description = "A bad tag (`bad_tag`)", body = ErrorBody),
        (status = 404, description = "The tag does not exist (`unknown_tag`)", body = ErrorBody),
        (status = 409, description = "The tag's ids are spent (`tag_exhausted`), or its public \
            ids (`public_ids_exhausted`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn leaf_segment(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
) -> Result<String, ApiError> {
    let id = app.segments.next_id(&tag).await?;
    crate::formats::public_text(&app, &tag, id)
}

/// The running snowflake generator, or a 503 saying why there is none.
pub(crate) fn snowflake(app: &AppState) -> Result<&Arc<Snowflake>, ApiError> {
    app.snowflake
        .as_ref()
        .map_err(|reason| ApiError::Snowflake(SnowflakeError::Config(reason.clone())))
}

/// `count` snowflake ids: from the ring of pre-made ids when the node runs one, else from
/// the generator.
pub(crate) async fn snowflake_next_ids(app: &AppState, count: u64) -> Result<Vec<u64>, ApiError> {
    let generator = snowflake(app)?;
    Ok(match &app.snowflake_cached {
        Some(cached) => cached.next_ids(count).await?,
        None => generator.next_ids(count).await?,
    })
}

/// Next snowflake id (Meituan Leaf compatible; the key does not change the id)
///
/// Leaf's snowflake route: `200 text/plain` with the decimal id. The key is Leaf's and, as in
/// Leaf, does not change the id. From the ring of pre-made ids when `snowflake.cached` is on.
#[utoipa::path(
    get,
    path = "/api/snowflake/get/{key}",
    tag = "leaf",
    operation_id = "leafSnowflakeGet",
    params(("key" = String, Path, description = "Leaf's key, accepted and ignored")),
    responses(
        (status = 200, description = "The id, in decimal", body = DecimalId,
            content_type = "text/plain"),
        (status = 500, description = SNOWFLAKE_500, body = ErrorBody),
        (status = 503, description = SNOWFLAKE_503, body = ErrorBody),
    )
)]
pub(crate) async fn leaf_snowflake(
    State(app): State<SharedState>,
    Path(_key): Path<String>,
) -> Result<String, ApiError> {
    let ids = snowflake_next_ids(&app, 1).await?;
    Ok(ids.first().map(u64::to_string).unwrap_or_default())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct LeafDecodeQuery {
    /// The snowflake id, in decimal.
    #[serde(rename = "snowflakeId")]
    #[param(required = true, value_type = String, pattern = "^[0-9]{1,19}$")]
    snowflake_id: Option<String>,
}

/// Leaf's decode body: every value a string, the time as `ms(yyyy-MM-dd HH:mm:ss.SSS)` (UTC).
#[derive(Serialize, ToSchema)]
#[schema(as = LeafDecoded)]
pub(crate) struct LeafDecodeBody {
    /// `ms(yyyy-MM-dd HH:mm:ss.SSS)`, UTC.
    #[schema(example = "1795333265390(2026-11-22 07:41:05.390)")]
    timestamp: String,
    #[serde(rename = "workerId")]
    worker_id: String,
    #[serde(rename = "sequenceId")]
    sequence_id: String,
}

/// The parts of a snowflake id (Meituan Leaf compatible: every value a string)
///
/// Leaf's decode route, under the node's layout.
#[utoipa::path(
    get,
    path = "/decodeSnowflakeId",
    tag = "leaf",
    operation_id = "leafSnowflakeDecode",
    params(LeafDecodeQuery),
    responses(
        (status = 200, description = "Leaf's decode body; the time in UTC", body = LeafDecodeBody),
        (status = 400, description = "Not a decimal id from 0 to 2^63-1, or not an id of the \
            node's layout (`bad_id`), or a malformed query (`bad_query`)", body = ErrorBody),
        (status = 503, description = "The node runs no snowflake generator \
            (`snowflake_not_running`)", body = ErrorBody),
    )
)]
pub(crate) async fn leaf_decode(
    State(app): State<SharedState>,
    query: Result<Query<LeafDecodeQuery>, QueryRejection>,
) -> Result<Json<LeafDecodeBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let text = query.snowflake_id.unwrap_or_default();
    let id = parse_id(&text)?;
    let parts = decode_with(snowflake(&app)?.layout(), id)?;
    let time = UtcMs(parts.timestamp_ms).to_string().replace('T', " ").replace('Z', "");
    Ok(Json(LeafDecodeBody {
        timestamp: format!("{}({time})", parts.timestamp_ms),
        worker_id: parts.worker.to_string(),
        sequence_id: parts.sequence.to_string(),
    }))
}

fn parse_id(text: &str) -> Result<u64, ApiError> {
    text.parse::<u64>().ok().filter(|id| *id <= i64::MAX as u64).ok_or_else(|| {
        ApiError::bad_request(
            "bad_id",
            format!("{text:?} is not an id; give a decimal number from 0 to {}", i64::MAX),
        )
    })
}

fn decode_with(layout: &Layout, id: u64) -> Result<Parts, ApiError> {
    layout.decode(id).ok_or_else(|| {
        ApiError::bad_request("bad_id", format!("{id} is not an id of layout {layout}"))
    })
}

/// Snowflake ids and the worker id that made them.
#[derive(Serialize, ToSchema)]
#[schema(as = SnowflakeIds)]
pub(crate) struct SnowflakeIdsBody {
    /// Increasing ids: numbers, or decimal strings with `ids_as=string`.
    #[schema(schema_with = crate::openapi::ids_schema)]
    ids: Vec<serde_json::Value>,
    /// The node's worker id.
    worker: u64,
}

/// `count` snowflake ids, increasing (from the ring of pre-made ids when `snowflake.cached` is on)
#[utoipa::path(
    get,
    path = "/v1/snowflake",
    tag = "snowflake",
    operation_id = "snowflakeIds",
    params(CountQuery),
    responses(
        (status = 200, description = "The ids and the node's worker id", body = SnowflakeIdsBody),
        (status = 400, description = "A bad `count` (`bad_count`), `ids_as` (`bad_ids_as`) or \
            query (`bad_query`)", body = ErrorBody),
        (status = 500, description = SNOWFLAKE_500, body = ErrorBody),
        (status = 503, description = SNOWFLAKE_503, body = ErrorBody),
    )
)]
pub(crate) async fn snowflake_ids(
    State(app): State<SharedState>,
    query: Result<Query<CountQuery>, QueryRejection>,
) -> Result<Json<SnowflakeIdsBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let count = parse_count(query.count.as_deref(), app.batch_count_max)?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let ids = ids_as.values(snowflake_next_ids(&app, count.get()).await?);
    Ok(Json(SnowflakeIdsBody { ids, worker: snowflake(&app)?.status().worker }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DecodeQuery {
    /// A layout preset (default: the node's layout).
    #[param(inline, value_type = Option<LayoutPreset>)]
    layout: Option<String>,
}

/// The layout presets `?layout=` names.
#[derive(ToSchema)]
#[schema(rename_all = "kebab-case")]
#[allow(dead_code, reason = "documents the accepted values; `Layout::preset` parses them")]
pub(crate) enum LayoutPreset {
    Snowflake,
    Sonyflake,
    Uid,
    JsSafe,
}

/// A snowflake-style id's parts.
#[derive(Serialize, ToSchema)]
#[schema(as = SnowflakeParts)]
pub(crate) struct DecodeBody {
    #[schema(schema_with = crate::openapi::any_id_schema)]
    id: u64,
    /// The layout's name: the node's, or the preset asked for.
    layout: String,
    /// Milliseconds since the Unix epoch.
    timestamp_ms: u64,
    /// The time, RFC 3339 in UTC.
    #[schema(format = DateTime)]
    time: String,
    worker: u64,
    sequence: u64,
}

/// The parts of an id under the node's layout, or a preset
#[utoipa::path(
    get,
    path = "/v1/snowflake/{id}",
    tag = "snowflake",
    operation_id = "snowflakeDecode",
    params(
        ("id" = String, Path, description = "A snowflake-style id, in decimal",
            pattern = "^[0-9]{1,19}$"),
        DecodeQuery,
    ),
    responses(
        (status = 200, description = "The id's parts", body = DecodeBody),
        (status = 400, description = "Not a decimal id from 0 to 2^63-1, or not an id of the \
            layout (`bad_id`); not a layout (`bad_layout`); a malformed query (`bad_query`)",
            body = ErrorBody),
        (status = 503, description = "No `layout` given and the node runs no snowflake \
            generator (`snowflake_not_running`)", body = ErrorBody),
    )
)]
pub(crate) async fn snowflake_decode(
    State(app): State<SharedState>,
    Path(id): Path<String>,
    query: Result<Query<DecodeQuery>, QueryRejection>,
) -> Result<Json<DecodeBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let id = parse_id(&id)?;
    let (name, parts) = decode_snowflake_id(&app, id, query.layout)?;
    Ok(Json(DecodeBody {
        id,
        layout: name,
        timestamp_ms: parts.timestamp_ms,
        time: UtcMs(parts.timestamp_ms).to_string(),
        worker: parts.worker,
        sequence: parts.sequence,
    }))
}

/// The parts of `id` under the preset `layout` names, or the node's layout: the layout's
/// name and the parts (`/v1/snowflake/{id}` and gRPC's `DecodeSnowflake`).
pub(crate) fn decode_snowflake_id(
    app: &AppState,
    id: u64,
    layout: Option<String>,
) -> Result<(String, Parts), ApiError> {
    if id > i64::MAX as u64 {
        return Err(ApiError::bad_request(
            "bad_id",
            format!("{id} is not an id; give a number from 0 to {}", i64::MAX),
        ));
    }
    let (name, layout) = match layout {
        Some(name) => {
            let layout = Layout::preset(&name).ok_or_else(|| {
                ApiError::bad_request(
                    "bad_layout",
                    format!("{name:?} is not a layout; use snowflake, sonyflake, uid or js-safe"),
                )
            })?;
            (name, layout)
        }
        None => {
            let generator = snowflake(app)?;
            (generator.status().space, *generator.layout())
        }
    };
    Ok((name, decode_with(&layout, id)?))
}

/// `count` and `ids_as`, the query of batch routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CountQuery {
    /// How many ids: 1 to `limits.batch_count_max` (at most 100000); default 1.
    #[param(schema_with = crate::openapi::count_schema)]
    count: Option<String>,
    /// How JSON carries numeric ids: `number` (default) or `string` (JavaScript numbers lose
    /// precision above 2^53). Ids of a tag with a text template are always strings.
    #[param(schema_with = crate::openapi::ids_as_schema)]
    ids_as: Option<String>,
}

/// A batch of a tag's ids.
#[derive(Serialize, ToSchema)]
#[schema(as = SegmentIds)]
pub(crate) struct IdsBody {
    tag: String,
    /// Numbers, or strings (a tag with a text template, or `ids_as=string`).
    #[schema(schema_with = crate::openapi::ids_schema)]
    ids: Vec<serde_json::Value>,
}

/// A batch of ids of a tag
///
/// `count` ids (default 1) of a tag, increasing, as JSON.
#[utoipa::path(
    get,
    path = "/v1/segment/{tag}",
    tag = "segment",
    operation_id = "segmentIds",
    params(("tag" = TagName, Path, description = TAG_PARAM), CountQuery),
    responses(
        (status = 200, description = "Ids increasing, or for a tag with a [format.TAG] section \
            its public ids: permuted numbers with a key, strings with a text template",
            body = IdsBody),
        (status = 400, description = "A bad tag (`bad_tag`), `count` (`bad_count`), `ids_as` \
            (`bad_ids_as`) or query (`bad_query`)", body = ErrorBody),
        (status = 404, description = "The tag does not exist (`unknown_tag`)", body = ErrorBody),
        (status = 409, description = "The tag's ids are spent (`tag_exhausted`), or its public \
            ids (`public_ids_exhausted`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn segment_ids(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
    query: Result<Query<CountQuery>, QueryRejection>,
) -> Result<Json<IdsBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let count = parse_count(query.count.as_deref(), app.batch_count_max)?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let ranges = app.segments.next_ids(&tag, count).await?;
    let ids = crate::formats::public_ids(&app, &tag, &ranges, ids_as)?;
    Ok(Json(IdsBody { tag: tag.to_string(), ids }))
}

pub(crate) fn parse_count(count: Option<&str>, max: u64) -> Result<Count, ApiError> {
    let Some(text) = count else { return Ok(Count::ONE) };
    let count: u64 = text.parse().map_err(|_| {
        ApiError::bad_request(
            "bad_count",
            format!("count {text:?} is not a whole number; ask for 1 to {max} ids per request"),
        )
    })?;
    Ok(Count::new_bounded(count, max)?)
}

/// A tag's store row, and on `GET /v1/tags/{tag}` the segments this node holds for it.
#[derive(Serialize, ToSchema)]
#[schema(as = Tag)]
pub(crate) struct TagBody {
    tag: String,
    /// First id not yet reserved by any node.
    max_id: u64,
    step: u64,
    description: String,
    /// Last change, seconds since the Unix epoch.
    update_time_s: u64,
    /// Only on `GET /v1/tags/{tag}`, when this node serves the tag: both segments, the
    /// adaptive step, the measured rate and runway, and the counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    segments: Option<SegmentsBody>,
    /// Only on `GET /v1/tags/{tag}`, when the tag has a `[format.TAG]` section: its template,
    /// and with a key the width and the key's fingerprint (never the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    format: Option<FormatBody>,
    /// Only on `POST /v1/tags` with `force`, when the tag was created below where a deleted
    /// tag of the same name stopped: what that risks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    warning: Option<String>,
}

/// How this node serves the tag: both segments, the pacing and the counters.
#[derive(Serialize, ToSchema)]
#[schema(as = TagSegments)]
pub(crate) struct SegmentsBody {
    /// The segment ids are taken from; `null` before the first refill.
    current: Option<SegmentBody>,
    /// The preloaded next segment; `null` until it is loaded.
    next: Option<SegmentBody>,
    /// Length of the last range the store gave: the adaptive step (at least the tag's step,
    /// at most 1000000).
    step: u64,
    /// Ids left in both segments.
    remaining: u64,
    /// Recent consumption, ids per second (10 s moving average).
    rate_per_s: f64,
    /// Seconds the remaining ids last at the recent rate; `null` while idle.
    runway_s: Option<f64>,
    /// Moving average of the store's allocation latency.
    refill_latency_ms: f64,
    /// Ranges installed by this node.
    refills: u64,
    /// Failed refill attempts.
    refill_failures: u64,
    /// Requests that found both segments spent and waited for the store.
    waits: u64,
    /// End of the highest range this node was given (or restored from its data directory);
    /// ranges below it are refused.
    high_water: u64,
    /// The rate over the last five minutes, ids per second, oldest first, one value per 5 s.
    rate_history_per_s: Vec<f64>,
}

/// One range of ids a node holds.
#[derive(Serialize, ToSchema)]
#[schema(as = Segment)]
pub(crate) struct SegmentBody {
    start: u64,
    /// Exclusive.
    end: u64,
    next_id: u64,
    remaining: u64,
}

impl TagBody {
    pub(crate) fn new(record: TagRecord, status: Option<TagStatus>) -> TagBody {
        let segment = |s: SegmentSnapshot| SegmentBody {
            start: s.range.start(),
            end: s.range.end(),
            next_id: s.next_id,
            remaining: s.range.end() - s.next_id,
        };
        TagBody {
            tag: record.tag.to_string(),
            max_id: record.max_id,
            step: record.step,
            description: record.description,
            update_time_s: record.update_time_s,
            format: None,
            warning: None,
            segments: status.map(|s| SegmentsBody {
                current: s.buffer.current.map(segment),
                next: s.buffer.next.map(segment),
                step: s.step,
                remaining: s.remaining,
                rate_per_s: s.rate_per_s,
                runway_s: s.runway_s,
                refill_latency_ms: s.refill_latency_ms,
                refills: s.refills,
                refill_failures: s.refill_failures,
                waits: s.waits,
                high_water: s.buffer.high_water,
                rate_history_per_s: s.rate_history_per_s,
            }),
        }
    }
}

/// Every tag in the store.
#[derive(Serialize, ToSchema)]
#[schema(as = Tags)]
pub(crate) struct TagsBody {
    tags: Vec<TagBody>,
}

/// List tags
#[utoipa::path(
    get,
    path = "/v1/tags",
    tag = "segment",
    operation_id = "listTags",
    responses(
        (status = 200, description = "Every tag in the store", body = TagsBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn list_tags(State(app): State<SharedState>) -> Result<Json<TagsBody>, ApiError> {
    let records = app.segments.list_tags().await?;
    Ok(Json(TagsBody { tags: records.into_iter().map(|r| TagBody::new(r, None)).collect() }))
}

/// A new tag.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTag {
    #[schema(value_type = TagName)]
    tag: String,
    #[schema(schema_with = crate::openapi::new_step_schema)]
    step: Option<u64>,
    #[schema(schema_with = crate::openapi::start_schema)]
    start: Option<u64>,
    #[schema(schema_with = crate::openapi::description_schema)]
    description: Option<String>,
    /// Accept a `start` below where a deleted tag of the same name stopped (its tombstone):
    /// the new tag may then hand out ids the old one did. Only when no id of the old tag
    /// survives anywhere. The answer's `warning` says what was forced.
    #[serde(default)]
    force: bool,
}

/// Create a tag
#[utoipa::path(
    post,
    path = "/v1/tags",
    tag = "segment",
    operation_id = "createTag",
    request_body = CreateTag,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = TagBody),
        (status = 400, description = "A bad body (`bad_body`), tag (`bad_tag`), step, start or \
            description (`bad_value`)", body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 403, description = FORBIDDEN, body = ErrorBody),
        (status = 409, description = "The tag exists (`tag_exists`), the store holds 10000 \
            tags (`too_many_tags`), or `start` is below where a deleted tag of this name stopped \
            and `force` is not set (`start_below_issued`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn create_tag(
    State(app): State<SharedState>,
    body: Result<Json<CreateTag>, JsonRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("bad_body", e.body_text()))?;
    let spec = TagSpec {
        tag: Tag::parse(&body.tag)?,
        step: body.step.map_or(Ok(Step::DEFAULT), Step::new)?,
        start: body.start.map(StartId::new).transpose()?,
        description: Description::new(body.description.as_deref().unwrap_or(""))?,
        force: body.force,
    };
    let created = app.segments.create_tag(&spec).await?;
    tracing::info!(tag = %spec.tag, step = spec.step.get(), max_id = created.record.max_id, "tag created");
    let mut body = TagBody::new(created.record, None);
    body.warning = created.forced;
    Ok((StatusCode::CREATED, Json(body)))
}

/// A tag's store row and the segments this node holds for it
#[utoipa::path(
    get,
    path = "/v1/tags/{tag}",
    tag = "segment",
    operation_id = "getTag",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    responses(
        (status = 200, description = "The tag", body = TagBody),
        (status = 400, description = "A bad tag (`bad_tag`)", body = ErrorBody),
        (status = 404, description = "The tag does not exist (`unknown_tag`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn get_tag(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
) -> Result<Json<TagBody>, ApiError> {
    let record = app.segments.get_tag(&tag).await?;
    let mut body = TagBody::new(record, app.segments.status(&tag));
    body.format = app.formats.get(&tag).map(crate::formats::FormatBody::new);
    Ok(Json(body))
}

/// A tag's new step.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetStep {
    #[schema(schema_with = crate::openapi::step_schema)]
    step: u64,
}

/// Change a tag's step
///
/// The new step takes effect at the tag's next refill.
#[utoipa::path(
    patch,
    path = "/v1/tags/{tag}",
    tag = "segment",
    operation_id = "setStep",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    request_body = SetStep,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The updated tag", body = TagBody),
        (status = 400, description = "A bad tag (`bad_tag`), body (`bad_body`) or step \
            (`bad_value`)", body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 403, description = FORBIDDEN, body = ErrorBody),
        (status = 404, description = "The tag does not exist (`unknown_tag`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn set_step(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
    body: Result<Json<SetStep>, JsonRejection>,
) -> Result<Json<TagBody>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("bad_body", e.body_text()))?;
    let record = app.segments.set_step(&tag, Step::new(body.step)?).await?;
    tracing::info!(%tag, step = body.step, "tag step changed");
    Ok(Json(TagBody::new(record, None)))
}

/// Delete a tag
#[utoipa::path(
    delete,
    path = "/v1/tags/{tag}",
    tag = "segment",
    operation_id = "deleteTag",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad tag (`bad_tag`)", body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 403, description = FORBIDDEN, body = ErrorBody),
        (status = 404, description = "The tag does not exist (`unknown_tag`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn delete_tag(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
) -> Result<StatusCode, ApiError> {
    app.segments.delete_tag(&tag).await?;
    tracing::info!(%tag, "tag deleted");
    Ok(StatusCode::NO_CONTENT)
}

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
    Json(StatusBody { status: "ok", store: app.segments.store_description() })
}

/// Readiness: the store answers, the node is not shutting down, and its snowflake generator
/// (when it runs one) can issue an id now
///
/// A generator whose lease is not proven, or whose clock is behind its last id or its
/// persisted time mark beyond the tolerance (a clock that jumped ahead and was corrected),
/// makes the node not ready: 503 `lease_not_proven` or `clock_behind`, the message naming the
/// cause and the fix. So does a worker id leased a moment ago, until the clock passes the floor
/// above any earlier holder's ids: 503 `lease_settling`.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "service",
    operation_id = "ready",
    responses(
        (status = 200, description = "Ready", body = StatusBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn ready(State(app): State<SharedState>) -> Result<Json<StatusBody>, ApiError> {
    app.segments.ready().await?;
    if let Ok(generator) = &app.snowflake {
        generator.readiness()?;
    }
    Ok(Json(StatusBody { status: "ready", store: app.segments.store_description() }))
}

/// This document
///
/// The OpenAPI 3.1 document of this API, generated from the handlers.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    operation_id = "openapi",
    responses((status = 200, description = "OpenAPI 3.1", content(("application/json"))))
)]
pub(crate) async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], crate::openapi::OPENAPI_JSON.as_str())
}

/// No route: 404, or for a gRPC call (a method this node lacks, or gRPC asked of a port
/// that serves HTTP only) the gRPC status `UNIMPLEMENTED`.
async fn no_route(uri: Uri, headers: axum::http::HeaderMap) -> Response {
    let error = ApiError::NoRoute(uri.path().to_string());
    if crate::grpc::is_grpc(&headers) {
        return crate::grpc::error_response(error);
    }
    error.into_response()
}
