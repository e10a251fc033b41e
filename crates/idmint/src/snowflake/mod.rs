//! Snowflake-style ids: `time | worker | sequence` in one `u64`, in a [`Layout`].
//!
//! [`Snowflake`] holds a worker id (leased from a store with a fencing token, assigned by
//! it, or static) and a persisted time mark ([`TIME_MARK_FILE`]), so a clock that steps back
//! is waited out or refused, never repeated. [`CachedSnowflake`] serves the same ids from a
//! ring of pre-made ones, filled a unit of borrowed time at a time (Baidu uid-generator).

mod cached;
mod generator;

pub use cached::{CachedConfig, CachedSnowflake};
pub use generator::{
    Snowflake, SnowflakeConfig, SnowflakeError, SnowflakeStatus, TIME_MARK_FILE,
    TIME_MARK_LOCK_FILE, WorkerIdRange, WorkerIdSource, settle_ms,
};
pub use idmint_core::snowflake::{LifetimeError, PRESETS, Parts, UtcMs, UtcMsError};
pub use idmint_core::{ClockPolicy, Layout, LayoutError, TimeUnit};

/// Bounds and defaults of the snowflake engines.
pub mod limits {
    pub use super::cached::{
        CACHED_MAX_AGE_MS_DEFAULT, CACHED_MAX_AGE_MS_MAX, CACHED_MAX_AGE_MS_MIN,
        CACHED_MAX_LEAD_MS_DEFAULT, CACHED_RING_CAPACITY_DEFAULT, TAKE_WAIT_MS_MAX,
    };
    pub use super::generator::{
        BORROW_LEAD_MS_MAX, CLOCK_OFFSET_PERIOD_MS, FIRST_ID_MS_DEFAULT_MAX,
        LEASE_MARGIN_MS_DEFAULT, LEASE_TTL_MS_DEFAULT, SETTLE_MS_DEFAULT, SNOWFLAKE_WAIT_MS_MAX,
        TIME_WINDOW_MS_DEFAULT, TIME_WINDOW_MS_MAX, TIME_WINDOW_MS_MIN, TOLERANCE_MS_DEFAULT,
        TOLERANCE_MS_MAX,
    };
    pub use crate::node::{
        SNOWFLAKE_RETRY_MS_MAX, SNOWFLAKE_RETRY_MS_MIN, SNOWFLAKE_START_ATTEMPT_MS_MAX,
    };
    pub use idmint_core::limits::{
        CLOCK_TOLERANCE_MS_MAX, LAYOUT_BITS_MAX, LAYOUT_END_MS_MAX, LAYOUT_EXPIRY_HORIZON_MS,
        LAYOUT_EXPIRY_HORIZON_YEARS, LAYOUT_FIELD_BITS_MAX, LAYOUT_LIFETIME_MS_MIN,
        RING_ATTEMPTS_MAX, RING_CAPACITY_MAX, RING_CAPACITY_MIN, RING_PADDING_PERMILLE_DEFAULT,
        VIBRATION_BITS_DEFAULT_MAX, VIBRATION_COST_SHIFT,
    };
}
