//! Tunables of segment serving, each checked against its bound in `idmint_core::limits`.
//! Configuration may lower a limit, never raise it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idmint_core::PreloadRatio;
use idmint_core::limits::{
    GIVE_BACK_MS_MAX, REFILL_WAIT_MS_DEFAULT, REFILL_WAIT_MS_MAX, SEGMENT_DURATION_S_DEFAULT,
    SEGMENT_DURATION_S_MAX, SEGMENT_DURATION_S_MIN, STORE_CALL_TIMEOUT_MS_DEFAULT,
    STORE_CALL_TIMEOUT_MS_MAX, TAG_REFRESH_MS_DEFAULT, TAG_REFRESH_MS_MAX, TAG_REFRESH_MS_MIN,
};
use idmint_core::pacing::IDLE_AFTER;

use crate::witness::Witness;

/// How segment serving behaves. Build with [`SegmentConfig::default`] and the checked setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentConfig {
    preload_ratio: PreloadRatio,
    refill_wait: Duration,
    store_call_timeout: Duration,
    give_back: Duration,
    tag_refresh_interval: Duration,
    segment_duration: Duration,
    adaptive_step: bool,
    state_dir: Option<PathBuf>,
    bound_unknown_tags: bool,
    metrics_source: Option<&'static str>,
    idle_after: Duration,
    witness: Option<Witness>,
}

/// A tunable outside its bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {got} is out of range; use {min} to {max}")]
pub struct ConfigError {
    /// The configuration field, as named in the config file.
    pub field: &'static str,
    /// The refused value.
    pub got: u64,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
}

impl Default for SegmentConfig {
    fn default() -> SegmentConfig {
        SegmentConfig {
            preload_ratio: PreloadRatio::DEFAULT,
            refill_wait: Duration::from_millis(REFILL_WAIT_MS_DEFAULT),
            store_call_timeout: Duration::from_millis(STORE_CALL_TIMEOUT_MS_DEFAULT),
            give_back: Duration::from_millis(GIVE_BACK_MS_MAX),
            tag_refresh_interval: Duration::from_millis(TAG_REFRESH_MS_DEFAULT),
            segment_duration: Duration::from_secs(SEGMENT_DURATION_S_DEFAULT),
            adaptive_step: true,
            state_dir: None,
            bound_unknown_tags: true,
            metrics_source: None,
            witness: None,
            idle_after: IDLE_AFTER,
        }
    }
}

impl SegmentConfig {
    /// Sets the share of a segment used before the next one is requested.
    pub fn with_preload_ratio(mut self, ratio: PreloadRatio) -> SegmentConfig {
        self.preload_ratio = ratio;
        self
    }

    /// Sets how long a request waits for a refill when both segments are spent
    /// (`1..=REFILL_WAIT_MS_MAX` ms).
    pub fn with_refill_wait_ms(mut self, ms: u64) -> Result<SegmentConfig, ConfigError> {
        self.refill_wait = bounded("refill_wait_ms", ms, 1, REFILL_WAIT_MS_MAX)?;
        Ok(self)
    }

    /// Sets the bound on one store call (`1..=STORE_CALL_TIMEOUT_MS_MAX` ms).
    pub fn with_store_call_timeout_ms(mut self, ms: u64) -> Result<SegmentConfig, ConfigError> {
        self.store_call_timeout =
            bounded("store_call_timeout_ms", ms, 1, STORE_CALL_TIMEOUT_MS_MAX)?;
        Ok(self)
    }

    /// Sets how long a shutdown may spend giving unissued ids back (`1..=GIVE_BACK_MS_MAX`
    /// ms, the default); what is not given back by then is skipped, never served again.
    pub fn with_give_back_ms(mut self, ms: u64) -> Result<SegmentConfig, ConfigError> {
        self.give_back = bounded("give_back_ms", ms, 1, GIVE_BACK_MS_MAX)?;
        Ok(self)
    }

    /// Sets how often the node drops tags deleted from the store
    /// (`TAG_REFRESH_MS_MIN..=TAG_REFRESH_MS_MAX` ms).
    pub fn with_tag_refresh_ms(mut self, ms: u64) -> Result<SegmentConfig, ConfigError> {
        self.tag_refresh_interval =
            bounded("tag_refresh_ms", ms, TAG_REFRESH_MS_MIN, TAG_REFRESH_MS_MAX)?;
        Ok(self)
    }

    /// Sets how long one segment should last at the forecast rate
    /// (`SEGMENT_DURATION_S_MIN..=SEGMENT_DURATION_S_MAX` s); the adaptive step sizes
    /// segments for it.
    pub fn with_segment_duration_s(mut self, s: u64) -> Result<SegmentConfig, ConfigError> {
        let ms = bounded("segment_duration_s", s, SEGMENT_DURATION_S_MIN, SEGMENT_DURATION_S_MAX)?;
        self.segment_duration = ms * 1000;
        Ok(self)
    }

    /// Turns the adaptive step on (the default) or off: off, every allocation reserves the
    /// tag's configured step, as Leaf does with its dynamic step disabled.
    pub fn with_adaptive_step(mut self, adaptive: bool) -> SegmentConfig {
        self.adaptive_step = adaptive;
        self
    }

    /// Keeps the per-tag high-water marks in `dir` (created when absent), so the
    /// store-regression guard survives restarts. Without it the marks live in memory only.
    pub fn with_state_dir(mut self, dir: impl Into<PathBuf>) -> SegmentConfig {
        self.state_dir = Some(dir.into());
        self
    }

    /// Turns off (or back on, the default) the bound on store lookups of names the store
    /// does not hold (a one-second negative cache and a per-second budget, see
    /// [`Segments::generator`](super::engine::Segments::generator)). Only for a store that bounds
    /// them itself: the client's engine over idmint servers, whose own nodes bound their
    /// store's lookups.
    pub fn with_unknown_tags_unbounded(mut self) -> SegmentConfig {
        self.bound_unknown_tags = false;
        self
    }

    /// Labels this engine's refill histogram with `source` beside `tag` (the Tinyid engine's
    /// `biz_type`s: `source="tinyid"`), so its series never merge with a tag of the same
    /// name served by another engine.
    pub fn with_metrics_source(mut self, source: &'static str) -> SegmentConfig {
        self.metrics_source = Some(source);
        self
    }

    /// Sets how long a tag hands out no id before it is idle, its runway infinite
    /// (`1..=IDLE_AFTER` ms: it may be shortened, for tests, never lengthened).
    pub fn with_idle_after_ms(mut self, ms: u64) -> Result<SegmentConfig, ConfigError> {
        let max = IDLE_AFTER.as_millis() as u64;
        self.idle_after = bounded("idle_after_ms", ms, 1, max)?;
        Ok(self)
    }

    /// How long a tag hands out no id before it is idle.
    pub fn idle_after(&self) -> Duration {
        self.idle_after
    }

    /// The `source` label of this engine's series, if any.
    pub fn metrics_source(&self) -> Option<&'static str> {
        self.metrics_source
    }

    /// Whether store lookups of unknown names are bounded.
    pub fn bound_unknown_tags(&self) -> bool {
        self.bound_unknown_tags
    }

    /// The preload ratio.
    pub fn preload_ratio(&self) -> PreloadRatio {
        self.preload_ratio
    }

    /// The refill wait bound.
    pub fn refill_wait(&self) -> Duration {
        self.refill_wait
    }

    /// The store call bound.
    pub fn store_call_timeout(&self) -> Duration {
        self.store_call_timeout
    }

    /// The bound on a shutdown's give-back.
    pub fn give_back(&self) -> Duration {
        self.give_back
    }

    /// The tag refresh interval.
    pub fn tag_refresh_interval(&self) -> Duration {
        self.tag_refresh_interval
    }

    /// The target lifetime of one segment.
    pub fn segment_duration(&self) -> Duration {
        self.segment_duration
    }

    /// Whether the step adapts to the consumption rate.
    pub fn adaptive_step(&self) -> bool {
        self.adaptive_step
    }

    /// Where the high-water marks persist, if anywhere.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// Raises `witness`'s mark of a tag to the end of every range before the range is
    /// served, and refuses a range below it (the store moved past it): ranges any node was
    /// given before the store was restored from an older backup are never served again.
    pub fn with_witness(mut self, witness: Witness) -> SegmentConfig {
        self.witness = Some(witness);
        self
    }

    /// The witness, if any ([`SegmentConfig::with_witness`]).
    pub fn witness(&self) -> Option<&Witness> {
        self.witness.as_ref()
    }
}

fn bounded(field: &'static str, got: u64, min: u64, max: u64) -> Result<Duration, ConfigError> {
    if (min..=max).contains(&got) {
        Ok(Duration::from_millis(got))
    } else {
        Err(ConfigError { field, got, min, max })
    }
}
