//! The dashboard: one self-contained page at `/` (HTML, CSS and script embedded in the
//! binary, nothing fetched from elsewhere) and the JSON it polls, `GET /v1/status`.
//!
//! The page shows each tag's two segments (like Leaf's `/cache`), step, rate, runway and a
//! sparkline of its rate over the last five minutes (kept by the node, one rate per 5 s,
//! `TagStatus::rate_history_per_s`); the snowflake worker and
//! its lease; sequences; and store health. It refreshes itself every two seconds. It is
//! read-only unless an admin token is entered (kept in the tab's session storage only),
//! and then offers tag create, step change and delete through the same admin routes as any
//! client, so it needs no privilege of its own.
//!
//! This file shapes JSON and serves the page; it holds no id logic and decides no status.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use idmint::Clock;
use serde::Serialize;
use utoipa::ToSchema;

use crate::routes::TagBody;
use crate::{ApiError, AppState, SharedState};

/// The page, embedded at build time.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// How long `/v1/status` waits for the store and Redis before reporting them down.
pub const STATUS_STORE_WAIT_MS: u64 = 1_000;

/// `GET /`: the dashboard page.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    summary = "The dashboard",
    description = "One self-contained HTML page (no CDN): tags with their two segments, step, \
        rate, runway and a sparkline; snowflake; sequences; store health. It polls \
        /v1/status every 2 s (`?refresh_ms=N`). Read-only until an admin token is entered.",
    responses(
        (status = 200, description = "The page", content_type = "text/html", body = String),
    )
)]
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // Everything is inline; nothing may be loaded from elsewhere.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        DASHBOARD_HTML,
    )
}

/// The node at a glance.
#[derive(Serialize, ToSchema)]
pub(crate) struct StatusBody {
    version: &'static str,
    /// When this answer was made, ms since the Unix epoch.
    time_ms: u64,
    store: StoreBody,
    auth: AuthBody,
    /// Every tag of the store, with this node's segments for the tags it serves.
    tags: Vec<TagBody>,
    snowflake: SnowflakeBody,
    sequences: SequencesBody,
}

#[derive(Serialize, ToSchema)]
struct StoreBody {
    description: String,
    up: bool,
    /// Why the store is reported down.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize, ToSchema)]
struct AuthBody {
    /// Whether admin routes need the admin token (else: loopback only, open).
    admin_token: bool,
    /// How many client tokens guard tags.
    clients: usize,
}

#[derive(Serialize, ToSchema)]
struct SnowflakeBody {
    running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<u64>,
    /// Until when the worker lease is proven; `null` for static and ordinal worker ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mark_ms: Option<u64>,
    rollbacks: u64,
    waits: u64,
    /// Ids in the cached ring, when the node serves from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    ring_ids: Option<u64>,
}

#[derive(Serialize, ToSchema)]
struct SequencesBody {
    running: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    items: Vec<SequenceItem>,
    raises: u64,
    reseeds: u64,
}

#[derive(Serialize, ToSchema)]
struct SequenceItem {
    name: String,
    daily: bool,
    period: String,
    cur: u64,
    max: u64,
    room: u64,
    recent_per_s: u64,
}

/// `GET /v1/status`: what the dashboard shows.
#[utoipa::path(
    get,
    path = "/v1/status",
    tag = "operations",
    summary = "The node at a glance",
    description = "Store health, every tag of the store with the segments this node holds, \
        the snowflake worker and lease, and sequences. A store or Redis that does not answer \
        within 1 s is reported down in the body, not as an error.",
    responses((status = 200, description = "The node's status", body = StatusBody))
)]
pub(crate) async fn status(State(app): State<SharedState>) -> Json<StatusBody> {
    let wait = Duration::from_millis(STATUS_STORE_WAIT_MS);
    let (tags, store_error) = match tokio::time::timeout(wait, app.segments.list_tags()).await {
        Ok(Ok(records)) => (records, None),
        Ok(Err(error)) => (Vec::new(), Some(error.to_string())),
        Err(_) => (Vec::new(), Some(format!("the store did not answer within {wait:?}"))),
    };
    let tags = tags
        .into_iter()
        .map(|record| {
            let status = app.segments.status(&record.tag);
            TagBody::new(record, status)
        })
        .collect();
    Json(StatusBody {
        version: env!("CARGO_PKG_VERSION"),
        time_ms: idmint::SystemClock.now_ms(),
        store: StoreBody {
            description: app.segments.store_description(),
            up: store_error.is_none(),
            error: store_error,
        },
        auth: AuthBody {
            admin_token: app.auth.has_admin_token(),
            clients: app.auth.clients().len(),
        },
        tags,
        snowflake: snowflake(&app),
        sequences: tokio::time::timeout(wait, sequences(&app)).await.unwrap_or_else(|_| {
            SequencesBody {
                running: true,
                reason: Some(format!("Redis did not answer within {wait:?}")),
                items: Vec::new(),
                raises: 0,
                reseeds: 0,
            }
        }),
    })
}

fn snowflake(app: &AppState) -> SnowflakeBody {
    match &app.snowflake {
        Ok(generator) => {
            let s = generator.status();
            SnowflakeBody {
                running: true,
                reason: None,
                layout: Some(s.space),
                worker: Some(s.worker),
                lease_until_ms: s.lease_until_ms,
                mark_ms: Some(s.mark_ms),
                rollbacks: s.rollbacks,
                waits: s.waits,
                ring_ids: app.snowflake_cached.as_ref().map(|ring| ring.len()),
            }
        }
        Err(reason) => SnowflakeBody {
            running: false,
            reason: Some(reason.clone()),
            layout: None,
            worker: None,
            lease_until_ms: None,
            mark_ms: None,
            rollbacks: 0,
            waits: 0,
            ring_ids: None,
        },
    }
}

async fn sequences(app: &AppState) -> SequencesBody {
    let Some(engine) = app.sequences.running() else {
        let reason = match app.sequences.get() {
            Err(ApiError::SequencesNotRunning(reason)) => reason,
            _ => String::new(),
        };
        return SequencesBody {
            running: false,
            reason: Some(reason),
            items: Vec::new(),
            raises: 0,
            reseeds: 0,
        };
    };
    let mut body = SequencesBody {
        running: true,
        reason: None,
        items: Vec::new(),
        raises: engine.raises(),
        reseeds: engine.reseeds(),
    };
    match engine.list().await {
        Ok(records) => {
            for record in records {
                if let Ok(s) = engine.status(&record.name).await {
                    body.items.push(SequenceItem {
                        name: record.name.to_string(),
                        daily: record.daily,
                        period: s.period,
                        cur: s.cur,
                        max: s.max,
                        room: s.max.saturating_sub(s.cur),
                        recent_per_s: s.recent_per_s,
                    });
                }
            }
        }
        Err(error) => body.reason = Some(error.to_string()),
    }
    body
}
