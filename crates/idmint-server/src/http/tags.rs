//! Tag admin: `GET/POST /v1/tags`, `GET/PATCH/DELETE /v1/tags/{tag}`. Changing routes are
//! admin routes (the route table's `admin`, `routes.rs`).
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; they decide nothing.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use idmint::node::NamedView;
use idmint_core::{Description, StartId, Step, Tag};
use idmint_store::TagSpec;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::RouteTag;
use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{
    AdminErrors, ApiJson, FormatBody, NotStorable, StoreErrors, StoreNotSetUp, TAG_PARAM, TagBody,
    TagName, UnknownTagToChange,
};
use crate::state::SharedState;

/// Every tag in the store.
#[derive(Serialize, ToSchema)]
#[schema(as = Tags)]
pub(crate) struct TagsBody {
    tags: Vec<TagBody>,
}

/// List tags
#[utoipa::path(
    get,
    path = "/v1/tags",
    tag = "segment",
    operation_id = "listTags",
    responses(
        (status = 200, description = "Every tag in the store", body = TagsBody),
        StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn list_tags(State(app): State<SharedState>) -> Result<Json<TagsBody>, ApiError> {
    let records = app.node.list_tags().await?;
    let mut tags: Vec<TagBody> = records.into_iter().map(|r| TagBody::new(r, None)).collect();
    tags.extend(app.node.list_strict_tags().await?.into_iter().map(TagBody::strict));
    Ok(Json(TagsBody { tags }))
}

/// A new tag.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTag {
    #[schema(value_type = TagName)]
    tag: String,
    #[schema(schema_with = crate::http::shared::new_step_schema)]
    step: Option<u64>,
    #[schema(schema_with = crate::http::shared::start_schema)]
    start: Option<u64>,
    #[schema(schema_with = crate::http::shared::description_schema)]
    description: Option<String>,
    /// Accept a `start` below where a deleted tag of the same name stopped (its tombstone):
    /// the new tag may then hand out ids the old one did. Only when no id of the old tag
    /// survives anywhere. The answer's `warning` says what was forced.
    #[serde(default)]
    force: bool,
    /// A strict tag: its ids increase in real time across the cluster (one owner node at a
    /// time serves them; the others forward). `step` and `force` do not apply; a `start`
    /// raises its first id.
    #[serde(default)]
    strict: bool,
}

/// Create a tag
#[utoipa::path(
    post,
    path = "/v1/tags",
    tag = "segment",
    operation_id = "createTag",
    request_body = CreateTag,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = TagBody),
        (status = 400, description = "A bad body (`bad_body`), tag (`bad_tag`), step, start or \
            description (`bad_value`)", body = ErrorBody),
        AdminErrors,
        (status = 409, description = "The tag exists (`tag_exists`), the store holds 10000 \
            tags (`too_many_tags`), or `start` is below where a deleted tag of this name stopped \
            and `force` is not set (`start_below_issued`), or the store's table cannot hold \
            the tag (`tag_not_storable`: the message gives the `ALTER TABLE`)",
            body = ErrorBody),
        StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn create_tag(
    State(app): State<SharedState>,
    ApiJson(body): ApiJson<CreateTag>,
) -> Result<impl IntoResponse, ApiError> {
    if body.strict {
        let tag = Tag::parse(&body.tag)?;
        let start = body.start.map(StartId::new).transpose()?;
        let record = app.node.create_strict_tag(&tag, start).await?;
        return Ok((StatusCode::CREATED, Json(TagBody::strict(record))));
    }
    let spec = TagSpec {
        tag: Tag::parse(&body.tag)?,
        step: body.step.map_or(Ok(Step::DEFAULT), Step::new)?,
        start: body.start.map(StartId::new).transpose()?,
        description: Description::new(body.description.as_deref().unwrap_or(""))?,
        force: body.force,
    };
    let created = app.node.create_tag(&spec).await?;
    let mut body = TagBody::new(created.record, None);
    body.warning = created.forced;
    Ok((StatusCode::CREATED, Json(body)))
}

/// A tag's store row and the segments this node holds for it
///
/// With `[tinyid]` enabled, a name the segment store has no tag of is looked up in Tinyid's
/// `tiny_id_info`: a `biz_type` answers its row (`kind` `tinyid`, with `delta` and
/// `remainder`) and this node's segments of it, in ids. A tag of the same name as a
/// `biz_type` answers the tag (both are in `GET /v1/status`).
#[utoipa::path(
    get,
    path = "/v1/tags/{tag}",
    tag = "segment",
    operation_id = "getTag",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    responses(
        (status = 200, description = "The tag, or a Tinyid `biz_type`", body = TagBody),
        (status = 400, description = "A bad tag (`bad_tag`)", body = ErrorBody),
        (status = 404, description = "No tag of that name, nor (with `[tinyid]`) a Tinyid \
            `biz_type` (`unknown_tag`, the message naming how to make either)",
            body = ErrorBody),
        NotStorable, StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn get_tag(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
) -> Result<Json<TagBody>, ApiError> {
    match app.node.get_tag_or_biz_type(&tag).await? {
        NamedView::Tag(view) => {
            let mut body = TagBody::new(view.record, view.status);
            body.format = view.format.as_ref().map(FormatBody::new);
            Ok(Json(body))
        }
        NamedView::BizType(view) => Ok(Json(TagBody::biz_type(view))),
        NamedView::Strict(record) => Ok(Json(TagBody::strict(record))),
    }
}

/// A tag's new step.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetStep {
    #[schema(schema_with = crate::http::shared::step_schema)]
    step: u64,
}

/// Change a tag's step
///
/// The new step takes effect at the tag's next refill.
#[utoipa::path(
    patch,
    path = "/v1/tags/{tag}",
    tag = "segment",
    operation_id = "setStep",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    request_body = SetStep,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The updated tag", body = TagBody),
        (status = 400, description = "A bad tag (`bad_tag`), body (`bad_body`) or step \
            (`bad_value`)", body = ErrorBody),
        AdminErrors, UnknownTagToChange, NotStorable, StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn set_step(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
    ApiJson(body): ApiJson<SetStep>,
) -> Result<Json<TagBody>, ApiError> {
    let record = app.node.set_step(&tag, Step::new(body.step)?).await?;
    Ok(Json(TagBody::new(record, None)))
}

/// Delete a tag
#[utoipa::path(
    delete,
    path = "/v1/tags/{tag}",
    tag = "segment",
    operation_id = "deleteTag",
    params(("tag" = TagName, Path, description = TAG_PARAM)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A bad tag (`bad_tag`)", body = ErrorBody),
        AdminErrors, UnknownTagToChange, NotStorable, StoreErrors, StoreNotSetUp,
    )
)]
pub(crate) async fn delete_tag(
    State(app): State<SharedState>,
    RouteTag(tag): RouteTag,
) -> Result<StatusCode, ApiError> {
    app.node.delete_tag(&tag).await?;
    Ok(StatusCode::NO_CONTENT)
}
