//! What the database backends (MySQL/MariaDB, PostgreSQL) share: the [`Dialect`] they differ
//! in and the code written once over it (`sql/`: sequences, tag metadata, worker leases), a
//! transaction's connection that is closed when cut off before `BEGIN` was answered
//! ([`TxConn`]), the bounds, backoff and per-tag lock stripes of the `cas` allocation mode,
//! scrubbing a password out of the driver's messages, and telling a refused privilege from an
//! outage (a refused privilege is final: [`StoreError::Denied`], never a retryable
//! "unavailable").

mod meta;
mod sequences;
mod workers;

pub(crate) use meta::tag_meta_store;
pub(crate) use sequences::sequence_store;
pub(crate) use workers::lease_store;

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, RandomState};
use std::time::Duration;

use idmint_core::Tag;
use idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT;

use crate::StoreError;

/// What one attempt of a call on a table made on first use yields: a database error (perhaps
/// a missing table, retried once the tables exist), or the call's outcome, refusals included.
pub(crate) type Attempt<T> = Result<Result<T, StoreError>, sqlx::Error>;

/// What the database backends spell differently, for the code they share (`sql/`): a few
/// expressions, the placeholders, the errors and how a missing table is made. Its invariant:
/// a shared statement reads and writes what each backend's own did, only the spelling is the
/// dialect's; every value in it is a bind parameter, never inlined, so numbering its `?` is the
/// whole of the placeholders' difference.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// Whether placeholders are numbered, `$1, $2, …` (PostgreSQL), rather than `?` (MySQL).
    const NUMBERED: bool;

    /// `expr`, an integer column, read as a signed 64-bit integer: MySQL casts it, whatever
    /// its integer type; PostgreSQL's columns are `bigint` already.
    fn int(expr: &str) -> String;

    /// `expr`, a text column, read as text: PostgreSQL casts it, whatever its text type.
    fn text(expr: &str) -> String;

    /// `expr` to order by, byte for byte, whatever the column's collation.
    fn byte_order(expr: &str) -> String;

    /// `expr = ?`, true only when the bytes are equal: MySQL's `utf8mb4_bin` pads with spaces.
    fn equal_bytes(expr: &str) -> String;

    /// What follows an `INSERT` so that a duplicate of the key `columns` inserts nothing:
    /// PostgreSQL's `ON CONFLICT … DO NOTHING`; nothing on MySQL, where the duplicate fails
    /// with a duplicate-key error. Callers take both as the duplicate.
    fn on_conflict_nothing(columns: &str) -> String;

    /// What follows a write so that it returns `columns` of the rows it wrote: PostgreSQL's
    /// `RETURNING`; nothing on MySQL (MariaDB has no `UPDATE … RETURNING`), whose callers read
    /// the row back in the write's transaction.
    fn returning(columns: &str) -> String;

    /// Whether `e` says that a table of the statement does not exist.
    fn is_no_table(e: &sqlx::Error) -> bool;

    /// A driver error as [`StoreError::Unavailable`], or as [`StoreError::Denied`] when the
    /// server refused a privilege (final: retrying does not grant it).
    fn unavailable(&self, e: sqlx::Error) -> StoreError;

    /// Creates each absent `(table, ddl)` of `tables`, never altering one that exists;
    /// `feature` names what needs them, in the log and in refusals. PostgreSQL takes the
    /// advisory lock of `key` meanwhile, so nodes starting together do not race.
    async fn create_tables(
        &self,
        key: &str,
        tables: &[(&str, String)],
        feature: &str,
    ) -> Result<(), StoreError>;

    /// `statement`, written with `?`, in the dialect's placeholders.
    fn sql(statement: String) -> sqlx::AssertSqlSafe<String> {
        if !Self::NUMBERED {
            return sqlx::AssertSqlSafe(statement);
        }
        let mut numbered = String::with_capacity(statement.len() + 16);
        for (n, part) in statement.split('?').enumerate() {
            if n > 0 {
                numbered.push_str(&format!("${n}"));
            }
            numbered.push_str(part);
        }
        sqlx::AssertSqlSafe(numbered)
    }

    /// Runs `attempt`; when it fails because a table does not exist yet, runs `ensure` (which
    /// creates the missing tables, never altering one) and `attempt` once more. The tables
    /// idmint makes on first use (sequences, tag metadata) are reached through it.
    async fn with_tables<T, F, Fut, E, EFut>(&self, ensure: E, attempt: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
        E: FnOnce() -> EFut,
        EFut: std::future::Future<Output = Result<(), StoreError>>,
    {
        match attempt().await {
            Ok(outcome) => return Ok(outcome),
            Err(e) if Self::is_no_table(&e) => {}
            Err(e) => return Err(self.unavailable(e)),
        }
        ensure().await?;
        attempt().await.map_err(|e| self.unavailable(e))
    }
}

/// Read-then-compare-and-set rounds one `alloc=cas` allocation makes before giving up as
/// contended.
pub(crate) const CAS_ATTEMPTS_MAX: u32 = 16;
/// Ceiling of the random pause after the first lost round; it doubles with every round.
pub(crate) const CAS_BACKOFF_US_MIN: u64 = 250;
/// Largest ceiling of that pause.
pub(crate) const CAS_BACKOFF_US_MAX: u64 = 16_000;
/// Locks that queue one store's `cas` allocations, a tag's always on the same one, so only
/// other nodes contend in the database.
pub(crate) const CAS_LOCK_STRIPES: usize = 64;

const _: () = assert!(CAS_BACKOFF_US_MIN <= CAS_BACKOFF_US_MAX);
// A fully contended allocation's pauses end well before the engine's call timeout.
const _: () = assert!(
    CAS_ATTEMPTS_MAX as u64 * CAS_BACKOFF_US_MAX <= STORE_CALL_TIMEOUT_MS_DEFAULT * 1_000 / 4
);

/// The lock stripes of one store's `cas` allocations.
#[derive(Debug)]
pub(crate) struct CasLocks(Vec<tokio::sync::Mutex<()>>);

impl CasLocks {
    pub(crate) fn new() -> CasLocks {
        CasLocks((0..CAS_LOCK_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect())
    }

    /// Waits for `tag`'s stripe: allocations of one tag in this process go one at a time.
    pub(crate) async fn queue(&self, tag: &Tag) -> tokio::sync::MutexGuard<'_, ()> {
        // SipHash with fixed keys: every call agrees on a tag's stripe.
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(tag.as_str());
        self.0[(hash % CAS_LOCK_STRIPES as u64) as usize].lock().await
    }
}

/// The pause after losing round `attempt` (0-based): uniform in `[0, ceiling]`, the ceiling
/// doubling from [`CAS_BACKOFF_US_MIN`] up to [`CAS_BACKOFF_US_MAX`]. Random, so writers that
/// collided spread out instead of colliding again.
pub(crate) fn cas_backoff(attempt: u32) -> Duration {
    let ceiling_us =
        CAS_BACKOFF_US_MIN.saturating_mul(1 << attempt.min(16)).min(CAS_BACKOFF_US_MAX);
    // A fresh RandomState is randomly keyed: all the randomness a pause needs.
    let random = RandomState::new().hash_one(attempt);
    Duration::from_micros(random % (ceiling_us + 1))
}

/// A bounded pool's options: `pool_max` connections, `acquire_timeout_ms` to get one, and a
/// ping before use only for a connection idle past `idle_ping_after_ms`, which the server or
/// a proxy may have dropped: pinging every connection (sqlx's default) would put a second
/// round trip on each allocation's path.
pub(crate) fn pool_options<DB: sqlx::Database>(
    pool_max: u32,
    acquire_timeout_ms: u64,
    idle_ping_after_ms: u64,
) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(pool_max)
        .acquire_timeout(Duration::from_millis(acquire_timeout_ms))
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= Duration::from_millis(idle_ping_after_ms) {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// The feature named by a refusal whose statement did not say which feature it served.
pub(crate) const ANY_FEATURE: &str = "this call";
/// The features of the segment table named in refusals: serving ids.
pub(crate) const FEATURE_SEGMENTS: &str = "serving segment ids";
/// Creating a tag.
pub(crate) const FEATURE_CREATE: &str = "tag creation";
/// Deleting a tag (its tombstone).
pub(crate) const FEATURE_DELETE: &str = "tag deletion";
/// Leaf-shaped tables named at most in a refusal.
pub(crate) const LEAF_TABLES_SHOWN_MAX: usize = 16;

/// The refusal to create the absent segment table `table` of `store` beside the Leaf-shaped
/// tables `leaf` (columns `biz_tag`, `max_id`, `step`): a mistyped `table=` would otherwise
/// serve `unknown tag` to every Leaf client.
pub(crate) fn leaf_table_beside(store: String, table: &str, leaf: &[String]) -> StoreError {
    StoreError::Absent {
        store,
        reason: format!(
            "the database has no table {table}, but it holds the Leaf table {} (columns \
             biz_tag, max_id, step): is table={table} mistyped? Name the table to serve with \
             table=, or add create_tables=true to the store URL to create {table} beside it",
            leaf.join(", ")
        ),
    }
}

/// The refusal of a privilege, when `e` is one: MySQL's and MariaDB's "command denied" and
/// "access denied" (SQLSTATE 42000 with "denied" in the message), PostgreSQL's
/// `insufficient_privilege` (42501). `needs` names the privilege and table the statement
/// needs (`INSERT on leaf_alloc`); `None` reads them from MySQL's message, which names both.
pub(crate) fn denied(
    e: &sqlx::Error,
    feature: &str,
    needs: Option<&str>,
    secret: Option<&str>,
) -> Option<StoreError> {
    let sqlx::Error::Database(db) = e else { return None };
    let message = db.message();
    let refused = match db.code().as_deref() {
        Some("42501") => true,
        Some("42000") => message.contains(" denied "),
        _ => false,
    };
    if !refused {
        return None;
    }
    let needs = needs
        .map(str::to_string)
        .or_else(|| needs_from_mysql(message))
        .unwrap_or_else(|| "a privilege on the table named here".to_string());
    Some(StoreError::Denied { feature: feature.to_string(), needs, detail: scrub(message, secret) })
}

/// `INSERT on leaf_alloc` from MySQL's "INSERT command denied to user 'u'@'h' for table
/// 'leaf_alloc'" (MariaDB: "… for table `db`.`leaf_alloc`").
fn needs_from_mysql(message: &str) -> Option<String> {
    let (command, rest) = message.split_once(" command denied")?;
    let quotes: &[char] = &['`', '\'', '"'];
    let table = rest.split_once("for table ")?.1.trim().trim_matches(quotes);
    let table = table.rsplit('.').next()?.trim_matches(quotes);
    Some(format!("{} on {table}", command.trim()))
}

/// The password of a `scheme://user:password@host/…` URL, as written.
pub(crate) fn password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    Some(userinfo.split_once(':')?.1)
}

/// `text` with every occurrence of `password`, as written or percent-decoded, replaced by
/// `***`: the drivers' messages are not promised to leave it out.
pub(crate) fn scrub(text: &str, password: Option<&str>) -> String {
    let mut text = text.to_string();
    if let Some(password) = password.filter(|p| !p.is_empty()) {
        for secret in [password.to_string(), percent_decode(password)] {
            if !secret.is_empty() {
                text = text.replace(&secret, "***");
            }
        }
    }
    text
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// A pooled connection taken for one transaction, which begins through [`TxConn::begin`].
/// Dropped while `BEGIN` waits for its answer (an error, or the call's future dropped, as a
/// give-back or a renewal cut off by its bound is), the connection is closed, which makes the
/// server end the transaction: sqlx (0.9, MySQL and PostgreSQL alike) counts a transaction
/// only once `BEGIN` was answered, so it would queue no `ROLLBACK`, and back in the pool the
/// connection would run the next caller's statements inside the open transaction, holding
/// their row locks and never committing their writes. Once begun, sqlx's own rollback on
/// drop applies.
pub(crate) struct TxConn<DB: sqlx::Database> {
    conn: sqlx::pool::PoolConnection<DB>,
    beginning: bool,
}

impl<DB: sqlx::Database> TxConn<DB> {
    /// A connection of `pool` for one transaction.
    pub(crate) async fn acquire(pool: &sqlx::Pool<DB>) -> Result<TxConn<DB>, sqlx::Error> {
        let conn = pool.acquire().await?;
        Ok(TxConn { conn, beginning: false })
    }

    /// Begins the transaction; the connection is closed on drop until `BEGIN` is answered.
    pub(crate) async fn begin(&mut self) -> Result<sqlx::Transaction<'_, DB>, sqlx::Error> {
        let TxConn { conn, beginning } = self;
        *beginning = true;
        let tx = sqlx::Connection::begin(&mut **conn).await?;
        *beginning = false;
        Ok(tx)
    }
}

impl<DB: sqlx::Database> Drop for TxConn<DB> {
    fn drop(&mut self) {
        if self.beginning {
            self.conn.close_on_drop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_removes_the_password_as_written_and_decoded() {
        let url = "postgres://app:p%40ss@db:5432/ids";
        assert_eq!(password(url), Some("p%40ss"));
        let text = format!("failed {url}; auth p@ss; raw p%40ss");
        assert_eq!(
            scrub(&text, password(url)),
            "failed postgres://app:***@db:5432/ids; auth ***; raw ***"
        );
        assert_eq!(password("mysql://app@db/ids"), None);
        assert_eq!(password("mysql://app:@db/ids"), Some(""));
        assert_eq!(scrub("nothing to hide", Some("")), "nothing to hide");
    }

    #[test]
    fn mysql_refusals_name_the_privilege_and_the_table() {
        assert_eq!(
            needs_from_mysql(
                "INSERT command denied to user 'leaf'@'localhost' for table `test`.`leaf_alloc`"
            )
            .as_deref(),
            Some("INSERT on leaf_alloc")
        );
        assert_eq!(
            needs_from_mysql(
                "CREATE command denied to user 'leaf'@'%' for table 'idmint_tombstones'"
            )
            .as_deref(),
            Some("CREATE on idmint_tombstones")
        );
        assert_eq!(needs_from_mysql("Access denied for user 'leaf'@'%' to database 'x'"), None);
    }

    #[test]
    fn cas_backoff_stays_within_its_ceiling() {
        for attempt in 0..CAS_ATTEMPTS_MAX + 70 {
            let ceiling = CAS_BACKOFF_US_MIN.saturating_mul(1 << attempt.min(16));
            let pause = cas_backoff(attempt).as_micros() as u64;
            assert!(pause <= ceiling.min(CAS_BACKOFF_US_MAX), "attempt {attempt}: {pause}");
        }
    }
}
