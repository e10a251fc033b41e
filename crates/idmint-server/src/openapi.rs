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
//! naming the codes (`error.rs`'s `ERROR_CODES`), or the shared set of its family
//! (`StoreErrors`, ...); mark an admin route with `security(("bearer" = []))` and
//! `AdminErrors`; derive `ToSchema` for its bodies; make the handler `pub(crate)` and add it
//! to `paths(...)` below. Parameter descriptions, schema snippets and error sets that routes
//! share live in `http/shared.rs`. `tests/it/openapi.rs` fails until the router and the
//! document agree on every path and method.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

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
        crate::http::segment::leaf_segment,
        crate::http::snowflake::leaf_snowflake,
        crate::http::snowflake::leaf_decode,
        crate::http::monitor::cache,
        crate::http::monitor::db,
        crate::http::segment::segment_ids,
        crate::http::leases::lease_ranges,
        crate::http::leases::return_ranges,
        crate::http::decode::decode,
        crate::http::tags::list_tags,
        crate::http::tags::create_tag,
        crate::http::tags::get_tag,
        crate::http::tags::set_step,
        crate::http::tags::delete_tag,
        crate::http::snowflake::snowflake_ids,
        crate::http::snowflake::snowflake_decode,
        crate::http::tso::timestamps,
        crate::http::tso::decode,
        crate::http::uuids::uuid_ids,
        crate::http::uuids::ulid_ids,
        crate::http::sequences::seq_ids,
        crate::http::sequences::list_seqs,
        crate::http::sequences::create_seq,
        crate::http::sequences::get_seq,
        crate::http::sequences::delete_seq,
        crate::http::status::health,
        crate::http::status::ready,
        crate::openapi::openapi,
        crate::http::status::scrape,
        crate::http::status::page,
        crate::http::status::status,
        crate::http::tinyid::next_id,
        crate::http::tinyid::next_id_simple,
        crate::http::tinyid::next_segment_id,
        crate::http::tinyid::next_segment_id_simple,
    ),
    modifiers(&LeafAnyMethod, &BearerScheme, &LimitsAndClientTokens),
    tags(
        (name = "leaf", description = "Meituan Leaf's routes, byte-compatible so existing Leaf \
            clients work unchanged: ids answer `200 text/plain` in decimal; errors are non-200 \
            with a JSON body, never `0` or a negative number."),
        (name = "tinyid", description = "Didi Tinyid's routes on a Tinyid database \
            (`[tinyid]`): Tinyid's answers, its tokens (`?token=`, checked against \
            `tiny_id_token`), its delta/remainder and version compare-and-set. Errors keep a \
            non-200 status."),
        (name = "segment", description = "Segment mode: ids of a tag from ranges the store \
            reserves, and the tags themselves."),
        (name = "snowflake", description = "Snowflake-style ids: time | worker | sequence."),
        (name = "sequences", description = "Sequences on Redis below a ceiling kept in the \
            store; plain or daily."),
        (name = "tso", description = "The timestamp oracle: 64-bit timestamps \
            `physical_ms << 18 | logical`, strictly increasing across the cluster."),
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

/// Leaf's and Tinyid's routes answer any method (both map them without one; router.rs's
/// `leaf_any`, http/tinyid.rs's `any_but_head`):
/// each GET operation of them is documented again under POST, PUT, PATCH and DELETE, with
/// its operation id suffixed by the method (`leafSegmentGet` → `leafSegmentGetPost`), so
/// every operation id stays unique. HEAD and OPTIONS take no id and are described in the
/// operations' text, not as operations.
struct LeafAnyMethod;

impl Modify for LeafAnyMethod {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for route in crate::routes::ROUTES.iter().filter(|r| r.any_method).map(|r| r.path) {
            let Some(item) = openapi.paths.paths.get_mut(route) else { continue };
            let Some(get) = item.get.clone() else { continue };
            let copy = |method: &str| {
                let mut operation = get.clone();
                operation.operation_id =
                    get.operation_id.as_ref().map(|id| format!("{id}{method}"));
                Some(operation)
            };
            item.post = copy("Post");
            item.put = copy("Put");
            item.patch = copy("Patch");
            item.delete = copy("Delete");
        }
    }
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
        let tinyid = ApiKey::Query(ApiKeyValue::with_description(
            "token",
            "A token of Tinyid's tiny_id_token table for the request's bizType, on Tinyid's \
             routes only (the one place a token travels in the query string)",
        ));
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
        components.add_security_scheme("tinyid_token", SecurityScheme::ApiKey(tinyid));
    }
}

/// What the middlewares add to every operation: the 429 of the per-client limit (any route
/// may answer it), the 415 of a gRPC content type on an HTTP route, and on the routes of
/// one tag (the route table's tag routes and `/v1/decode`) the optional bearer token of a
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
        let tag_routes: Vec<&str> = crate::routes::tag_routes()
            .into_iter()
            .map(|(route, _)| route)
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

/// This document
///
/// The OpenAPI 3.1 document of this API, generated from the handlers.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    operation_id = "openapi",
    responses((status = 200, description = "OpenAPI 3.1", content(("application/json"))))
)]
pub(crate) async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON.as_str())
}
