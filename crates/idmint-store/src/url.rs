//! Store URLs: `sqlite://PATH` (the default, `sqlite://./idmint-data/idmint.db`),
//! `memory://` (nothing persists; for tests and demos), `mysql://…` (MariaDB too),
//! `postgres://…` and, with feature `redis`, `redis://[USER:PASSWORD@]HOST[:PORT][/DB]`,
//! `redis+sentinel://[PASSWORD@]HOST:PORT[,…]/MASTER[/DB]` and
//! `redis+cluster://[PASSWORD@]HOST:PORT[,…]`, each with `?prefix=P` (default `idmint:`,
//! starts every key idmint writes; see `idmint_store::redis`).
//!
//! The database URLs take idmint's own options as query parameters, which are removed
//! before the URL reaches the driver: `table` (default `leaf_alloc`), `alloc` (`update`, the
//! default: one atomic `UPDATE`; or `cas`: read, then compare-and-set, for databases and
//! proxies that forbid expression updates), `pool_max` (connections, default
//! [`POOL_MAX_DEFAULT`]), `workers_table`, `worker_node_table` and `create_tables`
//! ([`CreateTables`]: `true`, `false` or `auto`, the default). Every other parameter is the driver's (e.g. `ssl-mode`).
//!
//! Several URLs separated by spaces interleave their stores by residue
//! ([`crate::InterleavedStore`]): `"mysql://a/ids mysql://b/ids"` serves each tag from both
//! databases, the first handing out the blocks ≡ 0 and the second those ≡ 1 (mod 2).
//! `flicker+mysql://…` names a Flicker ticket database (feature `mysql`), with the options
//! `table` (default [`FLICKER_TABLE_DEFAULT`]), `pool_max`, `node` (this node's stub row;
//! default: the host name) and `increment` + `offset` (the `auto_increment_increment` and
//! `auto_increment_offset` idmint sets and checks on every connection; without them the
//! server's own settings are read and checked). Several `flicker+mysql://` URLs are one
//! Flicker set.
//!
//! Displaying a URL never shows a password.

use std::fmt;
use std::path::PathBuf;

use crate::{StoreError, TABLE_NAME};

/// Most sources one interleaved store takes (the URL's space-separated parts).
pub const INTERLEAVE_SOURCES_MAX: usize = 16;

/// Connections a database store opens at most, by default.
pub const POOL_MAX_DEFAULT: u32 = 10;
/// Largest `pool_max` accepted.
pub const POOL_MAX_LIMIT: u32 = 256;
/// File descriptors set aside for an SQLite store: the database, its write-ahead log and
/// shared memory, for each engine that opens it (segments, worker leases, sequences).
pub const SQLITE_DESCRIPTORS: u64 = 12;
/// File descriptors set aside for a Redis store or the sequences' Redis: its multiplexed
/// connection, a Sentinel's connections, a Cluster's nodes.
pub const REDIS_DESCRIPTORS: u64 = 32;
/// Longest table name accepted (MySQL's identifier limit).
pub const TABLE_NAME_LEN_MAX: usize = 64;

/// A parsed store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// In-process memory; everything is lost at exit.
    Memory,
    /// An SQLite database file, created with its directory when absent.
    Sqlite(PathBuf),
    /// A MySQL or MariaDB database.
    Mysql(SqlUrl),
    /// A PostgreSQL database.
    Postgres(SqlUrl),
    /// Flicker ticket databases (MySQL family), interleaved by their auto-increment offsets.
    Flicker(Vec<FlickerUrl>),
    /// A Redis server (feature `redis`): segments and worker ids, not sequences' ceilings.
    #[cfg(feature = "redis")]
    Redis(crate::redis::RedisUrl),
    /// Segment stores interleaved by residue: the store at position `i` owns the blocks
    /// `≡ i (mod len)`. Never nested.
    Interleaved(Vec<StoreUrl>),
}

/// One Flicker ticket database: `flicker+mysql://USER:PASSWORD@HOST:PORT/DB?…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlickerUrl {
    /// The database; `options.table` names the ticket table (its tag table is the same name
    /// with `_tags`), `options.alloc` is unused.
    pub url: SqlUrl,
    /// This node's stub row (`{tag}/{node}`): `[A-Za-z0-9_.:-]`, 1 to
    /// [`FLICKER_NODE_LEN_MAX`] characters.
    pub node: String,
    /// `auto_increment_increment` and `auto_increment_offset` to set on each connection;
    /// `None` reads the server's.
    pub auto_increment: Option<AutoIncrement>,
}

/// A ticket database's auto-increment series: `offset + k × increment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoIncrement {
    /// `auto_increment_increment`: how many databases the set may hold.
    pub increment: u64,
    /// `auto_increment_offset`, 1 to `increment`: the database's place in the set.
    pub offset: u64,
}

/// The ticket table of a Flicker database, by default.
pub const FLICKER_TABLE_DEFAULT: &str = "idmint_tickets";
/// Longest Flicker node name (the stub row's suffix).
pub const FLICKER_NODE_LEN_MAX: usize = 64;
/// Largest `auto_increment_increment` MySQL and MariaDB accept.
pub const AUTO_INCREMENT_MAX: u64 = 65_535;
/// Longest Flicker table name: `_tags` is appended for its tag table.
const FLICKER_TABLE_LEN_MAX: usize = TABLE_NAME_LEN_MAX - "_tags".len();

/// A database URL split into the driver's part and idmint's options.
#[derive(Clone, PartialEq, Eq)]
pub struct SqlUrl {
    /// The URL for the driver, idmint's parameters removed. Holds the password: never
    /// display it; use [`SqlUrl::redacted`].
    driver_url: String,
    /// idmint's options.
    pub options: SqlOptions,
}

/// How idmint uses a database store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlOptions {
    /// The segment table.
    pub table: TableName,
    /// How `allocate` reserves a range.
    pub alloc: AllocMode,
    /// Connections opened at most.
    pub pool_max: u32,
    /// The worker-id lease table (`workers_table=`, default
    /// [`WORKERS_TABLE`](crate::WORKERS_TABLE)): idmint creates it in this database when
    /// absent, beside Leaf's table; name it so it cannot clash with a table of yours.
    pub workers_table: TableName,
    /// The worker-id assignment table (`worker_node_table=`, default
    /// [`WORKER_NODE_TABLE`](crate::WORKER_NODE_TABLE)), likewise.
    pub worker_node_table: TableName,
    /// Whether idmint may create the tables it needs (`create_tables=`).
    pub create_tables: CreateTables,
}

/// Whether a node may create the tables it needs (`create_tables=` of a database URL).
/// Every table is created when its feature first needs it, never altered: the segment
/// table at start, the tombstone table at the first tag deletion, the worker tables at the
/// first lease or assignment, the sequence tables at the first sequence call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreateTables {
    /// The default: create what a feature needs, but not a segment table in a database that
    /// holds another Leaf-shaped table (`biz_tag`, `max_id`, `step`: most likely a mistyped
    /// `table=`), and not one in a Tinyid database until a tag is first created there.
    #[default]
    Auto,
    /// `create_tables=true`: create what a feature needs, a new segment table included.
    Always,
    /// `create_tables=false`: issue no DDL at all; a missing table is a final error naming
    /// the table and `idmint schema print`.
    Never,
}

impl CreateTables {
    /// Whether any DDL may be issued.
    pub fn allowed(self) -> bool {
        self != CreateTables::Never
    }
}

/// How a database store reserves a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocMode {
    /// One atomic `UPDATE … SET max_id = max_id + …` (MySQL: with `LAST_INSERT_ID`).
    #[default]
    Update,
    /// Read `max_id`, then `UPDATE … SET max_id = ? WHERE biz_tag = ? AND max_id = ?`,
    /// retried a bounded number of times: no expression in the update.
    Cas,
}

/// A validated table name: `[A-Za-z_][A-Za-z0-9_]*`, at most [`TABLE_NAME_LEN_MAX`]
/// characters, so it can be written into SQL as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName(String);

/// The store `idmint serve` and `idmint tag` use without `--store`.
pub const DEFAULT_STORE_URL: &str = "sqlite://./idmint-data/idmint.db";

const ACCEPTED: &str = "use sqlite://PATH (e.g. sqlite://./idmint-data/idmint.db), memory://, \
                        mysql://USER:PASSWORD@HOST:PORT/DB, postgres://USER:PASSWORD@HOST:PORT/DB \
                        or redis://[:PASSWORD@]HOST[:PORT][/DB][?prefix=P] (also \
                        redis+sentinel://, redis+cluster://)";

impl StoreUrl {
    /// The file descriptors a store opened from this URL may hold: its pool's `pool_max`
    /// connections on a database (each Flicker and interleaved one's), or what
    /// [`SQLITE_DESCRIPTORS`] and [`REDIS_DESCRIPTORS`] set aside.
    pub fn descriptors_reserved(&self) -> u64 {
        match self {
            StoreUrl::Memory => 0,
            StoreUrl::Sqlite(_) => SQLITE_DESCRIPTORS,
            StoreUrl::Mysql(url) | StoreUrl::Postgres(url) => u64::from(url.options.pool_max),
            StoreUrl::Flicker(urls) => urls.iter().map(|f| u64::from(f.url.options.pool_max)).sum(),
            #[cfg(feature = "redis")]
            StoreUrl::Redis(_) => REDIS_DESCRIPTORS,
            StoreUrl::Interleaved(stores) => {
                stores.iter().map(StoreUrl::descriptors_reserved).sum()
            }
        }
    }

    /// Parses a store URL, or several separated by spaces (interleaved).
    pub fn parse(url: &str) -> Result<StoreUrl, StoreError> {
        let parts: Vec<&str> = url.split_whitespace().collect();
        // A single URL (a file path may hold spaces), unless every part names a scheme.
        if parts.len() <= 1 || !parts.iter().all(|p| p.contains("://")) {
            return StoreUrl::parse_one(url.trim());
        }
        let bad = |reason: String| StoreError::BadUrl { url: redact_urls(url), reason };
        if parts.len() > INTERLEAVE_SOURCES_MAX {
            return Err(bad(format!(
                "{} stores given; interleave at most {}",
                parts.len(),
                INTERLEAVE_SOURCES_MAX
            )));
        }
        let stores = parts.into_iter().map(StoreUrl::parse_one).collect::<Result<Vec<_>, _>>()?;
        if stores.iter().all(|s| matches!(s, StoreUrl::Flicker(_))) {
            let urls = stores.into_iter().flat_map(|s| match s {
                StoreUrl::Flicker(urls) => urls,
                _ => Vec::new(),
            });
            return Ok(StoreUrl::Flicker(urls.collect()));
        }
        if stores.iter().any(|s| matches!(s, StoreUrl::Flicker(_))) {
            return Err(bad(
                "Flicker ticket databases and segment stores cannot be mixed in one store; \
                 run one idmint for each"
                    .to_string(),
            ));
        }
        if stores.contains(&StoreUrl::Memory) && stores.iter().any(|s| *s != StoreUrl::Memory) {
            return Err(bad("memory:// interleaves only with memory://".to_string()));
        }
        Ok(StoreUrl::Interleaved(stores))
    }

    fn parse_one(url: &str) -> Result<StoreUrl, StoreError> {
        let bad = |reason: String| StoreError::BadUrl { url: redact(url), reason };
        let (scheme, rest) = url
            .split_once("://")
            .or_else(|| url.split_once(':'))
            .ok_or_else(|| bad(format!("no scheme; {ACCEPTED}")))?;
        match scheme {
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(bad("memory:// takes no path".to_string())),
            "sqlite" if rest.is_empty() => Err(bad(format!("no database path; {ACCEPTED}"))),
            "sqlite" => Ok(StoreUrl::Sqlite(PathBuf::from(rest))),
            "mysql" | "mariadb" => Ok(StoreUrl::Mysql(SqlUrl::parse("mysql", rest, &bad)?)),
            "postgres" | "postgresql" => {
                Ok(StoreUrl::Postgres(SqlUrl::parse("postgres", rest, &bad)?))
            }
            "flicker+mysql" | "flicker+mariadb" => {
                Ok(StoreUrl::Flicker(vec![FlickerUrl::parse(rest, &bad)?]))
            }
            #[cfg(feature = "redis")]
            "redis" | "redis+sentinel" | "redis+cluster" => {
                Ok(StoreUrl::Redis(crate::redis::RedisUrl::parse(url)?))
            }
            #[cfg(not(feature = "redis"))]
            "redis" | "redis+sentinel" | "redis+cluster" => {
                Err(bad("this build has no Redis support; build idmint with `--features redis`"
                    .to_string()))
            }
            other => Err(bad(format!("unknown scheme {other:?}; {ACCEPTED}"))),
        }
    }
}

impl FlickerUrl {
    fn parse(rest: &str, bad: &dyn Fn(String) -> StoreError) -> Result<FlickerUrl, StoreError> {
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut node = None;
        let mut increment = None;
        let mut offset = None;
        let mut table = None;
        let mut passed = Vec::new();
        let number = |key: &str, value: &str| {
            value.parse::<u64>().ok().filter(|n| (1..=AUTO_INCREMENT_MAX).contains(n)).ok_or_else(
                || bad(format!("{key}={value:?} is out of range; use 1 to {AUTO_INCREMENT_MAX}")),
            )
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "node" => node = Some(node_name(value).map_err(bad)?),
                "increment" => increment = Some(number(key, value)?),
                "offset" => offset = Some(number(key, value)?),
                "alloc" => {
                    return Err(bad(
                        "alloc does not apply to a Flicker database: its tickets come from the \
                         auto-increment"
                            .to_string(),
                    ));
                }
                "table" => {
                    if value.len() > FLICKER_TABLE_LEN_MAX {
                        return Err(bad(format!(
                            "table={value:?} is too long for a ticket table; use at most \
                             {FLICKER_TABLE_LEN_MAX} characters (idmint adds `_tags`)"
                        )));
                    }
                    table = Some(value);
                    passed.push(pair);
                }
                _ => passed.push(pair),
            }
        }
        let table_param = format!("table={FLICKER_TABLE_DEFAULT}");
        if table.is_none() {
            passed.push(&table_param);
        }
        let rest = format!("{location}?{}", passed.join("&"));
        let url = SqlUrl::parse("mysql", &rest, bad)?;
        let auto_increment = match (increment, offset) {
            (None, None) => None,
            (Some(increment), Some(offset)) if offset <= increment => {
                Some(AutoIncrement { increment, offset })
            }
            (Some(increment), Some(offset)) => {
                return Err(bad(format!(
                    "offset={offset} is above increment={increment}; the server would ignore \
                     it. Use an offset from 1 to the increment"
                )));
            }
            _ => {
                return Err(bad(
                    "give both increment and offset (e.g. increment=2&offset=1), or neither to \
                     use the server's settings"
                        .to_string(),
                ));
            }
        };
        let node = match node {
            Some(node) => node,
            None => default_node_name(),
        };
        Ok(FlickerUrl { url, node, auto_increment })
    }
}

/// A Flicker node name, or why it is refused.
fn node_name(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= FLICKER_NODE_LEN_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "node={name:?} is not a node name; use 1 to {FLICKER_NODE_LEN_MAX} characters of \
             A-Z a-z 0-9 _ . : -"
        ))
    }
}

/// This machine's host name (Linux's `/proc/sys/kernel/hostname`, else `$HOSTNAME`), or an
/// empty string when neither can be read.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| host.trim().to_string())
        .unwrap_or_default()
}

/// This machine's host name as a node name (characters outside the node alphabet become
/// `-`), or `idmint` when it cannot be read.
fn default_node_name() -> String {
    let cleaned: String = host_name()
        .chars()
        .take(FLICKER_NODE_LEN_MAX)
        .map(|c| if c.is_ascii_alphanumeric() || "_.:-".contains(c) { c } else { '-' })
        .collect();
    if cleaned.is_empty() { "idmint".to_string() } else { cleaned }
}

impl SqlUrl {
    fn parse(
        scheme: &str,
        rest: &str,
        bad: &dyn Fn(String) -> StoreError,
    ) -> Result<SqlUrl, StoreError> {
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let host_end = location.find('/').unwrap_or(location.len());
        if location[..host_end].rsplit('@').next().is_none_or(str::is_empty) {
            return Err(bad(format!("no host; {ACCEPTED}")));
        }
        if location[host_end..].trim_start_matches('/').is_empty() {
            return Err(bad(format!("no database name after the host; {ACCEPTED}")));
        }
        let mut options = SqlOptions::default();
        let mut driver_params = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "table" => {
                    options.table = TableName::new(value).map_err(bad)?;
                }
                "workers_table" | "worker_node_table" => {
                    let name =
                        TableName::new(value).map_err(|reason| bad(format!("{key}: {reason}")))?;
                    if key == "workers_table" {
                        options.workers_table = name;
                    } else {
                        options.worker_node_table = name;
                    }
                }
                "alloc" => {
                    options.alloc = match value {
                        "update" => AllocMode::Update,
                        "cas" => AllocMode::Cas,
                        other => {
                            return Err(bad(format!(
                                "alloc={other:?} is not a mode; use alloc=update (one atomic \
                                 UPDATE, the default) or alloc=cas (read, then compare-and-set)"
                            )));
                        }
                    }
                }
                "create_tables" => {
                    options.create_tables = match value {
                        "true" => CreateTables::Always,
                        "false" => CreateTables::Never,
                        "auto" => CreateTables::Auto,
                        other => {
                            return Err(bad(format!(
                                "create_tables={other:?} is not a choice; use create_tables=true \
                                 (create every table a feature needs), false (no DDL at all; \
                                 apply `idmint schema print` yourself) or auto (the default)"
                            )));
                        }
                    }
                }
                "pool_max" => {
                    options.pool_max = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=POOL_MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "pool_max={value:?} is out of range; use 1 to {POOL_MAX_LIMIT}"
                            ))
                        })?;
                }
                _ => driver_params.push(pair),
            }
        }
        let mut driver_url = format!("{scheme}://{location}");
        if !driver_params.is_empty() {
            driver_url.push('?');
            driver_url.push_str(&driver_params.join("&"));
        }
        Ok(SqlUrl { driver_url, options })
    }

    /// The URL for the driver (idmint's parameters removed). It holds the password: pass it
    /// to the driver only, never to a log or an error.
    pub fn driver_url(&self) -> &str {
        &self.driver_url
    }

    /// The URL with any password replaced by `***`, for logs and errors.
    pub fn redacted(&self) -> String {
        redact(&self.driver_url)
    }
}

impl fmt::Debug for SqlUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlUrl")
            .field("url", &self.redacted())
            .field("options", &self.options)
            .finish()
    }
}

impl Default for SqlOptions {
    fn default() -> SqlOptions {
        SqlOptions {
            table: TableName::default(),
            alloc: AllocMode::Update,
            pool_max: POOL_MAX_DEFAULT,
            workers_table: TableName::known(crate::WORKERS_TABLE),
            worker_node_table: TableName::known(crate::WORKER_NODE_TABLE),
            create_tables: CreateTables::Auto,
        }
    }
}

impl TableName {
    /// A table name, or why it is refused.
    pub fn new(name: &str) -> Result<TableName, String> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if first_ok && rest_ok && name.len() <= TABLE_NAME_LEN_MAX {
            Ok(TableName(name.to_string()))
        } else {
            Err(format!(
                "table={name:?} is not a table name; use 1 to {TABLE_NAME_LEN_MAX} characters of \
                 A-Z a-z 0-9 _, not starting with a digit"
            ))
        }
    }

    /// One of idmint's own table names (a constant of the crate, a valid name: checked by
    /// the tests of this module).
    pub(crate) fn known(name: &'static str) -> TableName {
        debug_assert!(TableName::new(name).is_ok(), "{name}");
        TableName(name.to_string())
    }

    /// The name, safe to write into SQL as is.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TableName {
    fn default() -> TableName {
        TableName(TABLE_NAME.to_string())
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory://"),
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Mysql(url) | StoreUrl::Postgres(url) => f.write_str(&url.redacted()),
            #[cfg(feature = "redis")]
            StoreUrl::Redis(url) => write!(f, "{url}"),
            StoreUrl::Flicker(urls) => {
                let urls: Vec<String> = urls
                    .iter()
                    .map(|u| u.url.redacted().replacen("mysql://", "flicker+mysql://", 1))
                    .collect();
                f.write_str(&urls.join(" "))
            }
            StoreUrl::Interleaved(urls) => {
                let urls: Vec<String> = urls.iter().map(ToString::to_string).collect();
                f.write_str(&urls.join(" "))
            }
        }
    }
}

/// A store or Redis URL as text, or several separated by spaces, with every password
/// replaced by `***` (`user:***@host`, and a `password=` query parameter's value), for logs,
/// errors and printed configurations. The text need not be a valid URL.
pub fn redact_urls(urls: &str) -> String {
    urls.split_whitespace().map(redact).collect::<Vec<_>>().join(" ")
}

/// `url` with the password of its `user:password@` part, and the value of a `password=`
/// query parameter (which the PostgreSQL and MySQL drivers accept), replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((url, query)) => (url, Some(redact_query(query))),
        None => (url, None),
    };
    let url = redact_user_info(url);
    match query {
        Some(query) => format!("{url}?{query}"),
        None => url,
    }
}

/// `url` (no query) with the password of its `user:password@` part replaced by `***`.
fn redact_user_info(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_string() };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        // redis+sentinel:// and redis+cluster:// take a lone password.
        None if scheme.starts_with("redis+") => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// A query string with the value of each `password=` parameter replaced by `***`.
fn redact_query(query: &str) -> String {
    let masked: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect();
    masked.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!(StoreUrl::parse("memory://"), Ok(StoreUrl::Memory));
        assert_eq!(
            StoreUrl::parse(DEFAULT_STORE_URL),
            Ok(StoreUrl::Sqlite(PathBuf::from("./idmint-data/idmint.db")))
        );
        assert_eq!(StoreUrl::parse("sqlite:///var/x.db"), Ok(StoreUrl::Sqlite("/var/x.db".into())));
        assert_eq!(StoreUrl::parse("sqlite:x.db"), Ok(StoreUrl::Sqlite("x.db".into())));
    }

    #[test]
    fn database_urls_keep_idmint_options_apart_from_the_driver() {
        let Ok(StoreUrl::Mysql(url)) = StoreUrl::parse(
            "mysql://root:pw@127.0.0.1:3306/ids?table=my_alloc&ssl-mode=disabled&alloc=cas&pool_max=4",
        ) else {
            panic!("not a MySQL URL")
        };
        assert_eq!(url.driver_url(), "mysql://root:pw@127.0.0.1:3306/ids?ssl-mode=disabled");
        assert_eq!(url.options.table.as_str(), "my_alloc");
        assert_eq!(url.options.alloc, AllocMode::Cas);
        assert_eq!(url.options.pool_max, 4);
        assert_eq!(url.redacted(), "mysql://root:***@127.0.0.1:3306/ids?ssl-mode=disabled");
        assert!(!format!("{url:?}").contains("pw@"));
        let Ok(StoreUrl::Postgres(url)) = StoreUrl::parse("postgresql://postgres@db/ids") else {
            panic!("not a PostgreSQL URL")
        };
        assert_eq!(url.driver_url(), "postgres://postgres@db/ids");
        assert_eq!(url.options, SqlOptions::default());
        assert_eq!(url.options.table.as_str(), "leaf_alloc");
        assert_eq!(url.options.workers_table.as_str(), crate::WORKERS_TABLE);
        assert_eq!(url.options.worker_node_table.as_str(), crate::WORKER_NODE_TABLE);
        let named = "mysql://u@db/ids?workers_table=leaf_workers&worker_node_table=leaf_nodes";
        let Ok(StoreUrl::Mysql(url)) = StoreUrl::parse(named) else { panic!("not MySQL") };
        assert_eq!(url.options.workers_table.as_str(), "leaf_workers");
        assert_eq!(url.options.worker_node_table.as_str(), "leaf_nodes");
        assert_eq!(url.driver_url(), "mysql://u@db/ids");
        assert_eq!(url.options.create_tables, CreateTables::Auto);
        for (value, expected) in [
            ("true", CreateTables::Always),
            ("false", CreateTables::Never),
            ("auto", CreateTables::Auto),
        ] {
            let text = format!("postgres://u@db/ids?create_tables={value}&sslmode=disable");
            let Ok(StoreUrl::Postgres(url)) = StoreUrl::parse(&text) else { panic!("{text}") };
            assert_eq!(url.options.create_tables, expected);
            assert_eq!(url.driver_url(), "postgres://u@db/ids?sslmode=disable");
        }
    }

    #[test]
    #[cfg(not(feature = "redis"))]
    fn redis_urls_say_which_feature_they_need() {
        for url in ["redis://h", "redis+sentinel://pw@h:1/m", "redis+cluster://pw@h:1"] {
            let err = StoreUrl::parse(url).unwrap_err().to_string();
            assert!(err.contains("--features redis") && !err.contains("pw@"), "{err}");
        }
    }

    #[test]
    fn refuses_with_a_reason_and_never_shows_a_password() {
        for (url, reason) in [
            ("mysql://root:hunter2@db:3306/ids?table=x;drop", "not a table name"),
            ("mysql://root:hunter2@db:3306/ids?workers_table=w;drop%20x", "workers_table: "),
            ("postgres://root:hunter2@db:5432/ids?worker_node_table=1n", "worker_node_table: "),
            ("postgres://root:hunter2@db:5432/ids?workers_table=", "not a table name"),
            ("mysql://root:hunter2@db:3306/ids?alloc=fast", "not a mode"),
            ("mysql://root:hunter2@db:3306/ids?create_tables=yes", "not a choice"),
            ("mysql://root:hunter2@db:3306/ids?pool_max=0", "out of range"),
            ("postgres://root:hunter2@db:5432", "no database name"),
            ("postgres://root:hunter2@/ids", "no host"),
        ] {
            let err = StoreUrl::parse(url).unwrap_err().to_string();
            assert!(!err.contains("hunter2"), "{err}");
            assert!(err.contains(reason) && err.contains("root:***@"), "{err}");
        }
        assert!(StoreUrl::parse("sqlite://").is_err());
        assert!(StoreUrl::parse("ftp://x").unwrap_err().to_string().contains("unknown scheme"));
        assert!(StoreUrl::parse("just-a-path").is_err());
    }

    #[test]
    fn redact_urls_masks_every_password_of_every_url() {
        assert_eq!(
            redact_urls("mysql://app:pw1@db1/ids postgres://app:pw2@db2/ids?password=pw3&x=1"),
            "mysql://app:***@db1/ids postgres://app:***@db2/ids?password=***&x=1"
        );
        assert_eq!(redact_urls("redis+sentinel://pw@h:26379/m"), "redis+sentinel://***@h:26379/m");
        assert_eq!(redact_urls("redis://:pw@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(
            redact_urls("sqlite://./idmint-data/idmint.db"),
            "sqlite://./idmint-data/idmint.db"
        );
        assert_eq!(redact_urls("not a url"), "not a url");
    }
}
