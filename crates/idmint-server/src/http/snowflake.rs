//! Snowflake ids: Leaf's `GET /api/snowflake/get/{key}` and `GET /decodeSnowflakeId`, and
//! `GET /v1/snowflake?count=N` and `GET /v1/snowflake/{id}` (an id's parts).
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; which ids (the ring's or
//! the generator's) and every decoding rule are the node's.

use axum::Json;
use axum::extract::{Path, State};
use idmint_core::Count;
use idmint_core::snowflake::UtcMs;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{
    ApiQuery, CountQuery, DecimalId, IdValues, IdsAs, SnowflakeErrors, parse_count,
};
use crate::state::SharedState;

/// Next snowflake id (Meituan Leaf compatible; the key does not change the id)
///
/// Leaf's snowflake route: `200 text/plain` with the decimal id. The key is Leaf's and, as in
/// Leaf, does not change the id. From the ring of pre-made ids when `snowflake.cached` is on.
/// Answered alike under GET, POST, PUT, PATCH and DELETE (Leaf maps it without a method);
/// HEAD answers `200` with no body and takes no id; OPTIONS answers `204` with `Allow`.
#[utoipa::path(
    get,
    path = "/api/snowflake/get/{key}",
    tag = "leaf",
    operation_id = "leafSnowflakeGet",
    params(("key" = String, Path, description = "Leaf's key, accepted and ignored")),
    responses(
        (status = 200, description = "The id, in decimal", body = DecimalId,
            content_type = "text/plain"),
        SnowflakeErrors,
    )
)]
pub(crate) async fn leaf_snowflake(
    State(app): State<SharedState>,
    Path(_key): Path<String>,
) -> Result<String, ApiError> {
    let ids = app.node.next_snowflake_ids(Count::ONE).await?;
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

/// Leaf's decode answer when `snowflakeId` is not a number: `200` with `errorMsg` alone, as
/// Leaf answers it (its controller catches the parse failure), so a script that reads
/// `errorMsg` from Leaf's answers reads it here.
#[derive(Serialize, ToSchema)]
#[schema(as = LeafDecodeError)]
pub(crate) struct LeafDecodeErrorBody {
    /// What is wrong and what to send.
    #[serde(rename = "errorMsg")]
    error_msg: String,
}

/// Leaf's decode answer: the parts, or `errorMsg`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[schema(as = LeafDecodeAnswer)]
pub(crate) enum LeafDecodeAnswer {
    /// The parts of the id.
    Parts(LeafDecodeBody),
    /// `snowflakeId` is not a decimal number from 0 to 2^63-1.
    NotANumber(LeafDecodeErrorBody),
}

/// The parts of a snowflake id (Meituan Leaf compatible: every value a string)
///
/// Leaf's decode route, under the node's layout. A `snowflakeId` that is not a decimal number
/// from 0 to 2^63-1 (empty included) answers as Leaf does: `200` with
/// `{"errorMsg": "…"}` alone. Answered alike under GET, POST, PUT, PATCH and DELETE (Leaf maps
/// it without a method).
#[utoipa::path(
    get,
    path = "/decodeSnowflakeId",
    tag = "leaf",
    operation_id = "leafSnowflakeDecode",
    params(LeafDecodeQuery),
    responses(
        (status = 200, description = "Leaf's decode body, the time in UTC; or, for a \
            `snowflakeId` that is not a number, Leaf's `{\"errorMsg\": …}`",
            body = LeafDecodeAnswer),
        (status = 400, description = "No `snowflakeId` (`bad_query`, as Leaf's framework \
            answers a missing parameter with 400), or a number that is not an id of the node's \
            layout (`bad_id`)", body = ErrorBody),
        (status = 501, description = "The node has no snowflake layout: it is not configured \
            to serve snowflake ids (`snowflake_not_configured`)", body = ErrorBody),
    )
)]
pub(crate) async fn leaf_decode(
    State(app): State<SharedState>,
    ApiQuery(query): ApiQuery<LeafDecodeQuery>,
) -> Result<Json<LeafDecodeAnswer>, ApiError> {
    let text = query.snowflake_id.ok_or_else(|| {
        ApiError::bad_request("bad_query", "give the id to decode: ?snowflakeId=N")
    })?;
    let Ok(id) = parse_id(&text) else {
        let error_msg = format!(
            "snowflakeId {text:?} is not a number; give a decimal id from 0 to {}",
            i64::MAX
        );
        return Ok(Json(LeafDecodeAnswer::NotANumber(LeafDecodeErrorBody { error_msg })));
    };
    let parts = app.node.decode_snowflake(id, None)?.parts;
    let time = UtcMs(parts.timestamp_ms).to_string().replace('T', " ").replace('Z', "");
    Ok(Json(LeafDecodeAnswer::Parts(LeafDecodeBody {
        timestamp: format!("{}({time})", parts.timestamp_ms),
        worker_id: parts.worker.to_string(),
        sequence_id: parts.sequence.to_string(),
    })))
}

fn parse_id(text: &str) -> Result<u64, ApiError> {
    text.parse::<u64>().ok().filter(|id| *id <= i64::MAX as u64).ok_or_else(|| {
        ApiError::bad_request(
            "bad_id",
            format!("{text:?} is not an id; give a decimal number from 0 to {}", i64::MAX),
        )
    })
}

/// Snowflake ids and the worker id that made them.
#[derive(Serialize, ToSchema)]
#[schema(as = SnowflakeIds)]
pub(crate) struct SnowflakeIdsBody {
    /// Increasing ids: numbers, or decimal strings with `ids_as=string`.
    #[schema(schema_with = crate::http::shared::ids_schema)]
    ids: IdValues,
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
        SnowflakeErrors,
    )
)]
pub(crate) async fn snowflake_ids(
    State(app): State<SharedState>,
    ApiQuery(query): ApiQuery<CountQuery>,
) -> Result<Json<SnowflakeIdsBody>, ApiError> {
    let count = parse_count(query.count.as_deref(), app.node.batch_count_max())?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let answer = app.node.snowflake_ids(count).await?;
    Ok(Json(SnowflakeIdsBody { ids: ids_as.values(answer.ids), worker: answer.worker }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DecodeQuery {
    /// A layout preset, or `custom` for the node's layout set bit by bit (default: the
    /// node's configured layout).
    #[param(inline, value_type = Option<LayoutPreset>)]
    layout: Option<String>,
}

/// The layouts `?layout=` names: the presets, and `custom`, the node's own layout when its
/// configuration sets the bits, unit or epoch apart from every preset.
#[derive(ToSchema)]
#[schema(rename_all = "kebab-case")]
#[allow(dead_code, reason = "documents the accepted values; `Node::decode_snowflake` parses them")]
pub(crate) enum LayoutPreset {
    Snowflake,
    Sonyflake,
    Uid,
    JsSafe,
    Custom,
}

/// A snowflake-style id's parts.
#[derive(Serialize, ToSchema)]
#[schema(as = SnowflakeParts)]
pub(crate) struct DecodeBody {
    #[schema(schema_with = crate::http::shared::any_id_schema)]
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
        (status = 501, description = "No `layout` given and the node has no snowflake layout: \
            it is not configured to serve snowflake ids (`snowflake_not_configured`)",
            body = ErrorBody),
    )
)]
pub(crate) async fn snowflake_decode(
    State(app): State<SharedState>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<DecodeQuery>,
) -> Result<Json<DecodeBody>, ApiError> {
    let id = parse_id(&id)?;
    let decoded = app.node.decode_snowflake(id, query.layout.as_deref())?;
    let parts = decoded.parts;
    Ok(Json(DecodeBody {
        id,
        layout: decoded.layout,
        timestamp_ms: parts.timestamp_ms,
        time: UtcMs(parts.timestamp_ms).to_string(),
        worker: parts.worker,
        sequence: parts.sequence,
    }))
}
