//! `/metrics`: Prometheus text from the `metrics` facade and its Prometheus exporter.
//!
//! Two kinds of series. Events are recorded when they happen: HTTP requests by route,
//! method and status, gRPC calls by service, method and gRPC status (read from the headers
//! or, for a call that sent messages, from its trailers: [`observe_grpc`]), and the store's
//! allocation latency per tag
//! (recorded by the library, `idmint::segment::REFILL_DURATION_METRIC`). State is read at scrape
//! time from what the library already counts (ids handed out, refills, steps, runway,
//! snowflake rollbacks and leases, sequence room), so the per-id path gains nothing, and the
//! process's own CPU, memory, file descriptors and start time (`process.rs`).
//!
//! Memory is bounded whether or not anyone scrapes: histograms are fixed buckets counted
//! when a sample is recorded (`histograms.rs`), never a queue of samples.
//!
//! Labels are bounded: routes by the router's templates (`unmatched` for the rest), methods
//! by a fixed list, statuses by HTTP, sequences by `TAG_COUNT_MAX`. Tags are bounded twice:
//! the `limits.metrics_tags_max` busiest tags (by recent rate) have series of their own, and
//! every other tag is summed into `tag="(other)"`, so a node with 10 000 tags answers a
//! scrape of a few hundred kilobytes. Tinyid's `biz_type`s are tags here, ranked with them
//! under the same bound, with `source="tinyid"` beside `tag` (and their own
//! `tag="(other)",source="tinyid"` sum), so a `biz_type` never shares a series with a tag
//! of the same name.
//!
//! The recorder is process-global (the facade's design): the first server of a process
//! installs it, and every server of the process renders the same registry.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use idmint::Clock;
use idmint::node::Engine;
use idmint::segment::TagStatus;
use idmint_core::Tag;
use metrics::{Counter, Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::histograms::{Histograms, OTHER_LABEL_VALUE, SplitRecorder, label_text, number};
use crate::limits::CONNECTIONS_REFUSED_METRIC;
use crate::state::AppState;

/// How long a scrape waits for the store and Redis to answer its health and sequence reads.
pub const SCRAPE_STORE_WAIT_MS: u64 = 1_000;

/// The process's Prometheus registry, installed as the global recorder on first use. If an
/// embedder installed another recorder first, `/metrics` still renders the scrape-time
/// series (they are recorded through this handle's registry only when it is global), and
/// says so once in the log.
pub fn handle() -> &'static PrometheusHandle {
    &installed().0
}

/// The histograms of the process (see [`handle`]).
fn histograms() -> &'static Histograms {
    &installed().1
}

/// The exporter's handle (counters and gauges) and the histograms, installed together as
/// the global recorder on first use.
fn installed() -> &'static (PrometheusHandle, Arc<Histograms>) {
    static INSTALLED: OnceLock<(PrometheusHandle, Arc<Histograms>)> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let prometheus = PrometheusBuilder::new().build_recorder();
        let handle = prometheus.handle();
        let histograms = Arc::new(Histograms::default());
        let recorder = SplitRecorder { prometheus, histograms: Arc::clone(&histograms) };
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!(
                "another metrics recorder is installed; /metrics shows only what it is given"
            );
        }
        describe();
        (handle, histograms)
    })
}

/// The body of `GET /metrics` (`http/status.rs`): reads the state series, then renders
/// everything as Prometheus text.
pub(crate) async fn render(app: &AppState) -> String {
    let handle = handle();
    collect(app).await;
    // Publishes the help texts described since the last scrape (the exporter holds no
    // histogram samples to drain: histograms live in `histograms.rs`).
    handle.run_upkeep();
    let mut body = handle.render();
    let statuses = app.node.segment_statuses();
    let biz_types = app.node.tinyid().map(|t| t.segments().statuses()).unwrap_or_default();
    let served: Vec<Served<'_>> = statuses
        .iter()
        .map(|(tag, status)| (None, tag, status))
        .chain(biz_types.iter().map(|(tag, status)| (Some(TINYID_SOURCE), tag, status)))
        .collect();
    let shown = busiest(&served, app.http_limits.metrics_tags_max);
    render_segments(&mut body, &served, &shown);
    histograms().render(&mut body, &|tag, source| shown.contains(&(source, tag)));
    crate::process::render(&mut body);
    body
}

/// The request series of one route, resolved once per route and method for its `200`
/// answers (every request of a busy route), looked up in [`http_handles`] for the rest.
pub(crate) struct RouteMetrics {
    /// The route's template; `None` where no route matched (`route="unmatched"`).
    route: Option<&'static str>,
    /// The handles of `200` answers, by method ([`METHOD_LABELS`]'s order).
    ok: [OnceLock<(Counter, Histogram)>; METHOD_LABELS.len()],
}

impl RouteMetrics {
    /// The series of `route` (`None`: no route matched), registered on first use.
    pub(crate) fn new(route: Option<&'static str>) -> RouteMetrics {
        RouteMetrics { route, ok: Default::default() }
    }

    /// One count and one latency sample for a request answered with `status`.
    pub(crate) fn record(&self, method: &Method, status: u16, started: Instant) {
        let route = self.route.unwrap_or(UNMATCHED_ROUTE);
        let index = method_index(method);
        let label = METHOD_LABELS[index];
        let made;
        let (requests, latency) = if status == 200 {
            self.ok[index].get_or_init(|| http_handles(route, label, status))
        } else {
            made = http_handles(route, label, status);
            &made
        };
        requests.increment(1);
        latency.record(started.elapsed().as_secs_f64());
    }
}

/// The `route` label of a request no route matched.
const UNMATCHED_ROUTE: &str = "unmatched";

/// The `service` and `method` labels of a gRPC call to a path outside `GRPC_METHODS`.
const UNKNOWN_GRPC: &str = "unknown";

/// The gRPC status names (the `code` label), by status number.
const GRPC_CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Counts a gRPC call (`labels`: its service and method, `None` for a method this node
/// lacks) with its gRPC status, and its time to the status: at once when the status is in
/// the headers (an error before any message), else when the trailers pass (after the last
/// message). A call whose body is dropped before its trailers (the caller went away) counts
/// as `CANCELLED`.
pub(crate) fn observe_grpc(
    labels: Option<(&'static str, &'static str)>,
    response: Response,
    started: Instant,
) -> Response {
    let (service, method) = labels.unwrap_or((UNKNOWN_GRPC, UNKNOWN_GRPC));
    let mut call = GrpcCall { service, method, started, done: false };
    if let Some(code) = grpc_code(response.headers()) {
        call.finish(code);
        return response;
    }
    if response.status() != StatusCode::OK {
        // Not a gRPC answer: the status gRPC clients read from the HTTP status.
        call.finish(grpc_code_of_http(response.status()));
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = body.map_frame(move |frame| {
        if let Some(trailers) = frame.trailers_ref() {
            call.finish(grpc_code(trailers).unwrap_or("UNKNOWN"));
        }
        frame
    });
    Response::from_parts(parts, Body::new(body))
}

/// One gRPC call being answered: counted once, when its status is known or when it is
/// dropped without one.
struct GrpcCall {
    service: &'static str,
    method: &'static str,
    started: Instant,
    done: bool,
}

impl GrpcCall {
    fn finish(&mut self, code: &'static str) {
        if self.done {
            return;
        }
        self.done = true;
        let (requests, latency) = grpc_handles(self.service, self.method, code);
        requests.increment(1);
        latency.record(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for GrpcCall {
    fn drop(&mut self) {
        self.finish("CANCELLED");
    }
}

/// The `grpc-status` of headers or trailers, by name.
fn grpc_code(headers: &HeaderMap) -> Option<&'static str> {
    let value = headers.get("grpc-status")?;
    let number: usize = value.to_str().ok()?.parse().ok()?;
    Some(GRPC_CODE_NAMES.get(number).copied().unwrap_or("UNKNOWN"))
}

/// The gRPC status a client reads from an HTTP status without `grpc-status` (gRPC's
/// "HTTP to gRPC status code mapping").
fn grpc_code_of_http(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "INTERNAL",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "UNIMPLEMENTED",
        429 | 502..=504 => "UNAVAILABLE",
        _ => "UNKNOWN",
    }
}

/// The counter and histogram of one gRPC service, method and status.
type GrpcHandles = HashMap<(&'static str, &'static str, &'static str), (Counter, Histogram)>;

/// The handles of a call's series, registered on first use and kept (as [`http_handles`]).
/// Bounded: services and methods are `GRPC_METHODS` (and `unknown`), codes gRPC's 17.
fn grpc_handles(
    service: &'static str,
    method: &'static str,
    code: &'static str,
) -> (Counter, Histogram) {
    static HANDLES: OnceLock<RwLock<GrpcHandles>> = OnceLock::new();
    let handles = HANDLES.get_or_init(RwLock::default);
    let key = (service, method, code);
    let found = handles.read().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
    if let Some(found) = found {
        return found;
    }
    let made = (
        counter!("idmint_grpc_requests_total", "service" => service, "method" => method, "code" => code),
        histogram!("idmint_grpc_request_duration_seconds", "service" => service, "method" => method),
    );
    handles.write().unwrap_or_else(PoisonError::into_inner).insert(key, made.clone());
    made
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

/// Methods as labels: the standard ones by name, anything else as `other` (the last).
const METHOD_LABELS: [&str; 8] =
    ["GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS", OTHER_METHOD];

/// `method`'s place in [`METHOD_LABELS`].
fn method_index(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::POST => 1,
        Method::PATCH => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::HEAD => 5,
        Method::OPTIONS => 6,
        _ => 7,
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
/// `cause` of `idmint_snowflake_not_ready`: the clock is off the store's past the lease margin.
const NOT_READY_CLOCK_SKEW: &str = "clock_skew";
/// `cause` of `idmint_snowflake_not_ready`: the generator has not started yet and its start
/// is retried (the worker store not reachable so far).
const NOT_READY_STARTING: &str = "starting";
/// `cause` of `idmint_snowflake_not_ready`: anything else the generator reports.
const NOT_READY_OTHER: &str = "other";

/// Every `cause` of `idmint_snowflake_not_ready`, each set every scrape (a cause that cleared
/// reads 0 rather than staying 1).
const NOT_READY_CAUSES: [&str; 6] = [
    NOT_READY_STARTING,
    NOT_READY_CLOCK_BEHIND,
    NOT_READY_LEASE,
    NOT_READY_LEASE_SETTLING,
    NOT_READY_CLOCK_SKEW,
    NOT_READY_OTHER,
];

/// Sets every state series from the library's counters and statuses.
async fn collect(app: &AppState) {
    gauge!("idmint_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let wait = Duration::from_millis(SCRAPE_STORE_WAIT_MS);
    let store_up = matches!(
        tokio::time::timeout(wait, app.node.engine_ready(Engine::Segment)).await,
        Ok(Ok(()))
    );
    gauge!("idmint_store_up").set(f64::from(u8::from(store_up)));
    collect_snowflake(app);
    if tokio::time::timeout(wait, collect_sequences(app)).await.is_err() {
        tracing::debug!("sequence metrics skipped: Redis did not answer in time");
    }
}

/// The `source` label of a Tinyid `biz_type`'s series.
const TINYID_SOURCE: &str = idmint::tinyid::METRICS_SOURCE;

/// A name served by one of the node's segment engines: its `source` label (`None` for the
/// segment store's tags, `tinyid` for Tinyid's `biz_type`s), the name and its status.
type Served<'a> = (Option<&'static str>, &'a Tag, &'a TagStatus);

/// The names with series of their own, tags and `biz_type`s together: the `max` busiest by
/// recent rate (then by ids handed out, then by name, so the choice is stable while rates
/// are equal), by source and name. A name like the sum (`(other)`) never has series of its
/// own: it is summed into it, so no two series ever share a label set.
fn busiest<'a>(served: &[Served<'a>], max: usize) -> HashSet<(Option<&'static str>, &'a str)> {
    let mut ranked: Vec<&Served<'a>> = served.iter().collect();
    ranked.sort_by(|a, b| {
        b.2.rate_per_s
            .total_cmp(&a.2.rate_per_s)
            .then(b.2.buffer.handed_out.cmp(&a.2.buffer.handed_out))
            .then(a.1.cmp(b.1))
            .then(a.0.cmp(&b.0))
    });
    ranked
        .into_iter()
        .filter(|(_, tag, _)| tag.as_str() != OTHER_LABEL_VALUE)
        .take(max)
        .map(|(source, tag, _)| (*source, tag.as_str()))
        .collect()
}

/// One per-tag family of the segment state series: name, type, help, the value of a tag,
/// and how the tags not shown are summed into `tag="(other)"`.
struct SegmentFamily {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&TagStatus) -> f64,
    fold: Fold,
}

/// How `tag="(other)"` sums the tags not shown.
#[derive(Clone, Copy)]
enum Fold {
    /// Their sum (counts, remaining ids, rates): the series of a name still add up.
    Sum,
    /// The largest (steps).
    Max,
    /// The smallest (runway: an alert on `< 60` still fires for a tag not shown).
    Min,
}

const SEGMENT_FAMILIES: &[SegmentFamily] = &[
    SegmentFamily {
        name: "idmint_segment_ids_issued_total",
        kind: "counter",
        help: "Ids this node handed out, by tag.",
        value: |s| s.buffer.handed_out as f64,
        fold: Fold::Sum,
    },
    SegmentFamily {
        name: "idmint_segment_refills_total",
        kind: "counter",
        help: "Segments this node installed, by tag.",
        value: |s| s.refills as f64,
        fold: Fold::Sum,
    },
    SegmentFamily {
        name: "idmint_segment_refill_failures_total",
        kind: "counter",
        help: "Failed segment refills, by tag.",
        value: |s| s.refill_failures as f64,
        fold: Fold::Sum,
    },
    SegmentFamily {
        name: "idmint_segment_waits_total",
        kind: "counter",
        help: "Requests that found both segments spent and waited for the store, by tag.",
        value: |s| s.waits as f64,
        fold: Fold::Sum,
    },
    SegmentFamily {
        name: "idmint_segment_step",
        kind: "gauge",
        help: "Length of the last segment the store gave (the adaptive step), by tag.",
        value: |s| s.step as f64,
        fold: Fold::Max,
    },
    SegmentFamily {
        name: "idmint_segment_remaining_ids",
        kind: "gauge",
        help: "Ids left in both segments, by tag.",
        value: |s| s.remaining as f64,
        fold: Fold::Sum,
    },
    SegmentFamily {
        name: "idmint_segment_rate_ids_per_second",
        kind: "gauge",
        help: "Recent consumption, by tag.",
        value: |s| s.rate_per_s,
        fold: Fold::Sum,
    },
    SegmentFamily {
        name: "idmint_segment_runway_seconds",
        kind: "gauge",
        help: "How long the remaining ids last at the recent rate (+Inf when idle), by tag.",
        // Idle: the ids last for ever.
        value: |s| s.runway_s.unwrap_or(f64::INFINITY),
        fold: Fold::Min,
    },
];

/// The segment state series: one per family and shown name (a `biz_type`'s with
/// `source="tinyid"`), and `tag="(other)"` for the rest of each source when there are any.
fn render_segments(
    out: &mut String,
    served: &[Served<'_>],
    shown: &HashSet<(Option<&'static str>, &str)>,
) {
    use std::fmt::Write as _;
    if served.is_empty() {
        return;
    }
    let labels = |source: Option<&str>, tag: &str| {
        let mut labels = vec![("tag".to_string(), tag.to_string())];
        labels.extend(source.map(|s| ("source".to_string(), s.to_string())));
        label_text(&labels)
    };
    for family in SEGMENT_FAMILIES {
        let name = family.name;
        let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} {}", family.help, family.kind);
        // The sums of the names not shown: the segment store's, then Tinyid's.
        let mut other: [Option<f64>; 2] = [None, None];
        for (source, tag, status) in served {
            let value = (family.value)(status);
            if shown.contains(&(*source, tag.as_str())) {
                let _ =
                    writeln!(out, "{name}{{{}}} {}", labels(*source, tag.as_str()), number(value));
                continue;
            }
            let sum = &mut other[usize::from(source.is_some())];
            *sum = Some(match (*sum, family.fold) {
                (None, _) => value,
                (Some(sum), Fold::Sum) => sum + value,
                (Some(max), Fold::Max) => max.max(value),
                (Some(min), Fold::Min) => min.min(value),
            });
        }
        for (source, value) in [(None, other[0]), (Some(TINYID_SOURCE), other[1])] {
            if let Some(value) = value {
                let _ = writeln!(
                    out,
                    "{name}{{{}}} {}",
                    labels(source, OTHER_LABEL_VALUE),
                    number(value)
                );
            }
        }
        out.push('\n');
    }
    // Every tag's refill failures in one series, whatever the ranking: a tag moving into or
    // out of `(other)` does not move it, so one alert watches every tag.
    let all: f64 = served.iter().map(|(_, _, status)| status.refill_failures as f64).sum();
    let name = REFILL_FAILURES_ALL;
    let _ = writeln!(
        out,
        "# HELP {name} Failed segment refills of every tag and Tinyid biz_type this node \
         serves.\n# TYPE {name} counter\n{name} {}\n",
        number(all)
    );
}

/// The node-wide sum of `idmint_segment_refill_failures_total` (deploy/prometheus's alert).
const REFILL_FAILURES_ALL: &str = "idmint_segment_refill_failures_all_total";

fn collect_snowflake(app: &AppState) {
    let Ok(generator) = app.node.snowflake() else {
        gauge!("idmint_snowflake_up").set(0.0);
        // A start being retried is a readiness cause of its own; a final refusal is not
        // (the node is ready for what it serves, see `Node::ready`).
        if let Some(space) = app.node.snowflake_space().filter(|_| app.node.snowflake_starting()) {
            let space = space.to_string();
            gauge!("idmint_snowflake_ready", "space" => space.clone()).set(0.0);
            set_not_ready(&space, Some(NOT_READY_STARTING));
        }
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
    // Absent until the first measurement answered (and on a node without a worker store).
    if let Some(offset_ms) = s.clock_offset_ms {
        gauge!("idmint_clock_offset_seconds", "space" => space.clone())
            .set(offset_ms as f64 / 1000.0);
    }
    // Every cause is set each scrape, so a cause that cleared reads 0 rather than staying 1.
    let cause = match generator.readiness() {
        Ok(()) => None,
        Err(idmint::snowflake::SnowflakeError::ClockBehind { .. }) => Some(NOT_READY_CLOCK_BEHIND),
        Err(idmint::snowflake::SnowflakeError::LeaseNotProven { .. }) => Some(NOT_READY_LEASE),
        Err(idmint::snowflake::SnowflakeError::LeaseSettling { .. }) => {
            Some(NOT_READY_LEASE_SETTLING)
        }
        Err(idmint::snowflake::SnowflakeError::ClockSkew { .. }) => Some(NOT_READY_CLOCK_SKEW),
        Err(_) => Some(NOT_READY_OTHER),
    };
    gauge!("idmint_snowflake_ready", "space" => space.clone())
        .set(f64::from(u8::from(cause.is_none())));
    set_not_ready(&space, cause);
    if let Some(cached) = app.node.snowflake_ring() {
        gauge!("idmint_snowflake_ring_ids", "space" => space.clone()).set(cached.len() as f64);
        counter!("idmint_snowflake_ring_rejected_total", "space" => space)
            .absolute(cached.rejected());
    }
}

/// `idmint_snowflake_not_ready{space, cause}`: 1 for `cause`, 0 for every other.
fn set_not_ready(space: &str, cause: Option<&'static str>) {
    for known in NOT_READY_CAUSES {
        gauge!("idmint_snowflake_not_ready", "space" => space.to_string(), "cause" => known)
            .set(f64::from(u8::from(cause == Some(known))));
    }
}

async fn collect_sequences(app: &AppState) {
    let Ok(sequences) = app.node.sequences() else {
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
    describe_counter!(
        "idmint_grpc_requests_total",
        "gRPC calls answered, by service, method and gRPC status (code: OK, NOT_FOUND, ...)."
    );
    describe_histogram!(
        "idmint_grpc_request_duration_seconds",
        Unit::Seconds,
        "Time to answer a gRPC call (to its status: the last message of a stream), by service \
         and method."
    );
    describe_counter!(
        CONNECTIONS_REFUSED_METRIC,
        "Connections closed at once: their client address held limits.client_connections_max."
    );
    describe_histogram!(
        idmint::segment::REFILL_DURATION_METRIC,
        Unit::Seconds,
        "Time the store took to allocate a segment, by tag."
    );
    // The segment families' help texts are in SEGMENT_FAMILIES (rendered at scrape time).
    describe_gauge!("idmint_store_up", "1 when the store answered the readiness probe.");
    describe_gauge!("idmint_snowflake_up", "1 when this node serves snowflake ids.");
    describe_gauge!("idmint_snowflake_worker_id", "The worker id this node holds.");
    describe_gauge!(
        "idmint_snowflake_ready",
        "1 when the snowflake generator can issue an id now (what /ready?engine=snowflake checks)."
    );
    describe_gauge!(
        "idmint_snowflake_not_ready",
        "1 for the cause that stops the snowflake generator. starting: the generator has not \
         started yet (its worker store not reachable so far); the start is retried in the \
         background, see the log or /ready for the last failure. clock_behind: the clock is behind \
         the last id or the persisted time mark beyond the tolerance (a clock that jumped ahead); \
         fix the time sync, then restart the node so that it leases a worker id not marked \
         ahead (docs/operations.md). lease_not_proven: the worker lease is lost or not renewed; \
         check the store. lease_settling: the worker id was just leased; ids start once any \
         earlier holder's ids are behind it (time_window_ms + lease_margin_ms after the start). \
         clock_skew: the clock is off the store's by more than lease_margin_ms (see \
         idmint_clock_offset_seconds); fix the time sync."
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
        "idmint_clock_offset_seconds",
        Unit::Seconds,
        "This node's clock minus its worker store's (positive: ahead), measured every 5 s; \
         past half of lease_margin_ms it is logged, past the margin snowflake ids are refused."
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

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident memory, in bytes (Linux: `/proc/self/statm`, in pages).
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
        let pages: u64 = statm.split_whitespace().nth(1).expect("resident").parse().expect("pages");
        pages * 4096
    }

    #[test]
    fn a_node_nobody_scrapes_stays_bounded() {
        const SAMPLES: u64 = 2_000_000;
        const GROWTH_BYTES_MAX: u64 = 8 << 20;
        let _ = handle();
        let route = RouteMetrics::new(Some("/soak/{tag}"));
        for _ in 0..10_000 {
            route.record(&Method::GET, 200, Instant::now());
        }
        // The other tests of this binary run meanwhile and allocate too: the least growth of
        // three rounds is this route's. Unbounded, samples would pile up over the rounds and
        // every round would grow.
        let mut grown = u64::MAX;
        for _ in 0..3 {
            let before = resident_bytes();
            for _ in 0..SAMPLES {
                route.record(&Method::GET, 200, Instant::now());
            }
            grown = grown.min(resident_bytes().saturating_sub(before));
        }
        // Unbounded, each sample kept until a scrape costs about 16 bytes: 32 MB a round.
        assert!(
            grown < GROWTH_BYTES_MAX,
            "{SAMPLES} requests without a scrape grew memory by {grown} bytes"
        );
    }
}
