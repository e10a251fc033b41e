//! `GET /v1/decode`: the internal id behind a public id text (a tag's template and key) or
//! an encoded id. Decoding is [`idmint::Node::decode_text`]'s; this file parses and renders.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::QueryTag;
use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{ApiQuery, StoreErrors, TagName, UnknownTag};
use crate::state::SharedState;

/// The query of `GET /v1/decode`: the text, and a tag or an encoding.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecodeQuery {
    /// The public id text, e.g. `ORD-20261124-0a1b2c3d`.
    #[param(required = true, value_type = String, min_length = 1, max_length = 512)]
    id: Option<String>,
    /// Decode with this tag's `[format.TAG]` template and key (a tag without one: plain
    /// decimal). Give `tag` or `encoding`, not both.
    #[param(value_type = Option<TagName>)]
    #[allow(
        dead_code,
        reason = "accepted and documented here; the handler takes the tag \
        the middleware parsed and checked (QueryTag), never this text again"
    )]
    tag: Option<String>,
    /// Decode a plain encoded id.
    #[param(inline, value_type = Option<EncodingName>)]
    encoding: Option<String>,
}

/// The encodings `?encoding=` names.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "documents the accepted values; `Encoding::parse` parses them")]
enum EncodingName {
    Decimal,
    Base36,
    Base62,
    Crockford32,
}

/// What a public id text stands for.
#[derive(Serialize, ToSchema)]
#[schema(as = DecodedId)]
pub(crate) struct DecodeBody {
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    template: Option<String>,
    /// The number the text encodes (after the permutation).
    public_id: u64,
    /// The id the tag issued.
    id: u64,
    /// The template's rendered dates, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dates: Vec<String>,
}

/// The internal id behind a public id (a tag's template and key) or an encoded id
///
/// `GET /v1/decode?id=TEXT&tag=TAG` (the tag's template and key) or
/// `GET /v1/decode?id=TEXT&encoding=base36` (a plain encoding).
#[utoipa::path(
    get,
    path = "/v1/decode",
    tag = "segment",
    operation_id = "decodeId",
    params(DecodeQuery),
    responses(
        (status = 200, description = "What the text stands for", body = DecodeBody),
        (status = 400, description = "No `id`, neither or both of `tag` and `encoding`, or an \
            unknown parameter (`bad_query`); a bad tag (`bad_tag`) or encoding (`bad_encoding`); \
            the text is not an id of the tag's format or the encoding (`not_an_id`)",
            body = ErrorBody),
        UnknownTag, StoreErrors,
    )
)]
pub(crate) async fn decode(
    State(app): State<SharedState>,
    QueryTag(tag): QueryTag,
    ApiQuery(query): ApiQuery<DecodeQuery>,
) -> Result<Json<DecodeBody>, ApiError> {
    let text = query.id.ok_or_else(|| {
        ApiError::bad_request("bad_query", "give the id to decode: ?id=TEXT&tag=TAG")
    })?;
    // The tag the middleware parsed and checked, not the query's text read a second time.
    let decoded = app.node.decode_text(text, tag, query.encoding.as_deref()).await?;
    Ok(Json(DecodeBody {
        text: decoded.text,
        tag: decoded.tag.map(|tag| tag.to_string()),
        template: decoded.template,
        public_id: decoded.public_id,
        id: decoded.id,
        dates: decoded.dates,
    }))
}
