//! The router: every HTTP route and the gRPC service, each behind the one middleware every
//! request passes (middleware.rs: the per-client limit, the tokens, HEAD without a handler,
//! the request timeout, errors made JSON, the metrics), and the answer where no route
//! matches.
//!
//! The top of the crate: it imports the route modules and the gRPC module; none of them
//! imports it.

use std::sync::Arc;

use axum::Router;
use axum::handler::Handler;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, get_service};

use crate::error::ApiError;
use crate::http::{
    decode, leases, monitor, segment, sequences, snowflake, status, tags, tinyid, tso, uuids,
};
use crate::middleware::{Guarded, On, RouteInfo};
use crate::routes::ROUTES;
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

/// The router of one listener: what it `serves`, over the shared state, every route behind
/// the one middleware (middleware.rs).
pub fn router_for(state: SharedState, serves: Serves) -> Router {
    // The recorder first, so the library's first refill is already measured.
    crate::metrics::handle();
    let routes = match serves {
        Serves::HttpAndGrpc => http_routes(&state).merge(grpc_routes(&state)),
        Serves::Http => http_routes(&state),
        Serves::Grpc => grpc_routes(&state),
    };
    routes.fallback_service(Guarded::new(
        no_route.with_state(()),
        Arc::clone(&state),
        RouteInfo::unmatched(),
    ))
}

/// The gRPC services (`grpc::GRPC_ROUTES`), each behind the middleware.
fn grpc_routes(app: &SharedState) -> Router {
    crate::grpc::grpc_router(app, &Guard(app))
}

/// Mounts each gRPC service behind the middleware.
struct Guard<'a>(&'a SharedState);

impl crate::grpc::Mount for Guard<'_> {
    fn mount<S: crate::grpc::GrpcService>(
        &self,
        router: Router,
        route: &'static str,
        service: S,
    ) -> Router {
        router.route_service(route, On::route(self.0, route).service(service))
    }
}

/// Every HTTP route of the route table (`routes.rs`), each with its handlers.
fn http_routes(app: &SharedState) -> Router {
    ROUTES.iter().fold(Router::new(), |router, route| {
        let on = On::route(app, route.path);
        router.route(route.path, handlers(route.path)(&on))
    })
}

/// The handlers of the route `path` under each method it takes. Every route of the table has
/// an arm here (a missing one stops every router's build, so every test, with its name).
fn handlers(path: &str) -> fn(&On) -> MethodRouter {
    match path {
        "/api/segment/get/{tag}" => |on| leaf_any(on, segment::leaf_segment),
        "/v1/segment/{tag}" => |on| on.get(segment::segment_ids),
        "/v1/segment/{tag}/ranges" => |on| on.get(leases::lease_ranges),
        "/v1/segment/{tag}/return" => |on| on.post(leases::return_ranges),
        "/v1/decode" => |on| on.get(decode::decode),
        "/v1/tags" => {
            |on| on.get_and(tags::list_tags, |on, m| m.post_service(on.bounded(tags::create_tag)))
        }
        "/v1/tags/{tag}" => |on| {
            on.get_and(tags::get_tag, |on, m| {
                m.patch_service(on.bounded(tags::set_step))
                    .delete_service(on.bounded(tags::delete_tag))
            })
        },
        "/api/snowflake/get/{key}" => |on| leaf_any(on, snowflake::leaf_snowflake),
        "/decodeSnowflakeId" => |on| leaf_any(on, snowflake::leaf_decode),
        "/cache" => |on| leaf_any(on, monitor::cache),
        "/db" => |on| leaf_any(on, monitor::db),
        "/v1/snowflake" => |on| on.get(snowflake::snowflake_ids),
        "/v1/snowflake/{id}" => |on| on.get(snowflake::snowflake_decode),
        "/v1/seq/{name}" => |on| on.get(sequences::seq_ids),
        "/v1/seqs" => |on| {
            on.get_and(sequences::list_seqs, |on, m| {
                m.post_service(on.bounded(sequences::create_seq))
            })
        },
        "/v1/seqs/{name}" => |on| {
            on.get_and(sequences::get_seq, |on, m| {
                m.delete_service(on.bounded(sequences::delete_seq))
            })
        },
        "/v1/tso" => |on| on.get(tso::timestamps),
        "/v1/tso/{timestamp}" => |on| on.get(tso::decode),
        "/v1/uuid" => |on| on.get(uuids::uuid_ids),
        "/v1/ulid" => |on| on.get(uuids::ulid_ids),
        "/tinyid/id/nextId" => |on| any_but_head(on, tinyid::next_id),
        "/tinyid/id/nextIdSimple" => |on| any_but_head(on, tinyid::next_id_simple),
        "/tinyid/id/nextSegmentId" => |on| any_but_head(on, tinyid::next_segment_id),
        "/tinyid/id/nextSegmentIdSimple" => |on| any_but_head(on, tinyid::next_segment_id_simple),
        "/health" => |on| on.get(status::health),
        "/ready" => |on| on.get(status::ready),
        "/openapi.json" => |on| on.get(crate::openapi::openapi),
        "/metrics" => |on| on.get(status::scrape),
        "/" => |on| on.get(status::page),
        "/v1/status" => |on| on.get(status::status),
        other => panic!("the route table (routes.rs) names {other}, which has no handler here"),
    }
}

/// A Leaf route: `handler` under GET, POST, PUT, PATCH and DELETE (Leaf maps its routes
/// without a method), HEAD as the middleware decides, OPTIONS answered by [`leaf_options`].
/// Other methods (TRACE, CONNECT, extensions) answer 405 with `Allow`.
fn leaf_any<H: Handler<T, SharedState>, T: 'static>(on: &On, handler: H) -> MethodRouter {
    on.methods(
        get_service(on.guard(handler.clone()))
            .post_service(on.bounded(handler.clone()))
            .put_service(on.bounded(handler.clone()))
            .patch_service(on.bounded(handler.clone()))
            .delete_service(on.bounded(handler))
            .options_service(on.guard(leaf_options)),
    )
}

/// A Tinyid route: `handler` on every method but HEAD, which answers an empty 200 and
/// consumes nothing.
fn any_but_head<H: Handler<T, SharedState>, T: 'static>(on: &On, handler: H) -> MethodRouter {
    let others =
        MethodFilter::POST.or(MethodFilter::PUT).or(MethodFilter::PATCH).or(MethodFilter::DELETE);
    on.methods(
        get_service(on.guard(handler.clone()))
            .on_service(others, on.bounded(handler))
            .head_service(on.guard(tinyid::head)),
    )
}

/// The methods Leaf's routes answer: Leaf maps them without a method, so its clients may
/// use any of these. HEAD and OPTIONS never run the handler (see the route table's `head`
/// and [`leaf_options`]).
pub(crate) const LEAF_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// OPTIONS on a Leaf route: `204` with the methods it answers, no id taken.
async fn leaf_options() -> Response {
    (StatusCode::NO_CONTENT, [(header::ALLOW, HeaderValue::from_static(LEAF_METHODS))])
        .into_response()
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
