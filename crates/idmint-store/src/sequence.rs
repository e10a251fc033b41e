//! Sequences' durable side: the [`SequenceStore`] trait, its definitions and the ceilings.
//!
//! A sequence is served from Redis (`idmint`'s sequence engine), but what makes it safe is
//! here, in the SQL store: the **ceiling** `max_value` of each `(name, period)` that no id
//! may pass. It only grows, in one atomic statement per raise, and it is written here before
//! Redis is told, so after any loss in Redis the engine can reseed above everything that
//! could have been handed out.
//!
//! Tables (created when absent, never altered): [`SEQUENCES_TABLE`] holds one row per
//! sequence (name, daily or not, output format, time zone, creation time);
//! [`CEILINGS_TABLE`] one row per `(name, period)`: `period` is `""` for a plain sequence
//! and the day (`YYYYMMDD` in the sequence's time zone) for a daily one, which restarts at 1
//! every day. The store never reads a clock: periods and times are the caller's.

use async_trait::async_trait;
use idmint_core::Tag;

use crate::StoreError;

/// The definitions table.
pub const SEQUENCES_TABLE: &str = "idmint_sequences";
/// The ceilings table.
pub const CEILINGS_TABLE: &str = "idmint_sequence_ceilings";
/// Most sequences one store holds (they are listed and checked whole).
pub const SEQUENCE_COUNT_MAX: usize = 10_000;
/// Longest output format, in bytes.
pub const SEQUENCE_FORMAT_LEN_MAX: usize = 128;
/// Longest time-zone name, in bytes (IANA names are shorter).
pub const TIME_ZONE_LEN_MAX: usize = 64;
/// Longest period, in bytes (`YYYYMMDD` is 8).
pub const PERIOD_LEN_MAX: usize = 16;
/// Largest ceiling: ids stay below `i64::MAX` so they fit a signed `BIGINT`.
pub const CEILING_MAX: u64 = i64::MAX as u64;

/// What `idmint seq create` defines. The name follows the tag rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceSpec {
    /// The sequence's name.
    pub name: Tag,
    /// Restart at 1 every day (in `time_zone`).
    pub daily: bool,
    /// The output format (e.g. `{date:%Y%m%d}{seq:06}`); `None`: the plain number.
    pub format: Option<String>,
    /// The time zone whose days a daily sequence follows, and its formatted dates use
    /// (`UTC`, an IANA name, or a fixed offset such as `+08:00`).
    pub time_zone: String,
    /// When it was created, in ms since the Unix epoch (the caller's clock).
    pub created_ms: u64,
}

/// A stored sequence definition.
pub type SequenceRecord = SequenceSpec;

/// Where sequence definitions and ceilings live: the same database as the segments.
///
/// [`raise_ceiling`](SequenceStore::raise_ceiling) is one atomic statement, so nodes that
/// raise at once each get a distinct, larger ceiling and none is lost.
#[async_trait]
pub trait SequenceStore: Send + Sync + 'static {
    /// Creates a sequence; refuses an existing name ([`StoreError::InvalidValue`] naming
    /// it) and more than [`SEQUENCE_COUNT_MAX`] sequences.
    async fn create_sequence(&self, spec: &SequenceSpec) -> Result<SequenceRecord, StoreError>;

    /// The definition of `name`, if it exists.
    async fn get_sequence(&self, name: &Tag) -> Result<Option<SequenceRecord>, StoreError>;

    /// Every definition, ordered by name.
    async fn list_sequences(&self) -> Result<Vec<SequenceRecord>, StoreError>;

    /// Deletes the definition of `name`; [`StoreError::TagNotFound`] when there is none.
    /// Its ceilings stay: a sequence created again under the name continues above every
    /// number the old one could have served (a Redis counter the deleting node could not
    /// remove may still hold them), instead of starting at 1 and repeating them.
    async fn delete_sequence(&self, name: &Tag) -> Result<(), StoreError>;

    /// The ceiling of `(name, period)`: 0 when it was never raised.
    async fn ceiling(&self, name: &Tag, period: &str) -> Result<u64, StoreError>;

    /// Raises the ceiling of `(name, period)` by `by` (≥ 1) in one atomic statement and
    /// returns the new ceiling; a missing row starts from 0. Refuses with
    /// [`StoreError::InvalidValue`] a raise past [`CEILING_MAX`], leaving it unchanged.
    async fn raise_ceiling(&self, name: &Tag, period: &str, by: u64) -> Result<u64, StoreError>;
}

/// Refuses a spec outside the bounds, before any store is asked.
pub(crate) fn check_spec(spec: &SequenceSpec) -> Result<(), StoreError> {
    if let Some(format) = &spec.format
        && (format.is_empty() || format.len() > SEQUENCE_FORMAT_LEN_MAX)
    {
        return Err(StoreError::InvalidValue(format!(
            "a format of {} bytes; use 1 to {SEQUENCE_FORMAT_LEN_MAX}",
            format.len()
        )));
    }
    if spec.time_zone.is_empty() || spec.time_zone.len() > TIME_ZONE_LEN_MAX {
        return Err(StoreError::InvalidValue(format!(
            "time zone {:?}: use a name of 1 to {TIME_ZONE_LEN_MAX} bytes",
            spec.time_zone
        )));
    }
    if spec.created_ms > CEILING_MAX {
        return Err(StoreError::InvalidValue(format!(
            "created_ms {} is too large",
            spec.created_ms
        )));
    }
    Ok(())
}

/// Refuses a period or raise outside the bounds, before any store is asked.
pub(crate) fn check_raise(period: &str, by: u64) -> Result<(), StoreError> {
    check_period(period)?;
    if by == 0 || by > CEILING_MAX {
        return Err(StoreError::InvalidValue(format!(
            "a ceiling raise of {by}; use 1 to {CEILING_MAX}"
        )));
    }
    Ok(())
}

/// Refuses a period that is not `""` or up to [`PERIOD_LEN_MAX`] ASCII digits.
pub(crate) fn check_period(period: &str) -> Result<(), StoreError> {
    if period.len() > PERIOD_LEN_MAX || !period.bytes().all(|b| b.is_ascii_digit()) {
        return Err(StoreError::InvalidValue(format!(
            "period {period:?}: use \"\" or up to {PERIOD_LEN_MAX} digits (YYYYMMDD)"
        )));
    }
    Ok(())
}

/// The refusal of a raise that would pass [`CEILING_MAX`], given the ceiling as read (or
/// why it could not be read, which is the answer then).
pub(crate) fn ceiling_overflow(
    name: &Tag,
    period: &str,
    current: Result<u64, StoreError>,
    by: u64,
) -> StoreError {
    match current {
        Ok(current) => StoreError::InvalidValue(format!(
            "sequence {name} (period {period:?}): raising the ceiling {current} by {by} passes \
             {CEILING_MAX}; the sequence has run out"
        )),
        Err(error) => error,
    }
}

/// The refusal of a second sequence of one name.
pub(crate) fn sequence_exists(name: &Tag) -> StoreError {
    StoreError::InvalidValue(format!(
        "sequence {name} already exists; pick another name or delete it with `idmint seq \
         delete {name}`"
    ))
}

/// Refuses a sequence past [`SEQUENCE_COUNT_MAX`] in a store that holds `count`.
pub(crate) fn check_sequence_count(count: i64) -> Result<(), StoreError> {
    if usize::try_from(count).is_ok_and(|count| count >= SEQUENCE_COUNT_MAX) {
        return Err(StoreError::InvalidValue(format!(
            "the store holds {SEQUENCE_COUNT_MAX} sequences, the most it may; delete one first"
        )));
    }
    Ok(())
}

/// A definition row as the SQL backends read it: name, daily (0 or 1), format, time zone
/// and `created_ms`.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) type DefinitionColumns = (String, i64, Option<String>, String, i64);

/// A definition as the SQL backends store it, or why the row cannot be served.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn stored_sequence(
    (name, daily, format, time_zone, created_ms): DefinitionColumns,
) -> Result<SequenceRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        tag: name.clone(),
        reason: format!("in table {SEQUENCES_TABLE}: {reason}"),
    };
    Ok(SequenceSpec {
        name: Tag::from_stored(&name).map_err(|e| corrupt(e.to_string()))?,
        daily: daily != 0,
        format,
        time_zone,
        created_ms: u64::try_from(created_ms)
            .map_err(|_| corrupt(format!("created_ms is negative ({created_ms})")))?,
    })
}

/// A stored ceiling (`None`: no row, a ceiling never raised, 0), or why the row cannot be
/// served: a negative one would let ids repeat.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn stored_ceiling(
    name: &Tag,
    period: &str,
    value: Option<i64>,
) -> Result<u64, StoreError> {
    let Some(value) = value else { return Ok(0) };
    u64::try_from(value).map_err(|_| StoreError::Corrupt {
        tag: name.to_string(),
        reason: format!(
            "in table {CEILINGS_TABLE}, period {period:?}: max_value is negative ({value})"
        ),
    })
}

/// `value` as a `BIGINT` column holds it. Every value written is bounded by [`CEILING_MAX`]
/// (`i64::MAX`) by the checks above before it gets here.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn bigint(value: u64) -> i64 {
    // Not a silent wrap: a value past i64::MAX would be a broken bound, and writing it
    // negative could lower a ceiling.
    i64::try_from(value).unwrap_or_else(|_| panic!("{value} does not fit a BIGINT column"))
}
