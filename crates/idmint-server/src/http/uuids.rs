//! The UUID and ULID routes: `GET /v1/uuid?count=N&version=4|7&format=standard|hex` and
//! `GET /v1/ulid?count=N`, both answering `{"ids": ["…", …]}` from the node's
//! [`idmint::Uuids`] (no store, no tag).
//!
//! `version` defaults to 4: "a UUID" means a random v4 to most users and libraries, and v7
//! (time-ordered, it reveals when it was made) is asked for by name. `format` defaults to
//! `standard` (`8-4-4-4-12`); `hex` is the 32 digits without dashes. v7 ids and ULIDs of
//! one answer increase, and increase across the answers of this node.
//!
//! Handlers parse and shape JSON only; a bad `count`, `version` or `format` is a 400 with a
//! message naming the accepted values.

use axum::Json;
use axum::extract::State;
use idmint_core::uuid::{UuidFormat, ulid_encode};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{ApiQuery, ClockOutOfRange, parse_count};
use crate::state::SharedState;

/// The query of `GET /v1/uuid`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct UuidQuery {
    /// 1 to `limits.batch_count_max` (default 1).
    #[param(schema_with = crate::http::shared::count_schema)]
    count: Option<String>,
    /// `4` (random, the default: what "a UUID" means to most clients) or `7` (48-bit Unix ms,
    /// then random bits; increasing within the node).
    #[param(inline, value_type = Option<UuidVersion>, default = json!("4"))]
    version: Option<String>,
    /// `standard` (8-4-4-4-12 lower-case hex, the default) or `hex` (32 lower-case hex digits,
    /// no dashes).
    #[param(inline, value_type = Option<UuidTextFormat>, default = json!("standard"))]
    format: Option<String>,
}

/// The UUID versions served.
#[derive(ToSchema)]
#[allow(dead_code, reason = "documents the accepted values; `uuid_ids` parses them")]
enum UuidVersion {
    #[schema(rename = "4")]
    V4,
    #[schema(rename = "7")]
    V7,
}

/// The UUID text formats served.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "documents the accepted values; `UuidFormat::parse` parses them")]
enum UuidTextFormat {
    Standard,
    Hex,
}

/// The query of `GET /v1/ulid`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct UlidQuery {
    /// 1 to `limits.batch_count_max` (default 1).
    #[param(schema_with = crate::http::shared::count_schema)]
    count: Option<String>,
}

/// UUIDs as text.
#[derive(Serialize, ToSchema)]
#[schema(as = Uuids)]
pub(crate) struct UuidsBody {
    /// RFC 9562 version and variant bits, lower-case hex.
    #[schema(schema_with = uuids_schema)]
    ids: Vec<String>,
}

/// ULIDs as text.
#[derive(Serialize, ToSchema)]
#[schema(as = Ulids)]
pub(crate) struct UlidsBody {
    /// 26 characters of Crockford base32.
    #[schema(schema_with = ulids_schema)]
    ids: Vec<String>,
}

/// `count` UUIDs made by this node, no store
///
/// Random v4 (the default) or time-ordered v7 (increasing within the node); RFC 9562 version
/// and variant bits. `count` UUIDs (default 1) of `version` in `format`.
#[utoipa::path(
    get,
    path = "/v1/uuid",
    tag = "uuid",
    operation_id = "uuidIds",
    params(UuidQuery),
    responses(
        (status = 200, description = "The UUIDs, as text", body = UuidsBody),
        (status = 400, description = "Bad `count` (`bad_count`), `version` (`bad_version`), \
            `format` (`bad_format`) or an unknown parameter (`bad_query`)", body = ErrorBody),
        ClockOutOfRange,
    )
)]
pub(crate) async fn uuid_ids(
    State(app): State<SharedState>,
    ApiQuery(query): ApiQuery<UuidQuery>,
) -> Result<Json<UuidsBody>, ApiError> {
    let count = parse_count(query.count.as_deref(), app.node.batch_count_max())?;
    let format = match query.format.as_deref() {
        None => UuidFormat::Standard,
        Some(name) => UuidFormat::parse(name)
            .map_err(|e| ApiError::bad_request("bad_format", e.to_string()))?,
    };
    let ids = match query.version.as_deref() {
        None | Some("4") => app.node.uuids().v4(count),
        Some("7") => app.node.uuids().v7(count)?,
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_version",
                format!(
                    "version {other:?} is not served; use 4 (random, the default) or 7 (time-ordered)"
                ),
            ));
        }
    };
    Ok(Json(UuidsBody { ids: ids.into_iter().map(|id| format.encode(id)).collect() }))
}

/// `count` ULIDs made by this node, no store
///
/// 48-bit Unix ms then 80 random bits, 26 characters of Crockford base32, increasing within
/// the node. `count` ULIDs (default 1).
#[utoipa::path(
    get,
    path = "/v1/ulid",
    tag = "uuid",
    operation_id = "ulidIds",
    params(UlidQuery),
    responses(
        (status = 200, description = "The ULIDs, as text", body = UlidsBody),
        (status = 400, description = "Bad `count` (`bad_count`) or an unknown parameter \
            (`bad_query`)", body = ErrorBody),
        ClockOutOfRange,
    )
)]
pub(crate) async fn ulid_ids(
    State(app): State<SharedState>,
    ApiQuery(query): ApiQuery<UlidQuery>,
) -> Result<Json<UlidsBody>, ApiError> {
    let count = parse_count(query.count.as_deref(), app.node.batch_count_max())?;
    let ids = app.node.uuids().ulid(count)?;
    Ok(Json(UlidsBody { ids: ids.into_iter().map(ulid_encode).collect() }))
}

/// An array of UUIDs in either text format.
fn uuids_schema() -> ArrayBuilder {
    let uuid = "^([0-9a-f]{8}-[0-9a-f]{4}-[47][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\
                |[0-9a-f]{12}[47][0-9a-f]{3}[89ab][0-9a-f]{15})$";
    ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String).pattern(Some(uuid)))
}

/// An array of ULIDs.
fn ulids_schema() -> ArrayBuilder {
    let ulid = "^[0-7][0-9A-HJKMNP-TV-Z]{25}$";
    ArrayBuilder::new().items(ObjectBuilder::new().schema_type(Type::String).pattern(Some(ulid)))
}
