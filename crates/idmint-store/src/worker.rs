//! Worker ids for snowflake-style layouts: the [`LeaseStore`] trait (keyed leases, which the
//! `idmint` fence holds) and the [`WorkerStore`] trait (store-assigned ids) beside it, their
//! request and answer types, their bounds, and the lease-acquisition walk the database
//! backends share.
//!
//! Two ways to give a node its worker id, both kept in the same database as the segments:
//!
//! - **Leases** (table [`WORKERS_TABLE`](crate::WORKERS_TABLE)): a node claims the lowest free id of its *space*
//!   (the layout's name) for a TTL and renews it. Every acquisition (a first claim or a
//!   takeover) writes a new `token` and a fresh random 128-bit `holder_id`; renewing, raising
//!   the time mark and releasing all check both, so a node whose id was taken over learns it
//!   ([`StoreError::LeaseLost`]) on its next call. The token is the store's clock in
//!   microseconds at the acquisition, or one above the row's previous token when that is
//!   larger: a row deleted by hand or restored from an older backup cannot bring an earlier
//!   token back, because the store's clock has moved on since it was drawn (the one
//!   condition: the store's clock does not step back past it). The holder id, drawn from the
//!   CSPRNG, holds even then. An expired id is reused only once
//!   `expires_ms + margin_ms < now` on the store's clock, and its new owner inherits the
//!   previous owner's persisted time high-water mark (`time_mark`), so it can refuse to issue
//!   at or below it.
//! - **Assignment** (table [`WORKER_NODE_TABLE`](crate::WORKER_NODE_TABLE), uid-generator's `WORKER_NODE`): every start
//!   inserts a row `(space, host, port, launch_ms)` and takes its auto-increment id as its
//!   worker id, never reused. The ids form one sequence per database, shared by all spaces,
//!   and start at 1.
//!
//! Both tables are created when absent and never altered.
//!
//! **Two clocks.** Whether a lease has expired (which id is free, whether a renewal or a
//! release still holds it) is decided by the *store's* clock, read inside the statement that
//! decides: the database's `UTC_TIMESTAMP(6)` on MySQL / MariaDB, `statement_timestamp()` on
//! PostgreSQL, `TIME` inside the script on Redis, and the machine's clock for the stores on
//! it (memory, SQLite: [`StoreClock`](crate::StoreClock)). So `expires_ms` is store time and
//! no row is ever compared with a caller's clock: a node whose clock runs fast cannot find a
//! live lease expired. What the rows carry *about ids* (`time_mark`, `launch_ms`,
//! `mark_max`) is the caller's time, as its ids are. [`LeaseStore::now_ms`] reads
//! the store's clock, so a node can measure how far its own is off. What the caller must do
//! with a lease (stop issuing ids one TTL after it asked, by its own clock, even before a
//! renewal fails; persist a mark before issuing up to it) is the `idmint` library's job; this
//! module must not spawn tasks or decide when to renew.

use std::sync::Arc;

use async_trait::async_trait;

use crate::StoreError;
use crate::names::WorkerSpace;

/// Longest worker space name (a layout name), in characters of `A-Z a-z 0-9 _ . : -`.
pub const WORKER_SPACE_LEN_MAX: usize = 64;
/// Largest `max_worker` a lease request may name: acquiring walks the space's rows in id
/// order, and listing returns them all, so a space holds at most this many plus one rows.
/// Sonyflake's 16 machine-id bits; Twitter's and Leaf's 10 bits fit far below.
pub const LEASE_WORKER_ID_MAX: u64 = (1 << 16) - 1;
/// Largest `max_worker` an assignment request may name (uid-generator's 22 worker bits fit).
pub const ASSIGN_WORKER_ID_MAX: u64 = (1 << 32) - 1;
/// Shortest lease.
pub const LEASE_TTL_MS_MIN: u64 = 1;
/// Longest lease: a node that vanishes holds its id at most this long (plus the margin).
pub const LEASE_TTL_MS_MAX: u64 = 3_600_000;
/// Longest safety margin between a lease's expiry and the reuse of its id.
pub const LEASE_MARGIN_MS_MAX: u64 = 3_600_000;
/// Largest time, in milliseconds, a request may carry (`now_ms`, `launch_ms`, a mark): about
/// 285 000 years past the Unix epoch, and far enough below `i64::MAX` that adding a TTL never
/// overflows a `BIGINT` column.
pub const WORKER_TIME_MS_MAX: u64 = (1 << 53) - 1;
/// Longest lease holder or assigned host description, in bytes.
pub const HOLDER_LEN_MAX: usize = 255;
/// The lease table's column for the holder id, added after the first release: a table an
/// earlier idmint made lacks it and is refused with [`StoreError::OutdatedTable`].
pub const HOLDER_ID_COLUMN: &str = "holder_id";
/// Rows one page of the acquisition walk reads.
pub(crate) const LEASE_SCAN_PAGE: usize = 256;

const _: () = assert!(LEASE_WORKER_ID_MAX <= ASSIGN_WORKER_ID_MAX);
const _: () = assert!(ASSIGN_WORKER_ID_MAX < i64::MAX as u64);
const _: () = assert!(LEASE_TTL_MS_MIN >= 1 && LEASE_TTL_MS_MIN <= LEASE_TTL_MS_MAX);
const _: () = assert!(WORKER_TIME_MS_MAX + LEASE_TTL_MS_MAX < i64::MAX as u64);
const _: () = assert!(LEASE_SCAN_PAGE >= 1);

/// Keyed leases: one holder at a time per slot (a worker id) of a lease space, with a
/// fencing token and holder id, an expiry judged by the store's clock, and a monotone mark
/// the next holder inherits. What the `idmint` library's fence holds; shared by every node of
/// every layout.
///
/// Implementations make [`acquire_lease`](LeaseStore::acquire_lease) atomic across nodes:
/// two acquirers never hold the same id of a space at once. A never-held id is claimed by
/// inserting its row under the `(space, worker_id)` primary key; an expired one by a
/// compare-and-set of its fencing token that also re-checks the expiry.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Claims the lowest worker id in `req.min_worker..=req.max_worker` of `req.space` that is
    /// free (an id outside the range is never claimed, whatever its row says): never
    /// held, or held by a lease that expired more than `req.margin_ms` ago
    /// (`expires_ms + margin_ms < now`, `now` the store's clock). The lease lasts until
    /// `now + ttl_ms` on the store's clock.
    ///
    /// An id whose persisted time mark is above `req.mark_max` is passed over: a
    /// clock that once jumped ahead left it marked, and its owner could issue nothing until
    /// the clock got there. When the only free ids are such ids, the call is refused with
    /// [`StoreError::WorkerMarksAhead`], naming the earliest of their marks.
    ///
    /// The row gets a new token ([`next_token`]) and a fresh random [`Lease::holder_id`]; a
    /// never-held id starts at time mark 0, a taken-over one keeps the previous owner's, which
    /// the caller must not issue at or below. Refuses with [`StoreError::WorkersExhausted`] when every id is
    /// held, and with [`StoreError::InvalidValue`] for a request outside the bounds of this
    /// module, before the store is asked.
    async fn acquire_lease(&self, req: &LeaseRequest) -> Result<Lease, StoreError>;

    /// Extends `lease` to `now + ttl_ms` on the store's clock (never shortening it) if its
    /// row still holds `lease.token` and `lease.holder_id` and has not expired
    /// (`expires_ms >= now`); returns the lease as stored, with the row's current time mark.
    ///
    /// Otherwise [`StoreError::LeaseLost`]: the caller must stop issuing ids with this worker
    /// id at once.
    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64) -> Result<Lease, StoreError>;

    /// Gives `lease` up: its expiry becomes the store's `now` (if earlier than the stored
    /// one), its time mark is kept, and the id is free again once the safety margin has
    /// passed. [`StoreError::LeaseLost`] when the row no longer holds `lease.token` and
    /// `lease.holder_id`, or is gone.
    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Persists the holder's mark (the snowflake generator's: "ids may be issued up to
    /// `mark` ms") before the holder acts up to it: the row's mark becomes the larger of its
    /// own and `mark`, never smaller, and the next holder inherits it. At most
    /// [`WORKER_TIME_MS_MAX`], the largest every backend stores exactly.
    /// [`StoreError::LeaseLost`] when the row no longer holds `lease.token` and
    /// `lease.holder_id`, or is gone.
    async fn raise_mark(&self, lease: &Lease, mark: u64) -> Result<(), StoreError>;

    /// Every lease row of `space` (held, expired or released), ordered by worker id: at most
    /// [`LEASE_WORKER_ID_MAX`] + 1. For operators.
    async fn list_leases(&self, space: &WorkerSpace) -> Result<Vec<LeaseRecord>, StoreError>;

    /// The store's clock, in milliseconds since the Unix epoch: the time leases are judged
    /// by. A caller measures its own clock's offset from it around this call.
    async fn now_ms(&self) -> Result<u64, StoreError>;
}

/// Worker ids a store hands out, besides leasing them: uid-generator's store-assigned ids.
#[async_trait]
pub trait WorkerStore: LeaseStore {
    /// Assigns a fresh worker id for one start of a node (uid-generator's `WORKER_NODE`):
    /// inserts `(space, host, port, launch_ms)` into [`WORKER_NODE_TABLE`](crate::WORKER_NODE_TABLE) and returns the
    /// row's auto-increment id. Ids are never reused, start at 1 and come from one sequence
    /// per database shared by all spaces. Refuses with [`StoreError::WorkersExhausted`],
    /// keeping no row, when the id would exceed `req.max_worker`.
    async fn assign_worker(&self, req: &AssignRequest) -> Result<u64, StoreError>;
}

/// Parsing lives here, beside the stores that refuse bad names; the type is in `names.rs`,
/// a leaf that `error.rs` can name without importing this module.
impl WorkerSpace {
    /// Parses a space name, refusing anything outside the alphabet and length with
    /// [`StoreError::InvalidValue`].
    pub fn parse(name: &str) -> Result<WorkerSpace, StoreError> {
        let valid = !name.is_empty()
            && name.len() <= WORKER_SPACE_LEN_MAX
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
        if valid {
            Ok(WorkerSpace(Arc::from(name)))
        } else {
            Err(StoreError::InvalidValue(format!(
                "worker space {name:?} is not a space name; use 1 to {WORKER_SPACE_LEN_MAX} \
                 characters of A-Z a-z 0-9 _ . : - (the layout's name)"
            )))
        }
    }
}

/// What [`LeaseStore::acquire_lease`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The space (layout) whose ids are claimed.
    pub space: WorkerSpace,
    /// The smallest worker id that may be claimed (0 for the whole space): with
    /// `max_worker`, the range this node's ids come from (`snowflake.worker_ids`), so Leaf or
    /// uid-generator nodes running beside idmint keep the ids outside it. At most
    /// `max_worker`.
    pub min_worker: u64,
    /// The largest worker id that may be claimed, at most [`LEASE_WORKER_ID_MAX`] (and at
    /// most the layout's largest).
    pub max_worker: u64,
    /// Who holds the lease, for operators (`host:port/pid`): at most [`HOLDER_LEN_MAX`]
    /// bytes, no control characters.
    pub holder: String,
    /// How long the lease lasts unless renewed: [`LEASE_TTL_MS_MIN`] to
    /// [`LEASE_TTL_MS_MAX`].
    pub ttl_ms: u64,
    /// How long past its expiry an id stays unusable (for a holder paused between checking
    /// its lease and issuing, and the skew between the nodes' clocks that the ids' times
    /// carry): at most [`LEASE_MARGIN_MS_MAX`].
    pub margin_ms: u64,
    /// The latest time mark, in milliseconds, a claimed id may carry: the caller's clock plus
    /// the step back it waits out. A free id marked later is passed over (at most
    /// [`WORKER_TIME_MS_MAX`], which passes none over).
    pub mark_max: u64,
}

/// A held lease on one worker id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The space the id belongs to.
    pub space: WorkerSpace,
    /// The worker id.
    pub worker_id: u64,
    /// The fencing token, never reused ([`next_token`]): later holdings of the id get larger
    /// ones. Every later call on the lease proves ownership with it and
    /// [`holder_id`](Lease::holder_id).
    pub token: u64,
    /// The fencing id of this holding: 128 random bits from the CSPRNG, drawn at every
    /// acquisition and stored in the row. Unlike the token it cannot come back when a row is
    /// deleted or restored from a backup, so a holder whose row changed hands that way still
    /// learns it ([`StoreError::LeaseLost`]).
    pub holder_id: u128,
    /// When the lease ends unless renewed, on the store's clock, in milliseconds. The holder
    /// does not compare it with its own clock: it stops one TTL after it asked.
    pub expires_ms: u64,
    /// The persisted time high-water mark, in milliseconds, carried over from earlier owners
    /// (0 if none): the owner must not issue ids at or below it.
    pub mark: u64,
}

impl Lease {
    /// The fencing id of this holding: its [`holder_id`](Lease::holder_id), random, so it
    /// cannot repeat even where the [`token`](Lease::token) could (a store whose clock stepped
    /// back past an earlier token).
    pub fn fence_token(&self) -> u128 {
        self.holder_id
    }
}

/// One row of [`WORKERS_TABLE`](crate::WORKERS_TABLE), for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The worker id.
    pub worker_id: u64,
    /// The last holder, as it described itself.
    pub holder: String,
    /// The fencing token of the last holder.
    pub token: u64,
    /// When the lease ends or ended, on the store's clock, in milliseconds.
    pub expires_ms: u64,
    /// The persisted time high-water mark, in milliseconds.
    pub mark: u64,
}

/// What [`WorkerStore::assign_worker`] records for one start of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignRequest {
    /// The space (layout) the id is for.
    pub space: WorkerSpace,
    /// The largest worker id the layout can encode, at most [`ASSIGN_WORKER_ID_MAX`].
    pub max_worker: u64,
    /// The node's host, for operators: at most [`HOLDER_LEN_MAX`] bytes, no control
    /// characters.
    pub host: String,
    /// The node's port, for operators (0 when it has none).
    pub port: u16,
    /// When the node started, on its clock, in milliseconds.
    pub launch_ms: u64,
}

/// Refuses a lease request outside this module's bounds, before any store is asked.
pub(crate) fn check_lease_request(req: &LeaseRequest) -> Result<(), StoreError> {
    if req.max_worker > LEASE_WORKER_ID_MAX {
        return Err(StoreError::InvalidValue(format!(
            "max_worker {} is above {LEASE_WORKER_ID_MAX}, the most a lease space holds; use \
             store-assigned worker ids for wider layouts, or lower max_worker",
            req.max_worker
        )));
    }
    if req.min_worker > req.max_worker {
        return Err(StoreError::InvalidValue(format!(
            "min_worker {} is above max_worker {}; give a range low-high with low <= high",
            req.min_worker, req.max_worker
        )));
    }
    check_text("holder", &req.holder)?;
    check_time_ms("mark_max", req.mark_max)?;
    check_ttl_ms(req.ttl_ms)?;
    if req.margin_ms > LEASE_MARGIN_MS_MAX {
        return Err(StoreError::InvalidValue(format!(
            "margin_ms {} is above {LEASE_MARGIN_MS_MAX}; use a shorter safety margin",
            req.margin_ms
        )));
    }
    Ok(())
}

/// Refuses an assignment request outside this module's bounds.
pub(crate) fn check_assign_request(req: &AssignRequest) -> Result<(), StoreError> {
    if req.max_worker > ASSIGN_WORKER_ID_MAX {
        return Err(StoreError::InvalidValue(format!(
            "max_worker {} is above {ASSIGN_WORKER_ID_MAX}, the largest assigned worker id",
            req.max_worker
        )));
    }
    check_text("host", &req.host)?;
    check_time_ms("launch_ms", req.launch_ms)
}

/// Refuses a renewal's `ttl_ms` outside the bounds.
pub(crate) fn check_renewal(ttl_ms: u64) -> Result<(), StoreError> {
    check_ttl_ms(ttl_ms)
}

/// Refuses a time (`launch_ms`, a mark) past [`WORKER_TIME_MS_MAX`].
pub(crate) fn check_time_ms(name: &str, ms: u64) -> Result<(), StoreError> {
    if ms <= WORKER_TIME_MS_MAX {
        Ok(())
    } else {
        Err(StoreError::InvalidValue(format!(
            "{name} {ms} is above {WORKER_TIME_MS_MAX}; pass milliseconds since the Unix epoch"
        )))
    }
}

fn check_ttl_ms(ttl_ms: u64) -> Result<(), StoreError> {
    if (LEASE_TTL_MS_MIN..=LEASE_TTL_MS_MAX).contains(&ttl_ms) {
        Ok(())
    } else {
        Err(StoreError::InvalidValue(format!(
            "ttl_ms {ttl_ms} is outside {LEASE_TTL_MS_MIN}..={LEASE_TTL_MS_MAX}; use a lease \
             of at most an hour"
        )))
    }
}

fn check_text(name: &str, text: &str) -> Result<(), StoreError> {
    if text.len() > HOLDER_LEN_MAX {
        return Err(StoreError::InvalidValue(format!(
            "{name} is {} bytes long; use at most {HOLDER_LEN_MAX}",
            text.len()
        )));
    }
    if text.chars().any(char::is_control) {
        return Err(StoreError::InvalidValue(format!(
            "{name} {text:?} holds a control character; describe the node in printable text"
        )));
    }
    Ok(())
}

/// The expiry below which a lease's id may be reused at the store's `now_ms`: an id is free
/// when `expires_ms + margin_ms < now_ms`, i.e. `expires_ms < now_ms - margin_ms`. `None`
/// while `now_ms` is within the margin of the epoch: nothing is reusable yet.
pub(crate) fn reusable_below(now_ms: u64, margin_ms: u64) -> Option<u64> {
    now_ms.checked_sub(margin_ms)
}

/// The token of a new holding: the store's clock in microseconds, or one above the row's
/// `previous` token when that is not below it (two holdings within one microsecond, or a
/// clock behind an earlier token). The SQL backends and the Redis script compute the same in
/// the statement that writes it, from the server's clock. Tokens so grow with the store's
/// time whatever happens to the rows: a deleted or restored row cannot bring one back.
pub fn next_token(previous: Option<u64>, now_us: u64) -> u64 {
    previous.map_or(now_us, |previous| now_us.max(previous.saturating_add(1)))
}

/// A row of [`WORKERS_TABLE`](crate::WORKERS_TABLE) as the acquisition walk reads it.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanRow {
    pub(crate) worker_id: u64,
    pub(crate) token: u64,
    /// Expired past the margin on the store's clock when the scan ran (the takeover checks
    /// again).
    pub(crate) free: bool,
    pub(crate) mark: u64,
}

/// The three atomic steps a database backend provides for [`acquire_from`].
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
#[async_trait]
pub(crate) trait LeaseTable: Send + Sync {
    /// Up to [`LEASE_SCAN_PAGE`] rows of `space` with `from <= worker_id <= max`, in id
    /// order, each marked free when `expires_ms + margin_ms` is before the store's now.
    async fn scan(
        &self,
        space: &WorkerSpace,
        from: u64,
        max: u64,
        margin_ms: u64,
    ) -> Result<Vec<ScanRow>, StoreError>;

    /// Inserts the row of a never-held id with the token [`next_token`] gives without a
    /// previous one, time mark 0, `holder_id` and an expiry one TTL after the store's now; `None` when a row for it exists (another node
    /// claimed it first), changing nothing.
    async fn insert_lease(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError>;

    /// Takes an expired id over in one conditional write: only if its row still holds
    /// `token` and `expires_ms + req.margin_ms` is before the store's now, sets the holder,
    /// the token [`next_token`] gives after `token`, `holder_id` and an expiry one TTL after
    /// the store's now, keeping the time
    /// mark. `None` when the row changed meanwhile, changing nothing.
    async fn take_over(
        &self,
        req: &LeaseRequest,
        worker_id: u64,
        token: u64,
        holder_id: u128,
    ) -> Result<Option<Lease>, StoreError>;
}

/// [`LeaseStore::acquire_lease`] over a [`LeaseTable`]: walks the space's rows in id order,
/// a page at a time, and tries each free id it meets (a gap is a never-held id, an expired
/// row one to take over) until one attempt wins. An attempt that loses went to another node,
/// so the walk moves on; every id is tried at most once, which bounds the walk by
/// `max_worker + 1` attempts. An expired row whose time mark is past `req.mark_max`
/// is passed over, and remembered for the refusal when nothing else is free.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) async fn acquire_from<T: LeaseTable + ?Sized>(
    table: &T,
    req: &LeaseRequest,
) -> Result<Lease, StoreError> {
    check_lease_request(req)?;
    // One fresh id for the whole walk: only the attempt that wins writes it.
    let holder_id = new_holder_id();
    // The earliest mark of the free ids passed over for a mark ahead of the clock.
    let mut earliest_ahead: Option<u64> = None;
    // The lowest id not yet examined: nothing below the range is ever looked at.
    let mut next = req.min_worker;
    loop {
        let rows = table.scan(&req.space, next, req.max_worker, req.margin_ms).await?;
        let last_page = rows.len() < LEASE_SCAN_PAGE;
        for row in rows {
            if row.worker_id < next || row.worker_id > req.max_worker {
                return Err(StoreError::Unavailable(format!(
                    "the scan of space {} returned worker id {} outside {next}..={}",
                    req.space, row.worker_id, req.max_worker
                )));
            }
            for vacant in next..row.worker_id {
                if let Some(lease) = table.insert_lease(req, vacant, holder_id).await? {
                    return Ok(lease);
                }
            }
            if row.free && row.mark > req.mark_max {
                let earliest = earliest_ahead.map_or(row.mark, |e| e.min(row.mark));
                earliest_ahead = Some(earliest);
            } else if row.free
                && let Some(lease) =
                    table.take_over(req, row.worker_id, row.token, holder_id).await?
            {
                return Ok(lease);
            }
            next = row.worker_id + 1;
        }
        if last_page {
            for vacant in next..=req.max_worker {
                if let Some(lease) = table.insert_lease(req, vacant, holder_id).await? {
                    return Ok(lease);
                }
            }
            return Err(none_free(req, earliest_ahead));
        }
    }
}

/// Why no id was claimed: [`StoreError::WorkerMarksAhead`] when free ids were passed over for
/// their marks (the earliest is `earliest_ahead`), [`StoreError::WorkersExhausted`] otherwise.
pub(crate) fn none_free(req: &LeaseRequest, earliest_ahead: Option<u64>) -> StoreError {
    match earliest_ahead {
        Some(earliest_mark_ms) => StoreError::WorkerMarksAhead {
            space: req.space.clone(),
            earliest_mark_ms,
            mark_max: req.mark_max,
        },
        None => exhausted(req),
    }
}

/// Every id of the request's range is held: [`StoreError::WorkersExhausted`] for the whole
/// space, [`StoreError::NoWorkerIdInRange`] for a range that starts above 0.
pub(crate) fn exhausted(req: &LeaseRequest) -> StoreError {
    if req.min_worker == 0 {
        StoreError::WorkersExhausted { space: req.space.clone(), max: req.max_worker }
    } else {
        StoreError::NoWorkerIdInRange {
            space: req.space.clone(),
            min: req.min_worker,
            max: req.max_worker,
        }
    }
}

/// [`StoreError::LeaseLost`] for `lease`.
pub(crate) fn lease_lost(lease: &Lease) -> StoreError {
    StoreError::LeaseLost { space: lease.space.clone(), worker_id: lease.worker_id }
}

/// The `(worker_id, token, holder_id)` columns of the row `lease` claims to hold. A lease
/// whose values no `BIGINT` column can hold (it was not made by a store) holds no row: lost.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn held_columns(lease: &Lease) -> Result<(i64, i64, String), StoreError> {
    match (i64::try_from(lease.worker_id), i64::try_from(lease.token)) {
        (Ok(worker_id), Ok(token)) => Ok((worker_id, token, holder_id_text(lease.holder_id))),
        _ => Err(lease_lost(lease)),
    }
}

/// A fresh holder id: 128 bits from the thread-local CSPRNG (ChaCha12, seeded and reseeded
/// from the operating system). Two acquisitions drawing the same id is as likely as guessing
/// a 128-bit key, so a holder id is never reused for any row.
pub(crate) fn new_holder_id() -> u128 {
    use rand::Rng;
    let mut rng = rand::rng();
    (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64())
}

/// A holder id as its column holds it: 32 lowercase hex digits. Rows written before the
/// column existed hold `''`, which no lease matches.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres", feature = "redis"))]
pub(crate) fn holder_id_text(holder_id: u128) -> String {
    format!("{holder_id:032x}")
}

/// [`StoreError::OutdatedTable`] for a lease table without [`HOLDER_ID_COLUMN`]; `sql` is the
/// backend's statement that adds it.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn outdated_workers_table(sql: &str) -> StoreError {
    StoreError::OutdatedTable {
        table: crate::names::WORKERS_TABLE,
        column: HOLDER_ID_COLUMN,
        fix: sql.to_string(),
    }
}

/// The feature named in refusals of the lease table.
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) const FEATURE_LEASES: &str = "snowflake worker-id leases";
/// The feature named in refusals of the assignment table.
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) const FEATURE_ASSIGN: &str = "store-assigned worker ids";

/// A lease row as [`LeaseStore::list_leases`] reads it: `worker_id`, `holder`, `token`,
/// `expires_ms`, `time_mark`.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) type RecordColumns = (i64, String, i64, i64, i64);

/// The record of a lease row of `space`, or why the row is corrupt.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn stored_record(
    space: &WorkerSpace,
    (worker_id, holder, token, expires_ms, time_mark): RecordColumns,
) -> Result<LeaseRecord, StoreError> {
    Ok(LeaseRecord {
        worker_id: stored(space, worker_id, "worker_id", worker_id)?,
        holder,
        token: stored(space, worker_id, "token", token)?,
        expires_ms: stored(space, worker_id, "expires_ms", expires_ms)?,
        mark: stored(space, worker_id, "time_mark", time_mark)?,
    })
}

/// A row of `space` as [`LeaseTable::scan`] reads it: `(worker_id, token, free, time_mark)`,
/// or why the row is corrupt.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn scan_row(
    space: &WorkerSpace,
    (worker_id, token, free, time_mark): (i64, i64, bool, i64),
) -> Result<ScanRow, StoreError> {
    Ok(ScanRow {
        worker_id: stored(space, worker_id, "worker_id", worker_id)?,
        token: stored(space, worker_id, "token", token)?,
        free,
        mark: stored(space, worker_id, "time_mark", time_mark)?,
    })
}

/// The lease `req` won on `worker_id` with `holder_id`, from the `(token, expires_ms,
/// time_mark)` its row holds after the winning write, or why the row is corrupt.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn won_lease(
    req: &LeaseRequest,
    worker_id: u64,
    holder_id: u128,
    (token, expires_ms, time_mark): (i64, i64, i64),
) -> Result<Lease, StoreError> {
    let (space, id) = (&req.space, column(worker_id));
    Ok(Lease {
        space: space.clone(),
        worker_id,
        token: stored(space, id, "token", token)?,
        holder_id,
        expires_ms: stored(space, id, "expires_ms", expires_ms)?,
        mark: stored(space, id, "time_mark", time_mark)?,
    })
}

/// `lease` renewed, from the `expires_ms` and `time_mark` its row holds after the renewal,
/// or why the row is corrupt. `id` is the lease's worker id as its column holds it.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn renewed_lease(
    lease: &Lease,
    id: i64,
    (expires_ms, time_mark): (i64, i64),
) -> Result<Lease, StoreError> {
    Ok(Lease {
        expires_ms: stored(&lease.space, id, "expires_ms", expires_ms)?,
        mark: stored(&lease.space, id, "time_mark", time_mark)?,
        ..lease.clone()
    })
}

/// The database server's clock as read, in ms since the Unix epoch, or the refusal of a
/// clock before 1970.
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) fn server_now_ms(now: i64) -> Result<u64, StoreError> {
    u64::try_from(now).map_err(|_| {
        StoreError::Unavailable(format!("the server's clock reads {now} ms, before 1970"))
    })
}

/// A stored number that must not be negative, or why the row is corrupt.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn stored(
    space: &WorkerSpace,
    worker_id: i64,
    column: &str,
    value: i64,
) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::CorruptWorker {
        space: space.clone(),
        worker_id,
        reason: format!("{column} is negative ({value})"),
    })
}

/// `value` as a `BIGINT` column holds it. Every value this module writes is bounded far below
/// `i64::MAX` by the checks above ([`WORKER_TIME_MS_MAX`], [`ASSIGN_WORKER_ID_MAX`]), and a
/// token by the store's clock in microseconds.
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
pub(crate) fn column(value: u64) -> i64 {
    // Not a silent wrap: a value past i64::MAX would be a broken bound, and writing it
    // negative could let an id be reused early.
    i64::try_from(value).unwrap_or_else(|_| panic!("{value} does not fit a BIGINT column"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_names_are_checked() {
        assert!(WorkerSpace::parse("snowflake.default:v1-a_b").is_ok());
        assert!(WorkerSpace::parse(&"s".repeat(WORKER_SPACE_LEN_MAX)).is_ok());
        for bad in ["", "has space", "quote'", "é", &"s".repeat(WORKER_SPACE_LEN_MAX + 1)] {
            assert!(
                matches!(WorkerSpace::parse(bad), Err(StoreError::InvalidValue(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn reuse_starts_strictly_after_the_margin() {
        // expires 100, margin 10: reusable only when now > 110.
        assert!(reusable_below(110, 10).is_some_and(|below| 100 >= below));
        assert!(reusable_below(111, 10).is_some_and(|below| 100 < below));
        assert_eq!(reusable_below(5, 10), None);
    }
}
