//! A tag's ids: Leaf's `GET /api/segment/get/{tag}` (one id as text) and
//! `GET /v1/segment/{tag}?count=N` (a batch as JSON), plain or as the tag's public ids.
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; they decide nothing.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use idmint::node::PublicText;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::{CheckedName, RouteTag};
use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{
    ApiQuery, CountQuery, IdText, IdValues, IdsAs, StoreErrors, StoreNotSetUp, TAG_PARAM,
    TagIdsSpent, TagName, UnknownTag, parse_count, public_values,
};
use crate::state::SharedState;

/// Next id of a tag (Meituan Leaf compatible)
///
/// Leaf's segment route, byte-compatible: `200 text/plain` with the decimal id. Errors are
/// non-200 with a JSON body, never `0` or a negative number. Answered alike under GET, POST,
/// PUT, PATCH and DELETE (Leaf maps it without a method); HEAD answers `200` with no body and
/// takes no id; OPTIONS answers `204` with `Allow`.
#[utoipa::path(
    get,
    path = "/api/segment/get/{tag}",
    tag = "leaf",
    operation_id = "leafSegmentGet",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    responses(
        (status = 200, description = "The id in decimal; for a tag with a [format.TAG] section, \
            its public id as the template renders it (a permuted number with a key)",
            body = IdText, content_type = "text/plain", headers(
                ("idmint-node" = String, description = "A strict tag only: the node \
                    that answered, as its peers reach it (its gRPC URL)"),
                ("idmint-owner" = String, description = "A strict tag only, when the \
                    answering node knows it: the owner, as `idmint-node` names nodes. Ask the \
                    server that named itself so directly (a hint: owners move)"))),
        (status = 400, description = "A bad tag (`bad_tag`)", body = ErrorBody),
        UnknownTag, TagIdsSpent, StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn leaf_segment(
    State(app): State<SharedState>,
    request: Request,
) -> Result<(OwnerHeaders, TextId), ApiError> {
    // By name as the path holds it: a tag the node serves is found without a `Tag` being
    // made; the take that finds an id now answers without the awaited take's `Result`.
    let name = CheckedName::of(&request)?.name(request.uri())?;
    if let Some(text) = app.node.try_public_text_by_name(&name) {
        return Ok((OwnerHeaders(None), TextId(text)));
    }
    let text = app.node.next_public_text_by_name(&name).await?;
    Ok((OwnerHeaders(app.strict_owner(&name)), TextId(text)))
}

/// A strict tag's answering node and owner as headers ([`crate::state::NODE_KEY`],
/// [`crate::state::OWNER_KEY`]); nothing for other tags.
pub(crate) struct OwnerHeaders(Option<[(HeaderName, HeaderValue); 2]>);

impl IntoResponseParts for OwnerHeaders {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut parts: ResponseParts) -> Result<ResponseParts, Self::Error> {
        for (key, value) in self.0.into_iter().flatten() {
            parts.headers_mut().insert(key, value);
        }
        Ok(parts)
    }
}

/// One id as Leaf's `text/plain` answer (as a `String` answers: `text/plain; charset=utf-8`).
pub(crate) struct TextId(PublicText);

impl IntoResponse for TextId {
    fn into_response(self) -> Response {
        let body = self.0.with_str(|text| Bytes::copy_from_slice(text.as_bytes()));
        ([(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], body)
            .into_response()
    }
}

/// A batch of a tag's ids.
#[derive(Serialize, ToSchema)]
#[schema(as = SegmentIds)]
pub(crate) struct IdsBody {
    tag: String,
    /// Numbers, or strings (a tag with a text template, or `ids_as=string`).
    #[schema(schema_with = crate::http::shared::ids_schema)]
    ids: IdValues,
}

/// A batch of ids of a tag
///
/// `count` ids (default 1) of a tag, increasing, as JSON.
#[utoipa::path(
    get,
    path = "/v1/segment/{tag}",
    tag = "segment",
    operation_id = "segmentIds",
    params(("tag" = TagName, Path, description = TAG_PARAM), CountQuery),
    responses(
        (status = 200, description = "Ids increasing, or for a tag with a [format.TAG] section \
            its public ids: permuted numbers with a key, strings with a text template",
            body = IdsBody, headers(
                ("idmint-node" = String, description = "A strict tag only: the node \
                    that answered, as its peers reach it (its gRPC URL)"),
                ("idmint-owner" = String, description = "A strict tag only, when the \
                    answering node knows it: the owner, as `idmint-node` names nodes. Ask the \
                    server that named itself so directly (a hint: owners move)"))),
        (status = 400, description = "A bad tag (`bad_tag`), `count` (`bad_count`), `ids_as` \
            (`bad_ids_as`) or query (`bad_query`)", body = ErrorBody),
        UnknownTag, TagIdsSpent, StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn segment_ids(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
    ApiQuery(query): ApiQuery<CountQuery>,
) -> Result<(OwnerHeaders, Json<IdsBody>), ApiError> {
    let count = parse_count(query.count.as_deref(), app.node.batch_count_max())?;
    let ids_as = IdsAs::parse(query.ids_as.as_deref())?;
    let ids = public_values(app.node.next_public_ids(&tag, count).await?, ids_as);
    let owner = OwnerHeaders(app.strict_owner(tag.as_str()));
    Ok((owner, Json(IdsBody { tag: tag.to_string(), ids })))
}
