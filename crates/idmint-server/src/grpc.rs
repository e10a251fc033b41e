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
//! This file holds no id logic and chooses no status code; it imports no HTTP route module,
//! and it is the only module that names a protobuf type. `StreamIds` is pulled by the
//! transport (`stream::unfold`), so a stream costs no task and stops when the caller does.

use std::pin::Pin;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, header};
use futures_util::Stream;
use idmint::Tag;
use idmint::node::{LeaseParts, PublicIds};
use idmint::segment::Lease;
use idmint_core::Count;
use idmint_core::snowflake::UtcMs;
use idmint_proto::v1::id_mint_server::{IdMint, IdMintServer};
use idmint_proto::v1::{
    DecodeIdRequest, DecodeIdResponse, DecodeSnowflakeRequest, DecodeSnowflakeResponse,
    NextIdsRequest, NextIdsResponse, NextRangeRequest, NextRangeResponse, NextSequenceIdsRequest,
    NextSequenceIdsResponse, NextSnowflakeIdsRequest, NextSnowflakeIdsResponse, Range,
    ReturnRangeRequest, ReturnRangeResponse, StreamIdsRequest, StreamIdsResponse,
};
use tonic::{Request, Response, Status};

use crate::error::ApiError;
use crate::state::SharedState;

/// Most ids one `StreamIds` call may ask for (10^9: a bulk export of a day's ids; larger
/// exports are several streams).
pub const STREAM_COUNT_MAX: u64 = 1_000_000_000;

/// Ids per `StreamIds` message when the request leaves `chunk` at 0.
pub const STREAM_CHUNK_DEFAULT: u64 = 10_000;

const _: () = assert!(STREAM_CHUNK_DEFAULT <= idmint_core::limits::BATCH_COUNT_MAX);

/// Path prefix of every gRPC call, as the router matches it.
pub const GRPC_ROUTE: &str = "/idmint.v1.IdMint/{*method}";

/// The gRPC service as a router of one route, [`GRPC_ROUTE`], sharing `state` with the
/// HTTP routes.
pub(crate) fn grpc_router(state: SharedState) -> Router<SharedState> {
    Router::new().route_service(GRPC_ROUTE, IdMintServer::new(GrpcApi { app: state }))
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
            let (ids, texts) = split(self.app.node.next_public_ids(&tag, count).await?);
            Ok(NextIdsResponse { tag: tag.to_string(), ids, texts })
        };
        respond(answer.await)
    }

    async fn next_range(&self, request: Request<NextRangeRequest>) -> Answer<NextRangeResponse> {
        let (headers, body) = parts(request);
        let answer = async {
            let tag = self.tag(&headers, &body.tag)?;
            let count = count(body.count, self.app.node.batch_count_max())?;
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
        let app = std::sync::Arc::clone(&self.app);
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
        self.app.auth.tag(headers, &tag)?;
        Ok(tag)
    }
}

/// A lease a client sends back, as the node checks it.
fn lease_parts(range: &Range) -> LeaseParts {
    LeaseParts { start: range.start, end: range.end, proof: range.proof }
}

/// A lease as the wire carries it.
fn range_of(lease: &Lease) -> Range {
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
    Count::new_bounded(count, max).map_err(|_| {
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
