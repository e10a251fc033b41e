//! Didi Tinyid's routes, answering as Tinyid's `IdContronller` does so Tinyid's clients work
//! unchanged: `/tinyid/id/nextId` and `nextSegmentId` (JSON `{"data","code","message"}`),
//! `nextIdSimple` (`1,2,3`) and `nextSegmentIdSimple` (`currentId,loadingId,maxId,delta,
//! remainder`), on every method Tinyid maps them to (its mappings name none), with `bizType`,
//! `batchSize` and `token` in the query string. HEAD consumes nothing.
//!
//! The token and the `biz_type` are checked by the middleware (`auth::check_tinyid`) before
//! a handler runs. Errors keep idmint's statuses (never a 200): the JSON routes answer them in
//! Tinyid's shape (`code` 5 `token is error`, or 6 with the reason), the simple routes in
//! idmint's JSON error body (Tinyid's own client reads no body of a non-200 answer).
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; they decide nothing.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use idmint::tinyid::TinyidSegment;
use idmint_core::Count;
use idmint_core::limits::BATCH_COUNT_MAX;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::TinyidBizType;
use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{StoreErrors, TinyidTextErrors};
use crate::state::SharedState;

/// HEAD: the headers of an answer, no id taken.
pub(crate) async fn head() -> impl IntoResponse {
    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")]
}

/// The answer to a request the middleware refused: Tinyid's JSON shape on Tinyid's JSON
/// routes, idmint's on every other route.
pub(crate) fn refusal(route: Option<&str>, error: ApiError) -> Response {
    match route {
        Some(route)
            if crate::routes::route(route).is_some_and(|r| r.tinyid)
                && !route.ends_with("Simple") =>
        {
            error.into_tinyid_response()
        }
        _ => error.into_response(),
    }
}

/// The query of the id routes (`bizType` and `token` are read by the middleware).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct TinyidQuery {
    /// The `biz_type` (a row of `tiny_id_info`).
    #[serde(rename = "bizType")]
    #[param(rename = "bizType", required = true)]
    #[allow(dead_code)]
    biz_type: Option<String>,
    /// A token of the `biz_type` in `tiny_id_token`.
    #[param(required = true)]
    #[allow(dead_code)]
    token: Option<String>,
    /// How many ids (1 when absent; more than `tinyid.batch_size_max` is cut to it, as
    /// Tinyid's `batch.size.max` does).
    #[serde(rename = "batchSize")]
    #[param(rename = "batchSize", minimum = 1)]
    batch_size: Option<String>,
}

/// Tinyid's answer: `{"data": …, "code": 200, "message": ""}`.
#[derive(Serialize, ToSchema)]
#[schema(as = TinyidIds)]
pub(crate) struct TinyidIds {
    /// The ids, increasing, each `id % delta == remainder`.
    data: Vec<u64>,
    /// 200.
    code: u16,
    /// Empty.
    message: String,
}

/// Tinyid's `SegmentId`: the client hands out the ids in `(currentId, maxId]` with
/// `id % delta == remainder` and loads its next segment past `loadingId`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SegmentBody {
    max_id: u64,
    loading_id: u64,
    current_id: u64,
    delta: u64,
    remainder: u64,
}

/// Tinyid's answer with a segment.
#[derive(Serialize, ToSchema)]
#[schema(as = TinyidSegment)]
pub(crate) struct TinyidSegmentAnswer {
    data: SegmentBody,
    /// 200.
    code: u16,
    /// Empty.
    message: String,
}

/// Tinyid's error answer (with idmint's non-200 status): `code` 5 for a missing or wrong
/// token (`token is error`), 6 for anything else, with the reason.
#[derive(Serialize, ToSchema)]
#[schema(as = TinyidError)]
pub(crate) struct TinyidError {
    /// Always null.
    #[schema(value_type = Option<String>)]
    data: Option<()>,
    /// 5: the token; 6: another error.
    code: u16,
    /// `token is error`, or what is wrong and how to fix it.
    message: String,
}

/// Ids of a Tinyid `biz_type` (Didi Tinyid compatible)
///
/// Tinyid's `nextId`: `{"data":[ids],"code":200,"message":""}`.
#[utoipa::path(
    get,
    path = "/tinyid/id/nextId",
    tag = "tinyid",
    operation_id = "tinyidNextId",
    params(TinyidQuery),
    security(("tinyid_token" = [])),
    responses(
        (status = 200, description = "The ids", body = TinyidIds),
        (status = 400, description = "bizType missing or not a name, batchSize not a whole \
            number of at least 1 (code 6)", body = TinyidError),
        (status = 401, description = "No token (code 5, `token is error`)", body = TinyidError),
        (status = 403, description = "The token is not one of the biz_type's in tiny_id_token \
            (code 5, `token is error`)", body = TinyidError),
        (status = 404, description = "No tiny_id_info row of the biz_type, or no [tinyid] \
            on this node (code 6)", body = TinyidError),
        (status = 409, description = "The biz_type's ids are spent (code 6)", body = TinyidError),
        (status = 500, description = "The row cannot be served, e.g. remainder >= delta \
            (code 6)", body = TinyidError),
        (status = 503, description = "The database did not answer in time (code 6)",
            body = TinyidError),
    )
)]
pub(crate) async fn next_id(
    State(app): State<SharedState>,
    TinyidBizType(biz_type): TinyidBizType,
    query: Result<Query<TinyidQuery>, QueryRejection>,
) -> Response {
    let answer = async {
        let batch = batch_size(query)?;
        Ok::<_, ApiError>(app.node.tinyid_ids(&biz_type, batch).await?)
    };
    match answer.await {
        Ok(data) => Json(TinyidIds { data, code: 200, message: String::new() }).into_response(),
        Err(error) => error.into_tinyid_response(),
    }
}

/// Ids of a Tinyid `biz_type` as text (Didi Tinyid compatible)
///
/// Tinyid's `nextIdSimple`: `200 text/plain`, the ids separated by commas.
#[utoipa::path(
    get,
    path = "/tinyid/id/nextIdSimple",
    tag = "tinyid",
    operation_id = "tinyidNextIdSimple",
    params(TinyidQuery),
    security(("tinyid_token" = [])),
    responses(
        (status = 200, description = "The ids, e.g. `3,5,7`", body = String,
            content_type = "text/plain"),
        (status = 400, description = "bizType missing or not a name (`bad_tag`, `bad_query`), \
            batchSize not a whole number of at least 1 (`bad_count`)", body = ErrorBody),
        TinyidTextErrors, StoreErrors,
    )
)]
pub(crate) async fn next_id_simple(
    State(app): State<SharedState>,
    TinyidBizType(biz_type): TinyidBizType,
    query: Result<Query<TinyidQuery>, QueryRejection>,
) -> Result<String, ApiError> {
    let ids = app.node.tinyid_ids(&biz_type, batch_size(query)?).await?;
    let texts: Vec<String> = ids.iter().map(u64::to_string).collect();
    Ok(texts.join(","))
}

/// A segment for a Tinyid client (Didi Tinyid compatible)
///
/// Tinyid's `nextSegmentId`: the ids in `(currentId, maxId]` with `id % delta == remainder`
/// are the client's, taken from this node's buffer (never handed out by anyone else).
#[utoipa::path(
    get,
    path = "/tinyid/id/nextSegmentId",
    tag = "tinyid",
    operation_id = "tinyidNextSegmentId",
    params(TinyidQuery),
    security(("tinyid_token" = [])),
    responses(
        (status = 200, description = "The segment", body = TinyidSegmentAnswer),
        (status = 400, description = "bizType missing or not a name (code 6)",
            body = TinyidError),
        (status = 401, description = "No token (code 5, `token is error`)", body = TinyidError),
        (status = 403, description = "The token is not one of the biz_type's (code 5)",
            body = TinyidError),
        (status = 404, description = "No row of the biz_type, or no [tinyid] on this node \
            (code 6)", body = TinyidError),
        (status = 409, description = "The biz_type's ids are spent (code 6)", body = TinyidError),
        (status = 500, description = "The row cannot be served (code 6)", body = TinyidError),
        (status = 503, description = "The database did not answer in time (code 6)",
            body = TinyidError),
    )
)]
pub(crate) async fn next_segment_id(
    State(app): State<SharedState>,
    TinyidBizType(biz_type): TinyidBizType,
) -> Response {
    match app.node.tinyid_segment(&biz_type).await {
        Ok(segment) => Json(TinyidSegmentAnswer {
            data: segment_body(segment),
            code: 200,
            message: String::new(),
        })
        .into_response(),
        Err(error) => ApiError::from(error).into_tinyid_response(),
    }
}

/// A segment for a Tinyid client, as text (Didi Tinyid compatible)
///
/// Tinyid's `nextSegmentIdSimple`, what Tinyid's Java client calls:
/// `currentId,loadingId,maxId,delta,remainder`.
#[utoipa::path(
    get,
    path = "/tinyid/id/nextSegmentIdSimple",
    tag = "tinyid",
    operation_id = "tinyidNextSegmentIdSimple",
    params(TinyidQuery),
    security(("tinyid_token" = [])),
    responses(
        (status = 200, description = "`currentId,loadingId,maxId,delta,remainder`",
            body = String, content_type = "text/plain"),
        (status = 400, description = "bizType missing or not a name (`bad_tag`, `bad_query`)",
            body = ErrorBody),
        TinyidTextErrors, StoreErrors,
    )
)]
pub(crate) async fn next_segment_id_simple(
    State(app): State<SharedState>,
    TinyidBizType(biz_type): TinyidBizType,
) -> Result<String, ApiError> {
    let s = app.node.tinyid_segment(&biz_type).await?;
    Ok(format!("{},{},{},{},{}", s.current_id, s.loading_id, s.max_id, s.delta, s.remainder))
}

/// `batchSize`: absent or empty is 1 (as Tinyid reads it); above `BATCH_COUNT_MAX` it is cut
/// there (the node cuts further to `tinyid.batch_size_max`); anything but a whole number of
/// at least 1 is refused, before an id is taken.
fn batch_size(query: Result<Query<TinyidQuery>, QueryRejection>) -> Result<Count, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let Some(text) = query.batch_size.filter(|t| !t.is_empty()) else { return Ok(Count::ONE) };
    let refused = || {
        ApiError::bad_request(
            "bad_count",
            format!(
                "batchSize {text:?} is not a whole number of at least 1; send e.g. batchSize=10"
            ),
        )
    };
    let n: u128 = text.parse().map_err(|_| refused())?;
    if n == 0 {
        return Err(refused());
    }
    // Cannot fail: 1..=BATCH_COUNT_MAX.
    Ok(Count::new(n.min(u128::from(BATCH_COUNT_MAX)) as u64).unwrap_or(Count::ONE))
}

fn segment_body(s: TinyidSegment) -> SegmentBody {
    SegmentBody {
        max_id: s.max_id,
        loading_id: s.loading_id,
        current_id: s.current_id,
        delta: s.delta,
        remainder: s.remainder,
    }
}
