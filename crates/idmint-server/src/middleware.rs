//! The one middleware every request passes, once: the per-client limit, the loopback guard
//! of a node without an admin token, the tokens, HEAD without a handler, the request
//! timeout, errors made JSON and the metrics, which see every answer (401s, 403s, 429s and
//! timeouts included).
//!
//! It is a service around each route's own service ([`Guarded`]), put there when the router
//! registers the route (router.rs), not an axum layer over the whole router: a layer adds a
//! boxed, cloned route and a boxed future per request, and the middleware's future moved by
//! value through each. Here the route is known when the router is built, so what depends on
//! it (which checks run, the metrics handles) is resolved once ([`RouteInfo`]), and a
//! request that the handler answers at once costs no timer, no allocation and two clock reads
//! (the start and the end of its latency).
//!
//! This file decides no status of its own: refusals come from `limits`, `auth` and
//! `ApiError`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request};
use axum::handler::{Handler, HandlerService};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get_service, post_service};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::auth::RouteChecks;
use crate::error::ApiError;
use crate::http::tinyid;
use crate::limits::{Pass, REQUEST_BODY_BYTES_MAX};
use crate::metrics::RouteMetrics;
use crate::routes::Head;
use crate::state::SharedState;

/// A handler with its state behind the request body bound.
type Limited<H, T> = <DefaultBodyLimit as Layer<HandlerService<H, T, SharedState>>>::Service;

/// Registers one route's methods, each handler behind the one middleware with the route's
/// [`RouteInfo`] (resolved once, here). A method the route does not take is answered by
/// the router (405 with `Allow`) behind the middleware too.
pub(crate) struct On {
    app: SharedState,
    info: Arc<RouteInfo>,
}

impl On {
    /// The route `template`.
    pub(crate) fn route(app: &SharedState, template: &'static str) -> On {
        On { app: Arc::clone(app), info: RouteInfo::route(template) }
    }

    /// `handler` with the state, behind the middleware.
    pub(crate) fn guard<H, T>(&self, handler: H) -> Guarded<HandlerService<H, T, SharedState>>
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        self.service(handler.with_state(Arc::clone(&self.app)))
    }

    /// `service` behind the middleware.
    pub(crate) fn service<S>(&self, service: S) -> Guarded<S> {
        Guarded::new(service, Arc::clone(&self.app), Arc::clone(&self.info))
    }

    /// `handler` behind the middleware and the request body bound
    /// (`REQUEST_BODY_BYTES_MAX`): every method but GET and HEAD is registered with it, so
    /// every handler that reads a body has it.
    pub(crate) fn bounded<H, T>(&self, handler: H) -> Guarded<Limited<H, T>>
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        let limit = DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX);
        self.service(limit.layer(handler.with_state(Arc::clone(&self.app))))
    }

    /// A route answering GET with `handler`.
    pub(crate) fn get<H: Handler<T, SharedState>, T: 'static>(&self, handler: H) -> MethodRouter {
        self.methods(get_service(self.guard(handler)))
    }

    /// A route answering POST with `handler`.
    pub(crate) fn post<H: Handler<T, SharedState>, T: 'static>(&self, handler: H) -> MethodRouter {
        self.methods(post_service(self.bounded(handler)))
    }

    /// A route answering GET with `get` and the `others` methods with their handlers.
    pub(crate) fn get_and<H: Handler<T, SharedState>, T: 'static>(
        &self,
        get: H,
        others: impl FnOnce(&On, MethodRouter) -> MethodRouter,
    ) -> MethodRouter {
        others(self, self.methods(get_service(self.guard(get))))
    }

    /// `methods` with the router's 405 behind the middleware.
    pub(crate) fn methods(&self, methods: MethodRouter) -> MethodRouter {
        methods.fallback_service(self.guard(method_not_allowed))
    }
}

/// A method the route does not take: 405 (the router adds `Allow`; the middleware makes
/// the answer JSON).
async fn method_not_allowed() -> StatusCode {
    StatusCode::METHOD_NOT_ALLOWED
}

/// What the middleware needs to know of a route, resolved once when the router is built.
pub(crate) struct RouteInfo {
    /// The route's kind: which checks run and how errors are shaped.
    kind: Kind,
    /// The token checks of an HTTP route.
    checks: Option<RouteChecks>,
    /// HEAD answers `200` with no body after the token check and never runs the handler
    /// (every route that hands out ids or leases: the route table's `head`).
    head_without_handler: bool,
    /// The route's metrics handles.
    metrics: RouteMetrics,
}

/// Which checks a route's requests pass, and how their errors are shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An HTTP route: tokens checked here, errors as JSON.
    Http,
    /// A gRPC route (`grpc::GRPC_ROUTES`): tokens checked by the service from the metadata
    /// where it needs them, errors as gRPC statuses.
    Grpc,
    /// No route matched: no token to check; errors as JSON, or as a gRPC status for a
    /// request that says it is a gRPC call.
    Unmatched,
}

impl RouteInfo {
    /// The route `template` of the router.
    pub(crate) fn route(template: &'static str) -> Arc<RouteInfo> {
        let kind = if crate::grpc::is_grpc_route(template) { Kind::Grpc } else { Kind::Http };
        // A route missing from the table never runs its handler under HEAD.
        let head_without_handler = kind == Kind::Http
            && crate::routes::route(template).is_none_or(|r| r.head == Head::WithoutHandler);
        Arc::new(RouteInfo {
            kind,
            checks: (kind == Kind::Http).then(|| RouteChecks::of(template)),
            head_without_handler,
            metrics: RouteMetrics::new(Some(template)),
        })
    }

    /// Where no route matched.
    pub(crate) fn unmatched() -> Arc<RouteInfo> {
        Arc::new(RouteInfo {
            kind: Kind::Unmatched,
            checks: None,
            head_without_handler: false,
            metrics: RouteMetrics::new(None),
        })
    }
}

/// A route's service (a handler with its state, a gRPC service, a fallback) behind the
/// middleware.
#[derive(Clone)]
pub(crate) struct Guarded<S> {
    inner: S,
    app: SharedState,
    info: Arc<RouteInfo>,
}

impl<S> Guarded<S> {
    /// `inner` behind the middleware, as the route `info` describes.
    pub(crate) fn new(inner: S, app: SharedState, info: Arc<RouteInfo>) -> Guarded<S> {
        Guarded { inner, app, info }
    }
}

impl<S> Service<Request> for Guarded<S>
where
    S: Service<Request, Error = Infallible>,
    S::Response: IntoResponse,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GuardedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> GuardedFuture<S::Future> {
        let started = Instant::now();
        let app = &self.app;
        let info = &self.info;
        let method = request.method().clone();
        // The gRPC method's labels, for the gRPC metrics (`None` outside the gRPC routes).
        let grpc_method =
            (info.kind == Kind::Grpc).then(|| crate::grpc::method_labels(request.uri().path()));
        // Authorisation follows the route the request resolved to, never a header the
        // client picks: the gRPC routes check their tokens from the metadata where they need
        // one (grpc.rs), every other route is checked here. The content type only shapes the
        // errors answered where no route matched.
        let grpc_shaped = match info.kind {
            Kind::Grpc => true,
            Kind::Http => false,
            Kind::Unmatched => crate::grpc::is_grpc(request.headers()),
        };
        let finish = Finish {
            info: Arc::clone(info),
            method,
            started,
            grpc_method,
            grpc_shaped,
            request_timeout_ms: app.http_limits.request_timeout_ms,
        };
        let pass = match crate::limits::admit(&app.http_limits, &mut request) {
            Ok(pass) => pass,
            Err(refused) => return GuardedFuture::answered(finish.error(refused), finish),
        };
        // Without an admin token every caller is admin, so the node answers only what a
        // local program sends, never a web page in the operator's browser (auth.rs); with a
        // token it costs one branch.
        if !app.auth.has_admin_token()
            && let Err(refused) =
                crate::auth::check_local_request(request.method(), request.uri(), request.headers())
        {
            return GuardedFuture::answered(finish.error(refused), finish);
        }
        if let Some(checks) = &info.checks {
            let checked = crate::grpc::refuse_on_http_route(request.headers())
                .and_then(|()| crate::auth::check(&app.auth, checks, &mut request));
            if let Err(error) = checked {
                return GuardedFuture::answered(error.into_response(), finish);
            }
            // Tinyid's routes check Tinyid's token table, and answer its refusal in Tinyid's
            // shape; every other refusal above is idmint's on every route.
            if let Err(error) = crate::auth::check_tinyid(&app.node, checks, &mut request) {
                return GuardedFuture::answered(
                    tinyid::refusal(Some(checks.route()), error),
                    finish,
                );
            }
            if finish.method == Method::HEAD && info.head_without_handler {
                return GuardedFuture::answered(head_without_handler(), finish);
            }
        }
        GuardedFuture::Running {
            inner: self.inner.call(request),
            timer: None,
            pass,
            finish: Some(finish),
        }
    }
}

/// HEAD on a route whose handler would hand out ids (the route table's `head` says the
/// others): `200`, no body, nothing taken. The token check has run, so it tells a client
/// that the route exists and its token is accepted; it does not say whether the tag exists
/// (`GET /v1/tags/{tag}` does).
fn head_without_handler() -> Response {
    (StatusCode::OK, [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))])
        .into_response()
}

/// What the end of a request needs: the metrics, and the shape of a timeout.
struct Finish {
    info: Arc<RouteInfo>,
    method: Method,
    started: Instant,
    grpc_method: Option<Option<(&'static str, &'static str)>>,
    grpc_shaped: bool,
    request_timeout_ms: u64,
}

impl Finish {
    /// `error` in the request's shape: a gRPC status on the gRPC routes (and for a gRPC call
    /// where no route matched), JSON otherwise.
    fn error(&self, error: ApiError) -> Response {
        if self.grpc_shaped {
            return crate::grpc::error_response(error);
        }
        error.into_response()
    }

    /// The answer past `limits.request_timeout_ms`: 503 `request_timeout`. A request whose
    /// future is dropped by the timeout loses the ids it had taken (a gap), never repeats
    /// one.
    fn timed_out(&self) -> Response {
        self.error(ApiError::Timeout(format!(
            "the request took longer than {} ms (limits.request_timeout_ms); retry",
            self.request_timeout_ms
        )))
    }

    /// Counts the answer, once. A gRPC call's status is in its headers or, after the
    /// messages, its trailers: the metrics read it where it is known (metrics.rs), not the
    /// HTTP status (always 200).
    fn record(self, response: Response) -> Response {
        if let Some(labels) = self.grpc_method {
            return crate::metrics::observe_grpc(labels, response, self.started);
        }
        self.info.metrics.record(&self.method, response.status().as_u16(), self.started);
        response
    }
}

pin_project! {
    /// The future of a [`Guarded`] request.
    #[project = GuardedProj]
    pub(crate) enum GuardedFuture<F> {
        /// Answered before the handler (a limit, a token, HEAD without a handler).
        Answered { response: Option<Response>, finish: Option<Finish> },
        /// The handler runs. The timer is made only if its first poll is pending: a handler
        /// that answers at once costs no timer.
        Running {
            #[pin]
            inner: F,
            timer: Option<Pin<Box<tokio::time::Sleep>>>,
            pass: Option<Pass>,
            finish: Option<Finish>,
        },
        /// An error the framework answered in plain text, being made JSON.
        Converting {
            converting: Pin<Box<dyn Future<Output = Response> + Send>>,
            pass: Option<Pass>,
            finish: Option<Finish>,
        },
    }
}

impl<F> GuardedFuture<F> {
    fn answered(response: Response, finish: Finish) -> GuardedFuture<F> {
        GuardedFuture::Answered { response: Some(response), finish: Some(finish) }
    }
}

impl<F, R> Future for GuardedFuture<F>
where
    F: Future<Output = Result<R, Infallible>>,
    R: IntoResponse,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let next = match self.as_mut().project() {
                GuardedProj::Answered { response, finish } => {
                    let response = response.take().expect("polled after completion");
                    let finish = finish.take().expect("polled after completion");
                    return Poll::Ready(Ok(finish.record(response)));
                }
                GuardedProj::Running { inner, timer, pass, finish } => {
                    let response = match inner.poll(cx) {
                        Poll::Ready(Ok(response)) => response.into_response(),
                        Poll::Pending => {
                            let at = finish.as_ref().expect("polled after completion");
                            let sleep = timer.get_or_insert_with(|| {
                                let timeout = Duration::from_millis(at.request_timeout_ms);
                                let deadline = tokio::time::Instant::from_std(at.started + timeout);
                                Box::pin(tokio::time::sleep_until(deadline))
                            });
                            ready!(sleep.as_mut().poll(cx));
                            at.timed_out()
                        }
                    };
                    let finish = finish.take().expect("polled after completion");
                    let pass = pass.take();
                    if finish.grpc_method.is_some() || !needs_json(&response) {
                        drop(pass);
                        return Poll::Ready(Ok(finish.record(response)));
                    }
                    GuardedFuture::Converting {
                        converting: Box::pin(crate::error::json_errors(response)),
                        pass,
                        finish: Some(finish),
                    }
                }
                GuardedProj::Converting { converting, pass, finish } => {
                    let response = ready!(converting.as_mut().poll(cx));
                    drop(pass.take());
                    let finish = finish.take().expect("polled after completion");
                    return Poll::Ready(Ok(finish.record(response)));
                }
            };
            self.set(next);
        }
    }
}

/// Whether `response` is an error the framework answered without JSON (see
/// `error::json_errors`, which makes it JSON).
fn needs_json(response: &Response) -> bool {
    let status = response.status();
    (status.is_client_error() || status.is_server_error())
        && !response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"))
}
