//! The router: every HTTP route and the gRPC service behind the one middleware every
//! request passes (`around`: the per-client limit and the request timeout, the tokens, the
//! handler, errors made JSON, the metrics), and the answer where no route matches.
//!
//! The top of the crate: it imports the route modules and the gRPC module; none of them
//! imports it.

use std::sync::Arc;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, RawPathParams, Request, State};
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Router, middleware};

use crate::error::ApiError;
use crate::http::{
    decode, leases, monitor, segment, sequences, snowflake, status, tags, tinyid, uuids,
};
use crate::limits::REQUEST_BODY_BYTES_MAX;
use crate::state::{AppState, SharedState};

/// What one listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// The HTTP routes and the gRPC service on one port (the default).
    HttpAndGrpc,
    /// The HTTP routes only (gRPC has its own port, `--grpc-listen`).
    Http,
    /// The gRPC service only.
    Grpc,
}

/// The API as an axum router over `state`: the HTTP routes and the gRPC service.
pub fn router(state: AppState) -> Router {
    router_for(Arc::new(state), Serves::HttpAndGrpc)
}

/// The router of one listener: what it `serves`, over the shared state, behind the one
/// middleware every request passes.
pub fn router_for(state: SharedState, serves: Serves) -> Router {
    // The recorder first, so the library's first refill is already measured.
    crate::metrics::handle();
    // One reference count per request and extractor, not one per field: the state is
    // shared, and every field's count would bounce between cores on each request.
    let routes = match serves {
        Serves::HttpAndGrpc => http_routes().merge(crate::grpc::grpc_router(Arc::clone(&state))),
        Serves::Http => http_routes(),
        Serves::Grpc => crate::grpc::grpc_router(Arc::clone(&state)),
    };
    routes
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), around))
        .with_state(state)
}

/// Every HTTP route.
fn http_routes() -> Router<SharedState> {
    Router::new()
        .route("/api/segment/get/{tag}", leaf_any(segment::leaf_segment))
        .route("/v1/segment/{tag}", get(segment::segment_ids))
        .route("/v1/segment/{tag}/ranges", get(leases::lease_ranges))
        .route("/v1/segment/{tag}/return", post(leases::return_ranges))
        .route("/v1/decode", get(decode::decode))
        .route("/v1/tags", get(tags::list_tags).post(tags::create_tag))
        .route("/v1/tags/{tag}", get(tags::get_tag).patch(tags::set_step).delete(tags::delete_tag))
        .route("/api/snowflake/get/{key}", leaf_any(snowflake::leaf_snowflake))
        .route("/decodeSnowflakeId", leaf_any(snowflake::leaf_decode))
        .route("/cache", leaf_any(monitor::cache))
        .route("/db", leaf_any(monitor::db))
        .route("/v1/snowflake", get(snowflake::snowflake_ids))
        .route("/v1/snowflake/{id}", get(snowflake::snowflake_decode))
        .route("/v1/seq/{name}", get(sequences::seq_ids))
        .route("/v1/seqs", get(sequences::list_seqs).post(sequences::create_seq))
        .route("/v1/seqs/{name}", get(sequences::get_seq).delete(sequences::delete_seq))
        .route("/v1/uuid", get(uuids::uuid_ids))
        .route("/v1/ulid", get(uuids::ulid_ids))
        .route("/tinyid/id/nextId", tinyid::any_but_head(tinyid::next_id))
        .route("/tinyid/id/nextIdSimple", tinyid::any_but_head(tinyid::next_id_simple))
        .route("/tinyid/id/nextSegmentId", tinyid::any_but_head(tinyid::next_segment_id))
        .route(
            "/tinyid/id/nextSegmentIdSimple",
            tinyid::any_but_head(tinyid::next_segment_id_simple),
        )
        .route("/health", get(status::health))
        .route("/ready", get(status::ready))
        .route("/openapi.json", get(crate::openapi::openapi))
        .route("/metrics", get(status::scrape))
        .route("/", get(status::page))
        .route("/v1/status", get(status::status))
}

/// The methods Leaf's routes answer: Leaf maps them without a method, so its clients may
/// use any of these. HEAD and OPTIONS never run the handler (see [`around`] and
/// [`leaf_options`]).
pub(crate) const LEAF_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// The routes whose GET handler only reads: a HEAD request runs it (and drops the body).
/// HEAD on any other route (every route that hands out ids or leases, and any route added
/// later, until it is listed here) answers `200` with no body after the token check, and
/// never runs its handler: a HEAD never consumes an id.
pub(crate) const HEAD_READS: &[&str] = &[
    "/decodeSnowflakeId",
    "/v1/decode",
    "/v1/tags",
    "/v1/tags/{tag}",
    "/v1/snowflake/{id}",
    "/v1/seqs",
    "/v1/seqs/{name}",
    "/health",
    "/ready",
    "/openapi.json",
    "/metrics",
    "/",
    "/v1/status",
    "/cache",
    "/db",
];

/// The routes with no GET: HEAD goes to the router there, which answers 405 with `Allow`, as
/// for any method a route does not take (HEAD means "GET without the body").
pub(crate) const HEAD_REFUSED: &[&str] = &["/v1/segment/{tag}/return"];

/// A Leaf route: `handler` under GET, POST, PUT, PATCH and DELETE (Leaf maps its routes
/// without a method), HEAD as [`around`] decides, OPTIONS answered by [`leaf_options`].
/// Other methods (TRACE, CONNECT, extensions) answer 405 with `Allow`.
fn leaf_any<H, T>(handler: H) -> MethodRouter<SharedState>
where
    H: Handler<T, SharedState>,
    T: 'static,
{
    get(handler.clone())
        .post(handler.clone())
        .put(handler.clone())
        .patch(handler.clone())
        .delete(handler)
        .options(leaf_options)
}

/// OPTIONS on a Leaf route: `204` with the methods it answers, no id taken.
async fn leaf_options() -> Response {
    (StatusCode::NO_CONTENT, [(header::ALLOW, HeaderValue::from_static(LEAF_METHODS))])
        .into_response()
}

/// HEAD on a route whose handler would hand out ids ([`HEAD_READS`] lists the others):
/// `200`, no body, nothing taken. The token check has run, so it tells a client that the
/// route exists and its token is accepted; it does not say whether the tag exists (`GET
/// /v1/tags/{tag}` does).
fn head_without_handler() -> Response {
    (StatusCode::OK, [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))])
        .into_response()
}

/// What every request passes through, once (one middleware, so one boxed future and one
/// service clone per request): the per-client limit and the request timeout, the tokens,
/// the handler, errors made JSON, and last the metrics, which see every answer (401s, 429s
/// and timeouts included).
async fn around(
    State(app): State<SharedState>,
    route: Option<MatchedPath>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let route = route.as_ref().map(MatchedPath::as_str);
    // Authorisation follows the route the request resolved to, never a header the client
    // picks: the gRPC routes (`GRPC_ROUTES`) check their tokens from the metadata where they
    // need one (grpc.rs: idmint.v1.IdMint; health and reflection are open), every other
    // route is checked here. The content type only shapes the errors answered where no
    // route matched (`no_route`).
    let grpc_route = route.is_some_and(crate::grpc::is_grpc_route);
    // The method's labels, for the gRPC metrics (`None` outside the gRPC routes).
    let grpc_method = grpc_route.then(|| crate::grpc::method_labels(request.uri().path()));
    let grpc_shaped = grpc_route || (route.is_none() && crate::grpc::is_grpc(request.headers()));
    let response = match crate::limits::admit(&app.http_limits, &request) {
        Err(refused) if grpc_shaped => crate::grpc::error_response(refused),
        Err(refused) => refused.into_response(),
        Ok(_pass) if grpc_route => {
            // gRPC answers statuses, never JSON; the timeout bounds the time to the first
            // message.
            crate::limits::bounded_or(
                &app.http_limits,
                next.run(request),
                crate::grpc::error_response,
            )
            .await
        }
        Ok(_pass) => {
            crate::limits::bounded(&app.http_limits, async {
                let checked = match route {
                    Some(route) => crate::grpc::refuse_on_http_route(request.headers())
                        .and_then(|()| crate::auth::check(&app.auth, route, params, &mut request)),
                    None => Ok(()),
                };
                // Tinyid's routes check Tinyid's token table, and answer its refusal in
                // Tinyid's shape; every other refusal above is idmint's on every route.
                let tinyid_checked = match (&checked, route) {
                    (Ok(()), Some(route)) => {
                        crate::auth::check_tinyid(&app.node, route, &mut request)
                    }
                    _ => Ok(()),
                };
                let head_only = method == Method::HEAD
                    && route.is_some_and(|route| {
                        !HEAD_READS.contains(&route) && !HEAD_REFUSED.contains(&route)
                    });
                match (checked, tinyid_checked) {
                    (Ok(()), Ok(())) if head_only => head_without_handler(),
                    (Ok(()), Ok(())) => crate::error::json_errors(next.run(request).await).await,
                    (Err(error), _) => error.into_response(),
                    (Ok(()), Err(error)) => tinyid::refusal(route, error),
                }
            })
            .await
        }
    };
    // A gRPC call's status is in its headers or, after the messages, its trailers: the
    // metrics read it where it is known (metrics.rs), not the HTTP status (always 200).
    if let Some(labels) = grpc_method {
        return crate::metrics::observe_grpc(labels, response, started);
    }
    crate::metrics::record_http(route, &method, response.status().as_u16(), started);
    response
}

/// No route: 404, or for a gRPC call (a method this node lacks, or gRPC asked of a port
/// that serves HTTP only) the gRPC status `UNIMPLEMENTED`.
async fn no_route(uri: Uri, headers: axum::http::HeaderMap) -> Response {
    let error = ApiError::NoRoute(uri.path().to_string());
    if crate::grpc::is_grpc(&headers) {
        return crate::grpc::error_response(error);
    }
    error.into_response()
}
