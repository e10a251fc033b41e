//! The timestamp oracle: `GET /v1/tso?count=N` (a batch of timestamps, strictly increasing
//! across the cluster) and `GET /v1/tso/{timestamp}` (a timestamp's parts).
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; the oracle's rules are the
//! node's (`idmint::strict`) and the layout's (`idmint_core::tso`).

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};

use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{ApiQuery, CountQuery, IdsAs, parse_count};
use crate::state::SharedState;

/// A timestamp in JSON: a number, or a decimal string with `ids_as=string` (JavaScript
/// numbers lose precision above 2^53, and timestamps are above it).
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Stamp {
    Number(u64),
    Text(String),
}

impl Stamp {
    fn of(timestamp: u64, ids_as: IdsAs) -> Stamp {
        match ids_as {
            IdsAs::Number => Stamp::Number(timestamp),
            IdsAs::String => Stamp::Text(timestamp.to_string()),
        }
    }
}

/// A timestamp as a number: 0 to 2^64-1 (no `int64` format: past 2^63-1 is allowed).
fn timestamp_schema() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0))
}

/// A timestamp in an answer: a number, or its decimal digits.
fn stamp_schema() -> OneOfBuilder {
    let number = timestamp_schema();
    let text = ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[0-9]{1,20}$"));
    OneOfBuilder::new().item(number).item(text)
}

/// A batch of timestamps: `first` to `last`, consecutive, in one millisecond.
#[derive(Serialize, ToSchema)]
#[schema(as = Timestamps)]
pub(crate) struct TimestampsBody {
    /// The first timestamp, `physical_ms << 18 | logical`: a number, or a decimal string with
    /// `ids_as=string`.
    #[schema(schema_with = stamp_schema)]
    first: Stamp,
    /// The last timestamp (`first + count - 1`), as `first`.
    #[schema(schema_with = stamp_schema)]
    last: Stamp,
    /// How many timestamps.
    count: u64,
    /// The batch's milliseconds since the Unix epoch (`first >> 18`).
    physical_ms: u64,
    /// The first timestamp's logical part (`first & 0x3FFFF`).
    logical: u64,
}

/// `count` timestamps of the cluster's oracle
///
/// Timestamps `physical_ms << 18 | logical` (PD's layout), `first` to `last`, in one
/// millisecond; each greater than every timestamp any node answered before this request
/// arrived. One node at a time owns the oracle; another node forwards to it.
#[utoipa::path(
    get,
    path = "/v1/tso",
    tag = "tso",
    operation_id = "tso",
    params(CountQuery),
    responses(
        (status = 200, description = "The batch", body = TimestampsBody),
        (status = 400, description = "A bad `count` (`bad_count`: 1 to the batch limit), \
            `ids_as` (`bad_ids_as`) or query (`bad_query`)", body = ErrorBody),
        (status = 501, description = "The node serves no oracle (`tso_not_configured`): its \
            store holds no leases (Flicker, several databases) or it has no gRPC listener for \
            its peers; final until its configuration changes. gRPC: FAILED_PRECONDITION",
            body = ErrorBody),
        (status = 503, description = "The oracle did not answer in time (`tso_unavailable`): its \
            owner is not reachable, its lease is passing to another node (at most the lease's \
            TTL and margin), or the store does not answer; or the node is shutting down \
            (`shutting_down`). Passes by itself", body = ErrorBody),
    )
)]
pub(crate) async fn timestamps(
    State(app): State<SharedState>,
    ApiQuery(query): ApiQuery<CountQuery>,
) -> Result<Json<TimestampsBody>, ApiError> {
    let count = parse_count(query.count.as_deref(), app.node.tso_count_max())?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let range = app.node.timestamps(count).await?;
    let (physical_ms, logical) = idmint_core::tso::split(range.start());
    Ok(Json(TimestampsBody {
        first: Stamp::of(range.start(), ids_as),
        last: Stamp::of(range.end() - 1, ids_as),
        count: count.get(),
        physical_ms,
        logical,
    }))
}

/// An oracle timestamp's parts.
#[derive(Serialize, ToSchema)]
#[schema(as = TimestampParts)]
pub(crate) struct TimestampPartsBody {
    #[schema(schema_with = timestamp_schema)]
    timestamp: u64,
    /// Milliseconds since the Unix epoch.
    physical_ms: u64,
    /// The counter within the millisecond.
    logical: u64,
    /// The physical part, RFC 3339 in UTC.
    #[schema(format = DateTime)]
    time: String,
}

/// The parts of an oracle timestamp
#[utoipa::path(
    get,
    path = "/v1/tso/{timestamp}",
    tag = "tso",
    operation_id = "tsoDecode",
    params(("timestamp" = String, Path, description = "A timestamp, in decimal",
        pattern = "^[0-9]{1,20}$")),
    responses(
        (status = 200, description = "The parts", body = TimestampPartsBody),
        (status = 400, description = "Not a decimal number from 0 to 2^64-1 (`bad_id`)",
            body = ErrorBody),
    )
)]
pub(crate) async fn decode(
    State(app): State<SharedState>,
    Path(text): Path<String>,
) -> Result<Json<TimestampPartsBody>, ApiError> {
    let digits = !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit());
    let timestamp = text.parse::<u64>().ok().filter(|_| digits).ok_or_else(|| {
        ApiError::bad_request(
            "bad_id",
            format!("{text:?} is not a timestamp; give a decimal number from 0 to {}", u64::MAX),
        )
    })?;
    let parts = app.node.decode_timestamp(timestamp);
    Ok(Json(TimestampPartsBody {
        timestamp,
        physical_ms: parts.physical_ms,
        logical: parts.logical,
        time: parts.time.to_string(),
    }))
}
