//! The step policy, checked against its promise for any inputs: a planned step is never
//! below the tag's step, never more than `STEP_GROWTH_MAX` times the previous segment (nor
//! above `STEP_MAX`) unless the tag's own step is larger, never below half the previous one
//! (within the cap), and the first segment is the tag's step.

use std::time::Duration;

use idmint_core::limits::{STEP_GROWTH_MAX, STEP_MAX};
use idmint_core::pacing::plan_step;
use proptest::prelude::*;

fn forecasts() -> impl Strategy<Value = f64> {
    prop_oneof![0.0..1e9f64, Just(f64::NAN), Just(f64::INFINITY), Just(0.0)]
}

proptest! {
    #[test]
    fn a_planned_step_stays_within_its_bounds(
        tag_step in 1u64..=2 * STEP_MAX,
        previous in 0u64..=2 * STEP_MAX,
        forecast in forecasts(),
        duration_s in 1u64..=86_400,
    ) {
        let step = plan_step(tag_step, previous, forecast, Duration::from_secs(duration_s));
        prop_assert!(step >= tag_step);
        let grown_max = (STEP_GROWTH_MAX * previous).min(STEP_MAX);
        prop_assert!(step <= grown_max.max(tag_step), "{step} after {previous}");
        prop_assert!(step >= (previous / 2).min(STEP_MAX), "{step} after {previous}");
        if previous == 0 {
            prop_assert_eq!(step, tag_step);
        }
    }

    /// Refill after refill at any forecasts, the steps grow by the factor at most and reach
    /// the cap only after enough refills: `tag_step × F^k` bounds the k-th.
    #[test]
    fn steps_grow_geometrically_at_most(
        tag_step in 1u64..=10_000,
        forecasts in prop::collection::vec(forecasts(), 1..40),
    ) {
        let mut previous = 0;
        for (k, forecast) in forecasts.into_iter().enumerate() {
            let step = plan_step(tag_step, previous, forecast, Duration::from_secs(900));
            let bound = STEP_GROWTH_MAX
                .checked_pow(k as u32)
                .and_then(|f| f.checked_mul(tag_step))
                .unwrap_or(u64::MAX)
                .min(STEP_MAX.max(tag_step));
            prop_assert!(step <= bound, "refill {k}: {step} above {bound}");
            previous = step;
        }
    }
}
