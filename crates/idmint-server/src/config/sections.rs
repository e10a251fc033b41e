//! The plain sections resolved and checked: `[segment]` into a [`SegmentConfig`],
//! `[snowflake]` into a [`SnowflakeConfig`] and its ring, `[limits]` into the batch bound and
//! the [`HttpLimits`], `[tinyid]` into a [`TinyidNodeConfig`], and `ready_engines` from what
//! they run. Each reads its keys from the section's `…Keys` struct (`keys.rs`) and
//! records every problem; a bad value leaves its default so the other checks still run.

use idmint::node::{Engine, TinyidNodeConfig};
use idmint::segment::SegmentConfig;
use idmint::snowflake::limits::{
    BORROW_LEAD_MS_MAX, TIME_WINDOW_MS_MAX, TIME_WINDOW_MS_MIN, TOLERANCE_MS_MAX,
};
use idmint::snowflake::{CachedConfig, SnowflakeConfig, WorkerIdRange, WorkerIdSource};
use idmint::tinyid::{TOKEN_REFRESH_MS_MAX, TOKEN_REFRESH_MS_MIN, TinyidConfig};
use idmint_core::PreloadRatio;
use idmint_core::limits::BATCH_COUNT_MAX;
use idmint_core::snowflake::{ExpiryWarning, Layout, LayoutError, TimeUnit, UtcMs};
use idmint_store::{LEASE_MARGIN_MS_MAX, LEASE_TTL_MS_MAX, LEASE_TTL_MS_MIN, StoreUrl};

use super::keys::{BatchKeys, HttpLimitKeys, SegmentKeys, SnowflakeKeys, TinyidKeys};
use super::origins::{Layers, Origin, Sourced};
use super::secret::SecretUrl;
use crate::limits::HttpLimits;

/// A checked setter of [`SegmentConfig`] taking a number.
type SetMs = fn(SegmentConfig, u64) -> Result<SegmentConfig, idmint::segment::ConfigError>;

/// The `[segment]` section resolved; each bad value is a problem and leaves its default.
pub(super) fn segment_config(l: &mut Layers<'_>, keys: SegmentKeys) -> SegmentConfig {
    let SegmentKeys {
        preload_ratio: preload,
        refill_wait_ms: refill_wait,
        store_call_timeout_ms: store_timeout,
        tag_refresh_ms: refresh,
        segment_duration_s: duration,
        adaptive_step: adaptive,
    } = keys;
    let mut config = SegmentConfig::default().with_adaptive_step(adaptive.value);
    if let Some(ratio) = l.check(&preload.origin, PreloadRatio::new(preload.value)) {
        config = config.with_preload_ratio(ratio);
    }
    let steps: [(&Sourced<u64>, SetMs); 4] = [
        (&refill_wait, SegmentConfig::with_refill_wait_ms),
        (&store_timeout, SegmentConfig::with_store_call_timeout_ms),
        (&refresh, SegmentConfig::with_tag_refresh_ms),
        (&duration, SegmentConfig::with_segment_duration_s),
    ];
    for (value, set) in steps {
        if let Some(next) = l.check(&value.origin, set(config.clone(), value.value)) {
            config = next;
        }
    }
    config
}

/// The `[snowflake]` section resolved: the generator (`None` when disabled or invalid) and
/// its ring (`snowflake.cached`). Every key is resolved, so it is printed, even when the
/// generator is disabled; its values are checked only when it is enabled.
pub(super) fn snowflake_config(
    l: &mut Layers<'_>,
    keys: SnowflakeKeys,
) -> (Option<SnowflakeConfig>, Option<CachedConfig>) {
    let SnowflakeKeys {
        enabled,
        layout: layout_name,
        time_bits,
        worker_bits,
        sequence_bits,
        time_unit,
        epoch,
        worker,
        worker_ids,
        tolerance_ms: tolerance,
        borrow_max_lead_ms: lead,
        max_vibration: vibration,
        time_window_ms: window,
        lease_ttl_ms: ttl,
        lease_margin_ms: margin,
        refuse_expiring: refuse,
        cached,
        ring_capacity: capacity,
        ring_max_lead_ms: ring_lead,
        ring_max_age_ms: ring_age,
    } = keys;
    if !enabled.value {
        return (None, None);
    }
    let preset = l.check(
        &layout_name.origin,
        Layout::preset(&layout_name.value).ok_or_else(|| {
            let names: Vec<&str> =
                idmint_core::snowflake::PRESETS.iter().map(|(name, _)| *name).collect();
            format!("{:?} is not a layout; use one of {}", layout_name.value, names.join(", "))
        }),
    );
    let fields = LayoutKeys {
        time_bits: &time_bits,
        worker_bits: &worker_bits,
        sequence_bits: &sequence_bits,
        time_unit: &time_unit,
        epoch: &epoch,
    };
    let layout = preset.and_then(|_| fields.layout(l));
    let space = layout.map(|layout| space_name(&layout_name.value, &layout));
    let source = match &layout {
        Some(layout) => l.check(&worker.origin, worker_source(&worker.value, layout)),
        None => None,
    };
    // Checked against the layout and the worker source here, so a bad range is a config
    // error naming the key, not a failed start.
    let range = match (&layout, worker_ids.value.trim()) {
        (_, "") => Some(None),
        (Some(layout), text) => l.check(
            &worker_ids.origin,
            WorkerIdRange::parse(text)
                .and_then(|range| range.check(layout).map(|()| range))
                .and_then(|range| fits_source(range, source.as_ref()).map(|()| Some(range))),
        ),
        (None, _) => None,
    };
    refuse_above(l, &tolerance, TOLERANCE_MS_MAX, "");
    let never_borrow = " (a restart waits out the lead); use a smaller lead, or 0 to never borrow";
    refuse_above(l, &lead, BORROW_LEAD_MS_MAX, never_borrow);
    refuse_outside(l, &window, TIME_WINDOW_MS_MIN, TIME_WINDOW_MS_MAX);
    refuse_outside(l, &ttl, LEASE_TTL_MS_MIN, LEASE_TTL_MS_MAX);
    refuse_above(l, &margin, LEASE_MARGIN_MS_MAX, "");
    let (Some(layout), Some(space)) = (layout, space) else { return (None, None) };
    let now_ms = idmint::Clock::now_ms(&idmint::SystemClock);
    if let Err(error) = layout.lifetime(now_ms) {
        // Blame the key that moved the layout off its preset, else the preset.
        let origin = [&epoch.origin, &time_bits.origin, &time_unit.origin]
            .into_iter()
            .find(|origin| **origin != Origin::Default)
            .unwrap_or(&layout_name.origin);
        let reason =
            format!("layout {space} ({layout}): {error}; {}", lifetime_fix(&layout, now_ms));
        l.refuse(origin, reason);
    }
    let horizon = idmint_core::limits::LAYOUT_EXPIRY_HORIZON_MS;
    match layout.expiry_warning(now_ms, horizon) {
        // Refused above, with the fix.
        Some(ExpiryWarning::Expired { .. }) | None => {}
        Some(warning) if refuse.value => {
            let reason = format!("layout {space}: {warning}; {}", lifetime_fix(&layout, now_ms));
            l.refuse(&layout_name.origin, reason);
        }
        Some(warning) => {
            tracing::warn!(layout = %space, %warning, "snowflake layout runs out of time soon");
        }
    }
    let ring = if cached.value {
        // The capacity alone first, so the error names the setting at fault.
        let alone = CachedConfig { capacity: capacity.value, max_lead_ms: 0, max_age_ms: 1_000 };
        let lead = CachedConfig { max_lead_ms: ring_lead.value, ..alone };
        let ring = CachedConfig { max_age_ms: ring_age.value, ..lead };
        let checked = l
            .check(&capacity.origin, alone.check(&layout))
            .and_then(|()| l.check(&ring_lead.origin, lead.check(&layout)))
            .and_then(|()| l.check(&ring_age.origin, ring.check(&layout)));
        checked.map(|()| ring)
    } else {
        None
    };
    let (Some(source), Some(range)) = (source, range) else { return (None, None) };
    let mut config = SnowflakeConfig::new(&space, layout);
    config.worker = source;
    config.worker_ids = range;
    config.tolerance_ms = tolerance.value;
    config.borrow_max_lead_ms = (lead.value > 0).then_some(lead.value);
    config.max_vibration = vibration.value;
    config.time_window_ms = window.value;
    config.lease_ttl_ms = ttl.value;
    config.lease_margin_ms = margin.value;
    (Some(config), ring)
}

/// Refuses `key`, in ms, above `max`; `fix` follows the reason.
fn refuse_above(l: &mut Layers<'_>, key: &Sourced<u64>, max: u64, fix: &str) {
    if key.value > max {
        l.refuse(&key.origin, format!("{} is above {max} ms{fix}", key.value));
    }
}

/// Refuses `key`, in ms, outside `min..=max`.
fn refuse_outside(l: &mut Layers<'_>, key: &Sourced<u64>, min: u64, max: u64) {
    if !(min..=max).contains(&key.value) {
        l.refuse(&key.origin, format!("{} is outside {min}..={max} ms", key.value));
    }
}

/// What the configuration runs, for [`ready_engines`].
pub(super) struct EnginesUsed {
    /// A `[snowflake]` key was set, in the file or by an `IDMINT_SNOWFLAKE_*` variable: a
    /// deployment that says something about its snowflake ids uses them, so by default its
    /// readiness waits for the generator.
    pub(super) snowflake_set: bool,
    /// `snowflake.enabled`.
    pub(super) snowflake: bool,
    /// `tinyid.enabled`.
    pub(super) tinyid: bool,
    /// `redis` is set.
    pub(super) sequences: bool,
}

/// `ready_engines` resolved: `auto` is `segment`, plus `snowflake` when a `[snowflake]` key
/// is set, `tinyid` when it is enabled and `sequences` when `redis` is set (each of those is
/// configured on purpose, while snowflake ids are on by default, so a segment-only
/// deployment is not held back by a generator it does not use). A list names engines the
/// configuration runs; naming one it does not is a problem, with the fix.
pub(super) fn ready_engines(
    l: &mut Layers<'_>,
    key: &Sourced<String>,
    used: &EnginesUsed,
) -> Vec<Engine> {
    if key.value.trim() == super::keys::READY_ENGINES_AUTO {
        let wanted = [
            (Engine::Snowflake, used.snowflake && used.snowflake_set),
            (Engine::Tinyid, used.tinyid),
            (Engine::Sequences, used.sequences),
        ];
        let mut engines = vec![Engine::Segment];
        engines.extend(wanted.into_iter().filter(|(_, on)| *on).map(|(engine, _)| engine));
        return engines;
    }
    let Some(engines) = l.check(
        &key.origin,
        Engine::parse_list(&key.value).map_err(|reason| {
            format!("{reason}; write \"auto\" or a list such as \"segment,snowflake\"")
        }),
    ) else {
        return vec![Engine::Segment];
    };
    for &engine in &engines {
        let missing = match engine {
            Engine::Snowflake if !used.snowflake => Some("snowflake.enabled is false"),
            Engine::Tinyid if !used.tinyid => Some("tinyid.enabled is false"),
            Engine::Sequences if !used.sequences => Some("no redis is configured"),
            _ => None,
        };
        if let Some(missing) = missing {
            l.refuse(
                &key.origin,
                format!(
                    "{engine} is listed but {missing}: the node would not run it; configure \
                     it, or leave it out of ready_engines"
                ),
            );
        }
    }
    engines
}

/// The five keys that make a layout, with their origins.
struct LayoutKeys<'a> {
    time_bits: &'a Sourced<u64>,
    worker_bits: &'a Sourced<u64>,
    sequence_bits: &'a Sourced<u64>,
    time_unit: &'a Sourced<String>,
    epoch: &'a Sourced<String>,
}

impl LayoutKeys<'_> {
    /// The layout the keys make, or `None` with each problem recorded against its key.
    fn layout(&self, l: &mut Layers<'_>) -> Option<Layout> {
        let unit = l.check(
            &self.time_unit.origin,
            TimeUnit::parse(&self.time_unit.value).ok_or_else(|| {
                format!("{:?} is not a time unit; use ms, 10ms or s", self.time_unit.value)
            }),
        );
        let epoch = l.check(&self.epoch.origin, self.epoch.value.parse::<UtcMs>());
        let (unit, epoch) = (unit?, epoch?);
        // Wider than any field may be: `Layout::new` refuses it with the bound.
        let bits = |key: &Sourced<u64>| u32::try_from(key.value).unwrap_or(u32::MAX);
        let (time, worker, sequence) =
            (bits(self.time_bits), bits(self.worker_bits), bits(self.sequence_bits));
        let made = Layout::new(time, worker, sequence, unit, epoch.0);
        let origin = match made {
            Err(LayoutError::NoSequenceBits) => &self.sequence_bits.origin,
            Err(LayoutError::FieldTooWide { field: "worker", .. }) => &self.worker_bits.origin,
            Err(LayoutError::FieldTooWide { field: "sequence", .. }) => &self.sequence_bits.origin,
            Err(LayoutError::TimeOverflows { .. }) if self.epoch.origin != Origin::Default => {
                &self.epoch.origin
            }
            _ => &self.time_bits.origin,
        };
        l.check(
            origin,
            made.map_err(|error| {
                format!(
                    "{error} (snowflake.time_bits {time}, worker_bits {worker}, sequence_bits \
                     {sequence}, time_unit {unit}, epoch {epoch})"
                )
            }),
        )
    }
}

/// The name of `layout` chosen under the preset `preset`: the preset's when the keys left its
/// fields alone (so worker ids and time marks stay in its space), another preset's when they
/// match one, else `custom`.
fn space_name(preset: &str, layout: &Layout) -> String {
    let presets = idmint_core::snowflake::PRESETS;
    let same = |(name, preset_layout): &&(&str, Layout)| {
        (preset_layout == layout).then(|| name.to_string())
    };
    presets
        .iter()
        .find(|(name, _)| *name == preset)
        .and_then(|entry| same(&entry))
        .or_else(|| presets.iter().find_map(|entry| same(&entry)))
        .unwrap_or_else(|| "custom".to_string())
}

/// What to change when `layout` does not last: the epoch (with what the start of this year
/// would give) or the bits.
fn lifetime_fix(layout: &Layout, now_ms: u64) -> String {
    let year = UtcMs(now_ms).start_of_year();
    let then = layout.with_epoch(year.0).ok().filter(|moved| moved.lifetime(now_ms).is_ok());
    let example = match then {
        Some(moved) => format!(
            " (with epoch = \"{}\" its {} bits of {} last until {})",
            &year.to_string()[..10],
            layout.time_bits(),
            layout.unit(),
            UtcMs(moved.expires_at_ms())
        ),
        None => String::new(),
    };
    format!(
        "set snowflake.epoch to a recent date{example}, or give snowflake.time_bits more bits \
         (from snowflake.worker_bits or snowflake.sequence_bits), or a longer \
         snowflake.time_unit (ids already made still decode with their preset)"
    )
}

/// `snowflake.worker` parsed: `lease`, `store-assigned`, `ordinal` or `static:N`.
fn worker_source(text: &str, layout: &Layout) -> Result<WorkerIdSource, String> {
    match text {
        "lease" => Ok(WorkerIdSource::Lease),
        "store-assigned" => Ok(WorkerIdSource::StoreAssigned),
        "ordinal" => Ok(WorkerIdSource::Ordinal),
        other => match other.strip_prefix("static:").and_then(|n| n.parse::<u64>().ok()) {
            Some(id) if id <= layout.max_worker() => Ok(WorkerIdSource::Static(id)),
            _ => Err(format!(
                "{other:?} is not a worker source; use lease, store-assigned, ordinal or \
                 static:N with N from 0 to {}",
                layout.max_worker()
            )),
        },
    }
}

/// Refuses a `snowflake.worker_ids` range that the worker source cannot keep: a static id
/// outside it, store-assigned ids (counted up from 1) with a range above 1, or leased ids
/// past the largest a lease space holds.
fn fits_source(range: WorkerIdRange, source: Option<&WorkerIdSource>) -> Result<(), String> {
    let lease_max = idmint_store::LEASE_WORKER_ID_MAX;
    match source {
        Some(WorkerIdSource::Lease) if range.max() > lease_max => Err(format!(
            "{range} ends above {lease_max}, the largest leased worker id; give a range \
             within 0-{lease_max}, e.g. \"{}-{lease_max}\"",
            range.min().min(lease_max - 1023)
        )),
        Some(WorkerIdSource::Static(id)) if !range.contains(*id) => Err(format!(
            "{range} does not hold snowflake.worker = \"static:{id}\"; give a static id inside \
             the range, or use worker = \"lease\""
        )),
        Some(WorkerIdSource::StoreAssigned) if range.min() > 1 => Err(format!(
            "{range} starts above 1, but store-assigned ids count up from 1; use worker = \
             \"lease\" with a range within 0-{lease_max}"
        )),
        _ => Ok(()),
    }
}

/// `limits.batch_count_max` checked: at least 1 and at most [`BATCH_COUNT_MAX`].
pub(super) fn batch_count_max(l: &mut Layers<'_>, keys: &BatchKeys) -> u64 {
    let BatchKeys { batch_count_max: batch } = keys;
    if !(1..=BATCH_COUNT_MAX).contains(&batch.value) {
        l.refuse(
            &batch.origin,
            format!(
                "batch_count_max = {} is out of range; use 1 to {BATCH_COUNT_MAX} \
                 (configuration may lower a limit, never raise it)",
                batch.value
            ),
        );
    }
    batch.value
}

/// The HTTP limits of `[limits]`, each with its `IDMINT_LIMITS_*` variable, checked against
/// their bounds; `None` (with the problem recorded) if one is out of range.
pub(super) fn http_limits(l: &mut Layers<'_>, keys: HttpLimitKeys) -> Option<HttpLimits> {
    let HttpLimitKeys {
        client_in_flight_max: in_flight,
        request_timeout_ms: timeout,
        idle_timeout_ms: idle,
        connections_max: connections,
        client_connections_max: per_client,
        metrics_tags_max: metrics_tags,
    } = keys;
    let resolved = HttpLimits {
        client_in_flight_max: u32::try_from(in_flight.value).unwrap_or(u32::MAX),
        request_timeout_ms: timeout.value,
        idle_timeout_ms: idle.value,
        connections_max: usize::try_from(connections.value).unwrap_or(usize::MAX),
        client_connections_max: usize::try_from(per_client.value).unwrap_or(usize::MAX),
        metrics_tags_max: usize::try_from(metrics_tags.value).unwrap_or(usize::MAX),
    };
    let origin = l.source.origin("limits");
    l.check(&origin, resolved.check().map(|()| resolved))
}

/// The `[tinyid]` section resolved: `None` when disabled. The store defaults to the main
/// one; a URL that is not MySQL is refused here, before the node starts.
pub(super) fn tinyid_config(
    l: &mut Layers<'_>,
    keys: TinyidKeys,
    main_store: Option<&StoreUrl>,
    segment: &SegmentConfig,
) -> Option<TinyidNodeConfig> {
    let TinyidKeys { enabled, store, token_refresh_ms: refresh, batch_size_max: batch } = keys;
    let refresh_range = TOKEN_REFRESH_MS_MIN..=TOKEN_REFRESH_MS_MAX;
    if !refresh_range.contains(&refresh.value) {
        l.refuse(
            &refresh.origin,
            format!(
                "{} is outside {TOKEN_REFRESH_MS_MIN} to {TOKEN_REFRESH_MS_MAX} ms",
                refresh.value
            ),
        );
    }
    if !(1..=BATCH_COUNT_MAX).contains(&batch.value) {
        l.refuse(&batch.origin, format!("{} is outside 1 to {BATCH_COUNT_MAX}", batch.value));
    }
    if !enabled.value {
        return None;
    }
    let url = match store.value.expose().trim() {
        "" => main_store.cloned(),
        text => l.check(&store.origin, StoreUrl::parse(text)),
    }?;
    if !matches!(url, StoreUrl::Mysql(_)) {
        l.refuse(
            &store.origin,
            format!(
                "Tinyid's tables are served from MySQL or MariaDB, where Tinyid runs, and the \
                 store is {url}; set tinyid.store to mysql://USER:PASSWORD@HOST:PORT/DB"
            ),
        );
        return None;
    }
    let engine = TinyidConfig {
        segment: segment.clone(),
        token_refresh_ms: refresh.value,
        batch_size_max: batch.value.clamp(1, BATCH_COUNT_MAX),
    };
    Some(TinyidNodeConfig { store: url, engine })
}

/// The `witness` URL resolved: `Some(None)` when empty, `None` after a problem. A witness is
/// another single store than the main one (a restore that took both back would leave it
/// nothing to tell), and one that keeps tag metadata and survives a restart.
pub(super) fn witness_url(
    l: &mut Layers<'_>,
    witness: &Sourced<SecretUrl>,
    store: Option<&StoreUrl>,
) -> Option<Option<StoreUrl>> {
    let text = witness.value.expose().trim();
    if text.is_empty() {
        return Some(None);
    }
    let url = l.check(&witness.origin, StoreUrl::parse(text))?;
    let refused = match &url {
        StoreUrl::Memory => Some("memory:// keeps nothing across restarts".to_string()),
        StoreUrl::Flicker(_) | StoreUrl::Interleaved(_) => {
            Some("a set of databases has no single home for a tag's mark".to_string())
        }
        url if Some(url) == store => Some(
            "it is the main store: a backup restored there takes the witness back with it"
                .to_string(),
        ),
        _ => None,
    };
    if let Some(reason) = refused {
        l.refuse(
            &witness.origin,
            format!(
                "{url} cannot be the witness: {reason}; name a second, independent SQLite, \
                 MySQL, PostgreSQL or Redis store (with an append-only file)"
            ),
        );
        return None;
    }
    Some(Some(url))
}
