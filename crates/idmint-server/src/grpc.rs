//! The gRPC API (`idmint.v1.IdMint`, `crates/idmint-proto/proto/idmint/v1/idmint.proto`): the
//! same ids, checks and errors as the HTTP routes, for every language with a gRPC stack and
//! for `idmint-client`, which leases ranges and hands ids out in its own process.
//!
//! Each call parses its input into idmint's newtypes, checks the tag's client token from the
//! `authorization` metadata (the same [`crate::Auth`] as HTTP), calls one
//! [`idmint::Node`] operation (the same as the HTTP route's) and shapes the answer. Errors are [`ApiError`]s turned into gRPC statuses by
//! `ApiError::into_grpc_status` (error.rs), the one mapping. The service is mounted in the
//! axum router (`grpc_router`), so it passes the same middleware as HTTP: the per-client
//! limit, the request timeout (up to the first message of a stream) and the metrics.
//!
//! Beside it, two standard services every gRPC tool knows: the health service
//! (`grpc.health.v1.Health`, what Kubernetes gRPC probes and `grpc_health_probe` call),
//! answering from the same readiness as `/ready` (and per engine, as `/ready?engine=`), and
//! server reflection
//! (`grpc.reflection.v1` and `v1alpha`, what `grpcurl list` and `describe` read). Neither
//! needs a token: probes carry none, and reflection tells what `idmint.proto` and
//! `/openapi.json` already publish ([`GRPC_ROUTES`] says which routes check tokens).
//!
//! This file holds no id logic and chooses no status code; it imports no HTTP route module,
//! and it is the only module that names a protobuf type. `StreamIds` and the health `Watch`
//! are pulled by the transport (`stream::unfold`), so a stream costs no task and stops when
//! the caller does (reflection's streams are tonic-reflection's: one task per stream).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, header};
use futures_util::{Stream, StreamExt};
use idmint::Tag;
use idmint::node::{Engine, LeaseParts, PublicIds};
use idmint::segment::RangeLease;
use idmint_core::limits::LEASE_COUNT_MAX;
use idmint_core::snowflake::UtcMs;
use idmint_core::{Count, ValueError};
use idmint_proto::v1::id_mint_server::{IdMint, IdMintServer};
use idmint_proto::v1::{
    DecodeIdRequest, DecodeIdResponse, DecodeSnowflakeRequest, DecodeSnowflakeResponse,
    DecodeTsoRequest, DecodeTsoResponse, NextIdsRequest, NextIdsResponse, NextRangeRequest,
    NextRangeResponse, NextSequenceIdsRequest, NextSequenceIdsResponse, NextSnowflakeIdsRequest,
    NextSnowflakeIdsResponse, Range, ReturnRangeRequest, ReturnRangeResponse, StreamIdsRequest,
    StreamIdsResponse, TsoRequest, TsoResponse,
};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::error::ApiError;
use crate::state::SharedState;

/// Most ids one `StreamIds` call may ask for (10^9: a bulk export of a day's ids; larger
/// exports are several streams).
pub const STREAM_COUNT_MAX: u64 = 1_000_000_000;

/// Ids per `StreamIds` message when the request leaves `chunk` at 0.
pub const STREAM_CHUNK_DEFAULT: u64 = 10_000;

const _: () = assert!(STREAM_CHUNK_DEFAULT <= idmint_core::limits::BATCH_COUNT_MAX);

/// Path prefix of every `idmint.v1.IdMint` call, as the router matches it.
pub const GRPC_ROUTE: &str = "/idmint.v1.IdMint/{*method}";

/// Path prefix of the standard health service's calls (`Check`, `Watch`).
pub const HEALTH_ROUTE: &str = "/grpc.health.v1.Health/{*method}";

/// Path prefix of server reflection, version 1 (grpcurl asks this first).
pub const REFLECTION_ROUTE: &str = "/grpc.reflection.v1.ServerReflection/{*method}";

/// Path prefix of server reflection, version 1alpha (older grpcurl and tools).
pub const REFLECTION_V1ALPHA_ROUTE: &str = "/grpc.reflection.v1alpha.ServerReflection/{*method}";

/// Every gRPC route, and whether its methods check a token from the metadata themselves
/// (`true`: `idmint.v1.IdMint`, per tag as on HTTP) or answer anyone (`false`: health, which
/// probes call without a token, and reflection, which describes only the published
/// contract). The router's middleware treats these routes as gRPC (statuses, never JSON;
/// no HTTP token check), and the auth fuzz reads this table.
pub const GRPC_ROUTES: &[(&str, bool)] = &[
    (GRPC_ROUTE, true),
    (HEALTH_ROUTE, false),
    (REFLECTION_ROUTE, false),
    (REFLECTION_V1ALPHA_ROUTE, false),
];

/// The service names the health service reports: `""` (the whole node) and
/// `idmint.v1.IdMint`, both SERVING exactly when `/ready` answers 200; and each engine by
/// its name (`segment`, `snowflake`, `tinyid`, `sequences`), SERVING exactly when
/// `/ready?engine=NAME` answers 200.
pub const HEALTH_SERVICES: &[&str] = &["", idmint_proto::SERVICE_NAME];

/// How often a health `Watch` looks at the readiness (it sends only changes).
pub const HEALTH_WATCH_POLL_MS: u64 = 1_000;

/// How long a health check waits for the readiness (the store's answer) before it reports
/// NOT_SERVING.
pub const HEALTH_CHECK_WAIT_MS: u64 = 1_000;

/// Every method of every gRPC service this node serves, as `(service, method)`: the labels
/// of the per-method metrics (a path outside this list is counted as `unknown`).
pub const GRPC_METHODS: &[(&str, &str)] = &[
    (idmint_proto::SERVICE_NAME, "NextIds"),
    (idmint_proto::SERVICE_NAME, "NextRange"),
    (idmint_proto::SERVICE_NAME, "ReturnRange"),
    (idmint_proto::SERVICE_NAME, "NextSnowflakeIds"),
    (idmint_proto::SERVICE_NAME, "NextSequenceIds"),
    (idmint_proto::SERVICE_NAME, "StreamIds"),
    (idmint_proto::SERVICE_NAME, "DecodeSnowflake"),
    (idmint_proto::SERVICE_NAME, "DecodeId"),
    ("grpc.health.v1.Health", "Check"),
    ("grpc.health.v1.Health", "Watch"),
    ("grpc.reflection.v1.ServerReflection", "ServerReflectionInfo"),
    ("grpc.reflection.v1alpha.ServerReflection", "ServerReflectionInfo"),
];

/// Whether `route` (a router template) is one of [`GRPC_ROUTES`].
pub(crate) fn is_grpc_route(route: &str) -> bool {
    GRPC_ROUTES.iter().any(|(known, _)| *known == route)
}

/// The `(service, method)` labels of a gRPC request path, from [`GRPC_METHODS`].
pub(crate) fn method_labels(path: &str) -> Option<(&'static str, &'static str)> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    GRPC_METHODS.iter().copied().find(|(s, m)| *s == service && *m == method)
}

/// A gRPC service as the router mounts it: a tower service of axum requests answering tonic's
/// responses.
pub(crate) trait GrpcService:
    tower::Service<
        axum::extract::Request,
        Response = axum::http::Response<tonic::body::Body>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> GrpcService for S where
    S: tower::Service<
            axum::extract::Request,
            Response = axum::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// How the router mounts a gRPC service on its route (router.rs puts each behind the one
/// middleware).
pub(crate) trait Mount {
    /// `router` with `service` at `route`.
    fn mount<S: GrpcService>(&self, router: Router, route: &'static str, service: S) -> Router;
}

/// The gRPC services as a router of their routes ([`GRPC_ROUTES`]), sharing `state` with the
/// HTTP routes, each mounted by `mount`.
pub(crate) fn grpc_router(state: &SharedState, mount: &impl Mount) -> Router {
    let health = GrpcHealth { app: Arc::clone(state), watched: Arc::default() };
    // Reflection serves the descriptors compiled into the binary (idmint.proto's and the
    // health service's); building it fails only on descriptors that do not decode, which
    // would be a broken build, and `grpc_services_describe_themselves` would fail first.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(idmint_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let v1 = reflection().build_v1().expect("idmint.proto's compiled descriptors decode");
    let v1alpha = reflection().build_v1alpha().expect("idmint.proto's compiled descriptors decode");
    let api = IdMintServer::new(GrpcApi { app: Arc::clone(state) });
    let router = mount.mount(Router::new(), GRPC_ROUTE, api);
    let router = mount.mount(router, HEALTH_ROUTE, HealthServer::new(health));
    let router = mount.mount(router, REFLECTION_ROUTE, v1);
    mount.mount(router, REFLECTION_V1ALPHA_ROUTE, v1alpha)
}

/// Whether a request says it is a gRPC call (its content type is `application/grpc…`, in
/// any case). It only chooses the shape of an error answered where no route matched (a gRPC
/// status rather than JSON); which checks run follows the route, never this header.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    const GRPC_TYPE: &str = "application/grpc";
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.as_bytes().get(..GRPC_TYPE.len()))
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(GRPC_TYPE.as_bytes()))
}

/// Refuses a gRPC content type on an HTTP route (415): such a request is neither a gRPC
/// call (those resolve to [`GRPC_ROUTE`]) nor the JSON the route documents, and answering
/// it would let a client's header pick how the request is read.
pub(crate) fn refuse_on_http_route(headers: &HeaderMap) -> Result<(), ApiError> {
    if !is_grpc(headers) {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType(
        "this HTTP route does not take a gRPC content type (application/grpc...): send JSON \
         (Content-Type: application/json) or no body; gRPC methods are called at \
         /idmint.v1.IdMint/METHOD"
            .to_string(),
    ))
}

/// The service: the node's state, shared with the HTTP handlers.
struct GrpcApi {
    app: SharedState,
}

type Answer<T> = Result<Response<T>, Status>;

/// A stream of `StreamIds` messages.
type IdStream = Pin<Box<dyn Stream<Item = Result<StreamIdsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl IdMint for GrpcApi {
    async fn next_ids(&self, request: Request<NextIdsRequest>) -> Answer<NextIdsResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let tag = self.tag(&headers, &body.tag)?;
            let count = count(body.count, self.app.node.batch_count_max())?;
            // A peer's forwarded take of a strict tag: served only under the lease it found,
            // and the peer knows the owner.
            if let Some(fence) = fence_token(&headers)? {
                let range = self.app.node.forwarded_ids(&tag, count, fence).await?;
                let ids = range.ids().collect();
                let answer = NextIdsResponse { tag: tag.to_string(), ids, texts: Vec::new() };
                return Ok(Response::new(answer));
            }
            let (ids, texts) = split(self.app.node.next_public_ids(&tag, count).await?);
            let mut response = Response::new(NextIdsResponse { tag: tag.to_string(), ids, texts });
            // A strict tag's answering node and owner, so a client asks the owner directly.
            for (key, value) in self.app.strict_owner(tag.as_str()).into_iter().flatten() {
                let key = tonic::metadata::AsciiMetadataKey::from_bytes(key.as_str().as_bytes());
                let value = tonic::metadata::AsciiMetadataValue::try_from(value.as_bytes());
                if let (Ok(key), Ok(value)) = (key, value) {
                    response.metadata_mut().insert(key, value);
                }
            }
            Ok(response)
        };
        answer.await.map_err(ApiError::into_grpc_status)
    }

    async fn next_range(&self, request: Request<NextRangeRequest>) -> Answer<NextRangeResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let tag = self.tag(&headers, &body.tag)?;
            let count = checked_count(body.count, LEASE_COUNT_MAX, Count::new_lease(body.count))?;
            let leases = self.app.node.lease(&tag, count).await?;
            let ranges = leases.iter().map(range_of).collect();
            Ok(NextRangeResponse { tag: tag.to_string(), ranges })
        };
        respond(answer.await)
    }

    async fn return_range(
        &self,
        request: Request<ReturnRangeRequest>,
    ) -> Answer<ReturnRangeResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let tag = self.tag(&headers, &body.tag)?;
            let leases: Vec<LeaseParts> = body.leases.iter().map(lease_parts).collect();
            let returned = self.app.node.take_back(&tag, body.start, body.end, &leases)?;
            Ok(ReturnRangeResponse { returned })
        };
        respond(answer.await)
    }

    async fn next_snowflake_ids(
        &self,
        request: Request<NextSnowflakeIdsRequest>,
    ) -> Answer<NextSnowflakeIdsResponse> {
        let count = count(request.get_ref().count, self.app.node.batch_count_max());
        let answer = async {
            let answer = self.app.node.snowflake_ids(count?).await?;
            Ok(NextSnowflakeIdsResponse { ids: answer.ids, worker: answer.worker })
        };
        respond(answer.await)
    }

    async fn next_sequence_ids(
        &self,
        request: Request<NextSequenceIdsRequest>,
    ) -> Answer<NextSequenceIdsResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let name = self.tag(&headers, &body.name)?;
            let count = count(body.count, self.app.node.sequence_count_max())?;
            let answer = self.app.node.sequence_ids(&name, count).await?;
            let (ids, texts) = match answer.formatted {
                Some(texts) => (Vec::new(), texts),
                None => (answer.numbers, Vec::new()),
            };
            let period = answer.period;
            Ok(NextSequenceIdsResponse { name: name.to_string(), period, ids, texts })
        };
        respond(answer.await)
    }

    type StreamIdsStream = IdStream;

    async fn stream_ids(&self, request: Request<StreamIdsRequest>) -> Answer<IdStream> {
        let (headers, body) = parts(request);
        let checked = (|| {
            let tag = self.tag(&headers, &body.tag)?;
            // Not a `Count` (that is one batch, at most BATCH_COUNT_MAX): the stream's total.
            let total = body.count;
            if !(1..=STREAM_COUNT_MAX).contains(&total) {
                return Err(ApiError::bad_request(
                    "bad_count",
                    format!("count is {total}; stream 1 to {STREAM_COUNT_MAX} ids"),
                ));
            }
            let chunk = match body.chunk {
                0 => STREAM_CHUNK_DEFAULT.min(self.app.node.batch_count_max()),
                chunk => count(chunk, self.app.node.batch_count_max())?.get(),
            };
            Ok::<_, ApiError>((tag, total, chunk))
        })();
        let (tag, total, chunk) = checked.map_err(ApiError::into_grpc_status)?;
        let app = Arc::clone(&self.app);
        let state = Some((app, tag, total));
        let stream = futures_util::stream::unfold(state, move |state| async move {
            let (app, tag, remaining) = state?;
            let wanted = remaining.min(chunk);
            match next_chunk(&app, &tag, wanted).await {
                Ok(message) => {
                    let left = remaining - wanted;
                    Some((Ok(message), (left > 0).then_some((app, tag, left))))
                }
                // The error ends the stream as its status.
                Err(error) => Some((Err(error.into_grpc_status()), None)),
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn decode_snowflake(
        &self,
        request: Request<DecodeSnowflakeRequest>,
    ) -> Answer<DecodeSnowflakeResponse> {
        let body = request.into_inner();
        let layout = Some(body.layout).filter(|l| !l.is_empty());
        let answer = self.app.node.decode_snowflake(body.id, layout.as_deref()).map(|decoded| {
            let parts = decoded.parts;
            DecodeSnowflakeResponse {
                id: body.id,
                layout: decoded.layout,
                timestamp_ms: parts.timestamp_ms,
                time: UtcMs(parts.timestamp_ms).to_string(),
                worker: parts.worker,
                sequence: parts.sequence,
            }
        });
        respond(answer.map_err(ApiError::from))
    }

    async fn tso(&self, request: Request<TsoRequest>) -> Answer<TsoResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let count = count(body.count, self.app.node.tso_count_max())?;
            let range = match fence_token(&headers)? {
                Some(fence) => self.app.node.forwarded_timestamps(count, fence).await?,
                None => self.app.node.timestamps(count).await?,
            };
            let first = range.start();
            let (physical_ms, logical) = idmint_core::tso::split(first);
            Ok(TsoResponse { first, count: count.get(), physical_ms, logical })
        };
        respond(answer.await)
    }

    async fn decode_tso(&self, request: Request<DecodeTsoRequest>) -> Answer<DecodeTsoResponse> {
        let timestamp = request.into_inner().timestamp;
        let parts = self.app.node.decode_timestamp(timestamp);
        respond(Ok(DecodeTsoResponse {
            timestamp,
            physical_ms: parts.physical_ms,
            logical: parts.logical,
            time: parts.time.to_string(),
        }))
    }

    async fn decode_id(&self, request: Request<DecodeIdRequest>) -> Answer<DecodeIdResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let tag = match Some(body.tag).filter(|t| !t.is_empty()) {
                // A guarded tag's token guards decoding its public ids too, as on HTTP.
                Some(text) => Some(self.tag(&headers, &text)?),
                None => None,
            };
            let encoding = Some(body.encoding).filter(|e| !e.is_empty());
            let decoded = self.app.node.decode_text(body.text, tag, encoding.as_deref()).await?;
            Ok(DecodeIdResponse {
                text: decoded.text,
                tag: decoded.tag.map(|tag| tag.to_string()).unwrap_or_default(),
                template: decoded.template.unwrap_or_default(),
                public_id: decoded.public_id,
                id: decoded.id,
                dates: decoded.dates,
            })
        };
        respond(answer.await)
    }
}

impl GrpcApi {
    /// Parses `text` as a tag and checks the caller may take its ids.
    fn tag(&self, headers: &HeaderMap, text: &str) -> Result<Tag, ApiError> {
        let tag = Tag::parse(text)?;
        self.app.auth.tag(headers, tag.as_str())?;
        Ok(tag)
    }
}

/// The standard health service: SERVING when the node is ready (`/ready`'s condition: the
/// store answers, the node is not shutting down, its snowflake generator can issue),
/// NOT_SERVING otherwise, for [`HEALTH_SERVICES`].
struct GrpcHealth {
    app: SharedState,
    /// The last readiness a `Watch` read, and when: every watcher shares it, so any number
    /// of watchers costs the store at most one readiness probe per [`HEALTH_WATCH_POLL_MS`].
    watched: Arc<tokio::sync::Mutex<Watched>>,
}

/// What a health check asks about: the node's readiness, or one engine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Probe {
    /// `""` or `idmint.v1.IdMint`: `/ready`.
    Node,
    /// An engine's name: `/ready?engine=NAME`.
    Engine(Engine),
}

/// The last readiness a `Watch` read per probe, and when (at most one entry per probe).
type Watched = HashMap<Probe, (tokio::time::Instant, ServingStatus)>;

/// The probe a health service name asks for; `None` for a name this node does not report.
fn probe_of(service: &str) -> Option<Probe> {
    if HEALTH_SERVICES.contains(&service) {
        return Some(Probe::Node);
    }
    Engine::ALL.into_iter().find(|engine| engine.name() == service).map(Probe::Engine)
}

/// A stream of health `Watch` messages.
type HealthStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for GrpcHealth {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Answer<HealthCheckResponse> {
        let service = request.into_inner().service;
        let Some(probe) = probe_of(&service) else {
            return respond(Err(unknown_service(&service)));
        };
        let status = serving(&self.app, probe).await;
        Ok(Response::new(HealthCheckResponse { status: status.into() }))
    }

    type WatchStream = HealthStream;

    async fn watch(&self, request: Request<HealthCheckRequest>) -> Answer<HealthStream> {
        let service = request.into_inner().service;
        let mut draining = self.app.draining.subscribe();
        let Some(probe) = probe_of(&service) else {
            // The protocol: SERVICE_UNKNOWN, and the call stays open (a service could be
            // added later; here none is, so the stream then waits for the drain, or until
            // the caller leaves).
            let unknown = HealthCheckResponse { status: ServingStatus::ServiceUnknown.into() };
            let drained = async move {
                let _ = draining.wait_for(|draining| *draining).await;
                None
            };
            let stream = futures_util::stream::once(async move { Ok(unknown) })
                .chain(futures_util::stream::once(drained).filter_map(std::future::ready));
            return Ok(Response::new(Box::pin(stream)));
        };
        let (app, watched) = (Arc::clone(&self.app), Arc::clone(&self.watched));
        // The state: the status last sent, and whether the stream has ended.
        let stream = futures_util::stream::unfold(
            (None, false),
            move |(last, ended): (Option<ServingStatus>, bool)| {
                let (app, watched) = (Arc::clone(&app), Arc::clone(&watched));
                let mut draining = draining.clone();
                async move {
                    if ended {
                        return None;
                    }
                    let poll = Duration::from_millis(HEALTH_WATCH_POLL_MS);
                    loop {
                        // Draining: NOT_SERVING once, then the stream ends.
                        if *draining.borrow_and_update() {
                            let status = ServingStatus::NotServing;
                            let message = HealthCheckResponse { status: status.into() };
                            return (last != Some(status)).then_some((Ok(message), (None, true)));
                        }
                        let now = watched_status(&app, &watched, probe, poll).await;
                        if Some(now) != last {
                            let message = HealthCheckResponse { status: now.into() };
                            return Some((Ok(message), (Some(now), false)));
                        }
                        tokio::select! {
                            () = tokio::time::sleep(poll) => {}
                            _ = draining.changed() => {}
                        }
                    }
                }
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The node's (or an engine's) readiness as a health status, bounded by
/// [`HEALTH_CHECK_WAIT_MS`]: NOT_SERVING from the moment the server began draining.
async fn serving(app: &SharedState, probe: Probe) -> ServingStatus {
    if *app.draining.borrow() {
        return ServingStatus::NotServing;
    }
    let wait = Duration::from_millis(HEALTH_CHECK_WAIT_MS);
    let ready = async {
        match probe {
            Probe::Node => app.node.ready().await,
            Probe::Engine(engine) => app.node.engine_ready(engine).await,
        }
    };
    match tokio::time::timeout(wait, ready).await {
        Ok(Ok(())) => ServingStatus::Serving,
        Ok(Err(_)) | Err(_) => ServingStatus::NotServing,
    }
}

/// The readiness a watcher of `probe` reports: the shared reading when it is younger than
/// `fresh`, else a new one (one at a time: the lock is held while the store answers).
async fn watched_status(
    app: &SharedState,
    watched: &tokio::sync::Mutex<Watched>,
    probe: Probe,
    fresh: Duration,
) -> ServingStatus {
    let mut last = watched.lock().await;
    if let Some((at, status)) = last.get(&probe).copied()
        && at.elapsed() < fresh
    {
        return status;
    }
    let status = serving(app, probe).await;
    last.insert(probe, (tokio::time::Instant::now(), status));
    status
}

/// The error of a health check for a service this node does not report.
fn unknown_service(service: &str) -> ApiError {
    ApiError::UnknownService(format!(
        "this node reports no service {service:?}; ask for \"\" (the whole node), {:?}, or \
         an engine: segment, snowflake, tinyid, sequences",
        idmint_proto::SERVICE_NAME
    ))
}

/// A lease a client sends back, as the node checks it.
fn lease_parts(range: &Range) -> LeaseParts {
    LeaseParts { start: range.start, end: range.end, proof: range.proof }
}

/// A lease as the wire carries it.
fn range_of(lease: &RangeLease) -> Range {
    Range { start: lease.range.start(), end: lease.range.end(), proof: lease.proof }
}

/// One `StreamIds` message of `wanted` ids.
async fn next_chunk(
    app: &SharedState,
    tag: &Tag,
    wanted: u64,
) -> Result<StreamIdsResponse, ApiError> {
    let count = Count::new_bounded(wanted, app.node.batch_count_max())?;
    let (ids, texts) = split(app.node.next_public_ids(tag, count).await?);
    Ok(StreamIdsResponse { ids, texts })
}

/// A request's `count`: 1 to `max`; 0 (proto3's unset) is refused like any other bad count.
fn count(count: u64, max: u64) -> Result<Count, ApiError> {
    checked_count(count, max, Count::new_bounded(count, max))
}

/// `made`, a `Count` of `count`, or its refusal naming the bound `max`.
fn checked_count(count: u64, max: u64, made: Result<Count, ValueError>) -> Result<Count, ApiError> {
    made.map_err(|_| {
        ApiError::bad_request("bad_count", format!("count is {count}; ask for 1 to {max} ids"))
    })
}

/// The numbers and the texts fields of an answer.
fn split(ids: PublicIds) -> (Vec<u64>, Vec<String>) {
    match ids {
        PublicIds::Numbers(ids) => (ids, Vec::new()),
        PublicIds::Texts(texts) => (Vec::new(), texts),
    }
}

/// The metadata entry a peer's forwarded take carries: the token of the lease row it found
/// this node holding (`idmint::peer::FenceToken`).
pub const FENCE_TOKEN_KEY: &str = "idmint-fence-token";

/// The fence token of a forwarded take, if the request carries one.
fn fence_token(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(FENCE_TOKEN_KEY) else { return Ok(None) };
    let token = value.to_str().ok().and_then(|text| text.parse::<u64>().ok());
    token.map(Some).ok_or_else(|| {
        ApiError::bad_request(
            "bad_query",
            format!("{FENCE_TOKEN_KEY} is not a decimal number (a lease row's token)"),
        )
    })
}

/// The request's metadata as HTTP headers (where the tokens are), and its message.
fn parts<T>(request: Request<T>) -> (HeaderMap, T) {
    let (metadata, _extensions, body) = request.into_parts();
    (metadata.into_headers(), body)
}

fn respond<T>(answer: Result<T, ApiError>) -> Answer<T> {
    answer.map(Response::new).map_err(ApiError::into_grpc_status)
}

/// An error the middleware answers (limits, timeout) as a gRPC status response: HTTP 200
/// with `grpc-status` and `grpc-message` headers and no message, as gRPC clients expect.
pub(crate) fn error_response(error: ApiError) -> axum::response::Response {
    let mut response = error.into_grpc_status().into_http::<axum::body::Body>();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// Longest a take on a peer may take, from connecting to the answer: a forwarded take is a
/// request's part and must leave it time to answer.
pub const PEER_CALL_TIMEOUT_MS: u64 = 2_000;

/// [`idmint::node::PeerLink`] over the peers' gRPC API: `NextIds` on the peer's URL, with
/// this node's admin token (the nodes of a cluster share it), one lazily connected channel
/// per peer reused by every call, each call bounded by [`PEER_CALL_TIMEOUT_MS`].
pub struct GrpcPeerLink {
    token: Option<crate::auth::Token>,
    channels: std::sync::Mutex<HashMap<idmint::node::Peer, tonic::transport::Channel>>,
}

impl GrpcPeerLink {
    /// A link presenting `token` (the admin token) to its peers, if any.
    pub fn new(token: Option<crate::auth::Token>) -> GrpcPeerLink {
        GrpcPeerLink { token, channels: std::sync::Mutex::new(HashMap::new()) }
    }

    /// The channel to `peer`, made on first use (it connects on its first call).
    fn channel(
        &self,
        peer: &idmint::node::Peer,
    ) -> Result<tonic::transport::Channel, idmint::node::PeerError> {
        let mut channels = self.channels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(channel) = channels.get(peer) {
            return Ok(channel.clone());
        }
        let timeout = Duration::from_millis(PEER_CALL_TIMEOUT_MS);
        let endpoint = tonic::transport::Endpoint::from_shared(peer.grpc_url.clone())
            .map_err(|e| unreachable(peer, &format!("not a gRPC URL: {e}")))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = endpoint.connect_lazy();
        channels.insert(peer.clone(), channel.clone());
        Ok(channel)
    }

    /// `message` as a call to `peer`: bounded in time, with the admin token and the fence
    /// token, if any.
    fn request<T>(
        &self,
        peer: &idmint::node::Peer,
        message: T,
        fence: Option<idmint::peer::FenceToken>,
    ) -> Result<Request<T>, idmint::node::PeerError> {
        let mut request = Request::new(message);
        request.set_timeout(Duration::from_millis(PEER_CALL_TIMEOUT_MS));
        if let Some(fence) = fence {
            let value = fence.to_string().parse().map_err(|_| unreachable(peer, "a bad token"))?;
            request.metadata_mut().insert(FENCE_TOKEN_KEY, value);
        }
        if let Some(token) = &self.token {
            let bearer = format!("Bearer {}", token.secret());
            let value = bearer.parse().map_err(|_| unreachable(peer, "the token is not ASCII"))?;
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }
}

#[async_trait::async_trait]
impl idmint::node::PeerLink for GrpcPeerLink {
    async fn next_ids(
        &self,
        peer: &idmint::node::Peer,
        tag: &Tag,
        count: Count,
        fence: Option<idmint::peer::FenceToken>,
    ) -> Result<PublicIds, idmint::node::PeerError> {
        let mut client = idmint_proto::v1::id_mint_client::IdMintClient::new(self.channel(peer)?);
        let message = NextIdsRequest { tag: tag.to_string(), count: count.get() };
        let request = self.request(peer, message, fence)?;
        let answer = client.next_ids(request).await.map_err(|status| peer_error(peer, &status))?;
        let NextIdsResponse { ids, texts, .. } = answer.into_inner();
        Ok(if texts.is_empty() { PublicIds::Numbers(ids) } else { PublicIds::Texts(texts) })
    }

    async fn timestamps(
        &self,
        peer: &idmint::node::Peer,
        count: Count,
        fence: Option<idmint::peer::FenceToken>,
    ) -> Result<u64, idmint::node::PeerError> {
        let mut client = idmint_proto::v1::id_mint_client::IdMintClient::new(self.channel(peer)?);
        let request = self.request(peer, TsoRequest { count: count.get() }, fence)?;
        let answer = client.tso(request).await.map_err(|status| peer_error(peer, &status))?;
        let answer = answer.into_inner();
        if answer.count != count.get() {
            return Err(unreachable(peer, &format!("answered {} timestamps", answer.count)));
        }
        Ok(answer.first)
    }
}

/// A peer's gRPC status as a [`idmint::node::PeerError`]: the statuses idmint answers for what
/// passes by itself (and the transport's own failures) are `Unreachable`, the rest final.
fn peer_error(peer: &idmint::node::Peer, status: &Status) -> idmint::node::PeerError {
    use tonic::Code;
    match status.code() {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Internal => {
            unreachable(peer, &format!("{:?}: {}", status.code(), status.message()))
        }
        _ => idmint::node::PeerError::Refused {
            peer: peer.grpc_url.clone(),
            code: status
                .metadata()
                .get(crate::error::GRPC_CODE_KEY)
                .and_then(|code| code.to_str().ok())
                .map_or_else(|| format!("{:?}", status.code()), str::to_string),
            message: status.message().to_string(),
        },
    }
}

/// An [`idmint::node::PeerError::Unreachable`] of `peer`.
fn unreachable(peer: &idmint::node::Peer, reason: &str) -> idmint::node::PeerError {
    idmint::node::PeerError::Unreachable { peer: peer.grpc_url.clone(), reason: reason.to_string() }
}
