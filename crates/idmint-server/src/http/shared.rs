//! What the HTTP route modules share, and nothing else: the descriptions and schema
//! snippets of their parameters and answers in the OpenAPI document, the error answers of
//! each route family as one set (`StoreErrors`, `SnowflakeErrors`, ...) that a route names in
//! its `responses(...)` beside its own rows, the query parts every batch route takes
//! (`count`, `ids_as`), the extractors of a query and a JSON body ([`ApiQuery`],
//! [`ApiJson`]), and the bodies more than one route answers (a tag, its format). A leaf: it
//! imports no other module of this crate but `error.rs`.

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use idmint::IdFormat;
use idmint::node::PublicIds;
use idmint::segment::TagStatus;
use idmint::tinyid::BizTypeView;
use idmint_core::limits::{
    BATCH_COUNT_MAX, DESCRIPTION_LEN_MAX, ID_MAX, ID_MIN, LEASE_COUNT_MAX, STEP_DEFAULT, STEP_MAX,
    STEP_MIN, TAG_LEN_MAX,
};
use idmint_core::{Count, SegmentSnapshot, StartId, ValueError};
use idmint_store::TagRecord;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Type};
use utoipa::openapi::{RefOr, Schema, SchemaFormat};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

use crate::error::{ApiError, ErrorBody};

/// Description of the `tag` path parameter.
pub(crate) const TAG_PARAM: &str = "The tag, percent-encoded (`/` as `%2F`): 1-128 bytes of \
    UTF-8, no control or bidi-override character, no leading or trailing whitespace, not \
    starting with `idmint.key.`";

/// Description of the `name` path parameter of sequences.
pub(crate) const SEQ_PARAM: &str = "Sequence name, percent-encoded: 1-128 bytes of UTF-8, no \
    control or bidi-override character, no leading or trailing whitespace";

/// The 500 answer of routes that reach the segment store.
pub(crate) const STORE_500: &str = "The tag's store row holds impossible values \
    (`store_row_invalid`), the node's data directory failed (`local_state`), or another failure \
    (`internal`)";

/// A route's query, parsed: a malformed one, or one with an unknown parameter where the
/// query refuses them, is `400 bad_query` with the parser's reason.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiQuery<T>, ApiError> {
        match Query::from_request_parts(parts, state).await {
            Ok(Query(query)) => Ok(ApiQuery(query)),
            Err(e) => Err(ApiError::bad_request("bad_query", e.body_text())),
        }
    }
}

/// A route's JSON body, parsed: one that is missing, malformed, too large, not sent as
/// `application/json` or has unknown fields is `400 bad_body` with the parser's reason.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<ApiJson<T>, ApiError> {
        match Json::from_request(request, state).await {
            Ok(Json(body)) => Ok(ApiJson(body)),
            Err(e) => Err(ApiError::bad_request("bad_body", e.body_text())),
        }
    }
}

/// Declares each set as an enum whose `IntoResponses` derive gives one answer per variant:
/// the status, the description and [`ErrorBody`]. The enums are types only utoipa reads.
macro_rules! error_sets {
    ($($(#[$doc:meta])+ $set:ident { $($status:tt $answer:ident: $text:tt,)+ })+) => {$(
        $(#[$doc])+
        #[derive(IntoResponses)]
        #[allow(dead_code, reason = "a set of answers for the OpenAPI document, never built")]
        pub(crate) enum $set {
            $(#[response(status = $status, description = $text)] $answer(ErrorBody),)+
        }
    )+};
}

// The error answers of each route family, one set per family: a route names in its
// `responses(...)` the sets it can answer, beside its own rows (its 200, its 400 naming its
// own codes).
error_sets! {
    /// The 500 and 503 of routes that reach the segment store.
    StoreErrors {
        500 Internal: STORE_500,
        503 Unavailable: "The store did not answer in time, both segments are spent and the refill \
            failed (`unavailable`), or the node is shutting down (`shutting_down`)",
    }
    /// The 501 of routes that reach the segment store: final until an operator acts.
    StoreNotSetUp {
        501 Missing: "The store's database account lacks a privilege this call needs \
            (`store_privilege_missing`: the message names the privilege and the table; `idmint \
            schema print` prints the GRANT statements), or a table it needs does not exist and the \
            node creates none (`store_table_missing`, `create_tables=false`); or, taking a tag's \
            ids, the tag's policy recorded in the store is one this node cannot honour \
            (`tag_policy_not_served`: a public id format this node's configuration lacks). gRPC: \
            FAILED_PRECONDITION",
    }
    /// The 404 of routes that take a tag's ids or decode with its format.
    UnknownTag {
        404 Unknown: "The tag does not exist (`unknown_tag`)",
    }
    /// The 404 of admin routes that change a tag.
    UnknownTagToChange {
        404 Unknown: "The tag does not exist (`unknown_tag`; the message says so when the name is \
            a Tinyid `biz_type`, whose row is changed with Tinyid's SQL)",
    }
    /// The 409 of routes that hand out a tag's ids one by one (not leased ranges).
    TagIdsSpent {
        409 Spent: "The tag's ids are spent (`tag_exhausted`), or its public ids \
            (`public_ids_exhausted`), or the store's table cannot hold the tag \
            (`tag_not_storable`)",
    }
    /// The 409 of a tag the store's table cannot hold (a tag route that names one tag).
    NotStorable {
        409 NotStorable: "The store's table cannot hold the tag (`tag_not_storable`, e.g. an emoji \
            in Leaf's `utf8` table; the message gives the `ALTER TABLE`)",
    }
    /// The 401 and 403 of admin routes.
    AdminErrors {
        401 Unauthorized: "No bearer token, or no `Authorization: Bearer TOKEN` header \
            (`unauthorized`; only when the node has an admin token: a node without one serves \
            admin routes to loopback clients only)",
        403 Forbidden: "The bearer token is not the admin token (a client token included) \
            (`forbidden`)",
    }
    /// The 409, 500, 501 and 503 of routes that take snowflake ids: the 409 and 501 are final
    /// (not worth retrying on this node), the 503 passes by itself.
    SnowflakeErrors {
        409 LayoutExhausted: "The layout's time field ran out (`layout_exhausted`): the node needs \
            a layout with more time bits or a later epoch; the message says how. gRPC: \
            FAILED_PRECONDITION",
        500 Internal: "The node's time mark could not be written (`local_state`), or another \
            failure (`internal`)",
        501 NotConfigured: "The node is not configured to serve snowflake ids \
            (`snowflake_not_configured`: disabled, a store that cannot hold worker leases, such as \
            Flicker or several databases, or a configuration the generator cannot run); no worker \
            id was free when it started (`worker_ids_exhausted`); or its clock is off the store's \
            by more than `snowflake.lease_margin_ms` (`clock_skew`); or the store's account lacks \
            a privilege on the worker tables, or they are missing with `create_tables=false` \
            (`store_privilege_missing`, `store_table_missing`). The message says what to do. gRPC: \
            FAILED_PRECONDITION",
        503 Unavailable: "The clock is behind beyond tolerance (`clock_behind`), the worker lease \
            is not proven (`worker_lease_not_proven`) or was just taken and waits out any earlier \
            holder's ids (`lease_settling`, with `Retry-After`), the generator has not started yet \
            and its start is retried in the background (`snowflake_not_running`, with the last \
            failure; also while the clock reads before the layout's epoch), it or its store did \
            not answer in time (`snowflake_unavailable`), or the node is shutting down \
            (`shutting_down`)",
    }
    /// The 500, 501 and 503 of sequence routes: the 501 is final, not worth retrying on this node.
    SequenceErrors {
        500 Internal: "An unexpected store failure (`internal`)",
        501 NotConfigured: "The node is not configured to serve sequences \
            (`sequences_not_configured`: no Redis, a bad Redis URL, or no single SQL store for the \
            ceilings), or the Redis of the counters cannot be trusted with them \
            (`sequence_store_unsupported`: it refuses `INFO` to idmint's user, or is a proxy), or \
            the store's account lacks a privilege on the sequence tables, or they are missing with \
            `create_tables=false` (`store_privilege_missing`, `store_table_missing`); the message \
            says how to fix it. gRPC: FAILED_PRECONDITION",
        503 Unavailable: "No room below the ceiling within 1 s, Redis or the store unavailable \
            (`sequence_unavailable`), or Redis not reachable yet (`sequences_not_running`)",
    }
    /// The 404 of routes that name one sequence.
    UnknownSequence {
        404 Unknown: "The sequence does not exist (`unknown_sequence`)",
    }
    /// The 503 of UUID v7 and ULID.
    ClockOutOfRange {
        503 OutOfRange: "The clock reads past the 48-bit millisecond field of UUID v7 and ULID \
            (`clock_out_of_range`)",
    }
    /// The 401, 403, 404 and 409 of Tinyid's text routes, in idmint's error body.
    TinyidTextErrors {
        401 Unauthorized: "No token (`unauthorized`)",
        403 Forbidden: "The token is not one of the biz_type's (`forbidden`)",
        404 UnknownBizType: "No row of the biz_type (`unknown_tag`), or no [tinyid] on this node \
            (`tinyid_not_served`)",
        409 Exhausted: "The biz_type's ids are spent (`tag_exhausted`)",
    }
}

/// The characters [`idmint_core::Tag::parse`] accepts and the edges it refuses, as an
/// ECMA-262 pattern (the reserved prefix and the byte length are said in the description).
const TAG_PATTERN: &str = "^[^\\s\\u0000-\\u001F\\u007F-\\u009F\\u200E\\u200F\\u061C\\u202A-\\u202E\\u2066-\\u2069](?:[^\\u0000-\\u001F\\u007F-\\u009F\\u200E\\u200F\\u061C\\u202A-\\u202E\\u2066-\\u2069]*[^\\s\\u0000-\\u001F\\u007F-\\u009F\\u200E\\u200F\\u061C\\u202A-\\u202E\\u2066-\\u2069])?$";

/// A tag or sequence name as [`idmint_core::Tag::parse`] accepts it.
pub(crate) struct TagName;

impl PartialSchema for TagName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            // Characters, as JSON Schema counts them: 128 bytes are at most 128 characters;
            // the byte bound is checked by the server.
            .max_length(Some(TAG_LEN_MAX))
            .pattern(Some(TAG_PATTERN))
            .description(Some(
                "1 to 128 bytes of UTF-8: no control or bidirectional-override character, \
                 no leading or trailing whitespace, not starting with `idmint.key.` (any \
                 ASCII case; idmint's internal rows). In a path, percent-encode it \
                 (`order%40v2`, `%E8%AE%A2%E5%8D%95`, `/` as `%2F`).",
            ))
            .into()
    }
}

impl ToSchema for TagName {}

/// Leaf's text answer of a segment id: the decimal id, or a tag's public id.
pub(crate) struct IdText;

impl PartialSchema for IdText {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).into()
    }
}

impl ToSchema for IdText {}

/// Leaf's text answer of a snowflake id: a positive decimal number below 2^63.
pub(crate) struct DecimalId;

impl PartialSchema for DecimalId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[1-9][0-9]{0,18}$")).into()
    }
}

impl ToSchema for DecimalId {}

/// `count` of a lease of ranges: 1 to [`LEASE_COUNT_MAX`], default 1.
pub(crate) fn lease_count_schema() -> ObjectBuilder {
    count_schema().maximum(Some(LEASE_COUNT_MAX))
}

/// `count` of a batch: 1 to the node's batch limit (`limits.batch_count_max`).
pub(crate) fn count_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(1))
        .maximum(Some(BATCH_COUNT_MAX))
        .default(Some(1.into()))
}

/// `ids_as`: how JSON carries numeric ids.
pub(crate) fn ids_as_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["number", "string"]))
        .default(Some("number".into()))
}

/// An array of ids: positive 64-bit numbers, or strings (`ids_as=string`, or a public id
/// template that renders text).
pub(crate) fn ids_schema() -> ArrayBuilder {
    let number = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(1))
        .maximum(Some(ID_MAX));
    let text = ObjectBuilder::new().schema_type(Type::String).min_length(Some(1));
    ArrayBuilder::new().items(OneOfBuilder::new().item(number).item(text))
}

/// Any 64-bit id a route decodes: 0 to 2^63-1.
pub(crate) fn any_id_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(0))
        .maximum(Some(ID_MAX))
}

/// A step: [`idmint_core::Step`]'s range.
pub(crate) fn step_schema() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(STEP_MIN)).maximum(Some(STEP_MAX))
}

/// The step of a new tag: [`step_schema`], 1000 when absent.
pub(crate) fn new_step_schema() -> ObjectBuilder {
    step_schema().default(Some(STEP_DEFAULT.into()))
}

/// A tag's first id: [`idmint_core::StartId`]'s range.
pub(crate) fn start_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(ID_MIN))
        .maximum(Some(StartId::MAX))
        .description(Some(
            "First id; at most 2^63-1 - 1000000 (one full step below the largest id). Without \
             it: 1, or, for a name deleted before, where the deleted tag stopped (its \
             tombstone). Below that tombstone it is refused (409 `start_below_issued`) unless \
             `force` is set",
        ))
}

/// A tag's description: [`idmint_core::Description`]'s rules.
pub(crate) fn description_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(DESCRIPTION_LEN_MAX))
        .pattern(Some("^[^\\u0000-\\u001f\\u007f-\\u009f]*$"))
        .description(Some("Free text: at most 256 characters, no control characters"))
}

/// `count` and `ids_as`, the query of batch routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct CountQuery {
    /// How many ids: 1 to `limits.batch_count_max` (at most 100000); default 1.
    #[param(schema_with = crate::http::shared::count_schema)]
    pub(crate) count: Option<String>,
    /// How JSON carries numeric ids: `number` (default) or `string` (JavaScript numbers lose
    /// precision above 2^53). Ids of a tag with a text template are always strings.
    #[param(schema_with = crate::http::shared::ids_as_schema)]
    pub(crate) ids_as: Option<String>,
}

pub(crate) fn parse_count(count: Option<&str>, max: u64) -> Result<Count, ApiError> {
    parse_count_as(count, max, |count| Count::new_bounded(count, max))
}

/// The `count` of a lease of ranges: 1 (absent) to [`LEASE_COUNT_MAX`].
pub(crate) fn parse_lease_count(count: Option<&str>) -> Result<Count, ApiError> {
    parse_count_as(count, LEASE_COUNT_MAX, Count::new_lease)
}

/// `count` (1 when absent) as a whole number, bounded by `make`; `max` is the bound a
/// refusal names.
fn parse_count_as(
    count: Option<&str>,
    max: u64,
    make: impl FnOnce(u64) -> Result<Count, ValueError>,
) -> Result<Count, ApiError> {
    let Some(text) = count else { return Ok(Count::ONE) };
    let count: u64 = text.parse().map_err(|_| {
        ApiError::bad_request(
            "bad_count",
            format!("count {text:?} is not a whole number; ask for 1 to {max} ids per request"),
        )
    })?;
    Ok(make(count)?)
}

/// A tag's store row, and on `GET /v1/tags/{tag}` the segments this node holds for it.
#[derive(Serialize, ToSchema)]
#[schema(as = Tag)]
pub(crate) struct TagBody {
    /// The tag, or the Tinyid `biz_type`.
    tag: String,
    /// `segment`: a tag of the segment store (Leaf's `leaf_alloc`, or idmint's table);
    /// `strict`: a strict tag (its ids increase in real time across the cluster; `step` 0,
    /// its owner reserves windows, and `max_id` is the first id no owner reserved);
    /// `tinyid`: a `biz_type` of Tinyid's `tiny_id_info` (with `[tinyid]` enabled), served on
    /// `/tinyid/id/*` and administered with Tinyid's SQL, not `/v1/tags`.
    #[schema(value_type = TagKind)]
    kind: &'static str,
    /// First id not yet reserved by any node; of a Tinyid `biz_type`, its row's `max_id` as
    /// Tinyid keeps it: the last id reserved.
    max_id: u64,
    /// Ids reserved per allocation (of a Tinyid `biz_type`, its row's `step`, in ids).
    step: u64,
    /// A Tinyid `biz_type`'s `delta`: it hands out the ids `id % delta == remainder`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1)]
    delta: Option<u64>,
    /// A Tinyid `biz_type`'s `remainder`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 0)]
    remainder: Option<u64>,
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
    pub(crate) format: Option<FormatBody>,
    /// Only on `POST /v1/tags` with `force`, when the tag was created below where a deleted
    /// tag of the same name stopped: what that risks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) warning: Option<String>,
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
    /// Whether the tag is idle: no id handed out here for 60 s (or none yet). Its runway is
    /// then infinite: `runway_s` is `null`, `idmint_segment_runway_seconds` is `+Inf`.
    idle: bool,
    /// Moving average of the store's allocation latency.
    refill_latency_ms: f64,
    /// Ids this node handed out of the tag since it started.
    ids_issued: u64,
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
    /// Exclusive. A Tinyid `biz_type`'s ids step by its `delta` from `start`.
    end: u64,
    next_id: u64,
    /// Ids left in the segment.
    remaining: u64,
}

/// What kind of name a [`TagBody`] is.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "documents the values of `kind`")]
pub(crate) enum TagKind {
    Segment,
    Tinyid,
    Strict,
}

impl TagBody {
    pub(crate) fn new(record: TagRecord, status: Option<TagStatus>) -> TagBody {
        TagBody {
            tag: record.tag.to_string(),
            kind: "segment",
            max_id: record.max_id,
            step: record.step,
            delta: None,
            remainder: None,
            description: record.description,
            update_time_s: record.update_time_s,
            format: None,
            warning: None,
            segments: status.map(|s| SegmentsBody::new(s, 1)),
        }
    }

    /// A strict tag, as the node shows it.
    pub(crate) fn strict(record: TagRecord) -> TagBody {
        TagBody { kind: "strict", ..TagBody::new(record, None) }
    }

    /// A Tinyid `biz_type`: its row and this node's segments of it, in ids.
    pub(crate) fn biz_type(view: BizTypeView) -> TagBody {
        let BizTypeView { row, status } = view;
        let delta = row.stride.delta();
        TagBody {
            tag: row.biz_type.to_string(),
            kind: idmint::tinyid::METRICS_SOURCE,
            max_id: row.max_id,
            step: row.step,
            delta: Some(delta),
            remainder: Some(row.stride.remainder()),
            description: String::new(),
            update_time_s: row.update_time_s,
            format: None,
            warning: None,
            segments: status.map(|s| SegmentsBody::new(s, delta)),
        }
    }
}

impl SegmentsBody {
    /// `status`'s segments, whose ids step by `delta` (1 but for Tinyid `biz_type`s).
    fn new(s: TagStatus, delta: u64) -> SegmentsBody {
        let segment = |s: SegmentSnapshot| SegmentBody {
            start: s.range.start(),
            end: s.range.end(),
            next_id: s.next_id,
            remaining: (s.range.end() - s.next_id) / delta.max(1),
        };
        SegmentsBody {
            current: s.buffer.current.map(segment),
            next: s.buffer.next.map(segment),
            step: s.step,
            remaining: s.remaining,
            rate_per_s: s.rate_per_s,
            runway_s: s.runway_s,
            idle: s.idle,
            refill_latency_ms: s.refill_latency_ms,
            ids_issued: s.buffer.handed_out,
            refills: s.refills,
            refill_failures: s.refill_failures,
            waits: s.waits,
            high_water: s.buffer.high_water,
            rate_history_per_s: s.rate_history_per_s,
        }
    }
}

/// How JSON answers carry ids: numbers (default) or strings (`ids_as=string`; JavaScript
/// numbers lose precision above 2^53).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum IdsAs {
    #[default]
    Number,
    String,
}

impl IdsAs {
    pub(crate) fn parse(text: Option<&str>) -> Result<IdsAs, ApiError> {
        match text {
            None | Some("number") => Ok(IdsAs::Number),
            Some("string") => Ok(IdsAs::String),
            Some(other) => Err(ApiError::bad_request(
                "bad_ids_as",
                format!("ids_as={other:?}; use ids_as=number (the default) or ids_as=string"),
            )),
        }
    }

    /// `ids` as an answer carries them, in this kind.
    pub(crate) fn values(self, ids: Vec<u64>) -> IdValues {
        match self {
            IdsAs::Number => IdValues::Numbers(ids),
            IdsAs::String => IdValues::Decimals(ids),
        }
    }
}

/// The ids of an answer, written to JSON straight from what the engine gave (no JSON value
/// made per id: a batch of 100 000 ids is one array of numbers, written once).
#[derive(Debug)]
pub(crate) enum IdValues {
    /// Numbers.
    Numbers(Vec<u64>),
    /// Numbers as decimal strings (`ids_as=string`).
    Decimals(Vec<u64>),
    /// Texts (a template that renders text).
    Texts(Vec<String>),
}

impl Serialize for IdValues {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IdValues::Numbers(ids) => ids.serialize(serializer),
            IdValues::Texts(texts) => texts.serialize(serializer),
            IdValues::Decimals(ids) => {
                use serde::ser::SerializeSeq;
                let mut seq = serializer.serialize_seq(Some(ids.len()))?;
                for id in ids {
                    seq.serialize_element(itoa::Buffer::new().format(*id))?;
                }
                seq.end()
            }
        }
    }
}

/// A tag's format as `GET /v1/tags/{tag}` shows it: never the key, only its fingerprint.
#[derive(Serialize, ToSchema)]
#[schema(as = TagFormat)]
pub(crate) struct FormatBody {
    /// The template, e.g. `ORD-{date:%Y%m%d}-{id:base36:8}`.
    template: String,
    /// The permutation's width in bits, with a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 16, maximum = 63, nullable = false)]
    bits: Option<u32>,
    /// The key's fingerprint (SipHash-2-4), with a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9a-f]{16}$", nullable = false)]
    key_fingerprint: Option<String>,
}

impl FormatBody {
    pub(crate) fn new(format: &IdFormat) -> FormatBody {
        let permutation = format.permutation();
        FormatBody {
            template: format.template().to_string(),
            bits: permutation.map(|p| p.bits()),
            key_fingerprint: permutation.map(|p| format!("{:016x}", p.fingerprint())),
        }
    }
}

/// A batch of public ids as an answer carries them: numbers (as `ids_as` says) or texts.
pub(crate) fn public_values(ids: PublicIds, ids_as: IdsAs) -> IdValues {
    match ids {
        PublicIds::Numbers(ids) => ids_as.values(ids),
        PublicIds::Texts(texts) => IdValues::Texts(texts),
    }
}
