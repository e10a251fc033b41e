//! Bearer tokens: the admin token that guards every route that changes the store (tag
//! create/set/delete, sequence create/delete), and optional per-tag client tokens (Didi
//! Tinyid's habit) that guard a tag's id routes.
//!
//! Tokens travel only in the `Authorization: Bearer TOKEN` header (never the query string,
//! which ends up in access logs), but on Didi Tinyid's routes (Tinyid's routes, checked by
//! [`check_tinyid`] against Tinyid's own `tiny_id_token` table), whose clients send
//! `?token=` and nothing else. They are compared in constant time, and are never logged,
//! printed or put in an error: [`Token`]'s `Debug` and `Display` show `***`.
//!
//! The rules, in `check` (applied by the router's one middleware to every request that
//! resolves to an HTTP route, whatever its headers; gRPC methods check the same tokens from
//! their metadata, in grpc.rs):
//! - an admin route needs the admin token when one is configured; without one the node
//!   must listen on loopback only ([`check_exposure`] refuses the start otherwise), so only
//!   local processes reach it; so do Leaf's monitor pages (the route table's `monitor`), under every
//!   method;
//! - a tag named by a client's `tags` needs that client's token (or the admin token) on
//!   its id routes; other tags stay open;
//! - no token: 401 with `WWW-Authenticate: Bearer`; a token that is not accepted: 403;
//! - the tag a request names is parsed once, here, and handed to the handler
//!   ([`RouteTag`], [`QueryTag`]): the check and the handler never read it apart.
//!
//! This file must not decide ids or statuses: errors go through `ApiError`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::Utf8Error;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri, header};
use idmint_core::Tag;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Shortest token accepted, in bytes: 16 random characters are beyond guessing online.
pub const TOKEN_LEN_MIN: usize = 16;
/// Longest token accepted, in bytes.
pub const TOKEN_LEN_MAX: usize = 512;
/// Most client tokens (`[auth.clients.NAME]` sections).
pub const CLIENTS_MAX: usize = 1_000;

/// A bearer token: visible ASCII, 16 to 512 bytes. Its `Debug` and `Display` print `***`.
#[derive(Clone, Deserialize)]
#[serde(try_from = "String")]
pub struct Token(Arc<str>);

impl Token {
    /// Checks a token's shape; the error never contains the token.
    pub fn parse(text: &str) -> Result<Token, String> {
        if !(TOKEN_LEN_MIN..=TOKEN_LEN_MAX).contains(&text.len()) {
            return Err(format!(
                "a token must be {TOKEN_LEN_MIN} to {TOKEN_LEN_MAX} characters long (this one \
                 has {}); make one with e.g. `openssl rand -hex 32`",
                text.len()
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token must be visible ASCII characters only (no spaces); make one \
                        with e.g. `openssl rand -hex 32`"
                .to_string());
        }
        Ok(Token(text.into()))
    }

    /// Whether `given` is this token, in time independent of where they differ (the length
    /// of the token is not secret).
    pub fn matches(&self, given: &str) -> bool {
        let (ours, theirs) = (self.0.as_bytes(), given.as_bytes());
        ours.len() == theirs.len() && bool::from(ours.ct_eq(theirs))
    }

    /// The token's text, to send it (a node to its peers); never for a log line.
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Token {
    type Error = String;

    fn try_from(text: String) -> Result<Token, String> {
        Token::parse(&text)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A client with its own token and the tags it may take ids of.
#[derive(Debug, Clone)]
pub struct Client {
    /// The client's name (`[auth.clients.NAME]`), for logs and errors.
    pub name: String,
    /// Its token.
    pub token: Token,
    /// The tags (and sequences) it may take ids of.
    pub tags: Vec<Tag>,
}

/// Who may call what: the admin token and the client tokens.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    admin: Option<Token>,
    clients: Vec<Client>,
    /// For each guarded tag, the indices of the clients that may take its ids.
    by_tag: HashMap<Tag, Vec<usize>>,
}

/// What a request proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    None,
    Admin,
    Client(usize),
    Wrong,
}

impl Auth {
    /// No tokens: every route is open (the node must listen on loopback only).
    pub fn open() -> Auth {
        Auth::default()
    }

    /// An admin token and client tokens.
    pub fn new(admin: Option<Token>, clients: Vec<Client>) -> Auth {
        let mut by_tag: HashMap<Tag, Vec<usize>> = HashMap::new();
        for (index, client) in clients.iter().enumerate() {
            for tag in &client.tags {
                by_tag.entry(tag.clone()).or_default().push(index);
            }
        }
        Auth { admin, clients, by_tag }
    }

    /// Whether an admin token is configured.
    pub fn has_admin_token(&self) -> bool {
        self.admin.is_some()
    }

    /// The admin token, which a node presents to its peers (the nodes of a cluster share it).
    pub fn admin_token(&self) -> Option<&Token> {
        self.admin.as_ref()
    }

    /// The configured clients.
    pub fn clients(&self) -> &[Client] {
        &self.clients
    }

    /// Whether `headers` carry the admin token, when one is configured; with none, every
    /// caller is admin (loopback only).
    pub fn admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.admin_or(
            headers,
            "this route changes the store: send the admin token as `Authorization: Bearer TOKEN`",
            "this route needs the admin token; the token sent is not it",
        )
    }

    /// Whether `headers` carry the admin token a monitor page needs, when one is configured
    /// (the route table's `monitor`); with none, every caller may read them (loopback only).
    pub fn monitor(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.admin_or(
            headers,
            "this page shows every tag's rows: send the admin token as `Authorization: Bearer \
             TOKEN`",
            "this page needs the admin token; the token sent is not it (a client token names \
             some tags, this page shows all)",
        )
    }

    /// Whether `headers` carry the admin token, when one is configured: else 401 saying
    /// `missing` when they carry no token, 403 saying `wrong` when another one.
    fn admin_or(&self, headers: &HeaderMap, missing: &str, wrong: &str) -> Result<(), ApiError> {
        if self.admin.is_none() {
            return Ok(());
        }
        match self.prove(headers)? {
            Proof::Admin => Ok(()),
            Proof::None => Err(ApiError::Unauthorized(missing.to_string())),
            Proof::Client(_) | Proof::Wrong => Err(ApiError::Forbidden(wrong.to_string())),
        }
    }

    /// Whether `headers` may take ids of `tag`: always for a tag no client names, else with
    /// the token of a client that names it, or the admin token.
    pub fn tag(&self, headers: &HeaderMap, tag: &str) -> Result<(), ApiError> {
        // No hash at all on a node whose tags have no client tokens (most of them).
        if self.by_tag.is_empty() {
            return Ok(());
        }
        let Some(allowed) = self.by_tag.get(tag) else { return Ok(()) };
        match self.prove(headers)? {
            Proof::Admin => Ok(()),
            Proof::Client(index) if allowed.contains(&index) => Ok(()),
            Proof::None => Err(ApiError::Unauthorized(format!(
                "tag {tag} needs a client token: send it as `Authorization: Bearer TOKEN`"
            ))),
            Proof::Client(_) | Proof::Wrong => Err(ApiError::Forbidden(format!(
                "the token sent is not one of tag {tag}'s client tokens"
            ))),
        }
    }

    /// Which configured token the request carries. Every token is compared, so the time
    /// taken does not say which one matched.
    fn prove(&self, headers: &HeaderMap) -> Result<Proof, ApiError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Ok(Proof::None) };
        let given = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::Unauthorized(
                    "the Authorization header must be `Bearer TOKEN`".to_string(),
                )
            })?;
        let mut proof = Proof::Wrong;
        if self.admin.as_ref().is_some_and(|t| t.matches(given)) {
            proof = Proof::Admin;
        }
        for (index, client) in self.clients.iter().enumerate() {
            if client.token.matches(given) && proof == Proof::Wrong {
                proof = Proof::Client(index);
            }
        }
        Ok(proof)
    }
}

/// Refuses to serve beyond loopback without an admin token: anyone who reaches the address
/// could create and delete tags. The message says how to fix it.
pub fn check_exposure(listen: SocketAddr, auth: &Auth) -> Result<(), String> {
    if listen.ip().is_loopback() || auth.has_admin_token() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {listen} without an admin token: anyone who can reach it could \
         create and delete tags. Set IDMINT_ADMIN_TOKEN (or admin_token in [auth]) to a \
         secret of at least {TOKEN_LEN_MIN} characters, or listen on 127.0.0.1"
    ))
}

/// Refuses, on a node without an admin token, what a web page could send it through the
/// operator's browser (DNS rebinding, cross-site requests): a request whose host is not a
/// loopback name or address, and a state-changing request (any method but GET, HEAD and
/// OPTIONS; every gRPC call is a POST) whose `Origin` is not the node's own. With an admin
/// token configured this is never called: the token is the guard.
///
/// The host is every authority the request names: the `Host` header of HTTP/1.x, and the
/// URI's authority (HTTP/2's `:authority`, an HTTP/1.1 absolute-form target); each one
/// present must be loopback. A request that names none (HTTP/1.0 without `Host`) passes:
/// every browser names one, so only a local program can send it, and on a node without an
/// admin token a local program is admin anyway.
pub(crate) fn check_local_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let mut host = None;
    if let Some(authority) = uri.authority() {
        let authority = authority.as_str();
        if !is_loopback_authority(authority) {
            return Err(foreign_host(authority));
        }
        host = Some(authority);
    }
    for value in headers.get_all(header::HOST) {
        let text = value.to_str().map_err(|_| foreign_host("(not visible ASCII)"))?;
        if !is_loopback_authority(text) {
            return Err(foreign_host(text));
        }
        host.get_or_insert(text);
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    for origin in headers.get_all(header::ORIGIN) {
        // Browsers write an origin in lower case, with the port only when it is not the
        // scheme's default, as they write `Host`: the node's own origin is `http://HOST`.
        let own = host.is_some_and(|host| {
            origin
                .as_bytes()
                .strip_prefix(b"http://")
                .is_some_and(|rest| rest.eq_ignore_ascii_case(host.as_bytes()))
        });
        if !own {
            return Err(ApiError::ForeignOrigin(format!(
                "this node has no admin token, so it takes changes only from pages it served \
                 itself; this request comes from origin {} (a web page elsewhere). Set \
                 IDMINT_ADMIN_TOKEN and send it as `Authorization: Bearer TOKEN`, or send \
                 the request without an Origin header",
                String::from_utf8_lossy(origin.as_bytes())
            )));
        }
    }
    Ok(())
}

/// Whether `authority` (`HOST[:PORT]`, no user info) names this machine by a loopback name
/// or address: `localhost` and `*.localhost` (which browsers resolve to loopback without
/// asking DNS), `127.0.0.0/8`, `[::1]` (and `[::ffff:127.x.y.z]`), with any port or none.
fn is_loopback_authority(authority: &str) -> bool {
    // `[IPv6]` with an optional `:PORT` after it, or `HOST` with an optional `:PORT`.
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inner, "")) => (inner, None),
            Some((inner, after)) => match after.strip_prefix(':') {
                Some(port) => (inner, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    if authority.starts_with('[') {
        return host
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| IpAddr::V6(ip).to_canonical().is_loopback());
    }
    const LOCALHOST: &[u8] = b"localhost";
    const SUBDOMAIN: &[u8] = b".localhost";
    let bytes = host.as_bytes();
    bytes.eq_ignore_ascii_case(LOCALHOST)
        || (bytes.len() > SUBDOMAIN.len()
            && bytes[bytes.len() - SUBDOMAIN.len()..].eq_ignore_ascii_case(SUBDOMAIN))
        || host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// The refusal of a request whose host is not loopback, on a node without an admin token.
fn foreign_host(host: &str) -> ApiError {
    ApiError::ForeignHost(format!(
        "this node has no admin token, so it answers only requests addressed to a loopback \
         name (localhost, 127.0.0.1, [::1]); this one names host {host:?}, which is how a web \
         page elsewhere reaches a local node (DNS rebinding). Address it as \
         http://127.0.0.1:PORT, or set IDMINT_ADMIN_TOKEN to serve it under other names"
    ))
}

/// The `biz_type` of a Tinyid route's request, parsed once by the middleware, after its
/// token opened it: what was checked is what is served.
#[derive(Debug, Clone)]
pub(crate) struct TinyidBizType(pub(crate) Tag);

impl<S: Send + Sync> FromRequestParts<S> for TinyidBizType {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<TinyidBizType, ApiError> {
        parts.extensions.get::<TinyidBizType>().cloned().ok_or_else(unchecked)
    }
}

/// Checks a Tinyid's routes request: `bizType` must name a tag, and `token` must be one
/// of that `biz_type`'s tokens in Tinyid's `tiny_id_token` (compared in constant time by the
/// library); no token is 401, a wrong one (or one of another `biz_type`) 403. Other routes
/// pass untouched. The `biz_type` goes to the handler as a [`TinyidBizType`].
pub(crate) fn check_tinyid(
    node: &idmint::Node,
    checks: &RouteChecks,
    request: &mut Request,
) -> Result<(), ApiError> {
    #[derive(Deserialize)]
    struct TokenQuery {
        #[serde(rename = "bizType")]
        biz_type: Option<String>,
        token: Option<String>,
    }
    if !checks.tinyid {
        return Ok(());
    }
    let Query(query) = Query::<TokenQuery>::try_from_uri(request.uri())
        .map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let name = query.biz_type.filter(|b| !b.is_empty()).ok_or_else(|| {
        ApiError::bad_request("bad_query", "bizType is missing: send ?bizType=NAME&token=TOKEN")
    })?;
    let biz_type = Tag::parse(&name)?;
    let token = query.token.filter(|t| !t.is_empty()).ok_or_else(|| {
        ApiError::Unauthorized(format!(
            "biz_type {biz_type} needs a token of Tinyid's tiny_id_token table: send \
             ?bizType={biz_type}&token=TOKEN"
        ))
    })?;
    if !node.tinyid_token_opens(&biz_type, &token)? {
        return Err(ApiError::Forbidden(format!(
            "the token is not one of biz_type {biz_type}'s in tiny_id_token"
        )));
    }
    request.extensions_mut().insert(TinyidBizType(biz_type));
    Ok(())
}

/// The route whose `tag` query parameter names the tag it decodes with.
pub(crate) const DECODE_ROUTE: &str = "/v1/decode";

/// That the middleware checked the name a request's path holds for its route's tag or
/// sequence parameter (the route table's `tag`): its client token, if the name has any. Handlers read
/// the name through it ([`CheckedName::name`]), from the same path with the same decoding,
/// so the name served is the name checked. Nothing is parsed or looked up here: a handler's
/// take by name parses a name the node does not serve (refusing a bad one as `Tag::parse`
/// does), and [`RouteTag`] parses it for the others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckedName {
    /// The route's parameter, named in refusals.
    param: &'static str,
    /// Its place among the path's `/`-separated segments.
    place: usize,
}

impl CheckedName {
    /// The check the middleware left in `request`; a refusal when it left none.
    pub(crate) fn of(request: &Request) -> Result<CheckedName, ApiError> {
        request.extensions().get::<CheckedName>().copied().ok_or_else(unchecked)
    }

    /// The checked name in `uri`'s path, percent-decoded as the middleware decoded it
    /// (borrowed unless something was encoded).
    pub(crate) fn name(self, uri: &Uri) -> Result<Cow<'_, str>, ApiError> {
        path_name(uri, self.param, self.place)
    }
}

/// The tag or sequence a request's path names (the route table's `tag`), as the middleware checked it
/// ([`CheckedName`]), parsed.
#[derive(Debug, Clone)]
pub(crate) struct RouteTag(pub(crate) Tag);

/// The tag `/v1/decode`'s `tag` query parameter names, if any, parsed once by the
/// middleware for the token check and the handler alike.
#[derive(Debug, Clone)]
pub(crate) struct QueryTag(pub(crate) Option<Tag>);

impl<S: Send + Sync> FromRequestParts<S> for RouteTag {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<RouteTag, ApiError> {
        let checked = parts.extensions.get::<CheckedName>().copied().ok_or_else(unchecked)?;
        Ok(RouteTag(Tag::parse(&checked.name(&parts.uri)?)?))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryTag {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<QueryTag, ApiError> {
        parts.extensions.get::<QueryTag>().cloned().ok_or_else(unchecked)
    }
}

/// A handler asked for a name the middleware did not parse and check: refuse (never serve
/// an unchecked name). Only a route missing from the route table's tag routes can cause it.
fn unchecked() -> ApiError {
    ApiError::Unchecked(
        "this route's tag was not checked by the middleware (a route missing from the route table's tag routes); \
         this is a bug in idmint, please report it",
    )
}

/// Which checks one route's requests pass, read from the tables above once, when the router
/// is built (middleware.rs keeps it with the route), so a request compares no route names.
#[derive(Debug, Clone)]
pub(crate) struct RouteChecks {
    /// The route's template.
    route: &'static str,
    /// The methods the admin token guards here (the route table's `admin`).
    admin: Vec<Method>,
    /// A monitor page (the route table's `monitor`).
    monitor: bool,
    /// `/v1/decode`, whose `tag` query parameter names a tag ([`DECODE_ROUTE`]).
    decode: bool,
    /// The path parameter naming a tag or sequence (the route table's `tag`), and its place among
    /// the path's `/`-separated segments.
    tag: Option<(&'static str, usize)>,
    /// A Tinyid route (the route table's `tinyid`).
    tinyid: bool,
}

impl RouteChecks {
    /// The checks of the route `route` (a router template).
    pub(crate) fn of(route: &'static str) -> RouteChecks {
        let entry = crate::routes::route(route);
        let tag = entry.and_then(|e| e.tag).map(|name| {
            let place = route.split('/').position(|segment| {
                segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) == Some(name)
            });
            // The table names each route's parameter: a template without it is a bug.
            (name, place.unwrap_or_else(|| panic!("{route} has no {{{name}}} parameter")))
        });
        RouteChecks {
            route,
            admin: entry.map(|e| e.admin.to_vec()).unwrap_or_default(),
            monitor: entry.is_some_and(|e| e.monitor),
            decode: route == DECODE_ROUTE,
            tag,
            tinyid: entry.is_some_and(|e| e.tinyid),
        }
    }

    /// The route's template.
    pub(crate) fn route(&self) -> &'static str {
        self.route
    }
}

/// Checks the admin token on the route table's admin routes and client tokens on the route table's tag routes (and
/// `/v1/decode?tag=`) before the handler runs; `checks` are the matched route's. A path's
/// name is checked as the handler reads it ([`CheckedName`]); a query's tag is parsed here,
/// once, and handed to the handler as a [`QueryTag`]: what was checked is what is served.
pub(crate) fn check(
    auth: &Auth,
    checks: &RouteChecks,
    request: &mut Request,
) -> Result<(), ApiError> {
    let admin = checks.admin.contains(request.method());
    if admin {
        auth.admin(request.headers())?;
    }
    if checks.monitor {
        auth.monitor(request.headers())?;
    }
    if checks.decode {
        let tag = decode_tag(request.uri())?;
        if let (Some(tag), false) = (&tag, admin) {
            auth.tag(request.headers(), tag.as_str())?;
        }
        request.extensions_mut().insert(QueryTag(tag));
    } else if let Some((param, place)) = checks.tag {
        let checked = CheckedName { param, place };
        if !admin {
            auth.tag(request.headers(), &checked.name(request.uri())?)?;
        } else {
            // Decoded all the same, so a name that is not UTF-8 is refused here on every route.
            checked.name(request.uri())?;
        }
        request.extensions_mut().insert(checked);
    }
    Ok(())
}

/// The name the path parameter `param`, the segment at `place`, holds in `uri`'s path.
fn path_name<'u>(uri: &'u Uri, param: &str, place: usize) -> Result<Cow<'u, str>, ApiError> {
    let text = path_segment(uri.path(), place).ok_or_else(unchecked)?;
    // `bad_request`, the code of every framework refusal.
    text.map_err(|_| {
        ApiError::bad_request(
            "bad_request",
            format!("the path parameter `{param}` is not valid UTF-8 once percent-decoded"),
        )
    })
}

/// The segment at `place` of `path` (counting from the empty one before its first `/`),
/// percent-decoded as axum decodes every path parameter (the same crate and call), without
/// allocating unless something was encoded. The router matched `path` to the route's
/// template segment by segment, so a parameter is the segment at the place its `{name}` has
/// in the template. `None`: `path` has fewer segments.
pub(crate) fn path_segment(path: &str, place: usize) -> Option<Result<Cow<'_, str>, Utf8Error>> {
    let mut start = 0;
    for _ in 0..place {
        start += path.as_bytes()[start..].iter().position(|b| *b == b'/')? + 1;
    }
    let rest = &path.as_bytes()[start..];
    let end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
    Some(percent_encoding::percent_decode(&rest[..end]).decode_utf8())
}

/// `/v1/decode`'s `tag`, decoded as the query extractor decodes every query (keys and
/// values percent-decoded, `+` a space); a repeated `tag` is refused.
fn decode_tag(uri: &Uri) -> Result<Option<Tag>, ApiError> {
    #[derive(Deserialize)]
    struct TagOnly {
        tag: Option<String>,
    }
    let Query(query) = Query::<TagOnly>::try_from_uri(uri)
        .map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    Ok(query.tag.as_deref().map(Tag::parse).transpose()?)
}

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse;

    use super::*;

    /// The path parameter the checks read is the one axum hands its extractors, for every
    /// tag route and every way of writing a name (percent-encoded slashes, UTF-8, `+`, `%`,
    /// encodings that are not UTF-8).
    #[tokio::test]
    async fn path_parameters_are_read_as_axum_reads_them() {
        use axum::extract::RawPathParams;
        use tower::ServiceExt;
        let names = [
            "order",
            "a%2Fb",
            "%E8%AE%A2%E5%8D%95",
            "%F0%9F%9A%80",
            "a+b",
            "a%20b",
            "100%25",
            "%FF",
            "%E8%AE",
            "x%",
            "%zz",
            "idmint.key.x",
            "a%00b",
            "~-._",
            "%2e%2E",
        ];
        for (route, name) in crate::routes::tag_routes() {
            let router = axum::Router::new().route(
                route,
                axum::routing::any(|params: Result<RawPathParams, _>| async move {
                    let params: Result<
                        RawPathParams,
                        axum::extract::rejection::RawPathParamsRejection,
                    > = params;
                    match params {
                        Ok(params) => format!(
                            "ok {:?}",
                            params.iter().map(|(_, v)| v.to_string()).collect::<Vec<_>>()
                        ),
                        Err(_) => "not utf-8".to_string(),
                    }
                }),
            );
            for raw in names {
                let path = route.replace(&format!("{{{name}}}"), raw);
                let request =
                    Request::builder().uri(&path).body(axum::body::Body::empty()).unwrap();
                let answer = router.clone().oneshot(request).await.unwrap();
                let body = axum::body::to_bytes(answer.into_body(), 4096).await.unwrap();
                let axum_reads = String::from_utf8(body.to_vec()).unwrap();
                let (_, place) = RouteChecks::of(route).tag.expect("a tag route");
                let ours = match path_segment(&path, place).expect("the path has the segment") {
                    Ok(text) => format!("ok {:?}", vec![text.to_string()]),
                    Err(_) => "not utf-8".to_string(),
                };
                assert_eq!(ours, axum_reads, "{path}");
            }
        }
    }

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().expect("header"));
        headers
    }

    fn token(text: &str) -> Token {
        Token::parse(text).expect("token")
    }

    #[test]
    fn tokens_are_checked_and_never_shown() {
        assert!(Token::parse("short").is_err());
        assert!(Token::parse("has a space in it!!").is_err());
        let t = token("0123456789abcdef0123");
        assert_eq!(format!("{t:?} {t}"), "*** ***");
        let error = Token::parse("sixteen chars with space").unwrap_err();
        assert!(!error.contains("sixteen"), "{error}");
        assert!(t.matches("0123456789abcdef0123"));
        assert!(!t.matches("0123456789abcdef0124"));
        assert!(!t.matches("0123456789abcdef012"));
    }

    #[test]
    fn admin_and_client_tokens() {
        let order = Tag::parse("order").expect("tag");
        let user = Tag::parse("user").expect("tag");
        let auth = Auth::new(
            Some(token("admin-admin-admin-1")),
            vec![Client {
                name: "shop".into(),
                token: token("client-client-1234"),
                tags: vec![order.clone()],
            }],
        );
        let status = |r: Result<(), ApiError>| r.err().map(|e| e.into_response().status().as_u16());
        assert_eq!(status(auth.admin(&HeaderMap::new())), Some(401));
        assert_eq!(status(auth.admin(&headers("Basic abc"))), Some(401));
        assert_eq!(status(auth.admin(&headers("Bearer wrong-wrong-wrong-1"))), Some(403));
        assert_eq!(status(auth.admin(&headers("Bearer client-client-1234"))), Some(403));
        assert_eq!(status(auth.admin(&headers("Bearer admin-admin-admin-1"))), None);
        assert_eq!(status(auth.tag(&HeaderMap::new(), order.as_str())), Some(401));
        assert_eq!(
            status(auth.tag(&headers("Bearer wrong-wrong-wrong-1"), order.as_str())),
            Some(403)
        );
        assert_eq!(status(auth.tag(&headers("Bearer client-client-1234"), order.as_str())), None);
        assert_eq!(status(auth.tag(&headers("Bearer admin-admin-admin-1"), order.as_str())), None);
        assert_eq!(status(auth.tag(&HeaderMap::new(), user.as_str())), None);
        assert_eq!(status(Auth::open().admin(&HeaderMap::new())), None);
    }

    #[test]
    fn loopback_hosts_are_told_from_others() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.9.8.7:1",
            "localhost",
            "LocalHost:8080",
            "app.localhost:3000",
            "[::1]",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(is_loopback_authority(host), "{host}");
        }
        for host in [
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            ".localhost",
            "0.0.0.0:8080",
            "10.0.0.1",
            "[::]:8080",
            "[::1",
            "[::1]x",
            "::1",
            "127.0.0.1:",
            "127.0.0.1:80a",
            "2130706433",
            "",
        ] {
            assert!(!is_loopback_authority(host), "{host}");
        }
    }

    #[test]
    fn exposure_needs_an_admin_token() {
        let public: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        let local: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        assert!(check_exposure(local, &Auth::open()).is_ok());
        let refused = check_exposure(public, &Auth::open()).unwrap_err();
        assert!(refused.contains("IDMINT_ADMIN_TOKEN"), "{refused}");
        let guarded = Auth::new(Some(token("admin-admin-admin-1")), Vec::new());
        assert!(check_exposure(public, &guarded).is_ok());
    }
}
