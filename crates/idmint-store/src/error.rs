//! The store's typed errors. Every message names the problem and, where there is one, the fix.
//! No message ever carries a password: URLs are shown through `StoreUrl`'s redacting display.

use idmint_core::Tag;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};

use crate::names::{WORKERS_TABLE, WorkerSpace};

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The tag has no row in the store.
    #[error("tag {0} does not exist; create it with `idmint tag create {0}`")]
    TagNotFound(Tag),
    /// `create_tag` for a tag that already has a row.
    #[error("tag {0} already exists; change its step with `idmint tag set {0} --step N`")]
    TagExists(Tag),
    /// `create_tag` with a start below the tombstone of a deleted tag of the same name: the
    /// new tag would hand out ids the old one did. Nothing was created.
    #[error(
        "tag {tag} was deleted after handing out ids below {tomb}; starting it again at {start} \
         would hand them out again. Create it without a start (it continues at {tomb}) or with \
         a start of at least {tomb}; or, only if no id of the old tag survives anywhere, force \
         it (`idmint tag create --force`, `\"force\": true`)"
    )]
    StartBelowIssued {
        /// The tag.
        tag: Tag,
        /// The start asked for.
        start: u64,
        /// The tombstone's `max_id`: every id the deleted tag handed out is below it.
        tomb: u64,
    },
    /// The allocation would pass the largest id; the row is left unchanged.
    #[error(
        "tag {tag} is exhausted: max_id {max_id} plus step {step} would pass the largest id \
         {ID_MAX}; create a new tag"
    )]
    Exhausted {
        /// The tag.
        tag: Tag,
        /// Its current `max_id`.
        max_id: u64,
        /// The step the allocation needed: the larger of the tag's step and the requested one.
        step: u64,
    },
    /// `create_tag` when the store already holds `TAG_COUNT_MAX` tags.
    #[error(
        "the store already holds {TAG_COUNT_MAX} tags, the most idmint serves; delete unused tags first"
    )]
    TooManyTags,
    /// A row holds values idmint cannot serve without risking a duplicate.
    #[error("the row of tag {tag} is invalid: {reason}; fix the row in the store")]
    Corrupt {
        /// The row's `biz_tag`.
        tag: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A value passed to the store is outside what a row may hold; nothing was changed. The
    /// message names the value and its bound.
    #[error("invalid value: {0}")]
    InvalidValue(String),
    /// The store a caller asked to read is not there: a missing SQLite file, or a database
    /// without the segment table ([`check_exists`](crate::check_exists)). Nothing was
    /// created.
    #[error("no idmint store at {store}: {reason}; nothing was created")]
    Absent {
        /// The store's URL, password masked.
        store: String,
        /// What is missing.
        reason: String,
    },
    /// The store answers but cannot be used for what was asked, whatever is retried: a Redis
    /// that refuses `INFO` to idmint's user or hides the data set's identity in it (a proxy),
    /// or that cannot replicate a script by its effects. Nothing was changed; final until
    /// the store, or idmint's access to it, is changed (the message names how).
    #[error("{store} {reason}")]
    Unsupported {
        /// The store, password masked.
        store: String,
        /// What it cannot do, and the fix.
        reason: String,
    },
    /// The store could not be reached or failed the call; nothing was changed that the
    /// caller can rely on. Retry later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// No worker id of the space is free: every id up to `max` is held by a lease (or
    /// within its safety margin after expiry), or has already been assigned.
    #[error(
        "no worker id of space {space} is free: every id up to {max} is held or was assigned; \
         stop nodes you no longer need (a lease frees its id after its TTL and safety margin; \
         delete stale rows of idmint_workers only for nodes you know are gone), or use a \
         layout with more worker bits (snowflake.worker_bits; store-assigned ids are never \
         reused, leased ones are). A node that found none at start serves no snowflake ids \
         until it is restarted"
    )]
    WorkersExhausted {
        /// The space.
        space: WorkerSpace,
        /// The largest worker id the request allowed.
        max: u64,
    },
    /// Every worker id of the range a node may take (`snowflake.worker_ids`) is held:
    /// the ids outside it belong to other generators (Leaf or uid-generator nodes beside
    /// idmint) and are never taken. Nothing was claimed.
    #[error(
        "no worker id left in range {min}-{max} of space {space} (snowflake.worker_ids): every \
         id of it is held; stop idmint nodes you no longer need (a lease frees its id after its \
         TTL and safety margin) or widen snowflake.worker_ids, keeping it clear of the ids \
         other generators use. A node that found none at start serves no snowflake ids until \
         it is restarted"
    )]
    NoWorkerIdInRange {
        /// The space.
        space: WorkerSpace,
        /// The smallest worker id of the range.
        min: u64,
        /// The largest worker id of the range.
        max: u64,
    },
    /// Every free worker id of the space carries a time mark past the caller's clock: a clock
    /// that jumped ahead left them marked, and ids under any of them would be refused until
    /// the clock got there. Nothing was claimed.
    #[error(
        "every free worker id of space {space} has a time mark ahead of this node's clock (the \
         earliest at {earliest_mark_ms} ms since the Unix epoch, past {mark_max}): a \
         clock that jumped ahead left them marked. Check the node's time sync; then wait until \
         the clock passes the mark, or stop nodes you no longer need so that ids free up (see \
         docs/operations.md, \"A clock that jumped ahead\")"
    )]
    WorkerMarksAhead {
        /// The space.
        space: WorkerSpace,
        /// The earliest time mark among the free ids passed over, in milliseconds.
        earliest_mark_ms: u64,
        /// The latest mark the request accepted.
        mark_max: u64,
    },
    /// The lease no longer holds its worker id: it expired, was released, or another node
    /// took the id over (the row's fencing token changed). The holder must stop issuing ids
    /// with it at once.
    #[error(
        "the lease on worker id {worker_id} of space {space} is lost (expired, released or \
         taken over by another node); stop issuing ids with it and acquire a new lease"
    )]
    LeaseLost {
        /// The space.
        space: WorkerSpace,
        /// The worker id that was held.
        worker_id: u64,
    },
    /// A row of the lease table holds values idmint cannot use without risking a duplicate.
    #[error(
        "the row of worker id {worker_id} of space {space} in table {WORKERS_TABLE} is invalid: \
         {reason}; fix or delete the row"
    )]
    CorruptWorker {
        /// The space.
        space: WorkerSpace,
        /// The row's worker id, as stored.
        worker_id: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// A table idmint made in an earlier version lacks a column this version needs to keep
    /// its guarantees; nothing was changed. The message gives the statement that adds it.
    #[error(
        "table {table} has no column {column} (an earlier idmint made it); add it with \
         `{fix}` (safe while older nodes run: they leave the column empty), then start again"
    )]
    OutdatedTable {
        /// The table.
        table: &'static str,
        /// The missing column.
        column: &'static str,
        /// The statement that adds the column on this backend.
        fix: String,
    },
    /// The tag cannot be stored in the table's tag column: a 4-byte UTF-8 character (an
    /// emoji) in a `utf8` (utf8mb3) column, anything beyond ASCII in a column of another
    /// character set. No row can hold it, so it is refused before any statement, on every
    /// call; final until the table is converted.
    #[error(
        "tag {tag} cannot be stored in table {table}, whose tag column is {charset}: convert \
         the table with `ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE \
         utf8mb4_bin` (idmint's own tables are made so), or use a tag the column can hold"
    )]
    TagNotStorable {
        /// The tag.
        tag: Tag,
        /// The table, as the store URL names it.
        table: String,
        /// The column's character set, as the server names it.
        charset: String,
    },
    /// The store's database account lacks a privilege a feature needs: named with the
    /// table, when the feature is used (never at a start that does not need it). Nothing was
    /// changed; final until the privilege is granted.
    #[error(
        "{feature} needs {needs}, which the store's database account lacks ({detail}); grant \
         it (`idmint schema print --store URL` prints each feature's GRANT statements, \
         docs/deploy.md lists them), or leave {feature} to an account that has it"
    )]
    Denied {
        /// What was asked (`tag creation`, `tag deletion`, `worker-id leases`, ...).
        feature: String,
        /// The privilege and its object, as a DBA grants it: `INSERT on leaf_alloc`.
        needs: String,
        /// The database's own words, password masked.
        detail: String,
    },
    /// A table a feature needs does not exist and this node may not create it
    /// (`create_tables=false`). Nothing was changed; final until the table is created.
    #[error(
        "{feature} needs table {table}, which does not exist, and this node creates no tables \
         (create_tables=false in the store URL); have it created with the DDL of `idmint \
         schema print --store URL`, or allow idmint to create it (create_tables=auto)"
    )]
    MissingTable {
        /// What was asked.
        feature: String,
        /// The table.
        table: String,
    },
    /// The store URL could not be used.
    #[error("bad store URL {url:?}: {reason}")]
    BadUrl {
        /// The URL, with any password removed.
        url: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
}
