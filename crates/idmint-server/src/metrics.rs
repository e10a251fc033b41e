//! `/metrics`: Prometheus text from the `metrics` facade and its Prometheus exporter.
//!
//! Two kinds of series. Events are recorded when they happen: HTTP requests by route,
//! method and status (the [`track`] middleware) and the store's allocation latency per tag
//! (recorded by the library, `idmint::REFILL_DURATION_METRIC`). State is read at scrape
//! time from what the library already counts (ids handed out, refills, steps, runway,
//! snowflake rollbacks and leases, sequence room), so the per-id path gains nothing.
//!
//! Labels are bounded: tags and sequences by `TAG_COUNT_MAX`, routes by the router's
//! templates (`unmatched` for the rest), methods by a fixed list, statuses by HTTP.
//!
//! The recorder is process-global (the facade's design): the first server of a process
//! installs it, and every server of the process renders the same registry.

use std::collections::HashMap;
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use idmint::Clock;
use metrics::{Counter, Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::{AppState, SharedState};

/// Histogram buckets of every `*_seconds` histogram: 100 µs to 10 s.
pub const DURATION_BUCKETS_S: &[f64] =
    &[0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// How long a scrape waits for the store and Redis to answer its health and sequence reads.
pub const SCRAPE_STORE_WAIT_MS: u64 = 1_000;

/// The process's Prometheus registry, installed as the global recorder on first use. If an
/// embedder installed another recorder first, `/metrics` still renders the scrape-time
/// series (they are recorded through this handle's registry only when it is global), and
/// says so once in the log.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new();
        let builder = match builder
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), DURATION_BUCKETS_S)
        {
            Ok(builder) => builder,
            // Only an empty bucket list is refused, and the list is a constant.
            Err(_) => PrometheusBuilder::new(),
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!(
                "another metrics recorder is installed; /metrics shows only what it is given"
            );
        }
        describe();
        handle
    })
}

/// `GET /metrics`: reads the state series, then renders everything as Prometheus text.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics",
    description = "Prometheus text format 0.0.4: per tag ids issued, refills and their \
        latency histogram, step, remaining ids and runway; the snowflake worker, lease and \
        clock rollbacks; sequence room, raises and reseeds; HTTP requests and latency by route, \
        method and status. docs/operations.md lists every series.",
    responses(
        (status = 200, description = "The metrics", content_type = "text/plain", body = String),
    )
)]
pub(crate) async fn scrape(State(app): State<SharedState>) -> Response {
    let handle = handle();
    collect(&app).await;
    handle.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render())
        .into_response()
}

/// One count and one latency sample for a request answered with `status`, by route
/// template (`unmatched` for none).
pub(crate) fn record_http(route: Option<&str>, method: &Method, status: u16, started: Instant) {
    let (requests, latency) =
        http_handles(route.unwrap_or("unmatched"), method_label(method), status);
    requests.increment(1);
    latency.record(started.elapsed().as_secs_f64());
}

/// The counter and histogram of one route, method and status, by route.
type HttpHandles = HashMap<String, HashMap<(&'static str, u16), (Counter, Histogram)>>;

/// The handles of a request's series, registered on first use and kept: a request then
/// costs a read lock and two map lookups, not a registry lookup with label allocations.
/// Bounded: routes are the router's templates, methods a fixed list, statuses HTTP's.
fn http_handles(route: &str, method: &'static str, status: u16) -> (Counter, Histogram) {
    static HANDLES: OnceLock<RwLock<HttpHandles>> = OnceLock::new();
    let handles = HANDLES.get_or_init(RwLock::default);
    let found = handles
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(route)
        .and_then(|by| by.get(&(method, status)).cloned());
    if let Some(found) = found {
        return found;
    }
    let made = (
        counter!("idmint_http_requests_total", "route" => route.to_string(), "method" => method, "status" => status.to_string()),
        histogram!("idmint_http_request_duration_seconds", "route" => route.to_string(), "method" => method),
    );
    let mut handles = handles.write().unwrap_or_else(PoisonError::into_inner);
    handles.entry(route.to_string()).or_default().insert((method, status), made.clone());
    made
}

/// Methods as labels: the standard ones by name, anything else as `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => OTHER_METHOD,
    }
}

/// The `method` label of any method outside the standard set.
const OTHER_METHOD: &str = "other";

/// `cause` of `idmint_snowflake_not_ready`: the clock is behind the last id or the time mark
/// beyond the tolerance.
const NOT_READY_CLOCK_BEHIND: &str = "clock_behind";
/// `cause` of `idmint_snowflake_not_ready`: the worker id was just leased and the clock has
/// not yet passed the floor above any earlier holder's ids.
const NOT_READY_LEASE_SETTLING: &str = "lease_settling";
/// `cause` of `idmint_snowflake_not_ready`: the worker-id lease is not proven.
const NOT_READY_LEASE: &str = "lease_not_proven";
/// `cause` of `idmint_snowflake_not_ready`: anything else the generator reports.
const NOT_READY_OTHER: &str = "other";

/// Sets every state series from the library's counters and statuses.
async fn collect(app: &AppState) {
    gauge!("idmint_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let wait = Duration::from_millis(SCRAPE_STORE_WAIT_MS);
    let store_up = matches!(tokio::time::timeout(wait, app.segments.ready()).await, Ok(Ok(())));
    gauge!("idmint_store_up").set(f64::from(u8::from(store_up)));
    collect_segments(app);
    collect_snowflake(app);
    if tokio::time::timeout(wait, collect_sequences(app)).await.is_err() {
        tracing::debug!("sequence metrics skipped: Redis did not answer in time");
    }
}

fn collect_segments(app: &AppState) {
    for (tag, s) in app.segments.statuses() {
        let tag = tag.to_string();
        counter!("idmint_segment_ids_issued_total", "tag" => tag.clone())
            .absolute(s.buffer.handed_out);
        counter!("idmint_segment_refills_total", "tag" => tag.clone()).absolute(s.refills);
        counter!("idmint_segment_refill_failures_total", "tag" => tag.clone())
            .absolute(s.refill_failures);
        counter!("idmint_segment_waits_total", "tag" => tag.clone()).absolute(s.waits);
        gauge!("idmint_segment_step", "tag" => tag.clone()).set(s.step as f64);
        gauge!("idmint_segment_remaining_ids", "tag" => tag.clone()).set(s.remaining as f64);
        gauge!("idmint_segment_rate_ids_per_second", "tag" => tag.clone()).set(s.rate_per_s);
        // Idle: the ids last for ever.
        gauge!("idmint_segment_runway_seconds", "tag" => tag)
            .set(s.runway_s.unwrap_or(f64::INFINITY));
    }
}

fn collect_snowflake(app: &AppState) {
    let Ok(generator) = &app.snowflake else {
        gauge!("idmint_snowflake_up").set(0.0);
        return;
    };
    gauge!("idmint_snowflake_up").set(1.0);
    let s = generator.status();
    let now_ms = idmint::SystemClock.now_ms();
    let space = s.space.clone();
    gauge!("idmint_snowflake_worker_id", "space" => space.clone()).set(s.worker as f64);
    counter!("idmint_snowflake_clock_rollbacks_total", "space" => space.clone())
        .absolute(s.rollbacks);
    counter!("idmint_snowflake_waits_total", "space" => space.clone()).absolute(s.waits);
    // Static and ordinal worker ids hold no lease and need none.
    let (held, remaining_s) = match s.lease_until_ms {
        None => (true, f64::INFINITY),
        Some(until) => (until > now_ms, until.saturating_sub(now_ms) as f64 / 1000.0),
    };
    gauge!("idmint_snowflake_lease_held", "space" => space.clone()).set(f64::from(u8::from(held)));
    gauge!("idmint_snowflake_lease_remaining_seconds", "space" => space.clone()).set(remaining_s);
    gauge!("idmint_snowflake_time_mark_ahead_seconds", "space" => space.clone())
        .set((s.mark_ms as f64 - now_ms as f64) / 1000.0);
    // Every cause is set each scrape, so a cause that cleared reads 0 rather than staying 1.
    let cause = match generator.readiness() {
        Ok(()) => None,
        Err(idmint::SnowflakeError::ClockBehind { .. }) => Some(NOT_READY_CLOCK_BEHIND),
        Err(idmint::SnowflakeError::LeaseNotProven { .. }) => Some(NOT_READY_LEASE),
        Err(idmint::SnowflakeError::LeaseSettling { .. }) => Some(NOT_READY_LEASE_SETTLING),
        Err(_) => Some(NOT_READY_OTHER),
    };
    gauge!("idmint_snowflake_ready", "space" => space.clone())
        .set(f64::from(u8::from(cause.is_none())));
    for known in
        [NOT_READY_CLOCK_BEHIND, NOT_READY_LEASE, NOT_READY_LEASE_SETTLING, NOT_READY_OTHER]
    {
        gauge!("idmint_snowflake_not_ready", "space" => space.clone(), "cause" => known)
            .set(f64::from(u8::from(cause == Some(known))));
    }
    if let Some(cached) = &app.snowflake_cached {
        gauge!("idmint_snowflake_ring_ids", "space" => space.clone()).set(cached.len() as f64);
        counter!("idmint_snowflake_ring_rejected_total", "space" => space)
            .absolute(cached.rejected());
    }
}

async fn collect_sequences(app: &AppState) {
    let Some(sequences) = app.sequences.running() else {
        gauge!("idmint_sequences_up").set(0.0);
        return;
    };
    gauge!("idmint_sequences_up").set(1.0);
    counter!("idmint_sequence_raises_total").absolute(sequences.raises());
    counter!("idmint_sequence_reseeds_total").absolute(sequences.reseeds());
    counter!("idmint_sequence_waits_total").absolute(sequences.waits());
    let Ok(records) = sequences.list().await else { return };
    for record in records {
        let Ok(status) = sequences.status(&record.name).await else { continue };
        let name = record.name.to_string();
        gauge!("idmint_sequence_room_ids", "sequence" => name.clone())
            .set(status.max.saturating_sub(status.cur) as f64);
        gauge!("idmint_sequence_rate_ids_per_second", "sequence" => name)
            .set(status.recent_per_s as f64);
    }
}

/// Help texts, shown as `# HELP` lines.
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "idmint_http_requests_total",
        "HTTP requests answered, by route, method and status."
    );
    describe_histogram!(
        "idmint_http_request_duration_seconds",
        Unit::Seconds,
        "Time to answer an HTTP request, by route and method."
    );
    describe_histogram!(
        idmint::REFILL_DURATION_METRIC,
        Unit::Seconds,
        "Time the store took to allocate a segment, by tag."
    );
    describe_counter!("idmint_segment_ids_issued_total", "Ids this node handed out, by tag.");
    describe_counter!("idmint_segment_refills_total", "Segments this node installed, by tag.");
    describe_counter!("idmint_segment_refill_failures_total", "Failed segment refills, by tag.");
    describe_counter!(
        "idmint_segment_waits_total",
        "Requests that found both segments spent and waited for the store, by tag."
    );
    describe_gauge!(
        "idmint_segment_step",
        "Length of the last segment the store gave (the adaptive step), by tag."
    );
    describe_gauge!("idmint_segment_remaining_ids", "Ids left in both segments, by tag.");
    describe_gauge!("idmint_segment_rate_ids_per_second", "Recent consumption, by tag.");
    describe_gauge!(
        "idmint_segment_runway_seconds",
        Unit::Seconds,
        "How long the remaining ids last at the recent rate (+Inf when idle), by tag."
    );
    describe_gauge!("idmint_store_up", "1 when the store answered the readiness probe.");
    describe_gauge!("idmint_snowflake_up", "1 when this node serves snowflake ids.");
    describe_gauge!("idmint_snowflake_worker_id", "The worker id this node holds.");
    describe_gauge!(
        "idmint_snowflake_ready",
        "1 when the snowflake generator can issue an id now (its /ready condition)."
    );
    describe_gauge!(
        "idmint_snowflake_not_ready",
        "1 for the cause that stops the snowflake generator. clock_behind: the clock is behind \
         the last id or the persisted time mark beyond the tolerance (a clock that jumped ahead); \
         fix the time sync, then restart the node so that it leases a worker id not marked \
         ahead (docs/operations.md). lease_not_proven: the worker lease is lost or not renewed; \
         check the store. lease_settling: the worker id was just leased; ids start once any \
         earlier holder's ids are behind it (time_window_ms + lease_margin_ms after the start)."
    );
    describe_counter!(
        "idmint_snowflake_clock_rollbacks_total",
        "Clock steps back beyond the tolerance (ids refused)."
    );
    describe_counter!(
        "idmint_snowflake_waits_total",
        "Snowflake requests that waited (sequence spent, or a small step back)."
    );
    describe_gauge!(
        "idmint_snowflake_lease_held",
        "1 while the worker id's lease is proven (always 1 for static and ordinal ids)."
    );
    describe_gauge!(
        "idmint_snowflake_lease_remaining_seconds",
        Unit::Seconds,
        "Time until the worker lease expires unless renewed."
    );
    describe_gauge!(
        "idmint_snowflake_time_mark_ahead_seconds",
        Unit::Seconds,
        "How far the persisted time mark is ahead of the clock."
    );
    describe_gauge!("idmint_snowflake_ring_ids", "Pre-made ids in the cached ring.");
    describe_counter!(
        "idmint_snowflake_ring_rejected_total",
        "Takes the cached ring refused (lead bound reached)."
    );
    describe_gauge!("idmint_sequences_up", "1 when this node serves sequences.");
    describe_counter!(
        "idmint_sequence_raises_total",
        "Ceiling raises this node made (forecast and on demand)."
    );
    describe_counter!(
        "idmint_sequence_reseeds_total",
        "Redis counters this node reseeded from the store's ceiling."
    );
    describe_counter!("idmint_sequence_waits_total", "Sequence requests that waited for a raise.");
    describe_gauge!(
        "idmint_sequence_room_ids",
        "Numbers left below the ceiling this period, by sequence."
    );
    describe_gauge!(
        "idmint_sequence_rate_ids_per_second",
        "Numbers taken in the last second, by sequence."
    );
    describe_gauge!("idmint_build_info", "Always 1; the version label names the build.");
}
