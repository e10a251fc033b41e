//! Every bound of the client, as a named constant, tied to its neighbours and to the
//! engine's limits by `const _: () = assert!(…)`. The builder may lower a limit, never raise
//! it. This file holds numbers only.

use idmint_core::limits::{
    BATCH_COUNT_MAX, REFILL_WAIT_MS_MAX, SEGMENT_DURATION_S_MAX, SEGMENT_DURATION_S_MIN,
    STORE_CALL_TIMEOUT_MS_MAX,
};

/// Most servers one client is given.
pub const ENDPOINTS_MAX: usize = 16;

/// Bound on one call to one server (connect, send, answer), unless the builder sets another.
pub const CALL_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// Shortest per-call timeout the builder accepts.
pub const CALL_TIMEOUT_MS_MIN: u64 = 10;
/// Longest per-call timeout the builder accepts.
pub const CALL_TIMEOUT_MS_MAX: u64 = 5_000;

/// Servers one call tries (a gRPC attempt and its HTTP fallback count as two) before it
/// fails with `ClientError::Unavailable`.
pub const CALL_ATTEMPTS_MAX: u32 = 3;

/// Bound on one call with all its attempts: `CALL_ATTEMPTS_MAX ×` the per-call timeout, at
/// most this.
pub const CALL_DEADLINE_MS_MAX: u64 = 8_000;

/// What the engine's store-call bound (and its refill wait) adds to a call's deadline, so
/// the engine never cancels an allocation the client's own bounds would have ended.
pub const STORE_CALL_MARGIN_MS: u64 = 500;

/// How long a server that failed is tried last at first; doubles with every failure in a
/// row.
pub const DOWN_BACKOFF_MS_MIN: u64 = 250;
/// Longest a failed server is tried last before it gets its place back.
pub const DOWN_BACKOFF_MS_MAX: u64 = 10_000;

/// Fewest ids one lease holds unless the builder sets another: the engine's tag step.
pub const MIN_LEASE_DEFAULT: u64 = 1_000;

/// How long one lease should last at the measured rate unless the builder sets another:
/// the adaptive lease size is `rate × duration` within `[min_lease, BATCH_COUNT_MAX]`,
/// growing at most ×2 per lease (the engine's `STEP_GROWTH_MAX`).
pub const LEASE_DURATION_S_DEFAULT: u64 = 10;
/// Longest lease duration the builder accepts.
pub const LEASE_DURATION_S_MAX: u64 = 3_600;

/// Leases of one tag kept for the next allocations when a server answers several ranges.
/// Beyond it a range is dropped (wasted, never repeated).
pub const QUEUED_LEASES_MAX: usize = 4;

/// Leases of one tag remembered (with the server that gave each) for the give-back at
/// close. The unissued tail spans at most the engine's two segments.
pub const RECENT_LEASES_MAX: usize = 8;

/// Rounds of one allocation: leases below the ids this client already served (a server
/// that took over after a failover) are skipped, a server's smaller batch limit is learnt;
/// then the allocation fails with an unavailable error.
pub const ALLOCATE_ROUNDS_MAX: u32 = 16;

/// Smallest snowflake batch fetched for the local cache.
pub const SNOWFLAKE_BATCH_MIN: u64 = 16;
/// Largest snowflake batch fetched for the local cache.
pub const SNOWFLAKE_BATCH_MAX: u64 = 10_000;
/// Snowflake ids older than this are dropped from the cache unserved, so an id's time
/// stays close to when it is handed out. A batch used up in a quarter of it doubles the
/// next batch; one that expires halves it.
pub const SNOWFLAKE_TTL_MS: u64 = 1_000;

/// Most ids one `stream_ids` call yields (the server's StreamIds bound).
pub const STREAM_COUNT_MAX: u64 = 1_000_000_000;
/// Ids per message asked of StreamIds.
pub const STREAM_CHUNK_IDS: u64 = 10_000;
/// Times a stream that broke off is opened again (on another server) for the ids still due.
pub const STREAM_REOPENS_MAX: u32 = 3;

/// Largest gRPC message the client decodes (a batch of `BATCH_COUNT_MAX` texts).
pub const GRPC_MESSAGE_BYTES_MAX: usize = 16 << 20;

/// Longest bearer token accepted.
pub const TOKEN_LEN_MAX: usize = 1_024;

const _: () = assert!(CALL_TIMEOUT_MS_MIN <= CALL_TIMEOUT_MS_DEFAULT);
const _: () = assert!(CALL_TIMEOUT_MS_DEFAULT <= CALL_TIMEOUT_MS_MAX);
const _: () = assert!(CALL_TIMEOUT_MS_MAX <= CALL_DEADLINE_MS_MAX);
const _: () = assert!(CALL_ATTEMPTS_MAX >= 2);
// The engine's bounds hold a whole call: its store timeout and refill wait are set to the
// call deadline plus the margin, within what the engine accepts.
const _: () = assert!(CALL_DEADLINE_MS_MAX + STORE_CALL_MARGIN_MS <= STORE_CALL_TIMEOUT_MS_MAX);
const _: () = assert!(CALL_DEADLINE_MS_MAX + STORE_CALL_MARGIN_MS <= REFILL_WAIT_MS_MAX);
const _: () = assert!(DOWN_BACKOFF_MS_MIN <= DOWN_BACKOFF_MS_MAX);
const _: () = assert!(1 <= MIN_LEASE_DEFAULT && MIN_LEASE_DEFAULT <= BATCH_COUNT_MAX);
const _: () = assert!(SEGMENT_DURATION_S_MIN <= LEASE_DURATION_S_DEFAULT);
const _: () = assert!(LEASE_DURATION_S_DEFAULT <= LEASE_DURATION_S_MAX);
const _: () = assert!(LEASE_DURATION_S_MAX <= SEGMENT_DURATION_S_MAX);
const _: () = assert!(QUEUED_LEASES_MAX >= 1 && RECENT_LEASES_MAX >= 2);
const _: () = assert!(SNOWFLAKE_BATCH_MIN <= SNOWFLAKE_BATCH_MAX);
const _: () = assert!(SNOWFLAKE_BATCH_MAX <= BATCH_COUNT_MAX);
const _: () = assert!(STREAM_CHUNK_IDS <= BATCH_COUNT_MAX && BATCH_COUNT_MAX <= STREAM_COUNT_MAX);
// Texts of a full batch: at most 128 bytes per public id, plus framing.
const _: () = assert!(GRPC_MESSAGE_BYTES_MAX as u64 >= BATCH_COUNT_MAX * 160);
