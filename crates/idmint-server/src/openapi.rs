//! The OpenAPI 3.1 document served at `/openapi.json`, generated from the handlers: each
//! handler's `#[utoipa::path(...)]` annotation (method, path, parameters, request body, every
//! success and every error status it can answer) and the `ToSchema` derives of the bodies it
//! reads and writes. This file only gathers them ([`ApiDoc`]) and adds what belongs to no
//! handler: the info section, the tags, the `bearer` security scheme and a few shared
//! schemas. It must not describe a route by hand.
//!
//! **Adding a route** (in any file): annotate its handler with `#[utoipa::path(...)]`, the
//! method and path exactly as `router()` registers them; list its parameters, its request
//! body, its success bodies and each error status with `body = ErrorBody` and a description
//! naming the codes (`error.rs`'s `ERROR_CODES`); mark an admin route with
//! `security(("bearer" = []))` and the 401/403 answers; derive `ToSchema` for its bodies; make
//! the handler `pub(crate)` and add it to `paths(...)` below. `tests/it/openapi.rs` fails
//! until the router and the document agree on every path and method.

use std::sync::LazyLock;

use idmint_core::StartId;
use idmint_core::limits::{
    BATCH_COUNT_MAX, DESCRIPTION_LEN_MAX, ID_MAX, ID_MIN, STEP_DEFAULT, STEP_MAX, STEP_MIN,
    TAG_LEN_MAX,
};
use utoipa::openapi::schema::{ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, Schema, SchemaFormat};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

/// The API's OpenAPI document, gathered from the handlers' annotations.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "idmint",
        version = env!("CARGO_PKG_VERSION"),
        description = "Distributed unique 64-bit id service. Errors are JSON bodies \
            {\"error\": {\"code\", \"message\"}} with a 4xx/5xx status; no route ever answers a \
            number in place of an id. Admin routes (creating, changing and deleting tags and \
            sequences) take `Authorization: Bearer TOKEN` when the node has admin tokens."
    ),
    paths(
        crate::routes::leaf_segment,
        crate::routes::leaf_snowflake,
        crate::routes::leaf_decode,
        crate::routes::segment_ids,
        crate::leases::lease_ranges,
        crate::leases::return_ranges,
        crate::formats::decode,
        crate::routes::list_tags,
        crate::routes::create_tag,
        crate::routes::get_tag,
        crate::routes::set_step,
        crate::routes::delete_tag,
        crate::routes::snowflake_ids,
        crate::routes::snowflake_decode,
        crate::uuids::uuid_ids,
        crate::uuids::ulid_ids,
        crate::sequences::seq_ids,
        crate::sequences::list_seqs,
        crate::sequences::create_seq,
        crate::sequences::get_seq,
        crate::sequences::delete_seq,
        crate::routes::health,
        crate::routes::ready,
        crate::routes::openapi,
        crate::metrics::scrape,
        crate::dashboard::page,
        crate::dashboard::status,
    ),
    modifiers(&BearerScheme, &LimitsAndClientTokens),
    tags(
        (name = "leaf", description = "Meituan Leaf's routes, byte-compatible so existing Leaf \
            clients work unchanged: ids answer `200 text/plain` in decimal; errors are non-200 \
            with a JSON body, never `0` or a negative number."),
        (name = "segment", description = "Segment mode: ids of a tag from ranges the store \
            reserves, and the tags themselves."),
        (name = "snowflake", description = "Snowflake-style ids: time | worker | sequence."),
        (name = "sequences", description = "Sequences on Redis below a ceiling kept in the \
            store; plain or daily."),
        (name = "uuid", description = "UUID v4/v7 and ULID made by the node, no store."),
        (name = "service", description = "Liveness, readiness and this document."),
        (name = "operations", description = "Prometheus metrics, the dashboard and its status."),
    ),
)]
pub(crate) struct ApiDoc;

/// The document as JSON, generated once on first use.
pub(crate) static OPENAPI_JSON: LazyLock<String> = LazyLock::new(|| {
    // Serialising a document of strings, numbers and maps cannot fail.
    ApiDoc::openapi().to_pretty_json().unwrap_or_else(|e| panic!("OpenAPI document: {e}"))
});

/// Description of the `tag` path parameter.
pub(crate) const TAG_PARAM: &str = "The tag: 1-128 characters of A-Z a-z 0-9 _ . : -";

/// Description of the `name` path parameter of sequences.
pub(crate) const SEQ_PARAM: &str = "Sequence name: 1-128 characters of A-Z a-z 0-9 _ . : -";

/// The 500 answer of routes that reach the segment store.
pub(crate) const STORE_500: &str = "The tag's store row holds impossible values \
    (`store_row_invalid`), the node's data directory failed (`local_state`), or another failure \
    (`internal`)";

/// The 503 answer of routes that reach the segment store.
pub(crate) const STORE_503: &str = "The store did not answer in time, both segments are spent \
    and the refill failed (`unavailable`), or the node is shutting down (`shutting_down`)";

/// The 503 answer of routes that take snowflake ids.
pub(crate) const SNOWFLAKE_503: &str = "The clock is behind beyond tolerance (`clock_behind`), \
    the worker lease is not proven (`worker_lease_not_proven`) or was just taken and waits \
    out any earlier holder's ids (`lease_settling`), the layout ran out \
    (`layout_exhausted`), the generator is not running (`snowflake_not_running`) or did not \
    answer in time (`snowflake_unavailable`)";

/// The 500 answer of routes that take snowflake ids.
pub(crate) const SNOWFLAKE_500: &str =
    "The node's time mark could not be written (`local_state`), or another failure (`internal`)";

/// The 503 answer of sequence routes.
pub(crate) const SEQ_503: &str = "No room below the ceiling within 1 s, Redis or the store \
    unavailable (`sequence_unavailable`), or sequences not configured (`sequences_not_running`)";

/// The 500 answer of sequence routes.
pub(crate) const SEQ_500: &str = "An unexpected store failure (`internal`)";

/// The 503 answer of UUID v7 and ULID.
pub(crate) const CLOCK_503: &str = "The clock reads past the 48-bit millisecond field of UUID \
    v7 and ULID (`clock_out_of_range`)";

/// The 401 answer of admin routes.
pub(crate) const UNAUTHORIZED: &str = "No bearer token, or no `Authorization: Bearer TOKEN` \
    header (`unauthorized`; only when the node has an admin token: a node without one serves \
    admin routes to loopback clients only)";

/// The 403 answer of admin routes.
pub(crate) const FORBIDDEN: &str =
    "The bearer token is not the admin token (a client token included) (`forbidden`)";

/// A tag or sequence name as [`idmint_core::Tag::parse`] accepts it.
pub(crate) struct TagName;

impl PartialSchema for TagName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(format!("^[A-Za-z0-9_.:-]{{1,{TAG_LEN_MAX}}}$")))
            .description(Some("1-128 characters of A-Z a-z 0-9 _ . : -"))
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

/// Adds the `bearer` security scheme that admin operations name.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An admin token of the node, on admin routes: `Authorization: Bearer TOKEN`",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// What the middlewares add to every operation: the 429 of the per-client limit (any route
/// may answer it), the 415 of a gRPC content type on an HTTP route, and on the routes of
/// one tag ([`crate::auth::TAG_ROUTES`] and `/v1/decode`) the optional bearer token of a
/// client that tag names, with its 401 and 403.
struct LimitsAndClientTokens;

impl Modify for LimitsAndClientTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let error = |description: &str| {
            let content =
                ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build();
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content("application/json", content)
                    .build(),
            )
        };
        let tag_routes: Vec<&str> = crate::auth::TAG_ROUTES
            .iter()
            .map(|(route, _)| *route)
            .chain(std::iter::once("/v1/decode"))
            .collect();
        for (path, item) in openapi.paths.paths.iter_mut() {
            let guarded = tag_routes.contains(&path.as_str());
            let operations =
                [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete];
            for operation in operations.into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                responses.insert("429".to_string(), error(TOO_MANY_REQUESTS));
                responses.insert("415".to_string(), error(GRPC_ON_HTTP_ROUTE));
                let admin = responses.contains_key("401");
                if guarded && !admin {
                    responses.insert("401".to_string(), error(CLIENT_UNAUTHORIZED));
                    responses.insert("403".to_string(), error(CLIENT_FORBIDDEN));
                    // Optional: only a tag that an `[auth.clients.NAME]` section names.
                    operation.security = Some(vec![
                        SecurityRequirement::default(),
                        SecurityRequirement::new("bearer", Vec::<String>::new()),
                    ]);
                }
            }
        }
    }
}

/// The 429 every route may answer.
pub(crate) const TOO_MANY_REQUESTS: &str = "This client address already has     `limits.client_in_flight_max` requests in flight (`too_many_requests`); `Retry-After: 1`";

/// The 415 every HTTP route answers a gRPC content type.
pub(crate) const GRPC_ON_HTTP_ROUTE: &str = "A gRPC content type (`application/grpc...`) on an \
    HTTP route, or a JSON body without `Content-Type: application/json` \
    (`unsupported_media_type`)";

/// The 401 of a tag's routes.
pub(crate) const CLIENT_UNAUTHORIZED: &str = "The tag is named by a client token     (`[auth.clients.NAME]`) and the request has no bearer token (`unauthorized`)";

/// The 403 of a tag's routes.
pub(crate) const CLIENT_FORBIDDEN: &str = "The bearer token is neither one of the tag's client     tokens nor the admin token (`forbidden`)";

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
