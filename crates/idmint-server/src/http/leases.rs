//! Ranges of a tag's ids leased to clients over HTTP: `GET /v1/segment/{tag}/ranges` and
//! `POST /v1/segment/{tag}/return`, the HTTP twins of gRPC's `NextRange` and `ReturnRange`
//! (what `idmint-client` falls back to where gRPC does not pass).
//!
//! Proofs travel as 16 lowercase hex digits: a JSON number would lose bits in JavaScript.
//! This file holds no id logic: leasing (and refusing a formatted tag) and taking back
//! (checking the leases) are [`idmint::Node`]'s.

use axum::Json;
use axum::extract::State;
use idmint::node::LeaseParts;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::RouteTag;
use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{
    ApiJson, ApiQuery, StoreErrors, TAG_PARAM, TagName, UnknownTag, parse_lease_count,
};
use crate::state::SharedState;

/// `count`, the query of the ranges route.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct RangesQuery {
    /// How many ids: 1 to 1000000 (a whole segment of the largest step, more than a batch:
    /// the answer holds ranges, not ids); default 1.
    #[param(schema_with = crate::http::shared::lease_count_schema)]
    count: Option<String>,
}

/// Ids `[start, end)` leased to the caller, with this node's proof.
#[derive(Serialize, Deserialize, ToSchema)]
#[schema(as = LeasedRange)]
#[serde(deny_unknown_fields)]
pub(crate) struct RangeBody {
    #[schema(minimum = 1, maximum = 9_223_372_036_854_775_807_i64)]
    start: u64,
    /// Exclusive.
    #[schema(minimum = 2, maximum = 9_223_372_036_854_775_807_i64)]
    end: u64,
    /// The node's proof that it leased exactly this range: send it back with the range to
    /// give unused ids back.
    #[schema(pattern = "^[0-9a-f]{16}$")]
    proof: String,
}

/// A tag's ids as leased ranges.
#[derive(Serialize, ToSchema)]
#[schema(as = LeasedRanges)]
pub(crate) struct RangesBody {
    tag: String,
    /// Increasing, non-adjacent ranges holding `count` ids in all.
    ranges: Vec<RangeBody>,
}

/// Ids given back.
#[derive(Deserialize, ToSchema)]
#[schema(as = ReturnedRange)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReturnBody {
    /// First id given back.
    start: u64,
    /// End of the ids given back (exclusive).
    end: u64,
    /// The leases that cover `[start, end)`, as the ranges route answered them, contiguous
    /// and increasing (at most 16).
    #[schema(max_items = 16)]
    leases: Vec<RangeBody>,
}

/// How many ids the node took back.
#[derive(Serialize, ToSchema)]
#[schema(as = Returned)]
pub(crate) struct ReturnedBody {
    /// All of `end - start`; or the top part of them, in the node's current segment, when
    /// they began in an earlier one; or 0 when the node could not prove it safe (the ids not
    /// taken back are wasted, never repeated).
    returned: u64,
}

/// Lease ranges of a tag's ids
///
/// `count` ids of a tag as ranges `[start, end)`, for a client that hands ids out in its own
/// process (`idmint-client`; gRPC's `NextRange`). Each range carries a proof with which the
/// client may give back what it did not use.
#[utoipa::path(
    get,
    path = "/v1/segment/{tag}/ranges",
    tag = "segment",
    operation_id = "leaseRanges",
    params(("tag" = TagName, Path, description = TAG_PARAM), RangesQuery),
    responses(
        (status = 200, description = "The ranges", body = RangesBody),
        (status = 400, description = "A bad tag (`bad_tag`), `count` (`bad_count`) or query \
            (`bad_query`)", body = ErrorBody),
        UnknownTag,
        (status = 409, description = "The tag's ids are spent (`tag_exhausted`), or it has a \
            public id format, whose internal ids are not leased (`formatted_tag`), or the \
            store's table cannot hold the tag (`tag_not_storable`)",
            body = ErrorBody),
        StoreErrors,
    )
)]
pub(crate) async fn lease_ranges(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
    ApiQuery(query): ApiQuery<RangesQuery>,
) -> Result<Json<RangesBody>, ApiError> {
    let count = parse_lease_count(query.count.as_deref())?;
    let leases = app.node.lease(&tag, count).await?;
    let ranges = leases
        .iter()
        .map(|lease| RangeBody {
            start: lease.range.start(),
            end: lease.range.end(),
            proof: format!("{:016x}", lease.proof),
        })
        .collect();
    Ok(Json(RangesBody { tag: tag.to_string(), ranges }))
}

/// Give back unused leased ids
///
/// Gives back `[start, end)`, unused ids of leased ranges, so the node hands them out again
/// (gRPC's `ReturnRange`). Taken back only when provably safe: they are the last ids the
/// node handed out of its current segment, none was given back before, and the proofs are
/// this node's; otherwise `returned` is 0 and nothing changes.
#[utoipa::path(
    post,
    path = "/v1/segment/{tag}/return",
    tag = "segment",
    operation_id = "returnRanges",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    request_body = ReturnBody,
    responses(
        (status = 200, description = "How many ids the node took back", body = ReturnedBody),
        (status = 400, description = "A bad tag (`bad_tag`) or body (`bad_body`); leases that \
            do not cover the ids, are not ranges, are more than 16, or are not this node's \
            (`bad_lease`)", body = ErrorBody),
    )
)]
pub(crate) async fn return_ranges(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
    ApiJson(body): ApiJson<ReturnBody>,
) -> Result<Json<ReturnedBody>, ApiError> {
    let ranges: Vec<LeaseParts> = body
        .leases
        .iter()
        .map(|lease| {
            let proof = u64::from_str_radix(&lease.proof, 16)
                .ok()
                .filter(|_| lease.proof.len() == 16)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "bad_lease",
                        "a lease's proof is 16 hex digits, as the ranges route answered it",
                    )
                })?;
            Ok(LeaseParts { start: lease.start, end: lease.end, proof })
        })
        .collect::<Result<_, ApiError>>()?;
    let returned = app.node.take_back(&tag, body.start, body.end, &ranges)?;
    Ok(Json(ReturnedBody { returned }))
}
