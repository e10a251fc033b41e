//! Every error the API answers, and its HTTP status: the one place where errors meet status
//! codes. Bodies are JSON, `{"error": {"code": "...", "message": "..."}}`, and never carry a
//! number that could be mistaken for an id.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idmint::Error;
use idmint::format::FormatError;
use idmint::node::{Engine, Feature, NodeError};
use idmint::sequence::SequenceError;
use idmint::snowflake::SnowflakeError;
use idmint::uuid::UuidsError;
use idmint_core::{TagError, ValueError};
use idmint_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

/// An error answered by the API.
#[derive(Debug)]
#[non_exhaustive]
pub enum ApiError {
    /// The request is malformed: a bad tag, count, body or parameter (400).
    BadRequest {
        /// Machine-readable code, e.g. `bad_tag`.
        code: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// No route matches (404).
    NoRoute(String),
    /// The library refused (status depends on the error).
    Library(Error),
    /// The snowflake generator refused, or is not running (status depends on the error).
    Snowflake(SnowflakeError),
    /// The sequence engine refused (status depends on the error).
    Sequence(SequenceError),
    /// Snowflake ids are not served by this node yet: its generator did not start, for a
    /// reason that passes by itself, and the start is retried (503), with the last failure.
    SnowflakeNotRunning(String),
    /// Sequences are not served by this node yet: Redis has not answered so far and is
    /// retried (503), with the reason.
    SequencesNotRunning(String),
    /// The timestamp oracle did not answer in time (503): its owner is not reachable, its
    /// lease is passing to another node, or the store does not answer.
    TsoUnavailable(String),
    /// The node is not configured to serve this kind of id (501, gRPC `FAILED_PRECONDITION`):
    /// final until its configuration changes, so not worth retrying on this node.
    NotConfigured {
        /// Snowflake ids or sequences.
        feature: Feature,
        /// Why, and how to configure it.
        reason: String,
    },
    /// A gRPC health check named a service this node does not report (404, gRPC
    /// `NOT_FOUND`, as the health protocol asks).
    UnknownService(String),
    /// A tag's public id format refused (status depends on the error).
    Format(FormatError),
    /// No UUID v7 or ULID: the clock is past their 48-bit time field (503).
    Uuids(UuidsError),
    /// The route needs a bearer token and the request has none, or not in the
    /// `Authorization: Bearer TOKEN` form (401, with `WWW-Authenticate: Bearer`).
    Unauthorized(String),
    /// The request's bearer token is not one the route accepts (403).
    Forbidden(String),
    /// On a node without an admin token, a request addressed to a host that is not a
    /// loopback name or address (403): how a web page reaches a local node by DNS
    /// rebinding.
    ForeignHost(String),
    /// On a node without an admin token, a state-changing request from a web page of
    /// another origin (403).
    ForeignOrigin(String),
    /// This client already has as many requests in flight as `limits.client_in_flight_max`
    /// allows (429, with `Retry-After: 1`).
    TooManyRequests(String),
    /// The request took longer than `limits.request_timeout_ms` (503).
    Timeout(String),
    /// Ranges of internal ids were asked of a tag with a public id format, whose internal
    /// ids do not leave the server (409).
    FormattedTag(idmint::Tag),
    /// Ranges were asked of a strict tag, whose ids a client may not cache (409); the message.
    StrictTag(String),
    /// A gRPC content type (`application/grpc…`) sent to an HTTP route (415): HTTP routes
    /// take JSON; gRPC methods live under `/idmint.v1.IdMint/`.
    UnsupportedMediaType(String),
    /// A handler asked for a tag the middleware had not checked: a bug, refused rather
    /// than served unchecked (500).
    Unchecked(&'static str),
    /// Tinyid's routes on a node that serves no Tinyid database (404).
    TinyidNotServed(String),
    /// A Tinyid `biz_type` without a `tiny_id_info` row (404 `unknown_tag`), the message
    /// naming Tinyid's table.
    UnknownBizType(String),
    /// A refusal of the node this server does not know yet (500).
    Internal(String),
    /// The node is not ready (`/ready`): the first engine the readiness waits for that
    /// cannot serve decides the status and code; the body lists every engine's state.
    NotReady {
        /// The first gating engine.
        engine: Engine,
        /// Its refusal.
        refusal: Refusal,
        /// Every engine the node runs, ready or not.
        engines: Vec<EngineState>,
    },
}

/// An engine's refusal taken apart, for [`ApiError::NotReady`].
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after_s: Option<u64>,
}

/// One engine's readiness as `/ready` answers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EngineState {
    /// `segment`, `snowflake`, `tinyid` or `sequences`.
    engine: &'static str,
    /// Whether it can serve now.
    ready: bool,
    /// Whether the node's readiness waits for it (`ready_engines`): an engine that does not
    /// gate may be not ready while `/ready` answers 200.
    gates: bool,
    /// Why it cannot serve: the code its routes answer now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = code_schema)]
    code: Option<&'static str>,
    /// Why it cannot serve, and the fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

impl EngineState {
    /// `engine`'s state as `/ready` lists it (`gates` when the node's readiness waits for
    /// it), and its refusal when it cannot serve.
    pub(crate) fn new(
        engine: Engine,
        gates: bool,
        state: Result<(), NodeError>,
    ) -> (EngineState, Option<Refusal>) {
        let refusal = state.err().map(|error| {
            let error = ApiError::from(error);
            let retry_after_s = error.retry_after_s();
            let (status, code, message) = error.into_parts();
            Refusal { status, code, message, retry_after_s }
        });
        let (code, message) = match &refusal {
            Some(refusal) => (Some(refusal.code), Some(refusal.message.clone())),
            None => (None, None),
        };
        let state =
            EngineState { engine: engine.name(), ready: code.is_none(), gates, code, message };
        (state, refusal)
    }
}

/// `/ready`'s body when the node is not ready: an error body that also lists the engines.
#[derive(Serialize, ToSchema)]
#[schema(as = NotReady)]
pub(crate) struct NotReadyBody {
    error: ErrorDetail,
    /// Every engine the node runs, ready or not.
    engines: Vec<EngineState>,
}

/// Every error answer's body: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong: a machine-readable code and a message for people.
#[derive(Serialize, ToSchema)]
struct ErrorDetail {
    #[schema(schema_with = code_schema)]
    code: &'static str,
    /// What is wrong and how to fix it.
    message: String,
}

/// Every code an error body can carry, and what it means: the `code` enum of the OpenAPI
/// document (`tests/it/openapi.rs` checks that it lists exactly the codes the sources answer).
pub(crate) const ERROR_CODES: &[(&str, &str)] = &[
    ("bad_tag", "400: a tag or sequence name that breaks the tag rule (the message says it)"),
    ("bad_count", "400: `count` is not a whole number from 1 to the node's batch limit"),
    ("bad_value", "400: a step, start id or description out of range"),
    ("bad_body", "400: the JSON body is missing, malformed, too large or has unknown fields"),
    ("bad_query", "400: a query parameter is malformed, missing or unknown"),
    ("bad_id", "400: not a decimal id from 0 to 2^63-1, or not an id of the layout"),
    (
        "bad_layout",
        "400: not a layout preset (snowflake, sonyflake, uid, js-safe) or the node's own (custom)",
    ),
    ("bad_ids_as", "400: `ids_as` is neither `number` nor `string`"),
    ("bad_version", "400: a UUID version other than 4 and 7"),
    ("bad_format", "400: a UUID format other than `standard` and `hex`"),
    ("bad_encoding", "400: not an encoding (decimal, base36, base62, crockford32)"),
    ("not_an_id", "400: the text is not an id of the tag's format or the encoding"),
    ("bad_sequence", "400: a bad sequence definition or request, or the name exists"),
    (
        "bad_lease",
        "400: ids given back that the leases sent do not cover, or leases not this node's",
    ),
    ("unauthorized", "401: the route needs a bearer token and the request has none"),
    ("forbidden", "403: the bearer token is not one the route accepts"),
    (
        "host_not_allowed",
        "403: on a node without an admin token, a request addressed to a host that is not \
         loopback (localhost, *.localhost, 127.0.0.0/8, [::1])",
    ),
    (
        "origin_not_allowed",
        "403: on a node without an admin token, a request other than GET, HEAD or OPTIONS \
         whose Origin is not the node's own (a web page elsewhere)",
    ),
    ("too_many_requests", "429: this client has `limits.client_in_flight_max` requests in flight"),
    ("no_route", "404: no route has this path"),
    ("tinyid_not_served", "404: Tinyid's routes on a node without `[tinyid] enabled = true`"),
    (
        "bad_request",
        "400: the framework refused the request (e.g. a path that is not UTF-8, or a request \
         that is not valid HTTP/1.1)",
    ),
    ("uri_too_long", "414: the request's URI is longer than 65534 bytes"),
    ("headers_too_large", "431: more than 100 request headers, or more header bytes than read"),
    ("method_not_allowed", "405: the route does not take this method (see `Allow`)"),
    ("body_too_large", "413: the request body is larger than 64 KiB"),
    (
        "unsupported_media_type",
        "415: a JSON body without `Content-Type: application/json`, or a gRPC content type \
         (`application/grpc…`) on an HTTP route",
    ),
    ("http_error", "4xx/5xx: another error the framework answered"),
    ("unknown_tag", "404: the tag does not exist"),
    ("unknown_sequence", "404: the sequence does not exist"),
    (
        "unknown_service",
        "404 (gRPC NOT_FOUND): a gRPC health check for a service this node does not report \
         (it reports \"\" and idmint.v1.IdMint)",
    ),
    ("tag_exists", "409: a tag of that name exists"),
    ("tag_exhausted", "409: the tag's next range would pass the largest id, 2^63-1"),
    (
        "start_below_issued",
        "409: `start` is below where a deleted tag of this name stopped; omit it, raise it, or \
         set `force`",
    ),
    ("too_many_tags", "409: the store holds the most tags it may (10 000)"),
    (
        "tag_not_storable",
        "409 (gRPC FAILED_PRECONDITION): the store's tag column cannot hold the tag (a 4-byte \
         character, e.g. an emoji, in Leaf's `utf8` table); final until the table is converted, \
         the message gives the `ALTER TABLE`",
    ),
    ("public_ids_exhausted", "409: the tag's next id is past its public format's width"),
    ("key_changed", "409: the tag's format key differs from the one its ids were issued with"),
    ("formatted_tag", "409: ranges of a tag with a public id format (its internal ids stay here)"),
    ("strict_tag", "409: ranges of a strict tag (ids a client cached would break its order)"),
    (
        "store_privilege_missing",
        "501 (gRPC FAILED_PRECONDITION): the store's database account lacks a privilege the \
         feature needs; the message names it and its table (see `idmint schema print`); final \
         until it is granted (for snowflake ids, until the node restarts after that)",
    ),
    (
        "store_table_missing",
        "501 (gRPC FAILED_PRECONDITION): a table the feature needs does not exist and the node \
         creates none (`create_tables=false`); the message names it",
    ),
    ("store_row_invalid", "500: the tag's store row holds impossible values"),
    ("local_state", "500: the node's data directory could not be read or written"),
    ("internal", "500: an unexpected failure"),
    (
        "unavailable",
        "503: the store did not answer in time, or the tag's format key guard is unavailable",
    ),
    ("shutting_down", "503: the node is shutting down"),
    ("request_timeout", "503: the request took longer than `limits.request_timeout_ms`"),
    ("clock_behind", "503: the clock went back beyond the snowflake tolerance"),
    (
        "clock_skew",
        "501 (gRPC FAILED_PRECONDITION): this node's clock is off its store's by more than half \
         of `snowflake.lease_margin_ms`, so it refuses snowflake ids with a leased worker id; \
         final until the time sync is fixed, served again by itself once the offset is back",
    ),
    (
        "lease_settling",
        "503: the snowflake worker id was just leased; ids start once any earlier holder's \
         ids are behind it (`time_window_ms` + `lease_margin_ms` after the start, 2.5 s by \
         default); `Retry-After` says when, in seconds",
    ),
    ("worker_lease_not_proven", "503: the snowflake worker id lease could not be renewed in time"),
    (
        "layout_exhausted",
        "409 (gRPC FAILED_PRECONDITION): the snowflake layout's time field ran out; final until \
         the node runs a layout with more time bits or a later epoch (the message says how)",
    ),
    ("snowflake_unavailable", "503: the snowflake generator or its store did not answer in time"),
    (
        "snowflake_not_running",
        "503: this node's snowflake generator has not started yet, for a reason that passes by \
         itself (its worker store not reachable so far, or slow); the start is retried in the \
         background and ids are served once it succeeds, the message gives the last failure \
         (also: the clock reads before the layout's epoch)",
    ),
    (
        "sequence_unavailable",
        "503: no room below the ceiling within 1 s, or Redis or the store unavailable",
    ),
    (
        "sequence_exhausted",
        "409 (gRPC FAILED_PRECONDITION): the sequence reached its largest number, 2^53-1 (the \
         most a Redis counter holds exactly); final, take ids from a new sequence name (a daily \
         sequence starts again at 1 the next day)",
    ),
    (
        "sequences_not_running",
        "503: this node serves no sequences yet: Redis has not answered so far (it is retried)",
    ),
    (
        "snowflake_not_configured",
        "501 (gRPC FAILED_PRECONDITION): this node is not configured to serve snowflake ids \
         (disabled, a store that cannot hold worker leases, or a configuration the generator \
         cannot run); final, the message says how to configure it",
    ),
    (
        "tso_not_configured",
        "501 (gRPC FAILED_PRECONDITION): this node serves no timestamp oracle (a store that \
         holds no leases, such as Flicker or several databases, or no gRPC listener for its \
         peers); final, the message says how to configure it",
    ),
    (
        "tso_unavailable",
        "503: the timestamp oracle did not answer in time: its owner is not reachable, its \
         lease is passing to another node (at most the lease's TTL and margin), or the store \
         does not answer",
    ),
    (
        "worker_ids_exhausted",
        "501 (gRPC FAILED_PRECONDITION): no snowflake worker id was free when this node \
         started (every id of the layout or of `snowflake.worker_ids` held or assigned); final \
         until the operator frees ids or widens the layout and restarts the node, the message \
         says how",
    ),
    (
        "sequence_store_unsupported",
        "501 (gRPC FAILED_PRECONDITION): the Redis of the sequence counters cannot be trusted \
         with them: it refuses `INFO` to idmint's user (allow it: `ACL SETUSER <user> +info`), \
         its `INFO` lacks `run_id` or `master_replid` (a proxy: point idmint at the server), \
         or it cannot replicate scripts by their effects (before Redis 3.2); final until that \
         changes, served again by itself once it has",
    ),
    (
        "sequences_not_configured",
        "501 (gRPC FAILED_PRECONDITION): this node is not configured to serve sequences (no \
         Redis, a bad Redis URL, or no single SQL store for their ceilings); final, the \
         message says how to configure it",
    ),
    (
        "tag_policy_not_served",
        "501 (gRPC FAILED_PRECONDITION): the tag's policy recorded in the store is one this \
         node cannot honour (a public id format other nodes have and this node's \
         configuration lacks, or a policy of a later version); final until the node's \
         configuration changes, the message says how",
    ),
    (
        "clock_out_of_range",
        "503: the clock reads past the 48-bit millisecond field of UUID v7 and ULID",
    ),
];

/// The `code` property: one of [`ERROR_CODES`], each explained in the description.
fn code_schema() -> Object {
    let meanings: Vec<String> =
        ERROR_CODES.iter().map(|(code, meaning)| format!("- `{code}`: {meaning}")).collect();
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ERROR_CODES.iter().map(|(code, _)| *code)))
        .description(Some(format!("Machine-readable code:\n{}", meanings.join("\n"))))
        .build()
}

impl ApiError {
    /// A 400 with a code and a message.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest { code, message: message.into() }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            ApiError::Library(error) => library_status(error),
            ApiError::Snowflake(error) => snowflake_status(error),
            ApiError::Sequence(error) => sequence_status(error),
            ApiError::SnowflakeNotRunning(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "snowflake_not_running")
            }
            ApiError::SequencesNotRunning(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "sequences_not_running")
            }
            ApiError::NotConfigured { feature: Feature::Snowflake, .. } => {
                (StatusCode::NOT_IMPLEMENTED, "snowflake_not_configured")
            }
            ApiError::NotConfigured { feature: Feature::TagPolicy, .. } => {
                (StatusCode::NOT_IMPLEMENTED, "tag_policy_not_served")
            }
            ApiError::NotConfigured { feature: Feature::Tso, .. } => {
                (StatusCode::NOT_IMPLEMENTED, "tso_not_configured")
            }
            ApiError::TsoUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "tso_unavailable"),
            ApiError::NotConfigured { .. } => {
                (StatusCode::NOT_IMPLEMENTED, "sequences_not_configured")
            }
            ApiError::UnknownService(_) => (StatusCode::NOT_FOUND, "unknown_service"),
            ApiError::Format(error) => format_status(error),
            ApiError::Uuids(_) => (StatusCode::SERVICE_UNAVAILABLE, "clock_out_of_range"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::ForeignHost(_) => (StatusCode::FORBIDDEN, "host_not_allowed"),
            ApiError::ForeignOrigin(_) => (StatusCode::FORBIDDEN, "origin_not_allowed"),
            ApiError::TooManyRequests(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_requests"),
            ApiError::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "request_timeout"),
            ApiError::FormattedTag(_) => (StatusCode::CONFLICT, "formatted_tag"),
            ApiError::StrictTag(_) => (StatusCode::CONFLICT, "strict_tag"),
            ApiError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::TinyidNotServed(_) => (StatusCode::NOT_FOUND, "tinyid_not_served"),
            ApiError::UnknownBizType(_) => (StatusCode::NOT_FOUND, "unknown_tag"),
            ApiError::Unchecked(_) | ApiError::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
            ApiError::NotReady { refusal, .. } => (refusal.status, refusal.code),
        }
    }

    /// How long a client should wait before it asks again, in seconds, when the refusal ends
    /// by itself at a known time (`Retry-After`): a worker id that settles.
    fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::Snowflake(SnowflakeError::LeaseSettling { retry_after_ms, .. }) => {
                Some(retry_after_ms.div_ceil(1_000).max(1))
            }
            ApiError::NotReady { refusal, .. } => refusal.retry_after_s,
            _ => None,
        }
    }

    /// The error as Didi Tinyid's JSON answer, `{"data":null,"code":C,"message":M}`, under
    /// idmint's HTTP status: Tinyid's `code` 5 and message `token is error` for a missing or
    /// wrong token, else its `code` 6 with idmint's message (what is wrong, how to fix it).
    pub(crate) fn into_tinyid_response(self) -> Response {
        let (status, code, message) = self.into_parts();
        let (tinyid_code, message) = match code {
            "unauthorized" | "forbidden" => (TINYID_TOKEN_ERR, "token is error".to_string()),
            _ => (TINYID_SYS_ERR, message),
        };
        // Tinyid's field order (Jackson writes `data`, `code`, `message` as declared).
        #[derive(Serialize)]
        struct TinyidBody {
            data: Option<()>,
            code: u16,
            message: String,
        }
        (status, Json(TinyidBody { data: None, code: tinyid_code, message })).into_response()
    }
}

/// Tinyid's `ErrorCode.TOKEN_ERR`.
pub(crate) const TINYID_TOKEN_ERR: u16 = 5;
/// Tinyid's `ErrorCode.SYS_ERR`.
pub(crate) const TINYID_SYS_ERR: u16 = 6;

fn snowflake_status(error: &SnowflakeError) -> (StatusCode, &'static str) {
    match error {
        SnowflakeError::ClockBehind { .. } => (StatusCode::SERVICE_UNAVAILABLE, "clock_behind"),
        // Retrying does not fix a clock: the operator (or the time sync) does.
        SnowflakeError::ClockSkew { .. } => (StatusCode::NOT_IMPLEMENTED, "clock_skew"),
        SnowflakeError::LeaseSettling { .. } => (StatusCode::SERVICE_UNAVAILABLE, "lease_settling"),
        SnowflakeError::LeaseNotProven { .. } => {
            (StatusCode::SERVICE_UNAVAILABLE, "worker_lease_not_proven")
        }
        // Nothing ends it but a new layout: final, as an exhausted tag is.
        SnowflakeError::Exhausted(_) => (StatusCode::CONFLICT, "layout_exhausted"),
        // Nothing frees an id by itself for this node: it does not retry the start.
        SnowflakeError::Store(
            StoreError::WorkersExhausted { .. } | StoreError::NoWorkerIdInRange { .. },
        ) => (StatusCode::NOT_IMPLEMENTED, "worker_ids_exhausted"),
        SnowflakeError::Store(
            error @ (StoreError::Denied { .. } | StoreError::MissingTable { .. }),
        ) => store_final(error),
        SnowflakeError::Unavailable(_) | SnowflakeError::Store(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "snowflake_unavailable")
        }
        SnowflakeError::Config(_) => (StatusCode::SERVICE_UNAVAILABLE, "snowflake_not_running"),
        SnowflakeError::LocalState(_) => (StatusCode::INTERNAL_SERVER_ERROR, "local_state"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

fn format_status(error: &FormatError) -> (StatusCode, &'static str) {
    match error {
        // An internal id past the permutation's width or the template's: the tag has used
        // up its public ids.
        FormatError::Permute(_) | FormatError::Encoding(_) => {
            (StatusCode::CONFLICT, "public_ids_exhausted")
        }
        FormatError::NotThisFormat { .. } => (StatusCode::BAD_REQUEST, "not_an_id"),
        FormatError::KeyChanged { .. } => (StatusCode::CONFLICT, "key_changed"),
        FormatError::KeyGuard { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

fn sequence_status(error: &SequenceError) -> (StatusCode, &'static str) {
    match error {
        SequenceError::NotFound(_) | SequenceError::Store(StoreError::TagNotFound(_)) => {
            (StatusCode::NOT_FOUND, "unknown_sequence")
        }
        SequenceError::Invalid(_) | SequenceError::Store(StoreError::InvalidValue(_)) => {
            (StatusCode::BAD_REQUEST, "bad_sequence")
        }
        SequenceError::Unavailable { .. } | SequenceError::Store(StoreError::Unavailable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "sequence_unavailable")
        }
        SequenceError::Store(
            error @ (StoreError::Denied { .. } | StoreError::MissingTable { .. }),
        ) => store_final(error),
        // Nothing ends it but a new sequence: final, as an exhausted tag is.
        SequenceError::Exhausted { .. } => (StatusCode::CONFLICT, "sequence_exhausted"),
        // Retrying does not change the server or idmint's access to it: the operator does.
        SequenceError::Store(StoreError::Unsupported { .. }) => {
            (StatusCode::NOT_IMPLEMENTED, "sequence_store_unsupported")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// A store's refusal that only an operator ends, whatever the engine: a missing privilege or
/// table. 501 (gRPC FAILED_PRECONDITION): final, never a 503 to retry.
fn store_final(error: &StoreError) -> (StatusCode, &'static str) {
    match error {
        StoreError::Denied { .. } => (StatusCode::NOT_IMPLEMENTED, "store_privilege_missing"),
        _ => (StatusCode::NOT_IMPLEMENTED, "store_table_missing"),
    }
}

fn library_status(error: &Error) -> (StatusCode, &'static str) {
    match error {
        Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_)) => {
            (StatusCode::NOT_FOUND, "unknown_tag")
        }
        Error::Unavailable { .. } | Error::Store(StoreError::Unavailable(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        }
        Error::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        Error::TooManyTags(_) | Error::Store(StoreError::TooManyTags) => {
            (StatusCode::CONFLICT, "too_many_tags")
        }
        Error::Store(StoreError::TagExists(_)) => (StatusCode::CONFLICT, "tag_exists"),
        // The tag is valid (it is served on any utf8mb4 table) but this table cannot hold
        // it: a state of the store, not of the request, so 409 and gRPC FAILED_PRECONDITION
        // rather than 400 and INVALID_ARGUMENT; final either way, never a 503 to retry.
        Error::Store(StoreError::TagNotStorable { .. }) => {
            (StatusCode::CONFLICT, "tag_not_storable")
        }
        Error::Store(StoreError::Exhausted { .. }) => (StatusCode::CONFLICT, "tag_exhausted"),
        Error::Store(StoreError::StartBelowIssued { .. }) => {
            (StatusCode::CONFLICT, "start_below_issued")
        }
        Error::Store(StoreError::Corrupt { .. }) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "store_row_invalid")
        }
        Error::Store(error @ (StoreError::Denied { .. } | StoreError::MissingTable { .. })) => {
            store_final(error)
        }
        Error::LocalState(_) => (StatusCode::INTERNAL_SERVER_ERROR, "local_state"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

/// The metadata key of a gRPC error's code (`unknown_tag`, `bad_count`, ...): the same code
/// the HTTP API puts in its JSON body.
pub const GRPC_CODE_KEY: &str = "idmint-code";

impl ApiError {
    /// The error as a gRPC status: its HTTP status mapped to the gRPC code, the message, and
    /// the HTTP API's code in the `idmint-code` metadata. The one mapping of errors to gRPC.
    pub fn into_grpc_status(self) -> tonic::Status {
        let (status, code, message) = self.into_parts();
        let grpc = match status {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => tonic::Code::InvalidArgument,
            StatusCode::UNAUTHORIZED => tonic::Code::Unauthenticated,
            StatusCode::FORBIDDEN => tonic::Code::PermissionDenied,
            // gRPC's word for a method the server lacks.
            StatusCode::NOT_FOUND if code == "no_route" => tonic::Code::Unimplemented,
            StatusCode::NOT_FOUND => tonic::Code::NotFound,
            StatusCode::CONFLICT if code == "tag_exists" => tonic::Code::AlreadyExists,
            StatusCode::CONFLICT => tonic::Code::FailedPrecondition,
            // A kind of id this node is not configured for: final here, not "unavailable".
            StatusCode::NOT_IMPLEMENTED => tonic::Code::FailedPrecondition,
            StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
            StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
            StatusCode::INTERNAL_SERVER_ERROR => tonic::Code::Internal,
            _ => tonic::Code::Unknown,
        };
        if status.is_server_error() {
            tracing::debug!(%status, code, %message, "gRPC request failed");
        }
        let mut answer = tonic::Status::new(grpc, message);
        answer
            .metadata_mut()
            .insert(GRPC_CODE_KEY, tonic::metadata::MetadataValue::from_static(code));
        answer
    }

    /// The HTTP status, the code and the message.
    fn into_parts(self) -> (StatusCode, &'static str, String) {
        let (status, code) = self.status_and_code();
        let message = match self {
            ApiError::BadRequest { message, .. } => message,
            ApiError::NoRoute(route) => format!(
                "no route {route}; the HTTP API is described at /openapi.json, the gRPC API by \
                 idmint.proto (on the port --grpc-listen names, if the node sets one)"
            ),
            ApiError::Library(error) => library_message(&error),
            ApiError::Snowflake(error) => error.to_string(),
            ApiError::Sequence(error) => sequence_message(&error),
            ApiError::SnowflakeNotRunning(reason)
            | ApiError::SequencesNotRunning(reason)
            | ApiError::TsoUnavailable(reason) => reason,
            ApiError::NotConfigured { reason, .. } => reason,
            ApiError::UnknownService(message) => message,
            ApiError::Format(error) => error.to_string(),
            ApiError::Uuids(error) => error.to_string(),
            ApiError::Unauthorized(message)
            | ApiError::Forbidden(message)
            | ApiError::ForeignHost(message)
            | ApiError::ForeignOrigin(message)
            | ApiError::TooManyRequests(message)
            | ApiError::Timeout(message)
            | ApiError::UnsupportedMediaType(message)
            | ApiError::TinyidNotServed(message)
            | ApiError::StrictTag(message)
            | ApiError::UnknownBizType(message)
            | ApiError::Internal(message) => message,
            ApiError::Unchecked(message) => message.to_string(),
            ApiError::FormattedTag(tag) => format!(
                "tag {tag} has a public id format ([format.{tag}]): its internal ids do not \
                 leave the server, so it is not leased in ranges; take its public ids with \
                 NextIds or GET /v1/segment/{tag}"
            ),
            ApiError::NotReady { refusal, engine, .. } => {
                format!("not ready: {engine}: {}", refusal.message)
            }
        };
        (status, code, message)
    }
}

/// A library error's message for an HTTP client: the fix names the route to call, then the
/// CLI command an operator on the node's store would run (the library's own texts name only
/// the command).
fn library_message(error: &Error) -> String {
    match error {
        Error::UnknownTag(tag) | Error::Store(StoreError::TagNotFound(tag)) => format!(
            "tag {tag} does not exist; create it with POST /v1/tags {{\"tag\": \"{tag}\"}} \
             (or `idmint tag create {tag}`)"
        ),
        Error::Store(StoreError::TagExists(tag)) => format!(
            "tag {tag} already exists; change its step with PATCH /v1/tags/{tag} \
             {{\"step\": N}} (or `idmint tag set {tag} --step N`)"
        ),
        other => other.to_string(),
    }
}

/// A sequence error's message for an HTTP client, naming the route before the CLI command.
fn sequence_message(error: &SequenceError) -> String {
    match error {
        SequenceError::NotFound(name) | SequenceError::Store(StoreError::TagNotFound(name)) => {
            format!(
                "sequence {name} does not exist; create it with POST /v1/seqs \
                 {{\"name\": \"{name}\"}} (or `idmint seq create {name}`)"
            )
        }
        // The store's refusal of a second sequence of one name names the command only.
        other => {
            let text = other.to_string();
            match text.find("delete it with `idmint seq delete ") {
                Some(at) => {
                    let command = &text[at + "delete it with ".len()..];
                    let name =
                        command.trim_start_matches("`idmint seq delete ").trim_end_matches('`');
                    format!("{}delete it with DELETE /v1/seqs/{name} (or {command})", &text[..at])
                }
                None => text,
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(mut self) -> Response {
        let retry_after_s = self.retry_after_s();
        let engines = match &mut self {
            ApiError::NotReady { engines, .. } => Some(std::mem::take(engines)),
            _ => None,
        };
        let (status, code, message) = self.into_parts();
        // Debug, not warn: during an outage every request fails, and a line per request
        // would flood the log. The cause (refill failed, lease lost, clock behind) is logged
        // once where it happened.
        if status.is_server_error() {
            tracing::debug!(%status, code, %message, "request failed");
        }
        let error = ErrorDetail { code, message };
        let mut response = match engines {
            Some(engines) => (status, Json(NotReadyBody { error, engines })).into_response(),
            None => (status, Json(ErrorBody { error })).into_response(),
        };
        let extra = match status {
            StatusCode::UNAUTHORIZED => Some((header::WWW_AUTHENTICATE, "Bearer")),
            StatusCode::TOO_MANY_REQUESTS => Some((header::RETRY_AFTER, "1")),
            _ => None,
        };
        if let Some((name, value)) = extra {
            response.headers_mut().insert(name, HeaderValue::from_static(value));
        }
        if let Some(seconds) = retry_after_s {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Longest body of a framework answer (axum's rejections) read to put it in JSON.
const PLAIN_ERROR_BYTES_MAX: usize = 4 * 1024;

/// Keeps every error JSON (applied to every answer by the router's one middleware): an error answered by the framework rather
/// than a handler (a path parameter that is not UTF-8, a method the route does not have, a
/// missing content type) is plain text or empty; it becomes `{"error": {code, message}}`
/// with the same status, the text as the message.
pub(crate) async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, PLAIN_ERROR_BYTES_MAX).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let code = framework_code(status);
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut answer =
        (status, Json(ErrorBody { error: ErrorDetail { code, message } })).into_response();
    for name in [header::ALLOW, header::WWW_AUTHENTICATE, header::RETRY_AFTER] {
        if let Some(value) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    answer
}

/// The code of an error the framework answered, by its status.
fn framework_code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "http_error",
    }
}

/// `From` for each error an [`ApiError`] variant wraps as it is.
macro_rules! wrapped_errors {
    ($($error:ty => $variant:ident,)+) => {$(
        impl From<$error> for ApiError {
            fn from(error: $error) -> ApiError {
                ApiError::$variant(error)
            }
        }
    )+};
}

wrapped_errors! {
    Error => Library,
    SnowflakeError => Snowflake,
    FormatError => Format,
    UuidsError => Uuids,
    SequenceError => Sequence,
}

impl From<TagError> for ApiError {
    fn from(error: TagError) -> ApiError {
        ApiError::bad_request("bad_tag", error.to_string())
    }
}

impl From<ValueError> for ApiError {
    fn from(error: ValueError) -> ApiError {
        let code = match error {
            ValueError::Count { .. } => "bad_count",
            _ => "bad_value",
        };
        ApiError::bad_request(code, error.to_string())
    }
}

impl From<NodeError> for ApiError {
    fn from(error: NodeError) -> ApiError {
        match error {
            NodeError::Segment(error) => ApiError::Library(error),
            NodeError::Snowflake(error) => ApiError::Snowflake(error),
            NodeError::Sequence(error) => ApiError::Sequence(error),
            NodeError::SnowflakeNotRunning(reason) => ApiError::SnowflakeNotRunning(reason),
            NodeError::SequencesNotRunning(reason) => ApiError::SequencesNotRunning(reason),
            error @ NodeError::TsoUnavailable(_) => ApiError::TsoUnavailable(error.to_string()),
            NodeError::NotConfigured { feature, reason } => {
                ApiError::NotConfigured { feature, reason }
            }
            NodeError::Format(error) => ApiError::Format(error),
            NodeError::Uuids(error) => ApiError::Uuids(error),
            NodeError::Tag(error) => error.into(),
            NodeError::Value(error) => error.into(),
            NodeError::FormattedTag(tag) => ApiError::FormattedTag(tag),
            error @ NodeError::StrictTag(_) => ApiError::StrictTag(error.to_string()),
            NodeError::BadId(message) => ApiError::bad_request("bad_id", message),
            NodeError::BadLayout(message) => ApiError::bad_request("bad_layout", message),
            NodeError::BadLease(message) => ApiError::bad_request("bad_lease", message),
            NodeError::BadEncoding(message) => ApiError::bad_request("bad_encoding", message),
            NodeError::NotAnId(message) => ApiError::bad_request("not_an_id", message),
            NodeError::DecodeHow(message) => ApiError::bad_request("bad_query", message),
            error @ NodeError::TinyidNotServed => ApiError::TinyidNotServed(error.to_string()),
            error @ NodeError::UnknownBizType(_) => ApiError::UnknownBizType(error.to_string()),
            // The same `404 unknown_tag`, its message naming both ways to make the name.
            error @ (NodeError::UnknownName(_) | NodeError::BizTypeNotAdministered(_)) => {
                ApiError::UnknownBizType(error.to_string())
            }
            // `NodeError` is non-exhaustive: a variant added later is an internal error
            // until it is mapped here.
            other => ApiError::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 22 item 8: an HTTP client is told the route to call, then the CLI command.
    #[test]
    fn messages_name_the_route_before_the_cli_command() {
        let tag = idmint::Tag::parse("order").unwrap();
        let unknown = library_message(&Error::Store(StoreError::TagNotFound(tag.clone())));
        assert!(unknown.contains("POST /v1/tags") && unknown.contains("idmint tag create order"));
        let exists = library_message(&Error::Store(StoreError::TagExists(tag.clone())));
        assert!(exists.contains("PATCH /v1/tags/order"), "{exists}");
        let missing = sequence_message(&SequenceError::NotFound(tag.clone()));
        assert!(missing.contains("POST /v1/seqs") && missing.contains("idmint seq create order"));
        let twice = sequence_message(&SequenceError::Store(StoreError::InvalidValue(
            "sequence order already exists; pick another name or delete it with `idmint seq \
             delete order`"
                .to_string(),
        )));
        assert!(
            twice.contains("delete it with DELETE /v1/seqs/order (or `idmint seq delete order`)"),
            "{twice}"
        );
    }

    /// Issue 31: a layout whose time field ran out was answered 503 `layout_exhausted`, which
    /// clients retry forever, though nothing ends it but a new layout. It is final: 409 and
    /// gRPC `FAILED_PRECONDITION`, as `tag_exhausted` is, the message naming the fix.
    #[test]
    fn an_exhausted_layout_is_final_with_the_fix() {
        let error = ApiError::Snowflake(SnowflakeError::Exhausted("snowflake".to_string()));
        assert_eq!(error.status_and_code(), (StatusCode::CONFLICT, "layout_exhausted"));
        let status = error.into_grpc_status();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        let message = status.message();
        assert!(message.contains("more time bits") && message.contains("later epoch"), "{message}");
        let (_, meaning) =
            ERROR_CODES.iter().find(|(code, _)| *code == "layout_exhausted").unwrap();
        assert!(meaning.starts_with("409"), "{meaning}");
    }

    /// Issue 32: a privilege the store's account lacks, or a table a node may not create,
    /// passes by no retry: 501 and gRPC `FAILED_PRECONDITION` on every engine, never a 503,
    /// the message naming the privilege (or table) and `idmint schema print`.
    #[test]
    fn a_missing_privilege_or_table_is_final_and_named() {
        let denied = || StoreError::Denied {
            feature: "tag deletion".to_string(),
            needs: "INSERT on idmint_tombstones".to_string(),
            detail: "INSERT command denied".to_string(),
        };
        let missing =
            || StoreError::MissingTable { feature: "x".to_string(), table: "t".to_string() };
        for (error, code) in [
            (ApiError::Library(Error::Store(denied())), "store_privilege_missing"),
            (ApiError::Snowflake(SnowflakeError::Store(denied())), "store_privilege_missing"),
            (ApiError::Sequence(SequenceError::Store(denied())), "store_privilege_missing"),
            (ApiError::Library(Error::Store(missing())), "store_table_missing"),
            (ApiError::Sequence(SequenceError::Store(missing())), "store_table_missing"),
        ] {
            assert_eq!(error.status_and_code(), (StatusCode::NOT_IMPLEMENTED, code));
            let status = error.into_grpc_status();
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
            assert!(status.message().contains("idmint schema print"), "{}", status.message());
        }
        let message = ApiError::Library(Error::Store(denied())).into_parts().2;
        assert!(message.contains("INSERT on idmint_tombstones"), "{message}");
    }

    /// Issue 31: a sequence at its largest number was answered 503 `sequence_unavailable`,
    /// which clients retry forever. It is final: 409 `sequence_exhausted` and gRPC
    /// `FAILED_PRECONDITION`, as `tag_exhausted` is, the message naming the limit and the fix.
    #[test]
    fn an_exhausted_sequence_is_final_with_the_fix() {
        let exhausted = || {
            ApiError::Sequence(SequenceError::Exhausted {
                name: idmint::Tag::parse("invoice").unwrap(),
                period: "20261128".to_string(),
                limit: idmint_store::COUNTER_MAX,
            })
        };
        let (status, code, message) = exhausted().into_parts();
        assert_eq!((status, code), (StatusCode::CONFLICT, "sequence_exhausted"));
        for part in ["invoice", "20261128", "9007199254740991", "new sequence", "next day"] {
            assert!(message.contains(part), "{part} not in {message}");
        }
        let grpc = exhausted().into_grpc_status();
        assert_eq!(grpc.code(), tonic::Code::FailedPrecondition);
        assert_eq!(grpc.metadata().get(GRPC_CODE_KEY).unwrap(), "sequence_exhausted");
        let (_, meaning) =
            ERROR_CODES.iter().find(|(code, _)| *code == "sequence_exhausted").unwrap();
        assert!(meaning.starts_with("409"), "{meaning}");
    }

    /// Issue 31, third review: a Redis whose `INFO` idmint cannot use is final (501, gRPC
    /// `FAILED_PRECONDITION`), never the retryable 503 every take answered before.
    #[test]
    fn a_counter_store_that_cannot_serve_sequences_is_final() {
        let unsupported = || {
            ApiError::Sequence(SequenceError::Store(StoreError::Unsupported {
                store: "redis redis://127.0.0.1:6379".to_string(),
                reason: "cannot serve sequences: it refuses INFO to idmint's user".to_string(),
            }))
        };
        let (status, code, message) = unsupported().into_parts();
        assert_eq!((status, code), (StatusCode::NOT_IMPLEMENTED, "sequence_store_unsupported"));
        assert!(message.contains("refuses INFO"), "{message}");
        let grpc = unsupported().into_grpc_status();
        assert_eq!(grpc.code(), tonic::Code::FailedPrecondition);
        assert_eq!(grpc.metadata().get(GRPC_CODE_KEY).unwrap(), "sequence_store_unsupported");
    }
}
