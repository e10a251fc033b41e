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
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use idmint_core::uuid::{UuidFormat, ulid_encode};
use serde::{Deserialize, Serialize};

use crate::routes::parse_count;
use crate::{ApiError, AppState};

/// The query of `GET /v1/uuid`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UuidQuery {
    count: Option<String>,
    /// `4` (default) or `7`.
    version: Option<String>,
    /// `standard` (default) or `hex`.
    format: Option<String>,
}

/// The query of `GET /v1/ulid`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UlidQuery {
    count: Option<String>,
}

/// `{"ids": [...]}`, ids as strings.
#[derive(Serialize)]
pub(crate) struct TextIdsBody {
    ids: Vec<String>,
}

/// `count` UUIDs (default 1) of `version` in `format`.
pub(crate) async fn uuid_ids(
    State(app): State<AppState>,
    query: Result<Query<UuidQuery>, QueryRejection>,
) -> Result<Json<TextIdsBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let count = parse_count(query.count.as_deref(), app.batch_count_max)?;
    let format = match query.format.as_deref() {
        None => UuidFormat::Standard,
        Some(name) => UuidFormat::parse(name)
            .map_err(|e| ApiError::bad_request("bad_format", e.to_string()))?,
    };
    let ids = match query.version.as_deref() {
        None | Some("4") => app.uuids.v4(count),
        Some("7") => app.uuids.v7(count)?,
        Some(other) => {
            return Err(ApiError::bad_request(
                "bad_version",
                format!(
                    "version {other:?} is not served; use 4 (random, the default) or 7 (time-ordered)"
                ),
            ));
        }
    };
    Ok(Json(TextIdsBody { ids: ids.into_iter().map(|id| format.encode(id)).collect() }))
}

/// `count` ULIDs (default 1).
pub(crate) async fn ulid_ids(
    State(app): State<AppState>,
    query: Result<Query<UlidQuery>, QueryRejection>,
) -> Result<Json<TextIdsBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let count = parse_count(query.count.as_deref(), app.batch_count_max)?;
    let ids = app.uuids.ulid(count)?;
    Ok(Json(TextIdsBody { ids: ids.into_iter().map(ulid_encode).collect() }))
}
