//! The openers, in one place: [`open`] (the store a [`StoreUrl`] names), [`open_workers`],
//! [`open_sequences`], [`open_counters`] (the sequence counters), and the single-database
//! opener the worker and sequence openers share ([`open_database`]), and [`open_tinyid`]. Kept out of the crate
//! root, which the backends import from, so the root imports no backend.

use std::sync::Arc;

use crate::SegmentStore;
use crate::counter::CounterStore;
use crate::error::StoreError;
#[cfg(feature = "mysql")]
use crate::flicker::open_flicker;
use crate::interleave;
use crate::memory::MemoryStore;
use crate::meta::TagMetaStore;
#[cfg(feature = "mysql")]
use crate::mysql::MySqlStore;
#[cfg(feature = "postgres")]
use crate::postgres::PgStore;
use crate::sequence::SequenceStore;
#[cfg(feature = "sqlite")]
use crate::sqlite::SqliteStore;
use crate::tinyid::TinyidStore;
use crate::url::StoreUrl;
use crate::worker::WorkerStore;

/// Opens the store a URL names, creating its table (and, for SQLite, its file and
/// directory) when absent.
pub async fn open(url: &StoreUrl) -> Result<Arc<dyn SegmentStore>, StoreError> {
    match url {
        #[cfg(feature = "mysql")]
        StoreUrl::Flicker(urls) => Ok(Arc::new(open_flicker(urls).await?)),
        #[cfg(not(feature = "mysql"))]
        StoreUrl::Flicker(_) => Err(StoreError::BadUrl {
            url: url.to_string(),
            reason: "this build has no MySQL support, which Flicker needs; build idmint with \
                     `--features mysql`"
                .to_string(),
        }),
        StoreUrl::Interleaved(urls) => {
            Ok(Arc::new(interleave::open_interleaved(urls, open_boxed).await?))
        }
        #[cfg(feature = "redis")]
        StoreUrl::Redis(url) => Ok(Arc::new(crate::redis::RedisStore::connect(url).await?)),
        single => Ok(open_database(single, true).await?),
    }
}

/// Checks that the store a URL names exists, creating and changing nothing: an SQLite file
/// holding the segment table (opened read-only), a MySQL or PostgreSQL database holding it,
/// each Flicker database holding its tag table, every member of an interleaved set. Memory
/// and Redis always pass: opening them creates nothing. What a command that must only read
/// (or change an existing tag) calls before [`open`], which creates what is absent.
pub async fn check_exists(url: &StoreUrl) -> Result<(), StoreError> {
    match url {
        StoreUrl::Memory => Ok(()),
        #[cfg(feature = "redis")]
        StoreUrl::Redis(_) => Ok(()),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite(path) => crate::sqlite::check_exists(path).await,
        #[cfg(feature = "mysql")]
        StoreUrl::Mysql(sql) => {
            let table = sql.options.table.as_str();
            let found = crate::mysql::table_exists(sql, table).await?;
            if found { Ok(()) } else { Err(no_table(url, table)) }
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(sql) => {
            let table = sql.options.table.as_str();
            let found = crate::postgres::table_exists(sql, table).await?;
            if found { Ok(()) } else { Err(no_table(url, table)) }
        }
        #[cfg(feature = "mysql")]
        StoreUrl::Flicker(urls) => {
            for flicker in urls {
                let table = format!("{}_tags", flicker.url.options.table.as_str());
                if !crate::mysql::table_exists(&flicker.url, &table).await? {
                    return Err(StoreError::Absent {
                        store: flicker.url.redacted(),
                        reason: format!("the database has no {table} table"),
                    });
                }
            }
            Ok(())
        }
        StoreUrl::Interleaved(urls) => {
            for member in urls {
                Box::pin(check_exists(member)).await?;
            }
            Ok(())
        }
        // A backend this build lacks: `open` says so.
        #[allow(unreachable_patterns, reason = "reached only in builds without a backend")]
        _ => Ok(()),
    }
}

/// The refusal of a database without the table `table`.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn no_table(url: &StoreUrl, table: &str) -> StoreError {
    StoreError::Absent {
        store: url.to_string(),
        reason: format!("the database has no {table} table"),
    }
}

/// A store URL opened once for a whole node: one handle (one pool, one connection budget)
/// that gives each engine the trait it needs. A single database (memory, SQLite, MySQL,
/// PostgreSQL) serves segments, worker leases and sequence ceilings from the same pool, so
/// `pool_max=1` means one connection per node; Redis serves segments and worker leases from
/// one connection. Sets of databases (Flicker, interleaved) serve segments only: worker
/// leases and ceilings must live in one database ([`Backend::workers`] and
/// [`Backend::sequences`] say why not), and so must tag metadata ([`Backend::tag_meta`]:
/// single databases and Redis).
#[derive(Clone)]
pub struct Backend {
    url: StoreUrl,
    segments: Arc<dyn SegmentStore>,
    workers: Option<Arc<dyn WorkerStore>>,
    sequences: Option<Arc<dyn SequenceStore>>,
    meta: Option<Arc<dyn TagMetaStore>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("url", &self.url.to_string()).finish_non_exhaustive()
    }
}

impl Backend {
    /// Opens `url` once, as [`open`] opens it for segments (the segment table created or
    /// checked as `create_tables=` says).
    pub async fn open(url: &StoreUrl) -> Result<Backend, StoreError> {
        let backend = |segments, workers, sequences, meta| Backend {
            url: url.clone(),
            segments,
            workers,
            sequences,
            meta,
        };
        Ok(match url {
            #[cfg(feature = "redis")]
            StoreUrl::Redis(redis) => {
                let store = Arc::new(crate::redis::RedisStore::connect(redis).await?);
                backend(store.clone(), Some(store.clone()), None, Some(store))
            }
            StoreUrl::Flicker(_) | StoreUrl::Interleaved(_) => {
                backend(open(url).await?, None, None, None)
            }
            single => {
                let database = open_database(single, true).await?;
                let meta = Some(database.clone() as Arc<dyn TagMetaStore>);
                backend(database.clone(), Some(database.clone()), Some(database), meta)
            }
        })
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The segment store.
    pub fn segments(&self) -> Arc<dyn SegmentStore> {
        Arc::clone(&self.segments)
    }

    /// The worker-lease store on the same handle, or why this URL cannot hold worker leases
    /// (as [`open_workers`] refuses it).
    pub fn workers(&self) -> Result<Arc<dyn WorkerStore>, StoreError> {
        self.workers.clone().ok_or_else(|| one_database(&self.url, "worker ids"))
    }

    /// The sequence-ceiling store on the same handle, or why this URL cannot hold ceilings
    /// (as [`open_sequences`] refuses it).
    pub fn sequences(&self) -> Result<Arc<dyn SequenceStore>, StoreError> {
        match &self.sequences {
            Some(store) => Ok(Arc::clone(store)),
            #[cfg(feature = "redis")]
            None if matches!(self.url, StoreUrl::Redis(_)) => Err(not_in_redis(&self.url)),
            None => Err(one_database(&self.url, "sequence ceilings")),
        }
    }

    /// The tag-metadata store on the same handle (a single database, or Redis), or `None` for
    /// a set of databases (Flicker, interleaved), where a value would have no one home: there
    /// the key guard keeps its legacy rows in the segment table.
    pub fn tag_meta(&self) -> Option<Arc<dyn TagMetaStore>> {
        self.meta.clone()
    }
}

/// Why a set of databases cannot hold `what`.
fn one_database(url: &StoreUrl, what: &str) -> StoreError {
    StoreError::BadUrl {
        url: url.to_string(),
        reason: format!(
            "{what} are kept in one database, so they need a single store: name one sqlite://, \
             mysql:// or postgres:// URL (or memory://) for them"
        ),
    }
}

/// Why Redis cannot hold sequence ceilings.
#[cfg(feature = "redis")]
fn not_in_redis(url: &StoreUrl) -> StoreError {
    StoreError::BadUrl {
        url: url.to_string(),
        reason: "sequences' ceilings are kept in SQL only, not in Redis: name a sqlite://, \
                 mysql:// or postgres:// URL for them"
            .to_string(),
    }
}

/// [`open`], boxed: how an interleaved set opens its members.
fn open_boxed(url: &StoreUrl) -> interleave::Opening<'_> {
    Box::pin(open(url))
}

/// A store of one database: it keeps segment rows, worker ids, sequence ceilings and tag
/// metadata alike.
pub(crate) trait Database:
    SegmentStore + WorkerStore + SequenceStore + TagMetaStore
{
}

impl<T: SegmentStore + WorkerStore + SequenceStore + TagMetaStore> Database for T {}

/// Opens a single-database URL (memory, SQLite, MySQL, PostgreSQL); with `segments`, opens
/// its segment table as [`open`] does (MySQL and PostgreSQL otherwise leave it alone: the
/// worker ids and sequences open their own tables when first used); refuses sets of databases (Flicker, interleaved) and Redis, which
/// [`open`] and [`open_workers`](crate::open_workers) open themselves.
pub(crate) async fn open_database(
    url: &StoreUrl,
    segments: bool,
) -> Result<Arc<dyn Database>, StoreError> {
    // Only the database backends tell the two apart.
    #[cfg(not(any(feature = "mysql", feature = "postgres")))]
    let _ = segments;
    match url {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path).await?)),
        #[cfg(not(feature = "sqlite"))]
        StoreUrl::Sqlite(_) => Err(StoreError::BadUrl {
            url: url.to_string(),
            reason: "this build has no SQLite support; build idmint with `--features sqlite`"
                .to_string(),
        }),
        #[cfg(feature = "mysql")]
        StoreUrl::Mysql(url) if segments => Ok(Arc::new(MySqlStore::connect(url).await?)),
        #[cfg(feature = "mysql")]
        StoreUrl::Mysql(url) => Ok(Arc::new(MySqlStore::connect_without_segments(url).await?)),
        #[cfg(not(feature = "mysql"))]
        StoreUrl::Mysql(url) => Err(StoreError::BadUrl {
            url: url.redacted(),
            reason: "this build has no MySQL support; build idmint with `--features mysql`"
                .to_string(),
        }),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) if segments => Ok(Arc::new(PgStore::connect(url).await?)),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) => Ok(Arc::new(PgStore::connect_without_segments(url).await?)),
        #[cfg(not(feature = "postgres"))]
        StoreUrl::Postgres(url) => Err(StoreError::BadUrl {
            url: url.redacted(),
            reason: "this build has no PostgreSQL support; build idmint with `--features postgres`"
                .to_string(),
        }),
        StoreUrl::Flicker(_) | StoreUrl::Interleaved(_) => Err(one_database(url, "worker ids")),
        // `open` and `open_workers` open Redis themselves: what is left needs a database.
        #[cfg(feature = "redis")]
        StoreUrl::Redis(_) => Err(not_in_redis(url)),
    }
}

/// Opens the counters at a Redis URL (`redis://…`, see `crate::redis`).
pub async fn open_counters(url: &str) -> Result<Arc<dyn CounterStore>, StoreError> {
    #[cfg(feature = "redis")]
    {
        let url = crate::redis::RedisUrl::parse(url)?;
        Ok(Arc::new(crate::redis::RedisCounters::connect(&url).await?))
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = url;
        Err(StoreError::BadUrl {
            url: "the sequence counters' URL".to_string(),
            reason: "this build has no Redis support, which sequences need; build idmint with \
                     `--features redis`"
                .to_string(),
        })
    }
}

/// Opens the store a URL names as a sequence store: `memory://`, `sqlite://…`, `mysql://…`
/// or `postgres://…`, leaving a database's segment table alone; the sequence tables are
/// created on first use (as `create_tables=` allows). Sets of databases (Flicker, interleaved) are refused: a
/// sequence's ceilings must live in one database, or two nodes could each raise a different
/// copy and hand out the same ids.
pub async fn open_sequences(url: &StoreUrl) -> Result<Arc<dyn SequenceStore>, StoreError> {
    match url {
        StoreUrl::Flicker(_) | StoreUrl::Interleaved(_) => {
            Err(one_database(url, "sequence ceilings"))
        }
        single => Ok(open_database(single, false).await?),
    }
}

/// Opens the store a URL names as a worker store: `memory://`, `sqlite://…`, `mysql://…`,
/// `postgres://…` or `redis://…`, leaving a database's segment table alone. The worker
/// tables are created on first use (as `create_tables=` allows). Flicker and interleaved URLs are refused: worker
/// ids must live in one database.
pub async fn open_workers(url: &StoreUrl) -> Result<Arc<dyn WorkerStore>, StoreError> {
    match url {
        #[cfg(feature = "redis")]
        StoreUrl::Redis(url) => Ok(Arc::new(crate::redis::RedisStore::connect(url).await?)),
        _ => Ok(open_database(url, false).await?),
    }
}

/// Opens a Didi Tinyid database (`mysql://…`: Tinyid runs on MySQL) as a [`TinyidStore`],
/// checking that its tables exist; never creates them. Every other kind of URL is refused
/// with the reason.
pub async fn open_tinyid(url: &StoreUrl) -> Result<Arc<dyn TinyidStore>, StoreError> {
    match url {
        #[cfg(feature = "mysql")]
        StoreUrl::Mysql(sql) => Ok(Arc::new(crate::tinyid::TinyidMySqlStore::connect(sql).await?)),
        #[cfg(not(feature = "mysql"))]
        StoreUrl::Mysql(_) => Err(StoreError::BadUrl {
            url: url.to_string(),
            reason: "this build has no MySQL support, which Tinyid's tables need; build idmint \
                     with `--features mysql`"
                .to_string(),
        }),
        other => Err(StoreError::BadUrl {
            url: other.to_string(),
            reason: "Tinyid's tables (tiny_id_info, tiny_id_token) are served from MySQL or \
                     MariaDB, where Tinyid runs: name its database as mysql://USER:PASSWORD@HOST:\
                     PORT/DB"
                .to_string(),
        }),
    }
}
