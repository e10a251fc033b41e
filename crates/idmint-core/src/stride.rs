//! Didi Tinyid's `delta`/`remainder` arithmetic: a `biz_type` hands out only the ids with
//! `id % delta == remainder`, so several Tinyid databases (or an odd and an even one) can
//! share one id space.
//!
//! Tinyid's `max_id` is the last id a segment covers (inclusive): a segment moves it from `M`
//! to `M + step` and serves the aligned ids in `(M, M + step]`. The engine does not step by
//! `delta` on its per-id path; it hands out *indices* `k` from a
//! [`DoubleBuffer`](crate::DoubleBuffer), contiguous like any segment, and [`Stride::id`] turns an index
//! into the id `k * delta + remainder`. Because that map is strictly increasing, an
//! increasing, disjoint run of indices is an increasing, disjoint run of ids: the double
//! buffer's uniqueness carries over unchanged.
//!
//! Pure arithmetic: no I/O, no clock.

use std::fmt;

use crate::IdRange;
use crate::limits::ID_MAX;

/// The largest `delta` accepted: Tinyid's column is `int(11)`, a signed 32-bit integer.
pub const DELTA_MAX: u64 = i32::MAX as u64;

/// A `biz_type`'s `delta` and `remainder`: ids `k * delta + remainder` for the indices
/// `k = 1, 2, …`. Made only by [`Stride::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stride {
    delta: u64,
    remainder: u64,
}

/// Why a row's `delta`, `remainder` or `step` cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StrideError {
    /// `delta` is below 1 or above [`DELTA_MAX`].
    Delta(i64),
    /// `remainder` is negative or not below `delta`: no id would ever satisfy
    /// `id % delta == remainder`.
    Remainder {
        /// The row's remainder.
        remainder: i64,
        /// The row's delta.
        delta: i64,
    },
    /// `step` is below `delta`: a segment could hold no id.
    Step {
        /// The row's step.
        step: i64,
        /// The row's delta.
        delta: i64,
    },
}

impl fmt::Display for StrideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrideError::Delta(delta) => {
                write!(f, "delta is {delta}; it must be from 1 to {DELTA_MAX}")
            }
            StrideError::Remainder { remainder, delta } => write!(
                f,
                "remainder is {remainder} with delta {delta}; it must be from 0 to delta - 1, \
                 or no id satisfies id % delta == remainder"
            ),
            StrideError::Step { step, delta } => {
                write!(f, "step is {step} with delta {delta}; step must be at least delta")
            }
        }
    }
}

impl std::error::Error for StrideError {}

impl Stride {
    /// The stride of a row holding `delta` and `remainder`, as Tinyid stores them.
    pub fn new(delta: i64, remainder: i64) -> Result<Stride, StrideError> {
        let delta_ok = u64::try_from(delta).ok().filter(|d| (1..=DELTA_MAX).contains(d));
        let delta_u = delta_ok.ok_or(StrideError::Delta(delta))?;
        let remainder_u = u64::try_from(remainder)
            .ok()
            .filter(|r| *r < delta_u)
            .ok_or(StrideError::Remainder { remainder, delta })?;
        Ok(Stride { delta: delta_u, remainder: remainder_u })
    }

    /// The stride of one id after another: every id (`delta` 1, `remainder` 0).
    pub const ONE: Stride = Stride { delta: 1, remainder: 0 };

    /// `delta`.
    pub fn delta(self) -> u64 {
        self.delta
    }

    /// `remainder`.
    pub fn remainder(self) -> u64 {
        self.remainder
    }

    /// Checks that a segment of `step` ids holds at least one id of this stride.
    pub fn check_step(self, step: i64) -> Result<(), StrideError> {
        if u64::try_from(step).is_ok_and(|s| s >= self.delta) {
            Ok(())
        } else {
            Err(StrideError::Step { step, delta: self.delta as i64 })
        }
    }

    /// The id of index `k`, `k * delta + remainder`; `None` past [`ID_MAX`].
    pub fn id(self, k: u64) -> Option<u64> {
        k.checked_mul(self.delta)?.checked_add(self.remainder).filter(|id| *id <= ID_MAX)
    }

    /// The smallest index, at least 1, whose id is above `max_id`: the first index a row
    /// whose (inclusive) `max_id` is `max_id` has not handed out. Indices start at 1, as
    /// segment ranges do, so the id `remainder` itself (index 0) is never served: only a row
    /// whose `max_id` is still below its `remainder` loses it.
    pub fn first_free_index(self, max_id: u64) -> u64 {
        // The ids above `max_id` are `k * delta + remainder > max_id`.
        if max_id < self.remainder {
            return 1;
        }
        ((max_id - self.remainder) / self.delta + 1).max(1)
    }

    /// The (inclusive) `max_id` that leaves exactly the indices from `k` on unissued: the
    /// largest value whose [`first_free_index`](Stride::first_free_index) is `k`.
    pub fn max_id_before(self, k: u64) -> Option<u64> {
        // id(k) - 1.
        k.checked_mul(self.delta)?.checked_add(self.remainder)?.checked_sub(1)
    }

    /// The indices a segment that moved `max_id` from `before` to `after` (Tinyid's
    /// `(before, after]`) covers, as a range of indices; `None` when it holds no id (or
    /// `after` is past [`ID_MAX`]).
    pub fn indices(self, before: u64, after: u64) -> Option<IdRange> {
        if after > ID_MAX || after <= before {
            return None;
        }
        IdRange::new(self.first_free_index(before), self.first_free_index(after))
    }

    /// The ids of a range of indices, in order.
    pub fn ids(self, indices: IdRange) -> impl Iterator<Item = u64> {
        // Indices come from ranges whose ids were checked against ID_MAX when the store
        // allocated them; a wrapped id would repeat one, so crash rather than serve it.
        indices.ids().map(move |k| {
            let id = self.id(k);
            assert!(id.is_some(), "index {k} of stride {self} is past ID_MAX");
            id.unwrap_or(ID_MAX)
        })
    }
}

impl fmt::Display for Stride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delta {} remainder {}", self.delta, self.remainder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_checked() {
        assert_eq!(Stride::new(0, 0), Err(StrideError::Delta(0)));
        assert_eq!(Stride::new(-2, 0), Err(StrideError::Delta(-2)));
        assert_eq!(Stride::new(2, 2), Err(StrideError::Remainder { remainder: 2, delta: 2 }));
        assert_eq!(Stride::new(2, -1), Err(StrideError::Remainder { remainder: -1, delta: 2 }));
        assert!(Stride::new(2, 1).expect("stride").check_step(1).is_err());
        assert!(Stride::new(2, 1).expect("stride").check_step(2).is_ok());
    }

    /// Tinyid's `SegmentId.init()` then `nextId()`: the ids a segment `(before, after]` hands
    /// out, brute force.
    fn tinyid_ids(before: u64, after: u64, delta: u64, remainder: u64) -> Vec<u64> {
        // Index 0 (the id `remainder` itself) is not served.
        (before + 1..=after).filter(|id| id % delta == remainder && *id > remainder).collect()
    }

    #[test]
    fn indices_match_tinyid_segments() {
        for delta in 1..6 {
            for remainder in 0..delta {
                let stride = Stride::new(delta as i64, remainder as i64).expect("stride");
                for before in 0..30 {
                    for step in delta..delta + 12 {
                        let after = before + step;
                        let ours: Vec<u64> = stride
                            .indices(before, after)
                            .map(|r| stride.ids(r).collect())
                            .unwrap_or_default();
                        assert_eq!(
                            ours,
                            tinyid_ids(before, after, delta, remainder),
                            "{stride} ({before}, {after}]"
                        );
                        // Giving back from any index restores a max_id that hands out
                        // exactly the indices from there on.
                        if let Some(range) = stride.indices(before, after) {
                            for k in range.ids() {
                                let max = stride.max_id_before(k).expect("max");
                                assert_eq!(stride.first_free_index(max), k);
                            }
                        }
                    }
                }
            }
        }
    }
}
