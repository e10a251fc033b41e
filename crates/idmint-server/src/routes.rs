//! The routes: Meituan Leaf's (`/api/segment/get/{tag}`, byte-compatible) and the native JSON
//! API under `/v1`, plus `/health`, `/ready`, `/openapi.json`, `/metrics`, the dashboard at
//! `/` and its `/v1/status`.
//!
//! Handlers parse their input into idmint's newtypes, call the library, and shape JSON;
//! they hold no id logic and never choose a status code (that is `error.rs`'s job).

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router, middleware};
use std::sync::Arc;

use idmint::{Snowflake, SnowflakeError, TagStatus};
use idmint_core::snowflake::{Layout, Parts, UtcMs};
use idmint_core::{Count, Description, SegmentSnapshot, StartId, Step, Tag};
use idmint_store::{TagRecord, TagSpec};
use serde::{Deserialize, Serialize};

use crate::formats::IdsAs;
use crate::{ApiError, AppState, REQUEST_BODY_BYTES_MAX};

/// The OpenAPI 3.1 document describing every route, served at `/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// The API as an axum router over `state`.
pub fn router(state: AppState) -> Router {
    // The recorder first, so the library's first refill is already measured.
    crate::metrics::handle();
    Router::new()
        .route("/api/segment/get/{tag}", get(leaf_segment))
        .route("/v1/segment/{tag}", get(segment_ids))
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
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        // Outermost last: metrics see every answer (401s, 429s and timeouts included),
        // the limits bound everything behind them, the tokens are checked before handlers.
        .layer(middleware::from_fn_with_state(state.clone(), crate::auth::authorize))
        .layer(middleware::from_fn_with_state(state.clone(), crate::limits::limit))
        .layer(middleware::from_fn(crate::metrics::track))
        .with_state(state)
}

/// Leaf's segment route: `200 text/plain` with the decimal id.
async fn leaf_segment(
    State(app): State<AppState>,
    Path(tag): Path<String>,
) -> Result<String, ApiError> {
    let tag = Tag::parse(&tag)?;
    let id = app.segments.next_id(&tag).await?;
    crate::formats::public_text(&app, &tag, id)
}

/// The running snowflake generator, or a 503 saying why there is none.
fn snowflake(app: &AppState) -> Result<&Arc<Snowflake>, ApiError> {
    app.snowflake
        .as_ref()
        .map_err(|reason| ApiError::Snowflake(SnowflakeError::Config(reason.clone())))
}

/// `count` snowflake ids: from the ring of pre-made ids when the node runs one, else from
/// the generator.
async fn snowflake_next_ids(app: &AppState, count: u64) -> Result<Vec<u64>, ApiError> {
    let generator = snowflake(app)?;
    Ok(match &app.snowflake_cached {
        Some(cached) => cached.next_ids(count).await?,
        None => generator.next_ids(count).await?,
    })
}

/// Leaf's snowflake route: `200 text/plain` with the decimal id. The key is Leaf's and, as
/// in Leaf, does not change the id.
async fn leaf_snowflake(
    State(app): State<AppState>,
    Path(_key): Path<String>,
) -> Result<String, ApiError> {
    let ids = snowflake_next_ids(&app, 1).await?;
    Ok(ids.first().map(u64::to_string).unwrap_or_default())
}

#[derive(Deserialize)]
struct LeafDecodeQuery {
    #[serde(rename = "snowflakeId")]
    snowflake_id: Option<String>,
}

/// Leaf's decode body: every value a string, the time as `ms(yyyy-MM-dd HH:mm:ss.SSS)` (UTC).
#[derive(Serialize)]
struct LeafDecodeBody {
    timestamp: String,
    #[serde(rename = "workerId")]
    worker_id: String,
    #[serde(rename = "sequenceId")]
    sequence_id: String,
}

/// Leaf's decode route.
async fn leaf_decode(
    State(app): State<AppState>,
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

#[derive(Serialize)]
struct SnowflakeIdsBody {
    ids: Vec<serde_json::Value>,
    worker: u64,
}

/// `count` snowflake ids (default 1), increasing.
async fn snowflake_ids(
    State(app): State<AppState>,
    query: Result<Query<CountQuery>, QueryRejection>,
) -> Result<Json<SnowflakeIdsBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let count = parse_count(query.count.as_deref(), app.batch_count_max)?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let ids = ids_as.values(snowflake_next_ids(&app, count.get()).await?);
    Ok(Json(SnowflakeIdsBody { ids, worker: snowflake(&app)?.status().worker }))
}

#[derive(Deserialize)]
struct DecodeQuery {
    layout: Option<String>,
}

#[derive(Serialize)]
struct DecodeBody {
    id: u64,
    layout: String,
    timestamp_ms: u64,
    time: String,
    worker: u64,
    sequence: u64,
}

/// The parts of an id under the node's layout, or a preset named by `?layout=`.
async fn snowflake_decode(
    State(app): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<DecodeQuery>, QueryRejection>,
) -> Result<Json<DecodeBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let id = parse_id(&id)?;
    let (name, layout) = match query.layout {
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
            let generator = snowflake(&app)?;
            (generator.status().space, *generator.layout())
        }
    };
    let parts = decode_with(&layout, id)?;
    Ok(Json(DecodeBody {
        id,
        layout: name,
        timestamp_ms: parts.timestamp_ms,
        time: UtcMs(parts.timestamp_ms).to_string(),
        worker: parts.worker,
        sequence: parts.sequence,
    }))
}

#[derive(Deserialize)]
struct CountQuery {
    count: Option<String>,
    /// `number` (default) or `string`.
    ids_as: Option<String>,
}

#[derive(Serialize)]
struct IdsBody {
    tag: String,
    /// Numbers, or strings (a tag with a text template, or `ids_as=string`).
    ids: Vec<serde_json::Value>,
}

/// `count` ids (default 1) of a tag, as JSON.
async fn segment_ids(
    State(app): State<AppState>,
    Path(tag): Path<String>,
    query: Result<Query<CountQuery>, QueryRejection>,
) -> Result<Json<IdsBody>, ApiError> {
    let tag = Tag::parse(&tag)?;
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
#[derive(Serialize)]
pub(crate) struct TagBody {
    tag: String,
    max_id: u64,
    step: u64,
    description: String,
    update_time_s: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments: Option<SegmentsBody>,
    /// The tag's public id format, on `GET /v1/tags/{tag}` when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<crate::formats::FormatBody>,
}

/// How this node serves the tag: both segments, the pacing and the counters.
#[derive(Serialize)]
struct SegmentsBody {
    current: Option<SegmentBody>,
    next: Option<SegmentBody>,
    /// Length of the last range the store gave (the adaptive step).
    step: u64,
    remaining: u64,
    rate_per_s: f64,
    /// `null` while idle.
    runway_s: Option<f64>,
    refill_latency_ms: f64,
    refills: u64,
    refill_failures: u64,
    waits: u64,
    high_water: u64,
}

#[derive(Serialize)]
struct SegmentBody {
    start: u64,
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
            }),
        }
    }
}

#[derive(Serialize)]
struct TagsBody {
    tags: Vec<TagBody>,
}

async fn list_tags(State(app): State<AppState>) -> Result<Json<TagsBody>, ApiError> {
    let records = app.segments.list_tags().await?;
    Ok(Json(TagsBody { tags: records.into_iter().map(|r| TagBody::new(r, None)).collect() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTag {
    tag: String,
    step: Option<u64>,
    start: Option<u64>,
    description: Option<String>,
}

async fn create_tag(
    State(app): State<AppState>,
    body: Result<Json<CreateTag>, JsonRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("bad_body", e.body_text()))?;
    let spec = TagSpec {
        tag: Tag::parse(&body.tag)?,
        step: body.step.map_or(Ok(Step::DEFAULT), Step::new)?,
        start: body.start.map_or(Ok(StartId::DEFAULT), StartId::new)?,
        description: Description::new(body.description.as_deref().unwrap_or(""))?,
    };
    let record = app.segments.create_tag(&spec).await?;
    tracing::info!(tag = %spec.tag, step = spec.step.get(), start = spec.start.get(), "tag created");
    Ok((StatusCode::CREATED, Json(TagBody::new(record, None))))
}

async fn get_tag(
    State(app): State<AppState>,
    Path(tag): Path<String>,
) -> Result<Json<TagBody>, ApiError> {
    let tag = Tag::parse(&tag)?;
    let record = app.segments.get_tag(&tag).await?;
    let mut body = TagBody::new(record, app.segments.status(&tag));
    body.format = app.formats.get(&tag).map(crate::formats::FormatBody::new);
    Ok(Json(body))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetStep {
    step: u64,
}

async fn set_step(
    State(app): State<AppState>,
    Path(tag): Path<String>,
    body: Result<Json<SetStep>, JsonRejection>,
) -> Result<Json<TagBody>, ApiError> {
    let tag = Tag::parse(&tag)?;
    let Json(body) = body.map_err(|e| ApiError::bad_request("bad_body", e.body_text()))?;
    let record = app.segments.set_step(&tag, Step::new(body.step)?).await?;
    tracing::info!(%tag, step = body.step, "tag step changed");
    Ok(Json(TagBody::new(record, None)))
}

async fn delete_tag(
    State(app): State<AppState>,
    Path(tag): Path<String>,
) -> Result<StatusCode, ApiError> {
    let tag = Tag::parse(&tag)?;
    app.segments.delete_tag(&tag).await?;
    tracing::info!(%tag, "tag deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize)]
struct StatusBody {
    status: &'static str,
    store: String,
}

/// Liveness: the process answers.
async fn health(State(app): State<AppState>) -> Json<StatusBody> {
    Json(StatusBody { status: "ok", store: app.segments.store_description() })
}

/// Readiness: not shutting down and the store answers.
async fn ready(State(app): State<AppState>) -> Result<Json<StatusBody>, ApiError> {
    app.segments.ready().await?;
    Ok(Json(StatusBody { status: "ready", store: app.segments.store_description() }))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NoRoute(uri.path().to_string())
}
