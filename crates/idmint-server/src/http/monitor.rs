//! Meituan Leaf's monitor pages: `/cache` (this node's double buffer of every tag it serves:
//! whether it is loaded, whether the next segment is ready, each segment's next value, end and
//! step) and `/db` (every row of the tag table: `biz_tag`, `max_id`, `step`, `description`,
//! `update_time`). HTML as Leaf renders them, or JSON with `?format=json` or
//! `Accept: application/json`. Every text from the store (tags, descriptions) is
//! HTML-escaped. Leaf maps them under every method; so does the router, and the admin token
//! guards them under every method (`auth.rs`'s `MONITOR_ROUTES`).
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; they decide nothing.

use std::fmt::Write as _;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use idmint::segment::TagStatus;
use idmint_core::SegmentSnapshot;
use idmint_core::snowflake::UtcMs;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{FORBIDDEN, STORE_500, STORE_503, UNAUTHORIZED};
use crate::state::SharedState;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct FormatQuery {
    /// `html` (Leaf's page, the default) or `json`; `Accept: application/json` also picks
    /// JSON.
    #[param(inline, value_type = Option<PageFormat>)]
    format: Option<String>,
}

/// The formats a monitor page is rendered in.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "documents the accepted values; `wants_json` parses them")]
pub(crate) enum PageFormat {
    Html,
    Json,
}

/// One segment of a buffer, as Leaf's `/cache` shows it.
#[derive(Serialize, ToSchema)]
#[schema(as = CacheSegment)]
pub(crate) struct CacheSegmentBody {
    /// The next id the segment hands out (Leaf's `value`).
    value: u64,
    /// The end of the segment, exclusive (Leaf's `max`).
    max: u64,
    /// The segment's length (Leaf's `step`).
    step: u64,
}

/// One tag's double buffer on this node.
#[derive(Serialize, ToSchema)]
#[schema(as = CacheBuffer)]
pub(crate) struct CacheBufferBody {
    /// The tag (Leaf's `key`).
    tag: String,
    /// Whether a first segment is loaded (Leaf's `initOk`).
    init: bool,
    /// Whether the next segment is loaded (Leaf's `nextReady`).
    next_ready: bool,
    /// The segment ids are taken from (Leaf's segment at `pos`); `null` before the first
    /// refill.
    current: Option<CacheSegmentBody>,
    /// The segment loaded ahead (Leaf's other segment); `null` until it is loaded.
    next: Option<CacheSegmentBody>,
}

/// Every buffer this node holds.
#[derive(Serialize, ToSchema)]
#[schema(as = Cache)]
pub(crate) struct CacheBody {
    buffers: Vec<CacheBufferBody>,
}

/// This node's segment buffers (Meituan Leaf's `/cache`)
///
/// Every tag this node serves, with its two segments. HTML as Leaf renders it (a table: tag,
/// init, next ready, then each segment's value, max and step), or JSON with `?format=json` or
/// `Accept: application/json`. Leaf answers it under any method, and so does idmint. Needs
/// the admin token when the node has one.
#[utoipa::path(
    get,
    path = "/cache",
    tag = "leaf",
    operation_id = "leafCache",
    params(FormatQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The buffers", content(
            (CacheBody = "application/json"),
            (String = "text/html"),
        )),
        (status = 400, description = "A `format` other than `html` or `json` (`bad_query`)",
            body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 403, description = FORBIDDEN, body = ErrorBody),
    )
)]
pub(crate) async fn cache(
    State(app): State<SharedState>,
    headers: HeaderMap,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let json = wants_json(&headers, query)?;
    let buffers: Vec<CacheBufferBody> =
        app.node.segment_buffers().into_iter().map(|(tag, s)| buffer(tag, s)).collect();
    if json {
        return Ok(Json(CacheBody { buffers }).into_response());
    }
    let mut rows = String::new();
    for b in &buffers {
        let cells = |s: &Option<CacheSegmentBody>| match s {
            Some(s) => format!("<td>{}</td><td>{}</td><td>{}</td>", s.value, s.max, s.step),
            None => "<td>-</td><td>-</td><td>-</td>".to_string(),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td>{}{}</tr>",
            escape_html(&b.tag),
            b.init,
            b.next_ready,
            cells(&b.current),
            cells(&b.next)
        );
    }
    let head = "<th>name</th><th>init</th><th>next</th><th>value</th><th>max</th>\
                <th>step</th><th>next value</th><th>next max</th><th>next step</th>";
    Ok(page("cache", head, &rows))
}

/// One row of the tag table, as Leaf's `/db` shows it.
#[derive(Serialize, ToSchema)]
#[schema(as = DbRow)]
pub(crate) struct DbRowBody {
    biz_tag: String,
    /// The first id not yet reserved by any node.
    max_id: u64,
    step: u64,
    description: String,
    /// Last change, RFC 3339 in UTC.
    #[schema(format = DateTime)]
    update_time: String,
    /// Last change, seconds since the Unix epoch.
    update_time_s: u64,
}

/// Every row of the tag table.
#[derive(Serialize, ToSchema)]
#[schema(as = Db)]
pub(crate) struct DbBody {
    rows: Vec<DbRowBody>,
}

/// The tag table's rows (Meituan Leaf's `/db`)
///
/// Every row of the tag table (`leaf_alloc`): `biz_tag`, `max_id`, `step`, `description`,
/// `update_time` (UTC). HTML as Leaf renders it, or JSON with `?format=json` or
/// `Accept: application/json`. Leaf answers it under any method, and so does idmint. Needs the
/// admin token when the node has one.
#[utoipa::path(
    get,
    path = "/db",
    tag = "leaf",
    operation_id = "leafDb",
    params(FormatQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The rows", content(
            (DbBody = "application/json"),
            (String = "text/html"),
        )),
        (status = 400, description = "A `format` other than `html` or `json` (`bad_query`)",
            body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 403, description = FORBIDDEN, body = ErrorBody),
        (status = 500, description = STORE_500, body = ErrorBody),
        (status = 503, description = STORE_503, body = ErrorBody),
    )
)]
pub(crate) async fn db(
    State(app): State<SharedState>,
    headers: HeaderMap,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let json = wants_json(&headers, query)?;
    let rows: Vec<DbRowBody> = app
        .node
        .list_tags()
        .await?
        .into_iter()
        .map(|r| DbRowBody {
            biz_tag: r.tag.to_string(),
            max_id: r.max_id,
            step: r.step,
            description: r.description,
            update_time: UtcMs(r.update_time_s.saturating_mul(1000)).to_string(),
            update_time_s: r.update_time_s,
        })
        .collect();
    if json {
        return Ok(Json(DbBody { rows }).into_response());
    }
    let mut html = String::new();
    for r in &rows {
        // Writing to a String cannot fail.
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape_html(&r.biz_tag),
            r.max_id,
            r.step,
            escape_html(&r.description),
            escape_html(&r.update_time)
        );
    }
    let head = "<th>tag</th><th>max</th><th>step</th><th>description</th><th>update</th>";
    Ok(page("db", head, &html))
}

/// Whether the answer is JSON: `?format=json`, or no `format` and an `Accept` naming
/// `application/json` (and not `text/html` before it).
fn wants_json(
    headers: &HeaderMap,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<bool, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    match query.format.as_deref() {
        Some("json") => Ok(true),
        Some("html") => Ok(false),
        Some(other) => Err(ApiError::bad_request(
            "bad_query",
            format!("format={other:?}; use format=html (the default) or format=json"),
        )),
        None => {
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
            let json = accept.find("application/json");
            let html = accept.find("text/html");
            Ok(json.is_some_and(|j| html.is_none_or(|h| j < h)))
        }
    }
}

fn buffer(tag: idmint::Tag, status: TagStatus) -> CacheBufferBody {
    let segment = |s: SegmentSnapshot| CacheSegmentBody {
        value: s.next_id,
        max: s.range.end(),
        step: s.range.end() - s.range.start(),
    };
    CacheBufferBody {
        tag: tag.to_string(),
        init: status.buffer.current.is_some(),
        next_ready: status.buffer.next.is_some(),
        current: status.buffer.current.map(segment),
        next: status.buffer.next.map(segment),
    }
}

/// A self-contained page with one table (nothing loaded from elsewhere).
fn page(title: &str, head: &str, rows: &str) -> Response {
    let body = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>idmint {title}</title>\
         <style>table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px}}\
         </style></head>\n<body><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\
         </tbody></table></body></html>\n"
    );
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, "default-src 'none'; style-src 'unsafe-inline'"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `text` safe inside HTML text and attribute values.
fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html(r#"<script>alert("x&'y")</script>"#),
            "&lt;script&gt;alert(&quot;x&amp;&#39;y&quot;)&lt;/script&gt;"
        );
        assert_eq!(escape_html("订单/v2"), "订单/v2");
    }
}
