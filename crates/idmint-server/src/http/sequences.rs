//! The sequence routes: `GET /v1/seq/{name}?count=N` (ids) and the definitions under
//! `/v1/seqs` (list, create, status, delete), over the node's sequences ([`idmint::Node`]).
//!
//! A formatted sequence answers its ids as JSON strings (`"20261122000001"`), a plain one as
//! numbers.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use idmint::sequence::SequenceStatus;
use idmint_core::Tag;
use idmint_store::{SequenceRecord, SequenceSpec};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::RouteTag;
use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{
    AdminErrors, ApiJson, ApiQuery, IdValues, IdsAs, SEQ_PARAM, SequenceErrors, TagName,
    UnknownSequence, parse_count,
};
use crate::state::SharedState;

/// The query of `GET /v1/seq/{name}`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeqQuery {
    /// 1 to `limits.batch_count_max` (default 1).
    #[param(schema_with = crate::http::shared::count_schema)]
    count: Option<String>,
    /// `number` (default) or `string`; formatted sequences are always strings.
    #[param(schema_with = crate::http::shared::ids_as_schema)]
    ids_as: Option<String>,
}

/// Numbers of a sequence.
#[derive(Serialize, ToSchema)]
#[schema(as = SequenceIds)]
pub(crate) struct SeqIdsBody {
    name: String,
    /// The day (YYYYMMDD) of a daily sequence.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[schema(required = false)]
    period: String,
    /// Increasing numbers, or strings (a formatted sequence, or `ids_as=string`).
    #[schema(schema_with = crate::http::shared::ids_schema)]
    ids: IdValues,
}

/// `count` numbers of a sequence, increasing (strings when it has a format)
#[utoipa::path(
    get,
    path = "/v1/seq/{name}",
    tag = "sequences",
    operation_id = "sequenceIds",
    params(("name" = TagName, Path, description = SEQ_PARAM), SeqQuery),
    responses(
        (status = 200, description = "The ids", body = SeqIdsBody),
        (status = 400, description = "A bad name (`bad_tag`), `count` (`bad_count`), `ids_as` \
            (`bad_ids_as`) or query (`bad_query`), or a count the sequence refuses \
            (`bad_sequence`)", body = ErrorBody),
        UnknownSequence,
        (status = 409, description = "The sequence reached its largest number, 2^53-1 \
            (`sequence_exhausted`): take ids from a new sequence name (a daily sequence starts \
            again at 1 the next day). gRPC: FAILED_PRECONDITION", body = ErrorBody),
        SequenceErrors,
    )
)]
pub(crate) async fn seq_ids(
    State(app): State<SharedState>,
    RouteTag(name): RouteTag,
    ApiQuery(query): ApiQuery<SeqQuery>,
) -> Result<Json<SeqIdsBody>, ApiError> {
    let count = parse_count(query.count.as_deref(), app.node.sequence_count_max())?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let ids = app.node.sequence_ids(&name, count).await?;
    let values = match ids.formatted {
        Some(formatted) => IdValues::Texts(formatted),
        None => ids_as.values(ids.numbers),
    };
    Ok(Json(SeqIdsBody { name: ids.name.to_string(), period: ids.period, ids: values }))
}

/// A sequence's definition, and on `GET /v1/seqs/{name}` its counter.
#[derive(Serialize, ToSchema)]
#[schema(as = Sequence)]
pub(crate) struct SeqBody {
    name: String,
    daily: bool,
    /// Output format, e.g. `{date:%Y%m%d}{seq:06}`; absent: plain numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    format: Option<String>,
    time_zone: String,
    /// When it was created, milliseconds since the Unix epoch.
    created_ms: u64,
    /// On `GET /v1/seqs/{name}`: the counter of the current period.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    counter: Option<CounterBody>,
}

/// The counter of a sequence's current period.
#[derive(Serialize, ToSchema)]
#[schema(as = SequenceCounter)]
pub(crate) struct CounterBody {
    /// `""`, or the day (YYYYMMDD) of a daily sequence.
    period: String,
    /// The last number taken (0: none this period).
    cur: u64,
    /// The ceiling Redis was told: no number passes it.
    max: u64,
    /// Numbers left below the ceiling.
    room: u64,
    /// Numbers taken in the last whole second.
    seqs_recently: u64,
    /// Numbers per second, averaged over the last five minutes.
    seqs_long_term: u64,
    /// Requests that waited for the ceiling to be raised.
    waits: u64,
    /// Times the counter was reseeded above the ceiling.
    reseeds: u64,
    /// Times the ceiling was raised.
    raises: u64,
}

impl SeqBody {
    fn new(record: SequenceRecord, status: Option<SequenceStatus>) -> SeqBody {
        SeqBody {
            name: record.name.to_string(),
            daily: record.daily,
            format: record.format,
            time_zone: record.time_zone,
            created_ms: record.created_ms,
            counter: status.map(|s| CounterBody {
                period: s.period,
                cur: s.cur,
                max: s.max,
                room: s.max.saturating_sub(s.cur),
                seqs_recently: s.recent_per_s,
                seqs_long_term: s.long_term_per_s,
                waits: s.waits,
                reseeds: s.reseeds,
                raises: s.raises,
            }),
        }
    }
}

/// Every sequence definition.
#[derive(Serialize, ToSchema)]
#[schema(as = Sequences)]
pub(crate) struct SeqsBody {
    sequences: Vec<SeqBody>,
}

/// Every sequence definition
#[utoipa::path(
    get,
    path = "/v1/seqs",
    tag = "sequences",
    operation_id = "listSequences",
    responses(
        (status = 200, description = "The definitions", body = SeqsBody),
        SequenceErrors,
    )
)]
pub(crate) async fn list_seqs(State(app): State<SharedState>) -> Result<Json<SeqsBody>, ApiError> {
    let records = app.node.list_sequences().await?;
    Ok(Json(SeqsBody { sequences: records.into_iter().map(|r| SeqBody::new(r, None)).collect() }))
}

/// A new sequence.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSeq {
    #[schema(value_type = TagName)]
    name: String,
    /// Restart at 1 each day in the time zone, the date in the ids (default false).
    #[schema(default = false, nullable = false)]
    daily: Option<bool>,
    /// Output format: literal text, `{date:STRFTIME}` parts and exactly one `{seq}` or
    /// `{seq:0N}`, last; default for a daily sequence: `{date:%Y%m%d}{seq:06}`.
    #[schema(nullable = false)]
    format: Option<String>,
    /// `UTC` (default), a fixed offset such as `+08:00`, or an IANA name.
    #[schema(default = "UTC", nullable = false)]
    time_zone: Option<String>,
}

/// Define a sequence
#[utoipa::path(
    post,
    path = "/v1/seqs",
    tag = "sequences",
    operation_id = "createSequence",
    request_body = CreateSeq,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = SeqBody),
        (status = 400, description = "A bad body (`bad_body`) or name (`bad_tag`); a bad \
            format or time zone, or the name exists (`bad_sequence`)", body = ErrorBody),
        AdminErrors, SequenceErrors,
    )
)]
pub(crate) async fn create_seq(
    State(app): State<SharedState>,
    ApiJson(body): ApiJson<CreateSeq>,
) -> Result<impl IntoResponse, ApiError> {
    let spec = SequenceSpec {
        name: Tag::parse(&body.name)?,
        daily: body.daily.unwrap_or(false),
        format: body.format,
        time_zone: body.time_zone.unwrap_or_else(|| "UTC".to_string()),
        // The node stamps the creation time with its clock.
        created_ms: 0,
    };
    let record = app.node.create_sequence(spec).await?;
    Ok((StatusCode::CREATED, Json(SeqBody::new(record, None))))
}

/// A sequence's definition and its current counter
#[utoipa::path(
    get,
    path = "/v1/seqs/{name}",
    tag = "sequences",
    operation_id = "getSequence",
    params(("name" = TagName, Path, description = SEQ_PARAM)),
    responses(
        (status = 200, description = "The sequence", body = SeqBody),
        (status = 400, description = "A bad name (`bad_tag`)", body = ErrorBody),
        UnknownSequence, SequenceErrors,
    )
)]
pub(crate) async fn get_seq(
    State(app): State<SharedState>,
    RouteTag(name): RouteTag,
) -> Result<Json<SeqBody>, ApiError> {
    let status = app.node.sequence_status(&name).await?;
    Ok(Json(SeqBody::new(status.spec.clone(), Some(status))))
}

/// Delete a sequence and its Redis counters
///
/// Its ceilings stay: a sequence created again under the name continues above the old
/// numbers.
#[utoipa::path(
    delete,
    path = "/v1/seqs/{name}",
    tag = "sequences",
    operation_id = "deleteSequence",
    params(("name" = TagName, Path, description = SEQ_PARAM)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad name (`bad_tag`)", body = ErrorBody),
        AdminErrors, UnknownSequence, SequenceErrors,
    )
)]
pub(crate) async fn delete_seq(
    State(app): State<SharedState>,
    RouteTag(name): RouteTag,
) -> Result<StatusCode, ApiError> {
    app.node.delete_sequence(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
