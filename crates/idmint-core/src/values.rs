//! Validated values that cross idmint's edges: step, batch count, start id, description and
//! preload ratio.
//!
//! Each is made only by its constructor, which checks it against the named limits; internal
//! code takes the newtype and never re-checks a raw number.

use std::fmt;

use crate::limits::{
    BATCH_COUNT_MAX, DESCRIPTION_LEN_MAX, ID_MAX, ID_MIN, LEASE_COUNT_MAX,
    PRELOAD_PERMILLE_DEFAULT, PRELOAD_PERMILLE_MAX, STEP_DEFAULT, STEP_MAX, STEP_MIN,
};

/// Why a value was refused. The message names the value, the bound and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueError {
    /// A step outside `STEP_MIN..=STEP_MAX`.
    Step {
        /// The refused step.
        got: u64,
    },
    /// A batch count outside `1..=max`.
    Count {
        /// The refused count.
        got: u64,
        /// The largest count allowed here.
        max: u64,
    },
    /// A start id outside `ID_MIN..=ID_MAX - STEP_MAX`.
    StartId {
        /// The refused start id.
        got: u64,
    },
    /// A description longer than [`DESCRIPTION_LEN_MAX`] characters or holding a control
    /// character.
    Description {
        /// Its length in characters.
        len: usize,
    },
    /// A preload ratio outside `(0, 1]`.
    PreloadRatio {
        /// The refused ratio, as given.
        got: String,
    },
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::Step { got } => {
                write!(f, "step {got} is out of range; use {STEP_MIN} to {STEP_MAX}")
            }
            ValueError::Count { got, max } => {
                write!(f, "count {got} is out of range; ask for 1 to {max} ids per request")
            }
            ValueError::StartId { got } => {
                write!(f, "start id {got} is out of range; use {ID_MIN} to {}", StartId::MAX)
            }
            ValueError::Description { len } => write!(
                f,
                "description ({len} characters) is invalid; use at most \
                 {DESCRIPTION_LEN_MAX} characters and no control characters"
            ),
            ValueError::PreloadRatio { got } => write!(
                f,
                "preload ratio {got} is out of range; use a share of the segment above 0 and \
                 at most 1 (default 0.1: preload once 10 % is used)"
            ),
        }
    }
}

impl std::error::Error for ValueError {}

/// Ids reserved per store allocation: `STEP_MIN..=STEP_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Step(u64);

impl Step {
    /// The step of a tag created without one ([`STEP_DEFAULT`]).
    pub const DEFAULT: Step = Step(STEP_DEFAULT);

    /// Checks a step against `STEP_MIN..=STEP_MAX`.
    pub fn new(step: u64) -> Result<Step, ValueError> {
        if (STEP_MIN..=STEP_MAX).contains(&step) {
            Ok(Step(step))
        } else {
            Err(ValueError::Step { got: step })
        }
    }

    /// The step as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// How many ids one request asks for: a batch, `1..=max` where `max` is at most
/// [`BATCH_COUNT_MAX`], or a lease of ranges, `1..=`[`LEASE_COUNT_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Count(u64);

impl Count {
    /// One id.
    pub const ONE: Count = Count(1);

    /// Checks a count against `1..=BATCH_COUNT_MAX`.
    pub fn new(count: u64) -> Result<Count, ValueError> {
        Count::new_bounded(count, BATCH_COUNT_MAX)
    }

    /// Checks a count against `1..=max`; `max` above [`BATCH_COUNT_MAX`] is lowered to it
    /// (configuration may lower a limit, never raise it).
    pub fn new_bounded(count: u64, max: u64) -> Result<Count, ValueError> {
        let max = max.min(BATCH_COUNT_MAX);
        if (1..=max).contains(&count) {
            Ok(Count(count))
        } else {
            Err(ValueError::Count { got: count, max })
        }
    }

    /// Checks the size of a lease of ranges against `1..=LEASE_COUNT_MAX`: ranges, not a
    /// list of ids, so a lease may be larger than any batch.
    pub fn new_lease(count: u64) -> Result<Count, ValueError> {
        if (1..=LEASE_COUNT_MAX).contains(&count) {
            Ok(Count(count))
        } else {
            Err(ValueError::Count { got: count, max: LEASE_COUNT_MAX })
        }
    }

    /// The count as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The first id of a new tag: `ID_MIN..=StartId::MAX`, leaving room for at least one
/// allocation of the largest step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StartId(u64);

impl StartId {
    /// The largest start id: one full step of room below [`ID_MAX`].
    pub const MAX: u64 = ID_MAX - STEP_MAX;

    /// The start id of a tag created without one (Leaf's sample row starts at 1).
    pub const DEFAULT: StartId = StartId(ID_MIN);

    /// Checks a start id against `ID_MIN..=StartId::MAX`.
    pub fn new(start: u64) -> Result<StartId, ValueError> {
        if (ID_MIN..=StartId::MAX).contains(&start) {
            Ok(StartId(start))
        } else {
            Err(ValueError::StartId { got: start })
        }
    }

    /// The start id as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// A tag's free-text description: at most [`DESCRIPTION_LEN_MAX`] characters, no control
/// characters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Description(String);

impl Description {
    /// Checks a description's length and characters.
    pub fn new(text: &str) -> Result<Description, ValueError> {
        let len = text.chars().count();
        if len > DESCRIPTION_LEN_MAX || text.chars().any(char::is_control) {
            return Err(ValueError::Description { len });
        }
        Ok(Description(text.to_owned()))
    }

    /// The description as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The share of a segment used before the next one is requested, in `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PreloadRatio {
    permille: u32,
}

impl PreloadRatio {
    /// Leaf's 10 %.
    pub const DEFAULT: PreloadRatio = PreloadRatio { permille: PRELOAD_PERMILLE_DEFAULT };

    /// Checks a ratio in `(0, 1]`, kept to a resolution of one per-mille (at least 0.001).
    pub fn new(ratio: f64) -> Result<PreloadRatio, ValueError> {
        let refuse = || ValueError::PreloadRatio { got: ratio.to_string() };
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(refuse());
        }
        // The cast is exact: the value is in (0, 1000] after the check above.
        let permille = ((ratio * 1000.0).round() as u32).clamp(1, PRELOAD_PERMILLE_MAX);
        Ok(PreloadRatio { permille })
    }

    /// The ratio in per-mille, `1..=1000`.
    pub fn permille(self) -> u32 {
        self.permille
    }

    /// The offset within a segment of `len` ids whose take triggers the refill: always
    /// inside the segment, so exactly one take covers it.
    pub fn preload_offset(self, len: u64) -> u64 {
        let offset = (u128::from(len) * u128::from(self.permille) / 1000) as u64;
        offset.min(len.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_hold_at_both_ends() {
        assert!(Step::new(0).is_err());
        assert_eq!(Step::new(1).map(Step::get), Ok(1));
        assert_eq!(Step::new(STEP_MAX).map(Step::get), Ok(STEP_MAX));
        assert!(Step::new(STEP_MAX + 1).is_err());
        assert!(Count::new(0).is_err());
        assert!(Count::new(BATCH_COUNT_MAX).is_ok());
        assert!(Count::new(BATCH_COUNT_MAX + 1).is_err());
        assert_eq!(Count::new_bounded(11, 10), Err(ValueError::Count { got: 11, max: 10 }));
        assert!(Count::new_bounded(BATCH_COUNT_MAX + 1, u64::MAX).is_err());
        assert_eq!(Count::new_lease(LEASE_COUNT_MAX).map(Count::get), Ok(LEASE_COUNT_MAX));
        assert!(Count::new_lease(0).is_err() && Count::new_lease(LEASE_COUNT_MAX + 1).is_err());
        assert!(StartId::new(0).is_err());
        assert!(StartId::new(StartId::MAX).is_ok());
        assert!(StartId::new(StartId::MAX + 1).is_err());
        assert!(Description::new(&"é".repeat(DESCRIPTION_LEN_MAX)).is_ok());
        assert!(Description::new(&"é".repeat(DESCRIPTION_LEN_MAX + 1)).is_err());
        assert!(Description::new("two\nlines").is_err());
    }

    #[test]
    fn preload_ratio_is_a_share_of_the_segment() {
        assert!(PreloadRatio::new(0.0).is_err());
        assert!(PreloadRatio::new(1.5).is_err());
        assert!(PreloadRatio::new(f64::NAN).is_err());
        assert_eq!(PreloadRatio::DEFAULT.preload_offset(1000), 100);
        assert_eq!(PreloadRatio::new(1.0).map(|r| r.preload_offset(1000)), Ok(999));
        assert_eq!(PreloadRatio::DEFAULT.preload_offset(1), 0);
        assert_eq!(PreloadRatio::new(0.0001).map(|r| r.permille()), Ok(1));
    }
}
