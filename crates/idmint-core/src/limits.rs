//! Every bound idmint enforces, as a named constant.
//!
//! Configuration may lower a limit, never raise it. Related bounds are tied together by
//! compile-time assertions so that changing one cannot silently break another.

/// Longest tag name, in bytes of UTF-8. Leaf's `biz_tag` is `varchar(128)`, which counts
/// characters on MySQL and PostgreSQL: 128 bytes fit every backend whatever the characters.
pub const TAG_LEN_MAX: usize = 128;

/// Longest tag description, in characters. Leaf's `description` is `varchar(256)`.
pub const DESCRIPTION_LEN_MAX: usize = 256;

/// Smallest id idmint ever hands out. Zero is never an id, so no client can mistake a
/// sentinel for one.
pub const ID_MIN: u64 = 1;

/// Largest id idmint ever hands out: ids fit a signed 64-bit integer (`BIGINT`, Java `long`).
pub const ID_MAX: u64 = i64::MAX as u64;

/// Smallest step (ids reserved per store allocation).
pub const STEP_MIN: u64 = 1;

/// Largest step. Leaf's `MAX_STEP`; bounds how many ids one allocation can strand.
pub const STEP_MAX: u64 = 1_000_000;

/// Largest factor by which the adaptive step may grow from one refill to the next (Leaf's
/// ×2): a segment is at most this many times as long as the one before it (or the tag's
/// configured step, if larger). Bounds what one burst can strand, see docs/GUARANTEES.md.
pub const STEP_GROWTH_MAX: u64 = 2;

/// Step given to a tag created without one.
pub const STEP_DEFAULT: u64 = 1_000;

/// Largest number of ids one batch request may ask for.
pub const BATCH_COUNT_MAX: u64 = 100_000;

/// Largest number of ids one lease of ranges (`/v1/segment/{tag}/ranges`, gRPC `NextRange`)
/// may ask for: a whole segment of the largest step. A lease answers a few ranges, never a
/// list of ids, so its size costs the answer nothing, and a client handing ids out of its own
/// memory at memory speed makes one call where batches would take ten.
pub const LEASE_COUNT_MAX: u64 = STEP_MAX;

/// Largest number of tags one node serves (and one store lists). Bounds memory and, later,
/// metric label cardinality.
pub const TAG_COUNT_MAX: usize = 10_000;

/// How long a node answers `unknown_tag` for a name the store did not hold without asking
/// the store again, in milliseconds: also how long a tag created behind the node's back
/// (another node, the CLI) may wait to be served there.
pub const UNKNOWN_TAG_TTL_MS: u64 = 1_000;

/// Names a node remembers as unknown at once (bounds that memory; past it the lookup budget
/// alone bounds the store calls).
pub const UNKNOWN_TAGS_MAX: usize = 20_000;

/// Store lookups per second that may find no tag, per node: past it, names the node has not
/// seen are refused as unavailable (retryable) until the second is over. Lookups that find a
/// tag do not count.
pub const UNKNOWN_TAG_LOOKUPS_PER_S_MAX: u64 = 200;

/// Default preload point: the next segment is requested once this share of the current one
/// is used (Leaf's 10 %), in per-mille.
pub const PRELOAD_PERMILLE_DEFAULT: u32 = 100;

/// Upper bound of the preload ratio, in per-mille (request the next segment at the latest
/// when the current one is spent).
pub const PRELOAD_PERMILLE_MAX: u32 = 1_000;

/// Default bound on how long a request waits for a refill when both segments are spent.
pub const REFILL_WAIT_MS_DEFAULT: u64 = 1_000;

/// Largest configurable refill wait.
pub const REFILL_WAIT_MS_MAX: u64 = 10_000;

/// Default bound on one store call (allocation, lookup).
pub const STORE_CALL_TIMEOUT_MS_DEFAULT: u64 = 3_000;

/// Largest configurable store call timeout.
pub const STORE_CALL_TIMEOUT_MS_MAX: u64 = 30_000;

/// Longest a shutdown spends giving unissued ids back to the store, in ms: what is not
/// given back by then is skipped (a gap, never a repeat). Below the grace periods of the
/// shipped deploy files with the drain and the other store calls of a shutdown
/// (docs/deploy.md, "Shutdown").
pub const GIVE_BACK_MS_MAX: u64 = 10_000;

/// Most tags given back in one store call at shutdown: one transaction on the SQL stores,
/// so 10 000 tags cost 20 commits rather than 10 000.
pub const GIVE_BACK_BATCH_MAX: usize = 500;

/// Most give-back batches in flight at once: below the SQL stores' default pool
/// (`POOL_MAX_DEFAULT`, 10), so the shutdown leaves connections for the rest of it.
pub const GIVE_BACK_CONCURRENCY_MAX: usize = 4;

/// Default interval of the tag refresh that drops tags deleted from the store (Leaf: 60 s).
pub const TAG_REFRESH_MS_DEFAULT: u64 = 60_000;

/// Smallest configurable tag refresh interval.
pub const TAG_REFRESH_MS_MIN: u64 = 100;

/// Largest configurable tag refresh interval.
pub const TAG_REFRESH_MS_MAX: u64 = 3_600_000;

/// First delay before a failed background refill is retried.
pub const REFILL_RETRY_MS_MIN: u64 = 50;

/// Longest delay between retries of a failed background refill.
pub const REFILL_RETRY_MS_MAX: u64 = 2_000;

/// Default target lifetime of one segment, in seconds: the adaptive step sizes segments to
/// last this long at the forecast rate (Leaf: 15 minutes).
pub const SEGMENT_DURATION_S_DEFAULT: u64 = 900;

/// Shortest configurable segment duration, in seconds.
pub const SEGMENT_DURATION_S_MIN: u64 = 1;

/// Longest configurable segment duration, in seconds (one day).
pub const SEGMENT_DURATION_S_MAX: u64 = 86_400;

/// How often each tag's consumption rate is sampled, in milliseconds.
pub const RATE_SAMPLE_MS: u64 = 1_000;

/// Rates each tag keeps for its recent history (the dashboard's sparkline): one every
/// `RATE_HISTORY_EVERY_MS`, so `RATE_HISTORY_LEN` of them cover the last five minutes.
pub const RATE_HISTORY_LEN: usize = 60;

/// How often a rate is added to a tag's history, in milliseconds.
pub const RATE_HISTORY_EVERY_MS: u64 = 5_000;

const _: () = assert!(RATE_HISTORY_EVERY_MS >= RATE_SAMPLE_MS);

/// Steps of its tag a segment mark is written ahead of the range it covers, so the refills
/// after it find their mark on disk already and need no write (`pacing::mark_ahead`).
pub const MARK_LEAD_RANGES: u64 = 64;

/// Most ids a segment mark is written ahead of the end of the range it covers: what a restart
/// after `kill -9` may skip per tag above the ranges the node was given. Sixteen ranges of
/// the largest step, so a tag refilled as fast as its store answers finds its marks written
/// long before it needs them: a mark is a file rewrite and a directory sync, several
/// milliseconds on common disks, against under one for an allocation.
pub const MARK_LEAD_IDS_MAX: u64 = 16 * STEP_MAX;

// A lead covers several more ranges of any configured step, so the early write (started
// when half the lead is left) overlaps the refills instead of pacing them.
const _: () = assert!(MARK_LEAD_IDS_MAX >= 4 * STEP_MAX && MARK_LEAD_RANGES >= 2);

/// Forward jumps a refill makes past a store that went backwards before it gives up for this
/// attempt (and retries with backoff).
pub const REGRESSION_JUMPS_MAX: u32 = 3;

/// Most segments one take may draw from: the current one and, after a switch, the next.
pub const TAKE_SEGMENTS_MAX: usize = 2;

/// Bits of a snowflake-style id: everything below the sign bit, so ids stay positive as a
/// signed 64-bit integer (`BIGINT`, Java `long`).
pub const LAYOUT_BITS_MAX: u32 = 63;

/// Widest single field (time, worker or sequence) of a layout: the time and sequence fields
/// need at least one bit each, so no field can use all [`LAYOUT_BITS_MAX`].
pub const LAYOUT_FIELD_BITS_MAX: u32 = 62;

/// Latest wall-clock millisecond a layout may reach: its epoch plus its whole time range must
/// stay a valid signed 64-bit millisecond timestamp (Java `long`, what Leaf's decode returns).
pub const LAYOUT_END_MS_MAX: u64 = i64::MAX as u64;

/// A layout whose time runs out within this many years is reported (at startup, in status).
pub const LAYOUT_EXPIRY_HORIZON_YEARS: u64 = 10;

/// Milliseconds in a mean Gregorian year (365.2425 days).
pub const MS_PER_YEAR: u64 = 31_556_952_000;

/// [`LAYOUT_EXPIRY_HORIZON_YEARS`] in milliseconds.
pub const LAYOUT_EXPIRY_HORIZON_MS: u64 = LAYOUT_EXPIRY_HORIZON_YEARS * MS_PER_YEAR;

/// Shortest lifetime a layout must have left when a generator starts: a layout that runs out
/// within a year is refused (set a later epoch or more time bits), not served until it stops.
pub const LAYOUT_LIFETIME_MS_MIN: u64 = MS_PER_YEAR;

/// The default vibration (`Layout::vibration_default`) spans at most `2^8` = 256 first
/// sequences: `id % N` is then exactly even for every `N` dividing 256.
pub const VIBRATION_BITS_DEFAULT_MAX: u32 = 8;

/// The default vibration costs at most `1 / 2^4` of a unit's sequences: a unit entered by the
/// clock starts at most `max_sequence / 16` above 0 (255 of 4 096 for `snowflake`).
pub const VIBRATION_COST_SHIFT: u32 = 4;

/// Largest tolerated backward clock step a snowflake generator waits out instead of refusing
/// (ShardingSphere's default is 10 ms, Leaf's 5 ms). Bounds the wait of one request.
pub const CLOCK_TOLERANCE_MS_MAX: u64 = 1_000;

/// Largest lead a snowflake generator's borrowed (logical) time may take over the wall clock.
/// A restart has to wait out the lead, so it is kept short.
pub const BORROW_LEAD_MS_MAX: u64 = 10_000;

/// Attempts of one snowflake issue (or unit reservation) whose CAS on the generator's state
/// lost to another thread before it gives up and reports contention. Each loss is another
/// thread's id, so only a crowd of issuers can exhaust it.
pub const SNOWFLAKE_CAS_ATTEMPTS_MAX: u32 = 1_024;

/// Smallest ring of pre-made ids: a one-slot ring cannot tell "filled" from "free".
pub const RING_CAPACITY_MIN: u64 = 2;

/// Largest ring of pre-made ids (16 bytes a slot: 64 MiB). uid-generator's default is 65 536.
pub const RING_CAPACITY_MAX: u64 = 1 << 22;

/// Default fill point of the ring, in per-mille of its capacity: refill once fewer ids than
/// this remain (uid-generator's `paddingFactor`, 50 %).
pub const RING_PADDING_PERMILLE_DEFAULT: u32 = 500;

/// Attempts of one ring put or take that lost the race for its position before it gives up
/// (reported as full or empty). Each lost attempt means another thread's put or take
/// succeeded, so only a crowd of takers can exhaust it.
pub const RING_ATTEMPTS_MAX: u32 = 1_024;

/// Most takes between two checks of whether the ring needs a fill: [`crate::Ring::take_checked`]
/// reads the putters' cursor only at positions that are multiples of this (or of a sixteenth
/// of the capacity, if smaller), because that cursor's cache line is rewritten by every put
/// and reading it on each take costs a cache miss whenever the filler is putting. The fill
/// is asked for at most this many ids late, a sixteenth of uid-generator's 65 536-id ring.
pub const RING_FILL_CHECK_EVERY_MAX: u64 = 1_024;

const _: () = assert!(ID_MIN >= 1);
const _: () = assert!(STEP_MIN >= 1 && STEP_MIN <= STEP_DEFAULT && STEP_DEFAULT <= STEP_MAX);
const _: () = assert!(STEP_MAX < ID_MAX / 2);
const _: () = assert!(STEP_GROWTH_MAX >= 2 && STEP_MAX.checked_mul(STEP_GROWTH_MAX).is_some());
const _: () = assert!(BATCH_COUNT_MAX >= 1 && BATCH_COUNT_MAX <= STEP_MAX);
const _: () = assert!(BATCH_COUNT_MAX <= LEASE_COUNT_MAX && LEASE_COUNT_MAX <= STEP_MAX);
const _: () =
    assert!(PRELOAD_PERMILLE_DEFAULT >= 1 && PRELOAD_PERMILLE_DEFAULT <= PRELOAD_PERMILLE_MAX);
const _: () = assert!(REFILL_WAIT_MS_DEFAULT <= REFILL_WAIT_MS_MAX);
const _: () = assert!(STORE_CALL_TIMEOUT_MS_DEFAULT <= STORE_CALL_TIMEOUT_MS_MAX);
const _: () = assert!(GIVE_BACK_BATCH_MAX >= 1 && GIVE_BACK_CONCURRENCY_MAX >= 1);
// The whole give-back outlasts one store call, so a batch on a slow store is not cut off
// before the store could answer it.
const _: () = assert!(GIVE_BACK_MS_MAX > STORE_CALL_TIMEOUT_MS_DEFAULT);
const _: () = assert!(TAG_REFRESH_MS_MIN <= TAG_REFRESH_MS_DEFAULT);
const _: () = assert!(TAG_REFRESH_MS_DEFAULT <= TAG_REFRESH_MS_MAX);
const _: () = assert!(REFILL_RETRY_MS_MIN <= REFILL_RETRY_MS_MAX);
const _: () = assert!(
    SEGMENT_DURATION_S_MIN <= SEGMENT_DURATION_S_DEFAULT
        && SEGMENT_DURATION_S_DEFAULT <= SEGMENT_DURATION_S_MAX
);
// A cursor may overshoot a segment's end by at most (concurrent takers x LEASE_COUNT_MAX);
// ids end below 2^63, so the u64 cursor has 2^63 of headroom and cannot wrap.
const _: () = assert!(ID_MAX < u64::MAX / 2 + 1);
// Ids below the sign bit are exactly the ids idmint may hand out.
const _: () = assert!(ID_MAX == (1u64 << LAYOUT_BITS_MAX) - 1);
const _: () = assert!(LAYOUT_FIELD_BITS_MAX + 1 == LAYOUT_BITS_MAX);
const _: () = assert!(LAYOUT_END_MS_MAX <= i64::MAX as u64);
const _: () = assert!(CLOCK_TOLERANCE_MS_MAX <= REFILL_WAIT_MS_MAX);
const _: () = assert!(
    RING_CAPACITY_MIN >= 2
        && RING_CAPACITY_MIN.is_power_of_two()
        && RING_CAPACITY_MAX.is_power_of_two()
        && RING_CAPACITY_MIN <= RING_CAPACITY_MAX
);
const _: () = assert!(RING_PADDING_PERMILLE_DEFAULT <= PRELOAD_PERMILLE_MAX);
const _: () = assert!(RING_ATTEMPTS_MAX >= 1);
const _: () = assert!(SNOWFLAKE_CAS_ATTEMPTS_MAX >= 1);
const _: () = assert!(RING_FILL_CHECK_EVERY_MAX.is_power_of_two());
const _: () = assert!(LAYOUT_LIFETIME_MS_MIN < LAYOUT_EXPIRY_HORIZON_MS);
const _: () = assert!(VIBRATION_BITS_DEFAULT_MAX + VIBRATION_COST_SHIFT <= LAYOUT_FIELD_BITS_MAX);
