//! Public id formats on the wire: the ids of a tag with a `[format.TAG]` section leave as
//! its template renders them (permuted when it has a key), `ids_as=string` carries numeric
//! ids as JSON strings for JavaScript clients, and `GET /v1/decode` maps a public id text
//! back to the internal id.
//!
//! Handlers here hold no format logic: templates, permutations and decoding are
//! [`idmint::IdFormat`]'s.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use idmint::segment::IdRange;
use idmint::{Clock, IdFormat, SystemClock, Tag};
use idmint_core::encoding::Encoding;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::QueryTag;
use crate::error::ErrorBody;
use crate::openapi::{STORE_500, STORE_503, TagName};
use crate::{ApiError, AppState, SharedState};

/// The public id formats of a node, by tag.
pub type TagFormats = HashMap<Tag, IdFormat>;

/// How JSON answers carry ids: numbers (default) or strings (`ids_as=string`; JavaScript
/// numbers lose precision above 2^53).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum IdsAs {
    #[default]
    Number,
    String,
}

impl IdsAs {
    pub(crate) fn parse(text: Option<&str>) -> Result<IdsAs, ApiError> {
        match text {
            None | Some("number") => Ok(IdsAs::Number),
            Some("string") => Ok(IdsAs::String),
            Some(other) => Err(ApiError::bad_request(
                "bad_ids_as",
                format!("ids_as={other:?}; use ids_as=number (the default) or ids_as=string"),
            )),
        }
    }

    /// `ids` as JSON values of this kind.
    pub(crate) fn values(self, ids: impl IntoIterator<Item = u64>) -> Vec<serde_json::Value> {
        match self {
            IdsAs::Number => ids.into_iter().map(serde_json::Value::from).collect(),
            IdsAs::String => ids.into_iter().map(|id| id.to_string().into()).collect(),
        }
    }
}

/// The public ids of `ranges` of `tag`: rendered by the tag's format if it has one (strings,
/// or numbers for a plain `{id}` template unless `ids_as=string`), else the ids as they are.
pub(crate) fn public_ids(
    app: &AppState,
    tag: &Tag,
    ranges: &[IdRange],
    ids_as: IdsAs,
) -> Result<Vec<serde_json::Value>, ApiError> {
    Ok(match typed_public_ids(app, tag, ranges)? {
        PublicIds::Numbers(ids) => ids_as.values(ids),
        PublicIds::Texts(texts) => texts.into_iter().map(serde_json::Value::from).collect(),
    })
}

/// A batch of public ids: numbers (a plain tag, or a numeric template with a key) or texts.
pub(crate) enum PublicIds {
    /// Ids, or a keyed tag's permuted ids.
    Numbers(Vec<u64>),
    /// A text template's rendering of each id.
    Texts(Vec<String>),
}

/// The public ids of `ranges` of `tag`, typed: what the JSON routes and gRPC both answer.
pub(crate) fn typed_public_ids(
    app: &AppState,
    tag: &Tag,
    ranges: &[IdRange],
) -> Result<PublicIds, ApiError> {
    let ids = ranges.iter().flat_map(|r| r.ids());
    let Some(format) = app.formats.get(tag) else {
        return Ok(PublicIds::Numbers(ids.collect()));
    };
    if format.is_numeric() {
        let publics = ids.map(|id| format.public_id(id)).collect::<Result<Vec<_>, _>>()?;
        return Ok(PublicIds::Numbers(publics));
    }
    let renderer = format.at(&format.zoned(SystemClock.now_ms()))?;
    let texts = ids.map(|id| renderer.render(id)).collect::<Result<_, _>>()?;
    Ok(PublicIds::Texts(texts))
}

/// Leaf's route answers one id as text: the tag's public id as its format renders it.
pub(crate) fn public_text(app: &AppState, tag: &Tag, id: u64) -> Result<String, ApiError> {
    let Some(format) = app.formats.get(tag) else {
        return Ok(id.to_string());
    };
    Ok(format.at(&format.zoned(SystemClock.now_ms()))?.render(id)?)
}

/// A tag's format as `GET /v1/tags/{tag}` shows it: never the key, only its fingerprint.
#[derive(Serialize, ToSchema)]
#[schema(as = TagFormat)]
pub(crate) struct FormatBody {
    /// The template, e.g. `ORD-{date:%Y%m%d}-{id:base36:8}`.
    template: String,
    /// The permutation's width in bits, with a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 16, maximum = 63, nullable = false)]
    bits: Option<u32>,
    /// The key's fingerprint (SipHash-2-4), with a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9a-f]{16}$", nullable = false)]
    key_fingerprint: Option<String>,
}

impl FormatBody {
    pub(crate) fn new(format: &IdFormat) -> FormatBody {
        let permutation = format.permutation();
        FormatBody {
            template: format.template().to_string(),
            bits: permutation.map(|p| p.bits()),
            key_fingerprint: permutation.map(|p| format!("{:016x}", p.fingerprint())),
        }
    }
}

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
    pub(crate) text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub(crate) template: Option<String>,
    /// The number the text encodes (after the permutation).
    pub(crate) public_id: u64,
    /// The id the tag issued.
    pub(crate) id: u64,
    /// The template's rendered dates, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) dates: Vec<String>,
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
        (status = 404, description = "The tag does not exist (`unknown_tag`)", body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn decode(
    State(app): State<SharedState>,
    QueryTag(tag): QueryTag,
    query: Result<Query<DecodeQuery>, QueryRejection>,
) -> Result<Json<DecodeBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let text = query.id.ok_or_else(|| {
        ApiError::bad_request("bad_query", "give the id to decode: ?id=TEXT&tag=TAG")
    })?;
    // The tag the middleware parsed and checked, not the query's text read a second time.
    decode_text(&app, text, tag, query.encoding).await.map(Json)
}

/// What `text` stands for under `tag`'s format or an `encoding` (exactly one of the two):
/// `/v1/decode` and gRPC's `DecodeId`. A tag that does not exist is `unknown_tag`, as on
/// every other tag route.
pub(crate) async fn decode_text(
    app: &AppState,
    text: String,
    tag: Option<Tag>,
    encoding: Option<String>,
) -> Result<DecodeBody, ApiError> {
    let not_an_id = |e: &dyn std::fmt::Display| ApiError::bad_request("not_an_id", e.to_string());
    match (tag, encoding) {
        (Some(tag), None) => {
            // A tag this node serves exists; any other is looked up in the store.
            if app.segments.status(&tag).is_none() {
                app.segments.get_tag(&tag).await?;
            }
            let plain = IdFormat::plain();
            let format = app.formats.get(&tag).unwrap_or(&plain);
            let decoded = format.decode(&text).map_err(|e| not_an_id(&e))?;
            Ok(DecodeBody {
                text,
                tag: Some(tag.to_string()),
                template: Some(format.template().to_string()),
                public_id: decoded.public_id,
                id: decoded.internal_id,
                dates: decoded.dates,
            })
        }
        (None, Some(name)) => {
            let encoding = Encoding::parse(&name)
                .map_err(|e| ApiError::bad_request("bad_encoding", e.to_string()))?;
            let id = encoding.decode(&text).map_err(|e| not_an_id(&e))?;
            Ok(DecodeBody { text, tag: None, template: None, public_id: id, id, dates: Vec::new() })
        }
        _ => Err(ApiError::bad_request(
            "bad_query",
            "give exactly one of tag= (decode with the tag's format) or encoding= (decimal, \
             base36, base62, crockford32)",
        )),
    }
}
