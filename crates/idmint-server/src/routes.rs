//! The route table: every HTTP route declared once, with who may call it, what HEAD does on
//! it and whether it answers every method. The router mounts exactly these routes (and each
//! one's handlers, `router.rs`), the middleware and the token checks read a route's entry
//! (`middleware.rs`, `auth.rs`), and the OpenAPI document its method and token rules
//! (`openapi.rs`). A route that is not here is not served.
//!
//! Pure data: this module imports no other module of the crate, so every module may read it.

use axum::http::Method;

/// What HEAD does on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// `200` with no body after the token check; the handler never runs (every route that
    /// hands out ids or leases: a HEAD never consumes an id).
    WithoutHandler,
    /// The GET handler only reads: HEAD runs it and drops the body.
    Reads,
    /// The route has no GET: HEAD answers `405` with `Allow`, as any method it does not take.
    Refused,
}

/// One HTTP route.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// The router's template (`/v1/segment/{tag}`).
    pub path: &'static str,
    /// The methods the admin token guards (the routes that change the store).
    pub admin: &'static [Method],
    /// The path parameter naming a tag or sequence: a client token configured for it
    /// guards the route.
    pub tag: Option<&'static str>,
    /// Leaf's monitor pages (`/cache`, `/db`): they show every tag's volume and
    /// description, so the admin token guards them whatever the method.
    pub monitor: bool,
    /// Didi Tinyid's routes: Tinyid's `tiny_id_token` table guards them, with the token in
    /// the query string, the one place idmint accepts one there.
    pub tinyid: bool,
    /// What HEAD does.
    pub head: Head,
    /// Answered under every method, as Leaf and Tinyid map their routes without one (the
    /// OpenAPI document repeats its GET under POST, PUT, PATCH and DELETE).
    pub any_method: bool,
}

/// An open route with a GET that hands out ids.
const fn issues(path: &'static str) -> Route {
    Route {
        path,
        admin: &[],
        tag: None,
        monitor: false,
        tinyid: false,
        head: Head::WithoutHandler,
        any_method: false,
    }
}

/// An open route whose GET only reads.
const fn reads(path: &'static str) -> Route {
    Route { head: Head::Reads, ..issues(path) }
}

/// A route of one tag or sequence, named by `param`, whose GET hands out ids.
const fn of_tag(path: &'static str, param: &'static str) -> Route {
    Route { tag: Some(param), ..issues(path) }
}

/// A Leaf route (any method).
const fn leaf(route: Route) -> Route {
    Route { any_method: true, ..route }
}

/// A Tinyid route (any method, Tinyid's tokens).
const fn tinyid(path: &'static str) -> Route {
    Route { tinyid: true, any_method: true, ..issues(path) }
}

/// Every HTTP route.
pub const ROUTES: &[Route] = &[
    leaf(of_tag("/api/segment/get/{tag}", "tag")),
    of_tag("/v1/segment/{tag}", "tag"),
    of_tag("/v1/segment/{tag}/ranges", "tag"),
    Route { head: Head::Refused, ..of_tag("/v1/segment/{tag}/return", "tag") },
    // Its `tag` query parameter names a tag: `auth.rs` checks it there (`DECODE_ROUTE`).
    reads("/v1/decode"),
    Route { admin: &[Method::POST], ..reads("/v1/tags") },
    Route { admin: &[Method::PATCH, Method::DELETE], tag: Some("tag"), ..reads("/v1/tags/{tag}") },
    leaf(issues("/api/snowflake/get/{key}")),
    leaf(reads("/decodeSnowflakeId")),
    leaf(Route { monitor: true, ..reads("/cache") }),
    leaf(Route { monitor: true, ..reads("/db") }),
    issues("/v1/snowflake"),
    reads("/v1/snowflake/{id}"),
    of_tag("/v1/seq/{name}", "name"),
    Route { admin: &[Method::POST], ..reads("/v1/seqs") },
    Route { admin: &[Method::DELETE], tag: Some("name"), ..reads("/v1/seqs/{name}") },
    issues("/v1/tso"),
    reads("/v1/tso/{timestamp}"),
    issues("/v1/uuid"),
    issues("/v1/ulid"),
    tinyid("/tinyid/id/nextId"),
    tinyid("/tinyid/id/nextIdSimple"),
    tinyid("/tinyid/id/nextSegmentId"),
    tinyid("/tinyid/id/nextSegmentIdSimple"),
    reads("/health"),
    reads("/ready"),
    reads("/openapi.json"),
    reads("/metrics"),
    reads("/"),
    reads("/v1/status"),
];

/// The entry of `path`.
pub fn route(path: &str) -> Option<&'static Route> {
    ROUTES.iter().find(|route| route.path == path)
}

/// The routes that change the store, `(method, route)`: the admin token guards exactly these.
pub fn admin_routes() -> Vec<(Method, &'static str)> {
    ROUTES.iter().flat_map(|r| r.admin.iter().map(move |m| (m.clone(), r.path))).collect()
}

/// Leaf's monitor pages.
pub fn monitor_routes() -> Vec<&'static str> {
    ROUTES.iter().filter(|r| r.monitor).map(|r| r.path).collect()
}

/// The routes of one tag or sequence, and the path parameter naming it.
pub fn tag_routes() -> Vec<(&'static str, &'static str)> {
    ROUTES.iter().filter_map(|r| Some((r.path, r.tag?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each route once, each tag parameter in its template, Tinyid's and Leaf's routes
    /// answering any method.
    #[test]
    fn every_route_is_declared_once_and_consistently() {
        let mut paths: Vec<&str> = ROUTES.iter().map(|r| r.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), ROUTES.len(), "a route declared twice");
        for route in ROUTES {
            if let Some(param) = route.tag {
                assert!(route.path.contains(&format!("{{{param}}}")), "{}", route.path);
            }
            assert!(!route.tinyid || route.any_method, "{}", route.path);
            assert!(!route.monitor || route.head == Head::Reads, "{}", route.path);
        }
    }
}
