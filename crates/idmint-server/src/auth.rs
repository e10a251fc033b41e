//! Bearer tokens: the admin token that guards every route that changes the store (tag
//! create/set/delete, sequence create/delete), and optional per-tag client tokens (Didi
//! Tinyid's habit) that guard a tag's id routes.
//!
//! Tokens travel only in the `Authorization: Bearer TOKEN` header (never the query string,
//! which ends up in access logs), are compared in constant time, and are never logged,
//! printed or put in an error: [`Token`]'s `Debug` and `Display` show `***`.
//!
//! The rules, in `check` (applied to every request by the router's one middleware):
//! - an admin route needs the admin token when one is configured; without one the node
//!   must listen on loopback only ([`check_exposure`] refuses the start otherwise), so only
//!   local processes reach it;
//! - a tag named by a client's `tags` needs that client's token (or the admin token) on
//!   its id routes; other tags stay open;
//! - no token: 401 with `WWW-Authenticate: Bearer`; a token that is not accepted: 403.
//!
//! This file must not decide ids or statuses: errors go through `ApiError`.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{RawPathParams, Request};
use axum::http::{HeaderMap, Method, header};
use idmint_core::Tag;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use crate::{ApiError, AppState};

/// Shortest token accepted, in bytes: 16 random characters are beyond guessing online.
pub const TOKEN_LEN_MIN: usize = 16;
/// Longest token accepted, in bytes.
pub const TOKEN_LEN_MAX: usize = 512;
/// Most client tokens (`[auth.clients.NAME]` sections).
pub const CLIENTS_MAX: usize = 1_000;

/// The routes that change the store: `(method, route)` as registered in the router. The
/// admin token guards exactly these.
pub const ADMIN_ROUTES: &[(Method, &str)] = &[
    (Method::POST, "/v1/tags"),
    (Method::PATCH, "/v1/tags/{tag}"),
    (Method::DELETE, "/v1/tags/{tag}"),
    (Method::POST, "/v1/seqs"),
    (Method::DELETE, "/v1/seqs/{name}"),
];

/// The routes that serve or describe one tag or sequence, and the path parameter naming
/// it: a client token configured for that tag guards them.
pub const TAG_ROUTES: &[(&str, &str)] = &[
    ("/api/segment/get/{tag}", "tag"),
    ("/v1/segment/{tag}", "tag"),
    ("/v1/segment/{tag}/ranges", "tag"),
    ("/v1/segment/{tag}/return", "tag"),
    ("/v1/tags/{tag}", "tag"),
    ("/v1/seq/{name}", "name"),
    ("/v1/seqs/{name}", "name"),
];

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

    /// The configured clients.
    pub fn clients(&self) -> &[Client] {
        &self.clients
    }

    /// Whether `headers` carry the admin token, when one is configured; with none, every
    /// caller is admin (loopback only).
    pub fn admin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.admin.is_none() {
            return Ok(());
        }
        match self.prove(headers)? {
            Proof::Admin => Ok(()),
            Proof::None => Err(ApiError::Unauthorized(
                "this route changes the store: send the admin token as `Authorization: Bearer \
                 TOKEN`"
                    .to_string(),
            )),
            Proof::Client(_) | Proof::Wrong => Err(ApiError::Forbidden(
                "this route needs the admin token; the token sent is not it".to_string(),
            )),
        }
    }

    /// Whether `headers` may take ids of `tag`: always for a tag no client names, else with
    /// the token of a client that names it, or the admin token.
    pub fn tag(&self, headers: &HeaderMap, tag: &Tag) -> Result<(), ApiError> {
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

/// Checks the admin token on [`ADMIN_ROUTES`] and client tokens on [`TAG_ROUTES`] (and
/// `/v1/decode?tag=`) before the handler runs; `route` is the matched route template.
pub(crate) fn check(
    app: &AppState,
    route: &str,
    params: Option<&RawPathParams>,
    request: &Request,
) -> Result<(), ApiError> {
    let headers = request.headers();
    if ADMIN_ROUTES.iter().any(|(method, r)| method == request.method() && *r == route) {
        return app.auth.admin(headers);
    }
    let tag_text = if route == "/v1/decode" {
        request.uri().query().and_then(|query| query_value(query, "tag"))
    } else if let Some((_, name)) = TAG_ROUTES.iter().find(|(r, _)| *r == route) {
        params.and_then(|p| p.iter().find(|(key, _)| key == name).map(|(_, v)| v.to_string()))
    } else {
        None
    };
    // A name that is not a tag guards nothing: the handler answers 400 for it.
    match tag_text.as_deref().map(Tag::parse) {
        Some(Ok(tag)) => app.auth.tag(headers, &tag),
        _ => Ok(()),
    }
}

/// The first value of `name` in a query string, percent-decoded where it matters for tag
/// names (they are `[A-Za-z0-9_.:-]`, so a name that needs decoding is not a tag anyway).
fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use axum::response::IntoResponse;

    use super::*;

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
        assert_eq!(status(auth.tag(&HeaderMap::new(), &order)), Some(401));
        assert_eq!(status(auth.tag(&headers("Bearer wrong-wrong-wrong-1"), &order)), Some(403));
        assert_eq!(status(auth.tag(&headers("Bearer client-client-1234"), &order)), None);
        assert_eq!(status(auth.tag(&headers("Bearer admin-admin-admin-1"), &order)), None);
        assert_eq!(status(auth.tag(&HeaderMap::new(), &user)), None);
        assert_eq!(status(Auth::open().admin(&HeaderMap::new())), None);
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
