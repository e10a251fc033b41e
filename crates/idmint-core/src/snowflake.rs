//! Snowflake-style ids: the bit layout, its presets, and the pure state step of a generator.
//!
//! An id is `time | worker | sequence` under a zero sign bit. A [`Layout`] says how wide each
//! field is, what one time unit is and where time starts (the epoch); [`Layout::new`] is the
//! only way to make one. [`step`] is a generator's whole per-id decision: given the *packed*
//! state of the last id issued, `(time_units << sequence_bits) | sequence`, and the clock
//! reading in units, it issues the next state, says how long to wait, or refuses. The state is
//! one `u64`, so the `idmint` library keeps it in one `AtomicU64` and steps it in a CAS loop;
//! [`start_floor`] makes the first state from the time mark persisted before a restart.
//! [`Layout::ids_of_unit`] lists one whole time unit, for the ring filler of the cached
//! generator (`ring.rs`), which runs on borrowed time like uid-generator's.
//!
//! This module must not read a clock, sleep or persist anything: time arrives as `now_ms` or
//! `now_units`, and waits and refusals leave as values the caller acts on.
//!
//! Invariant: every state [`step`] issues is strictly greater than the state it was given
//! (an `assert!`), so one worker's ids strictly increase and never repeat, whatever the clock
//! does.

use std::fmt;

use crate::limits::{
    BORROW_LEAD_MS_MAX, CLOCK_TOLERANCE_MS_MAX, LAYOUT_BITS_MAX, LAYOUT_END_MS_MAX,
    LAYOUT_FIELD_BITS_MAX, LAYOUT_LIFETIME_MS_MIN, MS_PER_YEAR, VIBRATION_BITS_DEFAULT_MAX,
    VIBRATION_COST_SHIFT,
};

/// Twitter's snowflake epoch, 2010-11-04T01:42:54.657Z (also Meituan Leaf's).
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;

/// Sonyflake's default start time, 2014-09-01T00:00:00Z.
pub const SONYFLAKE_EPOCH_MS: u64 = 1_409_529_600_000;

/// Baidu uid-generator's default epoch, 2016-05-20 (taken here as 00:00:00Z; uid-generator
/// parses it in the JVM's time zone).
pub const UID_GENERATOR_EPOCH_MS: u64 = 1_463_702_400_000;

/// Epoch of the `js-safe` preset, 2024-01-01T00:00:00Z.
pub const JS_SAFE_EPOCH_MS: u64 = 1_704_067_200_000;

/// The named layouts, for configuration and `idmint decode --layout NAME`.
///
/// - `snowflake`: 41 bits of milliseconds / 10 worker / 12 sequence from Twitter's epoch,
///   Meituan Leaf's layout, so Leaf's decode reads idmint's ids and the other way round.
/// - `sonyflake`: Sonyflake's field sizes, 39 bits of 10 ms / 16 worker / 8 sequence from
///   2014-09-01. The sizes only: Sonyflake puts the sequence *above* the machine id, idmint
///   keeps `time | worker | sequence`, so real Sonyflake ids do not decode with it.
/// - `uid`: Baidu uid-generator's default, 28 bits of seconds / 22 worker / 13 sequence from
///   2016-05-20. Its time ran out in November 2024: kept for decoding old ids.
/// - `js-safe`: ids below 2^53, exact as JavaScript numbers: 32 bits of seconds / 8 worker /
///   13 sequence from 2024-01-01 (until 2160).
pub const PRESETS: [(&str, Layout); 4] = [
    ("snowflake", preset(41, 10, 12, TimeUnit::Millis, TWITTER_EPOCH_MS)),
    ("sonyflake", preset(39, 16, 8, TimeUnit::TenMillis, SONYFLAKE_EPOCH_MS)),
    ("uid", preset(28, 22, 13, TimeUnit::Seconds, UID_GENERATOR_EPOCH_MS)),
    ("js-safe", preset(32, 8, 13, TimeUnit::Seconds, JS_SAFE_EPOCH_MS)),
];

/// The length of one step of an id's time field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeUnit {
    /// One millisecond (Twitter, Leaf, ShardingSphere).
    Millis,
    /// Ten milliseconds (Sonyflake).
    TenMillis,
    /// One second (Baidu uid-generator).
    Seconds,
}

/// A validated id layout: `time_bits + worker_bits + sequence_bits <= 63`, at least one time
/// and one sequence bit, and the epoch plus the whole time range within
/// [`LAYOUT_END_MS_MAX`]. Made only by [`Layout::new`] or [`Layout::preset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    time_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
    unit: TimeUnit,
    epoch_ms: u64,
}

/// Why a layout was refused. The message names the problem and the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The time field has no bits.
    NoTimeBits,
    /// The sequence field has no bits.
    NoSequenceBits,
    /// One field is wider than [`LAYOUT_FIELD_BITS_MAX`].
    FieldTooWide {
        /// `"time"`, `"worker"` or `"sequence"`.
        field: &'static str,
        /// Its width.
        bits: u32,
    },
    /// The fields together are wider than [`LAYOUT_BITS_MAX`]: the sign bit would be used.
    TooWide {
        /// Width of the time field.
        time_bits: u32,
        /// Width of the worker field.
        worker_bits: u32,
        /// Width of the sequence field.
        sequence_bits: u32,
    },
    /// The epoch plus the whole time range passes [`LAYOUT_END_MS_MAX`].
    TimeOverflows {
        /// Width of the time field.
        time_bits: u32,
        /// Its unit.
        unit: TimeUnit,
        /// The epoch.
        epoch_ms: u64,
    },
}

/// The fields of one id, as [`Layout::decode`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The time field: units since the epoch.
    pub time_units: u64,
    /// The wall-clock millisecond the time field stands for: `epoch + time_units × unit`.
    pub timestamp_ms: u64,
    /// The worker field.
    pub worker: u64,
    /// The sequence field.
    pub sequence: u64,
}

/// A layout's time runs out within the horizon asked about (see [`Layout::expiry_warning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryWarning {
    /// Time already ran out: a generator of this layout issues nothing.
    Expired {
        /// The first millisecond the time field cannot hold.
        expires_at_ms: u64,
    },
    /// Time runs out later, but within the horizon.
    Within {
        /// The first millisecond the time field cannot hold.
        expires_at_ms: u64,
        /// Milliseconds from now until then.
        remaining_ms: u64,
    },
}

/// Why a layout cannot serve ids from now on (see [`Layout::lifetime`]). The message gives
/// the numbers; the caller adds which settings to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LifetimeError {
    /// The epoch is after the clock: the time field would be negative.
    EpochInFuture {
        /// The epoch.
        epoch_ms: u64,
        /// The clock.
        now_ms: u64,
    },
    /// The time field ran out before now.
    Expired {
        /// The first millisecond the time field cannot hold.
        expires_at_ms: u64,
        /// The clock.
        now_ms: u64,
    },
    /// The time field runs out within [`LAYOUT_LIFETIME_MS_MIN`].
    TooShort {
        /// The first millisecond the time field cannot hold.
        expires_at_ms: u64,
        /// Milliseconds from now until then.
        remaining_ms: u64,
    },
}

/// A text that is not a UTC time `UtcMs` reads (see its `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UtcMsError {
    /// The text refused.
    pub text: String,
}

/// What a snowflake generator does when its clock is behind the last id it issued.
///
/// Both bounds are in units of the layout (see [`ClockPolicy::from_ms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockPolicy {
    /// How far behind the clock may be and still be waited out; beyond it [`step`] refuses.
    pub tolerance_units: u64,
    /// Borrowed time: `Some(max_lead_units)` lets the generator run on a logical clock ahead
    /// of the wall clock by at most that many units, instead of waiting; `None` never issues
    /// a time above the clock. A restart must not reuse the lead: the time mark the library
    /// persists has to cover it.
    pub borrow: Option<u64>,
}

/// The outcome of one [`step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Step {
    /// Issue an id: `packed` is the new state (the caller installs it with a CAS on the old
    /// one) and [`Layout::compose_packed`] makes the id from it.
    Issue {
        /// `(time_units << sequence_bits) | sequence` of the id to issue.
        packed: u64,
    },
    /// Nothing can be issued now: the sequence of the current unit is spent, or the clock is
    /// behind within tolerance. Sleep until the clock reads `units`, then step again.
    WaitUntil {
        /// The first unit at which the step issues, if no one else issued meanwhile.
        units: u64,
    },
    /// The clock is behind the last id issued by more than the policy tolerates: issuing
    /// could repeat an id, waiting would be too long.
    Refuse {
        /// How many units the clock is behind the time of the last id.
        behind_units: u64,
    },
    /// The layout's time field is full: no id of it can be issued any more.
    Exhausted,
}

/// The outcome of [`start_floor`]: how a generator starts after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Start {
    /// Start with `last` as the state: every id issued from it lies above the mark.
    Ready {
        /// The first state, `(mark << sequence_bits) | max_sequence`.
        last: u64,
    },
    /// The clock is at or behind the mark within tolerance: sleep until `units`, then start.
    WaitUntil {
        /// The first unit above the mark.
        units: u64,
    },
    /// The clock is behind the mark by more than the policy tolerates: a clock this wrong
    /// would repeat ids issued before the restart.
    Refuse {
        /// How many units the clock is behind the mark.
        behind_units: u64,
    },
    /// The mark is at the end of the layout's time: nothing can be issued above it.
    Exhausted,
}

/// A millisecond timestamp that displays as UTC, `2010-11-04T01:42:54.657Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcMs(pub u64);

/// Steps a generator's state: the next state to issue, a wait, or a refusal.
///
/// `last` is the packed state of the last id issued (`0` for a generator that never issued,
/// or the state [`start_floor`] made), `now_units` the clock in units of `layout` (see
/// [`Layout::to_units`]). In order:
///
/// - the clock is past the last time: issue at the clock, with the new unit's first sequence;
/// - otherwise the next state is the last time with the next sequence or, when the sequence
///   is spent, the next unit with its first sequence; its *lead* is how far it is ahead of the
///   clock, and *behind* is how far the clock is behind the last time;
/// - behind beyond what borrowing absorbs (`borrow`, 0 without) plus `tolerance_units`:
///   [`Step::Refuse`];
/// - lead at most the borrow (0 without): issue it; else [`Step::WaitUntil`] the unit where
///   it would be.
///
/// A wait is therefore at most `tolerance_units + 1` units, and an issued time is at most
/// `borrow` units ahead of the clock.
///
/// *Vibration* (ShardingSphere's `max-vibration-offset`): a new unit's first sequence is
/// `(last_sequence + 1) % (max_vibration + 1)`, with `max_vibration` capped at the largest
/// sequence. At a low rate, one id per unit, the last sequence is the previous unit's first,
/// so the first sequences cycle `0, 1, …, max_vibration, 0` exactly as ShardingSphere's do,
/// and ids spread over `id % n` shards instead of all being even; derived from the state, it
/// needs nothing shared besides it. `0` turns vibration off.
///
/// When `max_vibration + 1` is a power of two (the default, [`Layout::vibration_default`]),
/// the sequence field is a *counter* modulo `max_vibration + 1` at every rate: each issued
/// sequence is the last one plus 1 modulo it (within a unit by the increment, into a unit
/// entered by the clock by the vibration, into a unit entered because the last one was spent
/// by `2^sequence_bits ≡ 0`). So one worker's consecutive ids fall into `id % N` evenly (the
/// counts differ by at most 1) for every `N` dividing [`Layout::even_modulus`]. The price: a
/// unit entered by the clock holds `max_vibration` fewer ids at worst.
///
/// Called in a CAS loop, a thread may read the clock, lose the race to a thread that read it
/// a unit later, and then see the clock "behind": a caller re-reads the clock before it
/// reports a [`Step::Refuse`].
pub fn step(
    layout: &Layout,
    last: u64,
    now_units: u64,
    policy: &ClockPolicy,
    max_vibration: u64,
) -> Step {
    let (last_time, last_sequence) = layout.unpack(last);
    let span = max_vibration.min(layout.max_sequence()) + 1;
    // A mask for the default (a power of two), sparing the hot path a division.
    let first = if span.is_power_of_two() {
        (last_sequence + 1) & (span - 1)
    } else {
        (last_sequence + 1) % span
    };
    if now_units > last_time {
        return issue(layout, last, now_units, first);
    }
    let (next_time, next_sequence) = if last_sequence < layout.max_sequence() {
        (last_time, last_sequence + 1)
    } else {
        (last_time + 1, first)
    };
    if next_time > layout.max_time_units() {
        return Step::Exhausted;
    }
    let lead_max = policy.borrow.unwrap_or(0);
    let behind = last_time - now_units;
    if behind.saturating_sub(lead_max) > policy.tolerance_units {
        return Step::Refuse { behind_units: behind };
    }
    if next_time - now_units > lead_max {
        return Step::WaitUntil { units: next_time - lead_max };
    }
    issue(layout, last, next_time, next_sequence)
}

/// How a generator starts after a restart, given `mark_units`, the persisted time mark (no id
/// at or below it may be issued again), and the clock.
///
/// Past the mark it is [`Start::Ready`] with the state "the mark's last sequence issued", so
/// the first id lies above the mark. At or behind the mark by at most `tolerance_units` it
/// waits for the unit after the mark; further behind it refuses. Borrowing is ignored here:
/// a clock behind the mark at boot is the one moment there is no evidence it is right, so the
/// generator does not run ahead of it (Leaf refuses to start in the same case).
pub fn start_floor(
    layout: &Layout,
    mark_units: u64,
    now_units: u64,
    policy: &ClockPolicy,
) -> Start {
    if mark_units >= layout.max_time_units() {
        return Start::Exhausted;
    }
    if now_units > mark_units {
        // `mark_units` is below the largest time, so it packs.
        let last = (mark_units << layout.sequence_bits) | layout.max_sequence();
        return Start::Ready { last };
    }
    let behind = mark_units - now_units;
    if behind > policy.tolerance_units {
        Start::Refuse { behind_units: behind }
    } else {
        Start::WaitUntil { units: mark_units + 1 }
    }
}

impl TimeUnit {
    /// Milliseconds in one unit.
    pub const fn millis(self) -> u64 {
        match self {
            TimeUnit::Millis => 1,
            TimeUnit::TenMillis => 10,
            TimeUnit::Seconds => 1_000,
        }
    }

    /// Units in one second.
    pub const fn per_second(self) -> u64 {
        1_000 / self.millis()
    }

    /// The unit's short name: `ms`, `10ms` or `s`.
    pub const fn label(self) -> &'static str {
        match self {
            TimeUnit::Millis => "ms",
            TimeUnit::TenMillis => "10ms",
            TimeUnit::Seconds => "s",
        }
    }

    /// The unit named by its [`TimeUnit::label`], or `None`.
    pub fn parse(label: &str) -> Option<TimeUnit> {
        [TimeUnit::Millis, TimeUnit::TenMillis, TimeUnit::Seconds]
            .into_iter()
            .find(|unit| unit.label() == label)
    }
}

impl Layout {
    /// Checks a layout: at least one time and one sequence bit (the worker field may be
    /// empty), no field above [`LAYOUT_FIELD_BITS_MAX`] bits, at most [`LAYOUT_BITS_MAX`]
    /// bits in all, and `epoch_ms + 2^time_bits × unit` within [`LAYOUT_END_MS_MAX`].
    pub const fn new(
        time_bits: u32,
        worker_bits: u32,
        sequence_bits: u32,
        unit: TimeUnit,
        epoch_ms: u64,
    ) -> Result<Layout, LayoutError> {
        if time_bits == 0 {
            return Err(LayoutError::NoTimeBits);
        }
        if sequence_bits == 0 {
            return Err(LayoutError::NoSequenceBits);
        }
        let fields = [("time", time_bits), ("worker", worker_bits), ("sequence", sequence_bits)];
        let mut i = 0;
        while i < fields.len() {
            let (field, bits) = fields[i];
            if bits > LAYOUT_FIELD_BITS_MAX {
                return Err(LayoutError::FieldTooWide { field, bits });
            }
            i += 1;
        }
        // Each field is at most 62 bits, so the sum cannot overflow.
        if time_bits + worker_bits + sequence_bits > LAYOUT_BITS_MAX {
            return Err(LayoutError::TooWide { time_bits, worker_bits, sequence_bits });
        }
        let end_ms = match (1u64 << time_bits).checked_mul(unit.millis()) {
            Some(span_ms) => span_ms.checked_add(epoch_ms),
            None => None,
        };
        match end_ms {
            Some(end_ms) if end_ms <= LAYOUT_END_MS_MAX => {
                Ok(Layout { time_bits, worker_bits, sequence_bits, unit, epoch_ms })
            }
            _ => Err(LayoutError::TimeOverflows { time_bits, unit, epoch_ms }),
        }
    }

    /// The preset called `name` (see [`PRESETS`]), if there is one.
    pub fn preset(name: &str) -> Option<Layout> {
        PRESETS.iter().find(|(n, _)| *n == name).map(|(_, layout)| *layout)
    }

    /// Width of the time field.
    pub const fn time_bits(&self) -> u32 {
        self.time_bits
    }

    /// Width of the worker field (may be 0: one worker).
    pub const fn worker_bits(&self) -> u32 {
        self.worker_bits
    }

    /// Width of the sequence field.
    pub const fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }

    /// What one step of the time field is.
    pub const fn unit(&self) -> TimeUnit {
        self.unit
    }

    /// The wall-clock millisecond of time unit 0.
    pub const fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    /// Largest value of the time field.
    pub const fn max_time_units(&self) -> u64 {
        (1 << self.time_bits) - 1
    }

    /// Largest worker id.
    pub const fn max_worker(&self) -> u64 {
        (1 << self.worker_bits) - 1
    }

    /// Largest sequence within one unit.
    pub const fn max_sequence(&self) -> u64 {
        (1 << self.sequence_bits) - 1
    }

    /// The first wall-clock millisecond the time field cannot hold: the layout's end.
    pub const fn expires_at_ms(&self) -> u64 {
        // Checked by `new` to fit within LAYOUT_END_MS_MAX.
        self.epoch_ms + (1 << self.time_bits) * self.unit.millis()
    }

    /// The clock `now_ms` in units since the epoch (rounded down), or `None` before the
    /// epoch. Past [`Layout::expires_at_ms`] the result exceeds [`Layout::max_time_units`],
    /// and [`step`] answers [`Step::Exhausted`].
    pub const fn to_units(&self, now_ms: u64) -> Option<u64> {
        if now_ms < self.epoch_ms {
            return None;
        }
        Some((now_ms - self.epoch_ms) / self.unit.millis())
    }

    /// The wall-clock millisecond where unit `time_units` starts (what to sleep until after a
    /// [`Step::WaitUntil`]), or `None` past the largest time.
    pub const fn timestamp_ms(&self, time_units: u64) -> Option<u64> {
        if time_units > self.max_time_units() {
            return None;
        }
        Some(self.epoch_ms + time_units * self.unit.millis())
    }

    /// Most ids one worker can issue per second: `(max_sequence + 1) × units per second`
    /// (4 096 000 for `snowflake`), saturating for absurdly wide sequences.
    pub const fn ids_per_second_limit(&self) -> u64 {
        (self.max_sequence() + 1).saturating_mul(self.unit.per_second())
    }

    /// The vibration a generator of this layout uses unless configured otherwise: the
    /// largest `2^k - 1` with `2^k` at most [`VIBRATION_BITS_DEFAULT_MAX`] bits and at most
    /// a `2^-`[`VIBRATION_COST_SHIFT`] share of the unit's sequences (255 for 12 sequence
    /// bits and more, 15 for `sonyflake`'s 8, 0 for 4 or fewer). See [`step`] for why a power
    /// of two.
    pub const fn vibration_default(&self) -> u64 {
        if self.sequence_bits <= VIBRATION_COST_SHIFT {
            return 0;
        }
        let bits = self.sequence_bits - VIBRATION_COST_SHIFT;
        let bits =
            if bits < VIBRATION_BITS_DEFAULT_MAX { bits } else { VIBRATION_BITS_DEFAULT_MAX };
        (1 << bits) - 1
    }

    /// The largest `N` for which one worker's consecutive ids fall into `id % N` exactly
    /// evenly under `max_vibration` (and so into `id % M` for every `M` dividing it): the
    /// largest power of two dividing `min(max_vibration, max_sequence) + 1`. 256 for the
    /// default of `snowflake`; 1 (no promise) without vibration.
    pub const fn even_modulus(&self, max_vibration: u64) -> u64 {
        let capped =
            if max_vibration < self.max_sequence() { max_vibration } else { self.max_sequence() };
        let span = capped + 1;
        span & span.wrapping_neg()
    }

    /// Milliseconds the layout still has at `now_ms`, or why it cannot serve ids: its epoch is
    /// after `now_ms`, its time ran out, or it runs out within [`LAYOUT_LIFETIME_MS_MIN`].
    pub const fn lifetime(&self, now_ms: u64) -> Result<u64, LifetimeError> {
        if self.epoch_ms > now_ms {
            return Err(LifetimeError::EpochInFuture { epoch_ms: self.epoch_ms, now_ms });
        }
        let expires_at_ms = self.expires_at_ms();
        if expires_at_ms <= now_ms {
            return Err(LifetimeError::Expired { expires_at_ms, now_ms });
        }
        let remaining_ms = expires_at_ms - now_ms;
        if remaining_ms < LAYOUT_LIFETIME_MS_MIN {
            return Err(LifetimeError::TooShort { expires_at_ms, remaining_ms });
        }
        Ok(remaining_ms)
    }

    /// This layout with its epoch moved to `epoch_ms` (the fix a lifetime error suggests), or
    /// why that does not fit.
    pub const fn with_epoch(&self, epoch_ms: u64) -> Result<Layout, LayoutError> {
        Layout::new(self.time_bits, self.worker_bits, self.sequence_bits, self.unit, epoch_ms)
    }

    /// Whether the layout's time runs out within `horizon_ms` of `now_ms` (see
    /// [`crate::limits::LAYOUT_EXPIRY_HORIZON_MS`]), or already did.
    pub fn expiry_warning(&self, now_ms: u64, horizon_ms: u64) -> Option<ExpiryWarning> {
        let expires_at_ms = self.expires_at_ms();
        let Some(remaining_ms) = expires_at_ms.checked_sub(now_ms).filter(|r| *r > 0) else {
            return Some(ExpiryWarning::Expired { expires_at_ms });
        };
        (remaining_ms <= horizon_ms)
            .then_some(ExpiryWarning::Within { expires_at_ms, remaining_ms })
    }

    /// The id of `sequence` in unit `time_units` of `worker`, or `None` when a field is out of
    /// its range.
    pub const fn compose(&self, time_units: u64, worker: u64, sequence: u64) -> Option<u64> {
        if time_units > self.max_time_units()
            || worker > self.max_worker()
            || sequence > self.max_sequence()
        {
            return None;
        }
        let sequence_bits = self.sequence_bits;
        Some(
            (time_units << (self.worker_bits + sequence_bits))
                | (worker << sequence_bits)
                | sequence,
        )
    }

    /// The id of `worker` for the packed state `(time_units << sequence_bits) | sequence`
    /// (what [`Step::Issue`] carries), or `None` when a field is out of its range.
    pub const fn compose_packed(&self, packed: u64, worker: u64) -> Option<u64> {
        let (time_units, sequence) = self.unpack(packed);
        self.compose(time_units, worker, sequence)
    }

    /// Packs `(time_units << sequence_bits) | sequence`, the generator's state, or `None` when
    /// a field is out of its range.
    pub const fn pack(&self, time_units: u64, sequence: u64) -> Option<u64> {
        if time_units > self.max_time_units() || sequence > self.max_sequence() {
            return None;
        }
        Some((time_units << self.sequence_bits) | sequence)
    }

    /// Splits a packed state into `(time_units, sequence)`.
    pub const fn unpack(&self, packed: u64) -> (u64, u64) {
        (packed >> self.sequence_bits, packed & self.max_sequence())
    }

    /// The fields of `id`, or `None` when it has bits above the layout (the sign bit, or above
    /// a layout narrower than 63 bits): not an id of this layout.
    pub const fn decode(&self, id: u64) -> Option<Parts> {
        let low_bits = self.worker_bits + self.sequence_bits;
        if id >> (low_bits + self.time_bits) != 0 {
            return None;
        }
        let time_units = id >> low_bits;
        Some(Parts {
            time_units,
            timestamp_ms: self.epoch_ms + time_units * self.unit.millis(),
            worker: (id >> self.sequence_bits) & self.max_worker(),
            sequence: id & self.max_sequence(),
        })
    }

    /// Every id of `worker` in unit `time_units`, sequences `0..=max_sequence` in order: what
    /// the cached generator's filler puts in the ring for one unit of borrowed time. `None`
    /// when the worker or the time is out of range.
    pub fn ids_of_unit(
        &self,
        worker: u64,
        time_units: u64,
    ) -> Option<impl Iterator<Item = u64> + use<>> {
        let base = self.compose(time_units, worker, 0)?;
        // The sequence is the low field, so each id is the base with its sequence or-ed in.
        Some((0..=self.max_sequence()).map(move |sequence| base | sequence))
    }
}

impl ClockPolicy {
    /// Never wait for a clock that went back, never run ahead of it.
    pub const STRICT: ClockPolicy = ClockPolicy { tolerance_units: 0, borrow: None };

    /// The policy for `layout` from bounds in milliseconds, rounded down to whole units (so it
    /// is never laxer than asked) and capped at [`CLOCK_TOLERANCE_MS_MAX`] and
    /// [`BORROW_LEAD_MS_MAX`] (configuration may lower a limit, never raise it).
    pub fn from_ms(layout: &Layout, tolerance_ms: u64, max_lead_ms: Option<u64>) -> ClockPolicy {
        let unit_ms = layout.unit().millis();
        ClockPolicy {
            tolerance_units: tolerance_ms.min(CLOCK_TOLERANCE_MS_MAX) / unit_ms,
            borrow: max_lead_ms.map(|lead_ms| lead_ms.min(BORROW_LEAD_MS_MAX) / unit_ms),
        }
    }
}

impl fmt::Display for TimeUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl fmt::Display for Layout {
    /// `41 ms-bits / 10 worker / 12 sequence, epoch 2010-11-04T01:42:54.657Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}-bits / {} worker / {} sequence, epoch {}",
            self.time_bits,
            self.unit,
            self.worker_bits,
            self.sequence_bits,
            UtcMs(self.epoch_ms)
        )
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::NoTimeBits => f.write_str(
                "the layout has no time bits; give the time field 1 to 62 bits \
                 (snowflake uses 41 bits of milliseconds)",
            ),
            LayoutError::NoSequenceBits => f.write_str(
                "the layout has no sequence bits; give the sequence field 1 to 62 bits \
                 (snowflake uses 12)",
            ),
            LayoutError::FieldTooWide { field, bits } => {
                write!(f, "the {field} field has {bits} bits; use at most {LAYOUT_FIELD_BITS_MAX}")
            }
            LayoutError::TooWide { time_bits, worker_bits, sequence_bits } => write!(
                f,
                "time {time_bits} + worker {worker_bits} + sequence {sequence_bits} bits make \
                 {} bits; use at most {LAYOUT_BITS_MAX} in all, so the sign bit stays 0",
                time_bits + worker_bits + sequence_bits
            ),
            LayoutError::TimeOverflows { time_bits, unit, epoch_ms } => write!(
                f,
                "{time_bits} bits of {unit} from epoch {} run past the largest timestamp \
                 ({LAYOUT_END_MS_MAX} ms); use fewer time bits, a shorter unit or an earlier \
                 epoch",
                UtcMs(epoch_ms)
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

impl fmt::Display for ExpiryWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExpiryWarning::Expired { expires_at_ms } => write!(
                f,
                "the layout's time ran out at {}: it issues no ids; use a later epoch or more \
                 time bits",
                UtcMs(expires_at_ms)
            ),
            ExpiryWarning::Within { expires_at_ms, remaining_ms } => write!(
                f,
                "the layout's time runs out at {} (in {} days): plan a later epoch or more \
                 time bits before then",
                UtcMs(expires_at_ms),
                remaining_ms / 86_400_000
            ),
        }
    }
}

impl fmt::Display for UtcMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MS_PER_DAY: u64 = 86_400_000;
        let (year, month, day) = civil_from_days(self.0 / MS_PER_DAY);
        let ms_of_day = self.0 % MS_PER_DAY;
        let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
        let (second, ms) = (ms_of_day / 1_000 % 60, ms_of_day % 1_000);
        write!(f, "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{ms:03}Z")
    }
}

impl UtcMs {
    /// Midnight UTC of January 1 of the year `self` falls in: the epoch a lifetime error
    /// suggests.
    pub fn start_of_year(self) -> UtcMs {
        let (year, _, _) = civil_from_days(self.0 / 86_400_000);
        UtcMs(days_from_civil(year, 1, 1) * 86_400_000)
    }
}

impl std::str::FromStr for UtcMs {
    type Err = UtcMsError;

    /// Reads `YYYY-MM-DD` (midnight UTC), `YYYY-MM-DDTHH:MM:SSZ` or
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` (what [`UtcMs`] displays; UTC only, so a time never depends
    /// on the machine's zone, as uid-generator's epoch does), or milliseconds since 1970 as
    /// digits (CosId's epochs). Years from 1970 on.
    fn from_str(text: &str) -> Result<UtcMs, UtcMsError> {
        parse_utc_ms(text).map(UtcMs).ok_or_else(|| UtcMsError { text: text.to_string() })
    }
}

impl fmt::Display for UtcMsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a UTC time; write a date (2024-01-01), a UTC date and time \
             (2024-01-01T08:00:00Z, 2010-11-04T01:42:54.657Z) or milliseconds since 1970 \
             (1704067200000)",
            self.text
        )
    }
}

impl std::error::Error for UtcMsError {}

impl fmt::Display for LifetimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LifetimeError::EpochInFuture { epoch_ms, now_ms } => write!(
                f,
                "its epoch {} is after the clock ({}): ids count time from the epoch, so it \
                 must be in the past",
                UtcMs(epoch_ms),
                UtcMs(now_ms)
            ),
            LifetimeError::Expired { expires_at_ms, now_ms } => write!(
                f,
                "its time ran out at {}, {:.1} years ago: it issues no ids",
                UtcMs(expires_at_ms),
                (now_ms - expires_at_ms) as f64 / MS_PER_YEAR as f64
            ),
            LifetimeError::TooShort { expires_at_ms, remaining_ms } => write!(
                f,
                "its time runs out at {}, in {} days; a layout must last at least {} days",
                UtcMs(expires_at_ms),
                remaining_ms / 86_400_000,
                LAYOUT_LIFETIME_MS_MIN / 86_400_000
            ),
        }
    }
}

impl std::error::Error for LifetimeError {}

/// A preset checked at compile time: an invalid one fails the build.
const fn preset(
    time_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
    unit: TimeUnit,
    epoch_ms: u64,
) -> Layout {
    match Layout::new(time_bits, worker_bits, sequence_bits, unit, epoch_ms) {
        Ok(layout) => layout,
        Err(_) => panic!("invalid preset layout"),
    }
}

/// Issues `(time, sequence)` after `last`, or reports the time field full.
fn issue(layout: &Layout, last: u64, time_units: u64, sequence: u64) -> Step {
    let Some(packed) = layout.pack(time_units, sequence) else {
        return Step::Exhausted;
    };
    // Crash before duplicating: a state at or below the last one could repeat an id.
    assert!(packed > last, "snowflake step went from {last:#x} to {packed:#x}");
    Step::Issue { packed }
}

/// The proleptic Gregorian `(year, month, day)` of day `days` since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, unsigned since idmint's times are never before 1970).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift to 0000-03-01, so a year ends with February and its leap day.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

/// Days from 1970-01-01 to `year-month-day` (Howard Hinnant's `days_from_civil`, unsigned:
/// years from 1970 on), the inverse of [`civil_from_days`].
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The millisecond `text` names (see `UtcMs`'s `FromStr`), or `None`.
fn parse_utc_ms(text: &str) -> Option<u64> {
    if !text.is_empty() && text.len() <= 19 && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok().filter(|ms| *ms <= LAYOUT_END_MS_MAX);
    }
    let number = |part: &str, len: usize| {
        (part.len() == len && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse::<u64>().ok())
            .flatten()
    };
    let (date, time) = match text.split_once('T') {
        Some((date, time)) => (date, Some(time.strip_suffix('Z')?)),
        None => (text, None),
    };
    let mut fields = date.split('-');
    let year = number(fields.next()?, 4)?;
    let month = number(fields.next()?, 2)?;
    let day = number(fields.next()?, 2)?;
    if fields.next().is_some() || year < 1970 || !(1..=12).contains(&month) {
        return None;
    }
    let month_days = match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=month_days).contains(&day) {
        return None;
    }
    let mut ms = days_from_civil(year, month, day) * 86_400_000;
    if let Some(time) = time {
        let (clock, fraction) = match time.split_once('.') {
            Some((clock, fraction)) => (clock, Some(number(fraction, 3)?)),
            None => (time, None),
        };
        let mut fields = clock.split(':');
        let hour = number(fields.next()?, 2).filter(|h| *h < 24)?;
        let minute = number(fields.next()?, 2).filter(|m| *m < 60)?;
        let second = number(fields.next()?, 2).filter(|s| *s < 60)?;
        if fields.next().is_some() {
            return None;
        }
        ms += ((hour * 60 + minute) * 60 + second) * 1_000 + fraction.unwrap_or(0);
    }
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{ID_MAX, LAYOUT_EXPIRY_HORIZON_MS};

    fn layout(time: u32, worker: u32, sequence: u32) -> Layout {
        Layout::new(time, worker, sequence, TimeUnit::Millis, 0).expect("valid layout")
    }

    fn is_leap(year: u64) -> bool {
        (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
    }

    fn month_len(year: u64, month: u64) -> u64 {
        match month {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    /// Days from 1970-01-01 to `year-month-day`, by counting: an oracle independent of
    /// `civil_from_days`.
    fn days_by_counting(year: u64, month: u64, day: u64) -> u64 {
        let years: u64 = (1970..year).map(|y| if is_leap(y) { 366 } else { 365 }).sum();
        let months: u64 = (1..month).map(|m| month_len(year, m)).sum();
        years + months + day - 1
    }

    fn utc_ms(year: u64, month: u64, day: u64) -> u64 {
        days_by_counting(year, month, day) * 86_400_000
    }

    #[test]
    fn preset_epochs_are_the_dates_they_name() {
        assert_eq!(SONYFLAKE_EPOCH_MS, utc_ms(2014, 9, 1));
        assert_eq!(UID_GENERATOR_EPOCH_MS, utc_ms(2016, 5, 20));
        assert_eq!(JS_SAFE_EPOCH_MS, utc_ms(2024, 1, 1));
        let twitter = utc_ms(2010, 11, 4) + ((60 + 42) * 60 + 54) * 1_000 + 657;
        assert_eq!(TWITTER_EPOCH_MS, twitter);
    }

    #[test]
    fn civil_dates_match_counting_for_every_day_of_five_centuries() {
        let mut days = 0;
        for year in 1970..2470 {
            for month in 1..=12 {
                for day in 1..=month_len(year, month) {
                    assert_eq!(civil_from_days(days), (year, month, day), "day {days}");
                    days += 1;
                }
            }
        }
        assert_eq!(days, days_by_counting(2470, 1, 1));
    }

    #[test]
    fn utc_timestamps_format_like_rfc_3339() {
        assert_eq!(UtcMs(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(UtcMs(TWITTER_EPOCH_MS).to_string(), "2010-11-04T01:42:54.657Z");
        assert_eq!(UtcMs(951_782_400_000).to_string(), "2000-02-29T00:00:00.000Z");
        assert_eq!(UtcMs(951_868_799_999).to_string(), "2000-02-29T23:59:59.999Z");
        assert_eq!(UtcMs(i64::MAX as u64).to_string(), "292278994-08-17T07:12:55.807Z");
    }

    #[test]
    fn presets_display_their_fields_and_epoch() {
        let shown: Vec<String> = PRESETS.iter().map(|(_, l)| l.to_string()).collect();
        assert_eq!(
            shown,
            [
                "41 ms-bits / 10 worker / 12 sequence, epoch 2010-11-04T01:42:54.657Z",
                "39 10ms-bits / 16 worker / 8 sequence, epoch 2014-09-01T00:00:00.000Z",
                "28 s-bits / 22 worker / 13 sequence, epoch 2016-05-20T00:00:00.000Z",
                "32 s-bits / 8 worker / 13 sequence, epoch 2024-01-01T00:00:00.000Z",
            ]
        );
        assert_eq!(Layout::preset("snowflake"), Some(PRESETS[0].1));
        assert_eq!(Layout::preset("js-safe").map(|l| l.time_bits()), Some(32));
        assert_eq!(Layout::preset("Snowflake"), None);
    }

    #[test]
    fn a_leaf_id_decodes_as_leaf_decodes_it() {
        // Leaf: timestamp = (id >> 22) + twepoch, workerId = (id >> 12) & 0x3ff,
        // sequenceId = id & 0xfff.
        let snowflake = Layout::preset("snowflake").expect("preset");
        let id = 1_419_040_589_484_425_278u64;
        let parts = snowflake.decode(id).expect("a snowflake id");
        assert_eq!(parts.timestamp_ms, (id >> 22) + TWITTER_EPOCH_MS);
        assert_eq!(parts.worker, (id >> 12) & 0x3ff);
        assert_eq!(parts.sequence, id & 0xfff);
        assert_eq!(snowflake.compose(parts.time_units, parts.worker, parts.sequence), Some(id));
        assert_eq!(snowflake.decode(1 << 63), None, "the sign bit is never set");
        let js = Layout::preset("js-safe").expect("preset");
        assert_eq!(js.decode(1 << 53), None, "past 53 bits");
        assert!(
            js.compose(js.max_time_units(), js.max_worker(), js.max_sequence()) < Some(1 << 53)
        );
    }

    #[test]
    fn bad_layouts_are_refused_with_the_fix() {
        let new = |t, w, s| Layout::new(t, w, s, TimeUnit::Millis, 0);
        assert_eq!(new(0, 10, 12), Err(LayoutError::NoTimeBits));
        assert_eq!(new(41, 10, 0), Err(LayoutError::NoSequenceBits));
        assert_eq!(new(63, 0, 1), Err(LayoutError::FieldTooWide { field: "time", bits: 63 }));
        assert_eq!(new(1, 80, 1), Err(LayoutError::FieldTooWide { field: "worker", bits: 80 }));
        let too_wide = new(42, 10, 12);
        assert_eq!(
            too_wide,
            Err(LayoutError::TooWide { time_bits: 42, worker_bits: 10, sequence_bits: 12 })
        );
        let message = too_wide.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("64 bits") && message.contains("at most 63"), "{message}");
        assert!(new(62, 0, 1).is_ok(), "62 bits of ms fit in i64 ms");
        // 2^62 ms from 2^62 - 1 end exactly at i64::MAX; one ms later does not fit.
        let last_epoch_ms = (1 << 62) - 1;
        let at_the_end = Layout::new(62, 0, 1, TimeUnit::Millis, last_epoch_ms);
        assert_eq!(at_the_end.map(|l| l.expires_at_ms()), Ok(i64::MAX as u64));
        let late = Layout::new(62, 0, 1, TimeUnit::Millis, last_epoch_ms + 1);
        assert!(matches!(late, Err(LayoutError::TimeOverflows { .. })));
        let seconds = Layout::new(62, 0, 1, TimeUnit::Seconds, 0);
        assert!(matches!(seconds, Err(LayoutError::TimeOverflows { .. })));
        assert!(layout(1, 0, 1).max_worker() == 0, "no worker bits: one worker");
    }

    #[test]
    fn limits_and_expiry_follow_from_the_fields() {
        let snowflake = Layout::preset("snowflake").expect("preset");
        assert_eq!(snowflake.ids_per_second_limit(), 4_096_000);
        assert_eq!((snowflake.max_worker(), snowflake.max_sequence()), (1_023, 4_095));
        assert_eq!(UtcMs(snowflake.expires_at_ms()).to_string(), "2080-07-10T17:30:30.209Z");
        let uid = Layout::preset("uid").expect("preset");
        assert_eq!(uid.ids_per_second_limit(), 8_192);
        assert_eq!(UtcMs(uid.expires_at_ms()).to_string(), "2024-11-20T21:24:16.000Z");
        let now = utc_ms(2026, 1, 1);
        let expired = uid.expiry_warning(now, LAYOUT_EXPIRY_HORIZON_MS);
        assert_eq!(expired, Some(ExpiryWarning::Expired { expires_at_ms: uid.expires_at_ms() }));
        assert_eq!(snowflake.expiry_warning(now, LAYOUT_EXPIRY_HORIZON_MS), None);
        let soon = snowflake.expiry_warning(utc_ms(2075, 1, 1), LAYOUT_EXPIRY_HORIZON_MS);
        assert!(matches!(soon, Some(ExpiryWarning::Within { .. })), "{soon:?}");
        let sonyflake = Layout::preset("sonyflake").expect("preset");
        assert_eq!(sonyflake.ids_per_second_limit(), 25_600);
        assert_eq!(sonyflake.to_units(SONYFLAKE_EPOCH_MS - 1), None);
        assert_eq!(sonyflake.to_units(SONYFLAKE_EPOCH_MS + 25), Some(2));
        assert_eq!(sonyflake.timestamp_ms(2), Some(SONYFLAKE_EPOCH_MS + 20));
        assert_eq!(sonyflake.timestamp_ms(sonyflake.max_time_units() + 1), None);
        assert!(snowflake.compose(snowflake.max_time_units(), 1_023, 4_095) == Some(ID_MAX));
        assert_eq!(snowflake.compose(0, 1_024, 0), None);
    }

    #[test]
    fn the_sequence_runs_then_waits_for_the_next_unit() {
        let l = layout(10, 0, 2);
        let strict = ClockPolicy::STRICT;
        let mut last = 0;
        let mut issued = Vec::new();
        for _ in 0..3 {
            let Step::Issue { packed } = step(&l, last, 5, &strict, 0) else { panic!("issue") };
            issued.push(l.unpack(packed));
            last = packed;
        }
        assert_eq!(issued, [(5, 0), (5, 1), (5, 2)]);
        let Step::Issue { packed } = step(&l, last, 5, &strict, 0) else { panic!("issue") };
        assert_eq!(l.unpack(packed), (5, 3));
        assert_eq!(step(&l, packed, 5, &strict, 0), Step::WaitUntil { units: 6 });
        let borrowing = ClockPolicy { tolerance_units: 0, borrow: Some(1) };
        assert_eq!(step(&l, packed, 5, &borrowing, 0), Step::Issue { packed: 6 << 2 });
    }

    #[test]
    fn a_clock_behind_is_waited_out_within_tolerance_and_refused_beyond() {
        let l = layout(10, 0, 4);
        let last = l.pack(100, 3).expect("packs");
        let policy = ClockPolicy { tolerance_units: 2, borrow: None };
        assert_eq!(step(&l, last, 98, &policy, 0), Step::WaitUntil { units: 100 });
        assert_eq!(step(&l, last, 97, &policy, 0), Step::Refuse { behind_units: 3 });
        assert_eq!(step(&l, last, 97, &ClockPolicy::STRICT, 0), Step::Refuse { behind_units: 3 });
        // Borrowing carries on at the last time, then past it, up to the lead.
        let borrowing = ClockPolicy { tolerance_units: 2, borrow: Some(3) };
        assert_eq!(step(&l, last, 97, &borrowing, 0), Step::Issue { packed: last + 1 });
        let spent = l.pack(100, 15).expect("packs");
        assert_eq!(step(&l, spent, 97, &borrowing, 0), Step::WaitUntil { units: 98 });
        let next_unit = l.pack(101, 0).expect("packs");
        assert_eq!(step(&l, spent, 98, &borrowing, 0), Step::Issue { packed: next_unit });
        assert_eq!(step(&l, spent, 94, &borrowing, 0), Step::Refuse { behind_units: 6 });
    }

    #[test]
    fn first_sequences_vibrate_at_a_low_rate() {
        let l = layout(20, 0, 4);
        let mut last = 0;
        let mut firsts = Vec::new();
        for now in 1..=9 {
            let Step::Issue { packed } = step(&l, last, now, &ClockPolicy::STRICT, 3) else {
                panic!("issue")
            };
            firsts.push(l.unpack(packed).1);
            last = packed;
        }
        assert_eq!(firsts, [1, 2, 3, 0, 1, 2, 3, 0, 1]);
        // A vibration above the largest sequence is capped at it.
        let tiny = layout(20, 0, 1);
        let spent = tiny.pack(4, 1).expect("packs");
        assert_eq!(
            step(&tiny, spent, 5, &ClockPolicy::STRICT, 100),
            Step::Issue { packed: 5 << 1 }
        );
    }

    #[test]
    fn utc_times_read_back_what_they_display() {
        for ms in [0, TWITTER_EPOCH_MS, UID_GENERATOR_EPOCH_MS, 951_868_799_999, 4_102_444_800_000]
        {
            let shown = UtcMs(ms).to_string();
            assert_eq!(shown.parse::<UtcMs>(), Ok(UtcMs(ms)), "{shown}");
        }
        assert_eq!("2016-05-20".parse::<UtcMs>(), Ok(UtcMs(UID_GENERATOR_EPOCH_MS)));
        assert_eq!("2024-01-01T00:00:00Z".parse::<UtcMs>(), Ok(UtcMs(JS_SAFE_EPOCH_MS)));
        assert_eq!("1577203200000".parse::<UtcMs>(), Ok(UtcMs(1_577_203_200_000)));
        let refused = [
            "",
            "2016-5-20",
            "2016-02-30",
            "2015-02-29",
            "1969-12-31",
            "2016-05-20T00:00:00",
            "2016-05-20T24:00:00Z",
            "2016-05-20T00:00:00+08:00",
            "2016-05-20T00:00:00.5Z",
            "-5",
            "2016-05-20 00:00:00Z",
            "99999999999999999999",
        ];
        for text in refused {
            let error = text.parse::<UtcMs>().expect_err(text);
            assert!(error.to_string().contains("2024-01-01T08:00:00Z"), "{error}");
        }
        assert_eq!(UtcMs(utc_ms(2026, 11, 26) + 5).start_of_year(), UtcMs(utc_ms(2026, 1, 1)));
        assert_eq!(TimeUnit::parse("10ms"), Some(TimeUnit::TenMillis));
        assert_eq!(TimeUnit::parse("sec"), None);
    }

    #[test]
    fn the_default_vibration_is_a_power_of_two_span_costing_a_sixteenth_at_most() {
        let default = |name| {
            Layout::preset(name)
                .map(|l| (l.vibration_default(), l.even_modulus(l.vibration_default())))
        };
        assert_eq!(default("snowflake"), Some((255, 256)));
        assert_eq!(default("sonyflake"), Some((15, 16)));
        assert_eq!(default("uid"), Some((255, 256)));
        assert_eq!(layout(20, 0, 4).vibration_default(), 0);
        assert_eq!(layout(20, 0, 5).vibration_default(), 1);
        for bits in 1..=30 {
            let l = layout(20, 0, bits);
            let v = l.vibration_default();
            assert!((v + 1).is_power_of_two() && v <= l.max_sequence() / 16, "{bits}: {v}");
        }
        let snowflake = Layout::preset("snowflake").expect("preset");
        assert_eq!(snowflake.even_modulus(0), 1);
        assert_eq!(snowflake.even_modulus(99), 4, "Leaf's 100 first sequences: id % 4 only");
        assert_eq!(snowflake.even_modulus(100_000), 4_096, "capped at the sequence field");
    }

    #[test]
    fn a_layout_serves_only_from_its_epoch_until_a_year_before_it_runs_out() {
        let now = utc_ms(2026, 11, 26);
        let uid = Layout::preset("uid").expect("preset");
        let expired = uid.lifetime(now).expect_err("uid ran out in 2024");
        assert_eq!(
            expired,
            LifetimeError::Expired { expires_at_ms: uid.expires_at_ms(), now_ms: now }
        );
        assert!(
            expired.to_string().contains("2024-11-20T21:24:16.000Z, 2.0 years ago"),
            "{expired}"
        );
        let fixed = uid.with_epoch(UtcMs(now).start_of_year().0).expect("fits");
        assert_eq!(UtcMs(fixed.expires_at_ms()).to_string(), "2034-07-04T21:24:16.000Z");
        assert!(fixed.lifetime(now).is_ok());
        let future = uid.with_epoch(now + 1).expect("fits").lifetime(now);
        assert!(matches!(future, Err(LifetimeError::EpochInFuture { .. })), "{future:?}");
        // 2^25 s is 388 days: from an epoch 30 days back, 358 days remain, below the year.
        let short = Layout::new(25, 0, 1, TimeUnit::Seconds, now - 30 * 86_400_000).expect("fits");
        let error = short.lifetime(now).expect_err("too short");
        assert!(
            error.to_string().contains("in 358 days; a layout must last at least 365"),
            "{error}"
        );
        assert_eq!(Layout::preset("snowflake").map(|l| l.lifetime(now).is_ok()), Some(true));
    }

    #[test]
    fn the_end_of_time_issues_nothing() {
        let l = layout(3, 0, 1);
        let last = l.pack(7, 1).expect("packs");
        assert_eq!(step(&l, last, 7, &ClockPolicy::STRICT, 0), Step::Exhausted);
        assert_eq!(step(&l, 0, 8, &ClockPolicy::STRICT, 0), Step::Exhausted);
        assert_eq!(start_floor(&l, 7, 9, &ClockPolicy::STRICT), Start::Exhausted);
    }

    #[test]
    fn a_restart_issues_only_above_the_mark() {
        let l = layout(20, 0, 4);
        let policy = ClockPolicy { tolerance_units: 2, borrow: Some(50) };
        let Start::Ready { last } = start_floor(&l, 100, 101, &policy) else { panic!("ready") };
        assert_eq!(step(&l, last, 101, &policy, 0), Step::Issue { packed: 101 << 4 });
        assert_eq!(start_floor(&l, 100, 100, &policy), Start::WaitUntil { units: 101 });
        assert_eq!(start_floor(&l, 100, 98, &policy), Start::WaitUntil { units: 101 });
        assert_eq!(start_floor(&l, 100, 97, &policy), Start::Refuse { behind_units: 3 });
    }

    #[test]
    fn policies_from_milliseconds_round_down_and_are_capped() {
        let uid = Layout::preset("uid").expect("preset");
        assert_eq!(
            ClockPolicy::from_ms(&uid, 999, Some(2_500)),
            ClockPolicy { tolerance_units: 0, borrow: Some(2) }
        );
        let snowflake = Layout::preset("snowflake").expect("preset");
        let capped = ClockPolicy::from_ms(&snowflake, u64::MAX, Some(u64::MAX));
        assert_eq!(
            capped,
            ClockPolicy {
                tolerance_units: CLOCK_TOLERANCE_MS_MAX,
                borrow: Some(BORROW_LEAD_MS_MAX)
            }
        );
    }

    #[test]
    fn ids_of_a_unit_cover_its_sequences_in_order() {
        let l = Layout::new(10, 3, 3, TimeUnit::Seconds, 0).expect("valid");
        let ids: Vec<u64> = l.ids_of_unit(5, 9).expect("in range").collect();
        let expected: Vec<u64> = (0..8).filter_map(|s| l.compose(9, 5, s)).collect();
        assert_eq!(ids, expected);
        assert!(l.ids_of_unit(8, 9).is_none());
        assert!(l.ids_of_unit(0, 1 << 10).is_none());
    }
}
