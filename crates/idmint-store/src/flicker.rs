//! Flicker ticket databases (feature `mysql`): ids from a MySQL / MariaDB auto-increment, as
//! Flickr's ticket servers made them, served through [`InterleavedStore`].
//!
//! A ticket is one `REPLACE INTO {table} (stub) VALUES ('{tag}/{node}')` and its
//! `LAST_INSERT_ID()`, sent as one text query (one round trip). The stub row keeps the table
//! at one row per tag and node; the auto-increment counter never goes back (InnoDB persists
//! it since MariaDB 10.2.4 and MySQL 8.0). A ticket stands for the block of `step` ids
//! `[ticket × step, (ticket + 1) × step)`; the step is recorded per tag in `{table}_tags` and
//! never changes.
//!
//! Several databases form a set: each runs with the same `auto_increment_increment = n` and
//! its own `auto_increment_offset`, so database `i` only ever yields tickets `≡ offset_i
//! (mod n)`. idmint sets those per session when the URL gives `increment` and `offset`, reads
//! them back on every new connection (a connection that disagrees is refused), and before
//! serving refuses a set whose increments differ, whose offsets share a residue, or that
//! holds more databases than the increment allows.
//!
//! Raising a lagging database past tickets already served inserts a row with an explicit id
//! (`{tag}/{node}/raise`): the counter moves past it and that id is never a ticket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use idmint_core::limits::{ID_MAX, TAG_COUNT_MAX};
use idmint_core::residue::ticket_at_or_above;
use idmint_core::{StartId, Tag, TagError};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Connection, Executor, MySqlPool, Row};

use crate::interleave::{InterleavedStore, TicketSource};
use crate::mysql::{
    MYSQL_IDLE_PING_AFTER_MS, SQLSTATE_NO_TABLE, bytes_literal, connect_options, pool_options, sql,
    unavailable, with_table,
};
use crate::sql::{CAS_ATTEMPTS_MAX, CasLocks, cas_backoff};
use crate::{AutoIncrement, FlickerUrl, StoreError, TagRecord, TagSpec};

/// How long opening a Flicker set waits for each database before deciding it is down.
pub const FLICKER_PROBE_TIMEOUT_MS: u64 = 3_000;

/// MySQL's SQLSTATE for a deadlock, the transaction rolled back (error 1213).
const SQLSTATE_DEADLOCK: &str = "40001";
/// MySQL's SQLSTATE for a duplicate key (error 1062).
const SQLSTATE_DUPLICATE: &str = "23000";

/// Opens a Flicker set: checks every database's auto-increment settings, refuses a set that
/// could hand out one ticket twice, creates the tables where absent.
///
/// A database that does not answer is skipped (and served once it answers) when its URL
/// gives `increment` and `offset`, since idmint then sets and checks them itself; without
/// them its residue is unknown and the set is refused. A set none of whose databases answer
/// is refused.
pub async fn open_flicker(urls: &[FlickerUrl]) -> Result<InterleavedStore, StoreError> {
    let mut sources = Vec::with_capacity(urls.len());
    let mut up = 0;
    let mut last_failure = None;
    for url in urls {
        let source = FlickerSource::new(url)?;
        let probe = tokio::time::timeout(
            Duration::from_millis(FLICKER_PROBE_TIMEOUT_MS),
            source.ensure_ready(),
        )
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "{} did not answer within {FLICKER_PROBE_TIMEOUT_MS} ms",
                source.location
            )))
        });
        match probe {
            Ok(()) => up += 1,
            Err(error @ StoreError::Unavailable(_)) if url.auto_increment.is_some() => {
                tracing::warn!(store = %source.location, %error, "Flicker database down at start; the others serve until it answers");
                last_failure = Some(error);
            }
            Err(StoreError::Unavailable(reason)) => {
                return Err(StoreError::Unavailable(format!(
                    "{reason}; its auto-increment settings cannot be checked, so the set is \
                     not served. Add increment=N&offset=I to its URL to start without it"
                )));
            }
            Err(error) => return Err(error),
        }
        sources.push(source);
    }
    if up == 0 {
        return Err(last_failure.unwrap_or_else(|| StoreError::Unavailable("no database".into())));
    }
    let settings: Vec<AutoIncrement> = sources.iter().filter_map(|s| s.settings()).collect();
    let modulus = check_set(&settings)?;
    let sources = sources
        .into_iter()
        .map(|mut source| {
            source.modulus = modulus;
            Box::new(source) as Box<dyn TicketSource>
        })
        .collect();
    InterleavedStore::new("flicker", modulus, sources)
}

/// The set's increment, or why the set could repeat a ticket.
fn check_set(settings: &[AutoIncrement]) -> Result<u64, StoreError> {
    let refuse = |reason: String| {
        Err(StoreError::InvalidValue(format!(
            "Flicker databases {reason}; set auto_increment_increment to the same N on every \
             database and auto_increment_offset to a distinct value from 1 to N on each"
        )))
    };
    let Some(first) = settings.first() else {
        return refuse("answered none of the settings".to_string());
    };
    let increment = first.increment;
    if let Some(other) = settings.iter().find(|s| s.increment != increment) {
        return refuse(format!(
            "have auto_increment_increment {increment} and {}: their tickets would interleave \
             unevenly and collide",
            other.increment
        ));
    }
    if settings.len() as u64 > increment {
        return refuse(format!(
            "number {} but auto_increment_increment is {increment}: two of them must share a \
             residue",
            settings.len()
        ));
    }
    let mut residues: Vec<u64> = settings.iter().map(|s| s.offset % increment).collect();
    residues.sort_unstable();
    if let Some(pair) = residues.windows(2).find(|pair| pair[0] == pair[1]) {
        return refuse(format!(
            "share auto_increment_offset residue {} (mod {increment}): they would hand out the \
             same tickets",
            pair[0]
        ));
    }
    if let Some(s) = settings.iter().find(|s| s.offset == 0 || s.offset > s.increment) {
        return refuse(format!(
            "include auto_increment_offset {} with increment {}: the server ignores an offset \
             outside 1..=increment",
            s.offset, s.increment
        ));
    }
    Ok(increment)
}

/// One ticket database.
struct FlickerSource {
    pool: MySqlPool,
    sql: Arc<Statements>,
    node: String,
    /// The settings every connection holds: given in the URL, or read from the first
    /// connection.
    settings: Arc<OnceLock<AutoIncrement>>,
    modulus: u64,
    location: String,
    /// Set once the tables exist.
    ready: tokio::sync::OnceCell<()>,
    /// Blocks of tags this source checked.
    blocks: Mutex<HashMap<Tag, u64>>,
    /// When a call last failed, for the pool's check of idle connections.
    failures: Arc<FailureClock>,
    /// Queues this node's ticket calls per tag.
    queue: CasLocks,
}

/// When a source's last call failed.
struct FailureClock {
    origin: std::time::Instant,
    /// Milliseconds from `origin` to the last failure; `u64::MAX`: none yet.
    last_ms: AtomicU64,
}

impl FailureClock {
    fn new() -> FailureClock {
        FailureClock { origin: std::time::Instant::now(), last_ms: AtomicU64::new(u64::MAX) }
    }

    fn failed(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Whether a connection idle for `idle` has been idle since before the last failure.
    fn idle_since_failure(&self, idle: Duration) -> bool {
        let last = self.last_ms.load(Ordering::Relaxed);
        if last == u64::MAX {
            return false;
        }
        let since = (self.origin.elapsed().as_millis() as u64).saturating_sub(last);
        idle.as_millis() as u64 >= since
    }
}

impl FlickerSource {
    fn new(url: &FlickerUrl) -> Result<FlickerSource, StoreError> {
        let redacted = url.url.redacted();
        let options = connect_options(&url.url)?;
        let settings = Arc::new(OnceLock::new());
        let configured = url.auto_increment;
        if let Some(given) = configured {
            let _ = settings.set(given);
        }
        let expected = Arc::clone(&settings);
        let failures = Arc::new(FailureClock::new());
        let clock = Arc::clone(&failures);
        let pool = pool_options(url.url.options.pool_max)
            // After a failure, every connection idle since before it is pinged once before
            // use: a database that went away and came back leaves the pool full of dead
            // connections, and each would otherwise fail one call (and earn the source
            // another backoff) before being replaced.
            .before_acquire(move |conn, meta| {
                let clock = Arc::clone(&clock);
                Box::pin(async move {
                    let idle_too_long =
                        meta.idle_for >= Duration::from_millis(MYSQL_IDLE_PING_AFTER_MS);
                    if idle_too_long || clock.idle_since_failure(meta.idle_for) {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |conn, _meta| {
                let expected = Arc::clone(&expected);
                Box::pin(async move {
                    if let Some(given) = configured {
                        conn.execute(AssertSqlSafe(format!(
                            "SET SESSION auto_increment_increment = {}, \
                             auto_increment_offset = {}",
                            given.increment, given.offset
                        )))
                        .await?;
                    }
                    let row = conn
                        .fetch_one(
                            "SELECT CAST(@@session.auto_increment_increment AS SIGNED), \
                             CAST(@@session.auto_increment_offset AS SIGNED)",
                        )
                        .await?;
                    let read = AutoIncrement {
                        increment: u64::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0),
                        offset: u64::try_from(row.try_get::<i64, _>(1)?).unwrap_or(0),
                    };
                    let want = *expected.get_or_init(|| read);
                    if read == want {
                        Ok(())
                    } else {
                        Err(sqlx::Error::Configuration(
                            format!(
                                "this connection has auto_increment_increment {} and \
                                 auto_increment_offset {}, not {} and {} as the set was checked \
                                 with; its tickets could collide, so it is not used",
                                read.increment, read.offset, want.increment, want.offset
                            )
                            .into(),
                        ))
                    }
                })
            })
            .connect_lazy_with(options);
        let table = url.url.options.table.as_str();
        Ok(FlickerSource {
            pool,
            sql: Arc::new(Statements::new(table)),
            node: url.node.clone(),
            settings,
            modulus: 1,
            location: format!("flicker+{}", with_table(&redacted, table)),
            ready: tokio::sync::OnceCell::new(),
            blocks: Mutex::default(),
            failures,
            queue: CasLocks::new(),
        })
    }

    fn settings(&self) -> Option<AutoIncrement> {
        self.settings.get().copied()
    }

    /// Creates the tables where absent (once), which also checks the settings of the
    /// connection it uses.
    async fn ensure_ready(&self) -> Result<(), StoreError> {
        self.ready
            .get_or_try_init(|| async {
                let probe = sqlx::query(sql(&self.sql.probe)).fetch_optional(&self.pool).await;
                match probe {
                    Ok(_) => return Ok(()),
                    Err(sqlx::Error::Database(e))
                        if e.code().as_deref() == Some(SQLSTATE_NO_TABLE) => {}
                    Err(e) => return Err(self.unavailable(e)),
                }
                sqlx::raw_sql(sql(&self.sql.create_tables))
                    .execute(&self.pool)
                    .await
                    .map_err(|e| self.unavailable(e))?;
                tracing::info!(store = %self.location, "created the Flicker ticket tables");
                Ok(())
            })
            .await
            .map(drop)
    }

    fn unavailable(&self, e: sqlx::Error) -> StoreError {
        self.failures.failed();
        match unavailable(e) {
            StoreError::Unavailable(reason) => {
                StoreError::Unavailable(format!("{}: {reason}", self.location))
            }
            other => other,
        }
    }

    /// Checks that `tag` is recorded here with `block` ids per ticket (once per tag).
    async fn check_block(&self, tag: &Tag, block: u64) -> Result<(), StoreError> {
        let known = self.blocks.lock().unwrap_or_else(PoisonError::into_inner).get(tag).copied();
        let recorded = match known {
            Some(recorded) => recorded,
            None => {
                let record =
                    self.get(tag).await?.ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
                self.blocks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(tag.clone(), record.step);
                record.step
            }
        };
        if recorded == block {
            Ok(())
        } else {
            Err(StoreError::Corrupt {
                tag: tag.to_string(),
                reason: format!(
                    "{} records step {recorded}, the other databases {block}; their ids would \
                     collide",
                    self.location
                ),
            })
        }
    }

    fn record(&self, row: &MySqlRow) -> Result<TagRecord, StoreError> {
        let read = || -> Result<_, sqlx::Error> {
            Ok((
                row.try_get::<String, _>(0)?,
                row.try_get::<i64, _>(1)?,
                row.try_get::<Option<String>, _>(2)?,
                row.try_get::<Option<i64>, _>(3)?,
                row.try_get::<i64, _>(4)?,
            ))
        };
        let (tag, step, description, update_time, max_ticket) =
            read().map_err(|e| self.unavailable(e))?;
        let corrupt = |reason: String| StoreError::Corrupt { tag: tag.clone(), reason };
        let parsed = Tag::from_stored(&tag).map_err(|e: TagError| corrupt(e.to_string()))?;
        let step = u64::try_from(step)
            .ok()
            .filter(|s| *s >= 1)
            .ok_or_else(|| corrupt(format!("step is {step}; it must be at least 1")))?;
        let next_ticket = u64::try_from(max_ticket).unwrap_or(0).saturating_add(1);
        Ok(TagRecord {
            tag: parsed,
            max_id: next_ticket.saturating_mul(step).min(ID_MAX),
            step,
            description: description.unwrap_or_default(),
            update_time_s: update_time.and_then(|t| u64::try_from(t).ok()).unwrap_or(0),
        })
    }
}

#[async_trait]
impl TicketSource for FlickerSource {
    async fn next_ticket(&self, tag: &Tag, block: u64) -> Result<u64, StoreError> {
        self.ensure_ready().await?;
        self.check_block(tag, block).await?;
        let statement = format!(
            "REPLACE INTO {t} (stub) VALUES ({stub}); \
             SELECT CAST(LAST_INSERT_ID() AS SIGNED)",
            t = self.sql.table,
            stub = stub(tag, &format!("/{}", self.node)),
        );
        // This node's calls for one tag queue here: they would all replace the same stub row,
        // which InnoDB answers with deadlocks.
        let _queued = self.queue.queue(tag).await;
        let mut attempt = 0;
        let row = loop {
            match sqlx::raw_sql(AssertSqlSafe(statement.clone())).fetch_one(&self.pool).await {
                Ok(row) => break row,
                // Another node's REPLACE won a lock: the loser is rolled back (its ticket is
                // skipped, never reused) and may simply run again.
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some(SQLSTATE_DEADLOCK)
                        && attempt < CAS_ATTEMPTS_MAX =>
                {
                    tokio::time::sleep(cas_backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(self.unavailable(e)),
            }
        };
        let ticket: i64 = row.try_get(0).map_err(|e| self.unavailable(e))?;
        let ticket = u64::try_from(ticket).unwrap_or(0);
        let residue = self.residue();
        if ticket == 0 || ticket % self.modulus != residue {
            return Err(StoreError::Corrupt {
                tag: tag.to_string(),
                reason: format!(
                    "{} handed out ticket {ticket}, not ≡ {residue} (mod {}): were its \
                     auto-increment settings changed?",
                    self.location, self.modulus
                ),
            });
        }
        Ok(ticket)
    }

    async fn raise(&self, tag: &Tag, _block: u64, ticket: u64) -> Result<(), StoreError> {
        self.ensure_ready().await?;
        if ticket <= 1 {
            return Ok(());
        }
        // An explicit id at or above the counter moves it past that id; below it, nothing
        // changes. Either way the next ticket is above `ticket - 1`.
        let statement = format!(
            "REPLACE INTO {t} (id, stub) VALUES ({id}, {stub})",
            t = self.sql.table,
            id = ticket - 1,
            stub = stub(tag, &format!("/{}/raise", self.node)),
        );
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.unavailable(e))
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.ensure_ready().await?;
        let row = sqlx::query(sql(&self.sql.select))
            .bind(tag.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        row.map(|row| self.record(&row)).transpose()
    }

    async fn list(&self) -> Result<Vec<TagRecord>, StoreError> {
        self.ensure_ready().await?;
        let rows = sqlx::query(sql(&self.sql.list))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        rows.iter()
            .map(|row| self.record(row))
            .filter(|r| {
                if let Err(error) = r {
                    tracing::warn!(store = %self.location, %error, "tag row skipped");
                }
                r.is_ok()
            })
            .collect()
    }

    async fn create(&self, spec: &TagSpec) -> Result<(), StoreError> {
        self.ensure_ready().await?;
        let count: i64 = sqlx::query(sql(&self.sql.count))
            .fetch_one(&self.pool)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| self.unavailable(e))?;
        if usize::try_from(count).unwrap_or(usize::MAX) >= TAG_COUNT_MAX {
            return Err(StoreError::TooManyTags);
        }
        let step = i64::try_from(spec.step.get()).unwrap_or(i64::MAX);
        let inserted = sqlx::query(sql(&self.sql.insert))
            .bind(spec.tag.as_str())
            .bind(step)
            .bind(spec.description.as_str())
            .execute(&self.pool)
            .await;
        match inserted {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(SQLSTATE_DUPLICATE) => {
                return Err(StoreError::TagExists(spec.tag.clone()));
            }
            Err(e) => return Err(self.unavailable(e)),
        }
        // No tombstone here: tickets come from one auto-increment counter that a delete never
        // lowers, so a tag created again cannot be given a ticket the old one had.
        let start = spec.start.unwrap_or(StartId::DEFAULT).get();
        let start = ticket_at_or_above(start, spec.step.get());
        self.raise(&spec.tag, spec.step.get(), start).await
    }

    async fn delete(&self, tag: &Tag) -> Result<(), StoreError> {
        self.ensure_ready().await?;
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).remove(tag);
        let deleted = sqlx::query(sql(&self.sql.delete))
            .bind(tag.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        // The tag's stub rows (every node's); the counter keeps its value.
        let prefix = format!("{}/", tag.as_str());
        sqlx::query(sql(&self.sql.delete_stubs))
            .bind(prefix.len() as i64)
            .bind(prefix)
            .execute(&self.pool)
            .await
            .map_err(|e| self.unavailable(e))?;
        if deleted.rows_affected() == 0 {
            Err(StoreError::TagNotFound(tag.clone()))
        } else {
            Ok(())
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.ensure_ready().await?;
        sqlx::query(sql(&self.sql.probe))
            .fetch_optional(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.unavailable(e))
    }

    fn residue(&self) -> u64 {
        self.settings().map_or(0, |s| s.offset % self.modulus.max(1))
    }

    fn describe(&self) -> String {
        self.location.clone()
    }
}

/// The stub row of `tag` with `suffix` (`/NODE` or `/NODE/raise`, only digits and letters)
/// as SQL that cannot inject: the tag itself for a tag of `[A-Za-z0-9_.:-]` (as every
/// version wrote it), else `#` and the SHA-256 of its bytes, computed by the server (the stub
/// column is ASCII; `#` never starts a plain stub, so the two forms never meet).
fn stub(tag: &Tag, suffix: &str) -> String {
    let name = tag.as_str();
    if name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b)) {
        return format!("'{name}{suffix}'");
    }
    format!("CONCAT('#', SHA2({}, 256), '{suffix}')", bytes_literal(tag))
}

/// The SQL of one ticket table and its tag table; the name is a validated identifier.
struct Statements {
    table: String,
    probe: Arc<str>,
    create_tables: Arc<str>,
    select: Arc<str>,
    list: Arc<str>,
    count: Arc<str>,
    insert: Arc<str>,
    delete: Arc<str>,
    delete_stubs: Arc<str>,
}

impl Statements {
    fn new(t: &str) -> Statements {
        let s = |sql: String| Arc::<str>::from(sql);
        // The row's block and, as its max_id, the highest ticket any tag reached here.
        let columns = format!(
            "g.tag, CAST(g.step AS SIGNED), g.description, \
             CAST(UNIX_TIMESTAMP(g.update_time) AS SIGNED), \
             (SELECT COALESCE(CAST(MAX(id) AS SIGNED), 0) FROM {t})"
        );
        Statements {
            table: t.to_string(),
            probe: s(format!("SELECT 1 FROM {t}_tags LIMIT 1")),
            create_tables: s(format!(
                "CREATE TABLE IF NOT EXISTS {t} (\
                 id bigint unsigned NOT NULL AUTO_INCREMENT, \
                 stub varchar(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                 PRIMARY KEY (id), UNIQUE KEY stub (stub)\
                 ) ENGINE=InnoDB; \
                 CREATE TABLE IF NOT EXISTS {t}_tags (\
                 tag varchar(128) NOT NULL, \
                 step bigint NOT NULL, \
                 description varchar(256) DEFAULT NULL, \
                 update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, \
                 PRIMARY KEY (tag)\
                 ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
            )),
            select: s(format!("SELECT {columns} FROM {t}_tags AS g WHERE g.tag = ?")),
            list: s(format!(
                "SELECT {columns} FROM {t}_tags AS g ORDER BY g.tag LIMIT {TAG_COUNT_MAX}"
            )),
            count: s(format!("SELECT COUNT(*) FROM {t}_tags")),
            insert: s(format!("INSERT INTO {t}_tags (tag, step, description) VALUES (?, ?, ?)")),
            delete: s(format!("DELETE FROM {t}_tags WHERE tag = ?")),
            delete_stubs: s(format!("DELETE FROM {t} WHERE LEFT(stub, ?) = ?")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(u64, u64)]) -> Vec<AutoIncrement> {
        pairs.iter().map(|&(increment, offset)| AutoIncrement { increment, offset }).collect()
    }

    #[test]
    fn a_set_that_could_repeat_a_ticket_is_refused() {
        assert_eq!(check_set(&set(&[(2, 1), (2, 2)])), Ok(2));
        assert_eq!(check_set(&set(&[(1, 1)])), Ok(1));
        assert_eq!(check_set(&set(&[(4, 1), (4, 3)])), Ok(4), "room to add databases later");
        for (bad, reason) in [
            (set(&[(2, 1), (3, 2)]), "increment 2 and 3"),
            (set(&[(2, 1), (2, 1)]), "share auto_increment_offset residue 1"),
            (set(&[(1, 1), (1, 1)]), "number 2 but auto_increment_increment is 1"),
            (set(&[(2, 1), (2, 2), (2, 1)]), "number 3"),
            (set(&[(2, 3)]), "offset 3 with increment 2"),
            (set(&[]), "none"),
        ] {
            let refused = check_set(&bad).unwrap_err().to_string();
            assert!(refused.contains(reason), "{refused}");
        }
    }
}
