//! Meituan Leaf's monitor pages, in Leaf's columns and order so that the scripts Leaf's users
//! wrote for them read them unchanged: `/cache` (every row of the tag table with this node's
//! double buffer of it, in Leaf's two slots: `name, init, next, pos, value0, max0, step0,
//! value1, max1, step1`) and `/db` (every row: `tag, max, step, update`, the last the
//! database's own text of `update_time`). HTML as Leaf renders them (numbers grouped by
//! thousands, each row followed by an empty one), or JSON with `?format=json` or
//! `Accept: application/json`. Every text from the store (tags, times) is HTML-escaped.
//! idmint's richer views are the dashboard and `/v1`. Leaf maps them under every method; so does the router, and the admin token
//! guards them under every method (the route table's `monitor`, `routes.rs`).
//!
//! Handlers parse, call one [`idmint::Node`] operation and render; they decide nothing.

use std::fmt::Write as _;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use idmint::segment::TagStatus;
use idmint_core::SegmentSnapshot;
use idmint_core::snowflake::UtcMs;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::http::shared::{AdminErrors, ApiQuery, StoreErrors};
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

/// One tag's buffer in Leaf's columns: Leaf's two segment slots, not current and next.
#[derive(Serialize, ToSchema)]
#[schema(as = CacheBuffer)]
pub(crate) struct CacheBufferBody {
    /// The tag (Leaf's `name` column).
    name: String,
    /// Whether a first segment is loaded. `false`, with every number 0, for a row this node
    /// has not loaded, as Leaf shows a buffer it has not initialised.
    init: bool,
    /// Whether the next segment is loaded.
    next: bool,
    /// The slot ids are taken from, 0 or 1: the first segment goes to slot 0 and each
    /// switch moves to the other slot, as in Leaf.
    pos: u8,
    /// Slot 0's next id (Leaf's `value`).
    value0: u64,
    /// Slot 0's end, exclusive (Leaf's `max`).
    max0: u64,
    /// Slot 0's length (Leaf's `step`).
    step0: u64,
    /// Slot 1's next id.
    value1: u64,
    /// Slot 1's end, exclusive.
    max1: u64,
    /// Slot 1's length.
    step1: u64,
}

/// Every row of the tag table, with this node's buffer of it.
#[derive(Serialize, ToSchema)]
#[schema(as = Cache)]
pub(crate) struct CacheBody {
    buffers: Vec<CacheBufferBody>,
}

/// Leaf's `/cache` columns, in Leaf's order.
const CACHE_COLUMNS: [&str; 10] =
    ["name", "init", "next", "pos", "value0", "max0", "step0", "value1", "max1", "step1"];

/// Every tag's buffer on this node (Meituan Leaf's `/cache`)
///
/// Every row of the tag table, sorted by tag, in Leaf's columns and order: `name, init,
/// next, pos, value0, max0, step0, value1, max1, step1` (Leaf's two segment slots; `pos` is
/// the slot in use). A row this node has not loaded shows as Leaf shows a buffer it has not
/// initialised: `false, false, 0` and every slot 0. The slot not in use shows 0 until the
/// next segment is loaded into it. HTML as Leaf renders it (numbers grouped by thousands,
/// `1,000`, each row followed by an empty one), or JSON in the same columns with
/// `?format=json` or `Accept: application/json`. Leaf answers it under any method, and so
/// does idmint. Needs the admin token when the node has one.
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
        AdminErrors, StoreErrors,
    )
)]
pub(crate) async fn cache(
    State(app): State<SharedState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<FormatQuery>,
) -> Result<Response, ApiError> {
    let json = wants_json(&headers, query)?;
    let buffers: Vec<CacheBufferBody> =
        app.node.leaf_cache().await?.into_iter().map(|(tag, s)| buffer(tag, s)).collect();
    if json {
        return Ok(Json(CacheBody { buffers }).into_response());
    }
    let mut rows = String::new();
    for b in &buffers {
        let flags =
            [escape_html(&b.name), b.init.to_string(), b.next.to_string(), b.pos.to_string()];
        let numbers = [b.value0, b.max0, b.step0, b.value1, b.max1, b.step1].map(grouped);
        let cells: Vec<&str> = flags.iter().chain(&numbers).map(String::as_str).collect();
        row(&mut rows, &cells);
    }
    Ok(page("cache", &CACHE_COLUMNS, &rows))
}

/// One row of the tag table, as Leaf's `/db` shows it, and idmint's fields beside.
#[derive(Serialize, ToSchema)]
#[schema(as = DbRow)]
pub(crate) struct DbRowBody {
    biz_tag: String,
    /// The first id not yet reserved by any node.
    max_id: u64,
    step: u64,
    description: String,
    /// Last change, as the database writes `update_time` as text (MySQL:
    /// `2026-11-28 14:03:07`, in the database's time zone): Leaf's `update` column. From a
    /// store whose time has no text of its own, `yyyy-MM-dd HH:mm:ss` in UTC.
    update: String,
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

/// Leaf's `/db` columns, in Leaf's order.
const DB_COLUMNS: [&str; 4] = ["tag", "max", "step", "update"];

/// The tag table's rows (Meituan Leaf's `/db`)
///
/// Every row of the tag table (`leaf_alloc`), sorted by tag, in Leaf's four columns: `tag,
/// max, step, update`, the last being the row's `update_time` as the database writes it
/// (MySQL: `2026-11-28 14:03:07`, in the database's time zone; from a store whose time has no
/// text of its own, `yyyy-MM-dd HH:mm:ss` in UTC). HTML as Leaf renders it (numbers grouped
/// by thousands, each row followed by an empty one), or JSON with `?format=json` or
/// `Accept: application/json` (with `description` and the time in UTC too). Leaf answers it
/// under any method, and so does idmint. Needs the admin token when the node has one.
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
        AdminErrors, StoreErrors,
    )
)]
pub(crate) async fn db(
    State(app): State<SharedState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<FormatQuery>,
) -> Result<Response, ApiError> {
    let json = wants_json(&headers, query)?;
    let rows: Vec<DbRowBody> = app
        .node
        .leaf_rows()
        .await?
        .into_iter()
        .map(|(r, update)| DbRowBody {
            biz_tag: r.tag.to_string(),
            max_id: r.max_id,
            step: r.step,
            description: r.description,
            update,
            update_time: UtcMs(r.update_time_s.saturating_mul(1000)).to_string(),
            update_time_s: r.update_time_s,
        })
        .collect();
    if json {
        return Ok(Json(DbBody { rows }).into_response());
    }
    let mut html = String::new();
    for r in &rows {
        let cells =
            [escape_html(&r.biz_tag), grouped(r.max_id), grouped(r.step), escape_html(&r.update)];
        row(&mut html, &cells.each_ref().map(String::as_str));
    }
    Ok(page("db", &DB_COLUMNS, &html))
}

/// Whether the answer is JSON: `?format=json`, or no `format` and an `Accept` naming
/// `application/json` (and not `text/html` before it).
fn wants_json(headers: &HeaderMap, query: FormatQuery) -> Result<bool, ApiError> {
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

/// A tag's buffer in Leaf's slots: the current segment in slot `pos`, the next one (when
/// loaded) in the other; a slot holding nothing, or a tag not loaded, reads 0.
fn buffer(tag: idmint::Tag, status: Option<TagStatus>) -> CacheBufferBody {
    let snapshot = status.map(|s| s.buffer);
    let epoch = snapshot.map_or(0, |b| b.epoch);
    // The first segment is slot 0's, each switch moves to the other slot.
    let pos = u8::from(epoch > 0 && epoch.is_multiple_of(2));
    let numbers = |s: Option<SegmentSnapshot>| {
        s.map_or((0, 0, 0), |s| (s.next_id, s.range.end(), s.range.len()))
    };
    let current = numbers(snapshot.and_then(|b| b.current));
    let next = numbers(snapshot.and_then(|b| b.next));
    let (slot0, slot1) = if pos == 0 { (current, next) } else { (next, current) };
    CacheBufferBody {
        name: tag.to_string(),
        init: snapshot.is_some_and(|b| b.current.is_some()),
        next: snapshot.is_some_and(|b| b.next.is_some()),
        pos,
        value0: slot0.0,
        max0: slot0.1,
        step0: slot0.2,
        value1: slot1.0,
        max1: slot1.1,
        step1: slot1.2,
    }
}

/// Appends one table row, then the empty row Leaf's pages put after each: a script that
/// steps over it on Leaf's pages steps over it here.
fn row(out: &mut String, cells: &[&str]) {
    out.push_str("<tr>");
    for cell in cells {
        // Writing to a String cannot fail.
        let _ = write!(out, "<td>{cell}</td>");
    }
    out.push_str("</tr>\n<tr></tr>\n");
}

/// A number as Leaf's pages write it (its template engine's default format): grouped by
/// thousands with commas, `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A self-contained page with one table (nothing loaded from elsewhere): Leaf's shape, a
/// header row of `columns`, then the rows.
fn page(title: &str, columns: &[&str], rows: &str) -> Response {
    let head: String = columns.iter().map(|c| format!("<th>{c}</th>")).collect();
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
    fn numbers_are_grouped_as_leaf_writes_them() {
        let cases = [(0, "0"), (999, "999"), (1_000, "1,000"), (100_000, "100,000")];
        for (n, text) in cases {
            assert_eq!(grouped(n), text);
        }
        assert_eq!(grouped(u64::from(u32::MAX)), "4,294,967,295");
        assert_eq!(grouped(i64::MAX as u64), "9,223,372,036,854,775,807");
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html(r#"<script>alert("x&'y")</script>"#),
            "&lt;script&gt;alert(&quot;x&amp;&#39;y&quot;)&lt;/script&gt;"
        );
        assert_eq!(escape_html("订单/v2"), "订单/v2");
    }
}
