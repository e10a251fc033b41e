//! Pacing of a tag's segments: the consumption rate, the size of the next segment and how
//! many ids to keep in hand when asking for it.
//!
//! Pure arithmetic: the caller measures time and ids and passes them in, so a simulation
//! drives it with a manual clock. The policy (documented in docs/INVARIANTS.md):
//!
//! - **Rate**: two exponentially weighted moving averages of ids per second, a fast one
//!   (time constant [`RATE_FAST_TAU_S`]) and a slow one ([`RATE_SLOW_TAU_S`]). The forecast
//!   is the larger of the two: it follows a surge within seconds and forgets it over minutes.
//!   The first observation sets the fast average only; the slow one starts from 0, so one
//!   burst counts in it as its ids spread over its time constant, never as a rate for
//!   minutes to come.
//! - **Step**: the forecast rate times the target segment duration (Leaf: 15 minutes), so a
//!   segment lasts about that long; never below the tag's configured step, never above
//!   [`STEP_MAX`], growing at most [`STEP_GROWTH_MAX`] times (Leaf's ×2) and shrinking at
//!   most by half (Leaf's ÷2) per refill. No single batch sets the step: whatever rate one
//!   burst suggests, the next segment is at most twice the last one, so what a `kill -9`
//!   strands is bounded by the segments actually consumed before it (docs/GUARANTEES.md).
//! - **Reserve**: the next segment is requested once the preload ratio of the current one is
//!   used, or earlier, so that at least `forecast × refill latency × RESERVE_FACTOR` ids remain
//!   when it is requested: one refill at the measured latency (three times over) fits in the
//!   runway.
//! - **Idle**: a tag that handed out no id for [`IDLE_AFTER`] is idle, and its runway is
//!   infinite (`None`). The fast average decays towards 0 without reaching it, so without
//!   this bound an unused tag's runway would grow without limit (1e20 s after ten quiet
//!   minutes) rather than say that nothing is being consumed.
//! - **Mark lead**: the store-regression guard's mark for a range ending at `end` is written
//!   as `end` plus a lead of [`MARK_LEAD_RANGES`] times the tag's configured step, at most
//!   [`MARK_LEAD_IDS_MAX`] and never past [`ID_MAX`]; once less than half the lead is left
//!   above a new range, the next mark is written early. Most refills then find their mark on
//!   disk already, and a restart skips at most the lead.

use std::time::Duration;

use crate::limits::{ID_MAX, MARK_LEAD_IDS_MAX, MARK_LEAD_RANGES, STEP_GROWTH_MAX, STEP_MAX};

/// Time constant of the fast rate average, in seconds.
pub const RATE_FAST_TAU_S: f64 = 10.0;
/// Time constant of the slow rate average, in seconds.
pub const RATE_SLOW_TAU_S: f64 = 300.0;
/// Refill latencies the reserve covers.
pub const RESERVE_FACTOR: f64 = 3.0;
/// How long a tag hands out no id before it is idle: six fast time constants
/// ([`RATE_FAST_TAU_S`]), by when the recent rate has fallen below 0.25 % of what it was at
/// the last take. A tag taking ids once a minute or more often is never idle, so an alert on
/// a short runway still fires for it. Configuration may shorten it (tests), never lengthen it.
pub const IDLE_AFTER: Duration = Duration::from_secs(60);

const _: () = assert!(IDLE_AFTER.as_secs() as f64 == 6.0 * RATE_FAST_TAU_S);

/// Ids per second a tag consumes, as two moving averages.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateMeter {
    fast: f64,
    slow: f64,
    primed: bool,
    /// Seconds observed since the last observation that saw an id.
    quiet_s: f64,
}

impl RateMeter {
    /// A meter that has seen nothing (rate 0).
    pub fn new() -> RateMeter {
        RateMeter::default()
    }

    /// Records that `ids` were handed out over `elapsed`. The first observation sets the fast
    /// average (the runway and the reserve need a rate at once); the slow one, which keeps a
    /// surge for minutes, starts from 0 so a single burst cannot hold the forecast up. An
    /// empty interval is ignored.
    pub fn observe(&mut self, ids: u64, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if seconds <= 0.0 {
            return;
        }
        let rate = ids as f64 / seconds;
        if !self.primed {
            (self.fast, self.primed) = (rate, true);
        } else {
            self.fast += (1.0 - (-seconds / RATE_FAST_TAU_S).exp()) * (rate - self.fast);
        }
        self.slow += (1.0 - (-seconds / RATE_SLOW_TAU_S).exp()) * (rate - self.slow);
        // An interval that saw an id counts as busy for all of its length.
        self.quiet_s = if ids > 0 { 0.0 } else { self.quiet_s + seconds };
    }

    /// Whether nothing is being consumed: no id seen at all (a rate of 0), or none for
    /// `idle_after` ([`IDLE_AFTER`] unless configured shorter).
    pub fn idle(&self, idle_after: Duration) -> bool {
        self.fast <= 0.0 || self.quiet_s >= idle_after.as_secs_f64()
    }

    /// The recent rate, ids per second: what runway is computed from.
    pub fn current(&self) -> f64 {
        self.fast
    }

    /// The rate segments are sized for: the larger of the recent and the long-term rate.
    pub fn forecast(&self) -> f64 {
        self.fast.max(self.slow)
    }
}

/// The step to ask the store for: `forecast × segment_duration`, between half and
/// [`STEP_GROWTH_MAX`] times `previous_step` (the length of the last range the store gave;
/// 0 before the first, then the step is `tag_step`), at most [`STEP_MAX`], and never below
/// `tag_step` (which wins over every other bound: an operator's larger step, or a Leaf row's
/// above `STEP_MAX`, is taken as it is).
pub fn plan_step(
    tag_step: u64,
    previous_step: u64,
    forecast: f64,
    segment_duration: Duration,
) -> u64 {
    // `as` saturates: an absurd rate asks for STEP_MAX, a NaN for 0 (then the floor).
    let target = (forecast * segment_duration.as_secs_f64()).ceil() as u64;
    let grown_max = previous_step.saturating_mul(STEP_GROWTH_MAX);
    target.min(grown_max).max(previous_step / 2).min(STEP_MAX).max(tag_step)
}

/// Ids to keep in hand when the next segment is requested: one refill at `latency`,
/// [`RESERVE_FACTOR`] times over, at the forecast rate.
pub fn preload_reserve(forecast: f64, latency: Duration) -> u64 {
    (forecast * latency.as_secs_f64() * RESERVE_FACTOR).ceil() as u64
}

/// Seconds the ids in hand last at the meter's recent rate; `None` when the tag is idle
/// ([`RateMeter::idle`] after `idle_after`): the ids last for ever.
pub fn runway_seconds(remaining: u64, meter: &RateMeter, idle_after: Duration) -> Option<f64> {
    (!meter.idle(idle_after)).then(|| remaining as f64 / meter.current())
}

/// The ids a mark is written ahead of the range it covers, for a tag whose configured step
/// is `tag_step`: [`MARK_LEAD_RANGES`] steps, at most [`MARK_LEAD_IDS_MAX`]. The tag's step,
/// not the range's length (which the adaptive step grows), so a restart can tell the lead
/// from a store that went back by the step the store reports with its next range.
pub fn mark_lead(tag_step: u64) -> u64 {
    tag_step.saturating_mul(MARK_LEAD_RANGES).min(MARK_LEAD_IDS_MAX)
}

/// The mark to write for a range ending at `end` when the mark on disk does not cover it:
/// `end` plus [`mark_lead`], never past [`ID_MAX`] (nor below `end`).
pub fn mark_ahead(end: u64, tag_step: u64) -> u64 {
    end.saturating_add(mark_lead(tag_step)).min(ID_MAX).max(end)
}

/// Whether the next mark is due early: the mark on disk, `mark`, covers the range ending at
/// `end` but leaves less than half the lead above it (and is below the mark a write would
/// make).
pub fn mark_due(mark: u64, end: u64, tag_step: u64) -> bool {
    mark < mark_ahead(end, tag_step) && mark.saturating_sub(end) < mark_lead(tag_step) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN15: Duration = Duration::from_secs(900);

    #[test]
    fn the_first_observation_primes_and_later_ones_average() {
        let mut m = RateMeter::new();
        assert_eq!(m.forecast(), 0.0);
        m.observe(1_000, Duration::from_secs(1));
        assert_eq!((m.current(), m.forecast()), (1_000.0, 1_000.0));
        m.observe(0, Duration::ZERO);
        assert_eq!(m.current(), 1_000.0, "an empty interval changes nothing");
        // Ten quiet seconds: the fast average drops to 1/e.
        m.observe(0, Duration::from_secs(10));
        assert!((m.current() - 1_000.0 / std::f64::consts::E).abs() < 1e-6);
        // A steady rate for ten minutes: the slow average holds it through a quiet minute.
        let mut m = RateMeter::new();
        for _ in 0..600 {
            m.observe(1_000, Duration::from_secs(1));
        }
        m.observe(0, Duration::from_secs(60));
        assert!(m.current() < 10.0, "{}", m.current());
        assert!(m.forecast() > 650.0, "forecast keeps the long-term rate: {}", m.forecast());
        // A surge shows within seconds.
        m.observe(100_000, Duration::from_secs(5));
        assert!(m.current() > 7_000.0, "{}", m.current());
    }

    #[test]
    fn the_step_targets_the_duration_within_its_bounds() {
        // 100 ids/s for 15 minutes, once the steps before have grown to it.
        assert_eq!(plan_step(1_000, 64_000, 100.0, MIN15), 90_000);
        // Growth is at most STEP_GROWTH_MAX per refill, whatever the forecast.
        assert_eq!(plan_step(1_000, 1_000, 100.0, MIN15), 2_000);
        assert_eq!(plan_step(1_000, 1_000, 1e9, MIN15), 2_000);
        assert_eq!(plan_step(200, 200, 95.49, MIN15), 400);
        // The first plan (nothing allocated yet) is the tag's step.
        assert_eq!(plan_step(1_000, 0, 1e9, MIN15), 1_000);
        // Never below the tag's step, nor above STEP_MAX.
        assert_eq!(plan_step(1_000, 1_000, 0.0, MIN15), 1_000);
        assert_eq!(plan_step(1_000, 800_000, 1e9, MIN15), STEP_MAX);
        // An operator's larger step is taken at once, beyond the growth bound.
        assert_eq!(plan_step(50_000, 1_000, 0.0, MIN15), 50_000);
        assert_eq!(plan_step(1_000, 1_000, f64::NAN, MIN15), 1_000);
        // A Leaf row with a larger configured step keeps it.
        assert_eq!(plan_step(2_000_000, 0, 1.0, MIN15), 2_000_000);
        // Shrinks by half at most per refill.
        assert_eq!(plan_step(1_000, 800_000, 1.0, MIN15), 400_000);
    }

    #[test]
    fn the_reserve_covers_three_refills_at_the_forecast() {
        assert_eq!(preload_reserve(10_000.0, Duration::from_millis(200)), 6_000);
        assert_eq!(preload_reserve(0.0, Duration::from_secs(1)), 0);
        let mut m = RateMeter::new();
        assert_eq!(runway_seconds(5_000, &m, IDLE_AFTER), None, "nothing seen: idle");
        m.observe(1_000, Duration::from_secs(1));
        assert_eq!(runway_seconds(5_000, &m, IDLE_AFTER), Some(5.0));
    }

    #[test]
    fn a_quiet_tag_becomes_idle_and_a_busy_one_never_does() {
        let mut m = RateMeter::new();
        m.observe(1_000, Duration::from_secs(1));
        // Ten quiet minutes: the rate decays without reaching 0, the runway is infinite.
        for _ in 0..600 {
            m.observe(0, Duration::from_secs(1));
        }
        assert!(m.current() > 0.0, "the decayed rate is not 0: {}", m.current());
        assert!(m.idle(IDLE_AFTER));
        assert_eq!(runway_seconds(50, &m, IDLE_AFTER), None);
        // One id and the tag is busy again, its runway finite and short.
        m.observe(10, Duration::from_secs(1));
        assert!(!m.idle(IDLE_AFTER));
        assert!(
            runway_seconds(50, &m, IDLE_AFTER).is_some_and(|s| s < 60.0),
            "{:?}",
            runway_seconds(50, &m, IDLE_AFTER)
        );
        // A take every 59 s never makes it idle.
        for _ in 0..10 {
            for _ in 0..59 {
                assert!(!m.idle(IDLE_AFTER));
                m.observe(0, Duration::from_secs(1));
            }
            m.observe(1, Duration::from_secs(1));
        }
        assert!(!m.idle(IDLE_AFTER));
    }

    #[test]
    fn one_burst_does_not_hold_the_forecast_up_for_minutes() {
        // 201 ids within 10 ms (one id, then a batch of 200): the recent rate says 20 100/s,
        // but two minutes of quiet later nothing says a segment needs more than the tag's step.
        let mut m = RateMeter::new();
        m.observe(201, Duration::from_millis(10));
        assert_eq!(m.current(), 20_100.0);
        for _ in 0..120 {
            m.observe(0, Duration::from_secs(1));
        }
        let step = plan_step(1_000, 1_000, m.forecast(), MIN15);
        assert_eq!(step, 1_000, "forecast {} two minutes after one burst", m.forecast());
    }

    #[test]
    fn a_mark_is_written_ahead_by_a_bounded_lead() {
        assert_eq!(mark_ahead(101, 100), 101 + 100 * MARK_LEAD_RANGES);
        assert_eq!(mark_ahead(2, 1), 2 + MARK_LEAD_RANGES);
        assert_eq!(mark_ahead(10, STEP_MAX), 10 + MARK_LEAD_IDS_MAX);
        assert_eq!(mark_ahead(ID_MAX - 3, 2), ID_MAX);
        assert_eq!(mark_ahead(ID_MAX, 2), ID_MAX);
        // Due once less than half the lead is left, never when the mark is at its highest.
        let lead = mark_lead(10);
        assert!(!mark_due(100 + lead, 100, 10));
        assert!(!mark_due(100 + lead / 2, 100, 10));
        assert!(mark_due(100 + lead / 2 - 1, 100, 10));
        assert!(!mark_due(ID_MAX, ID_MAX - 1, 10));
    }
}
