//! The MySQL/MariaDB and PostgreSQL servers tests run against, and a fresh database on them.
//!
//! The server is the one `IDMINT_TEST_MYSQL_URL` / `IDMINT_TEST_POSTGRES_URL` names, or,
//! when that is unset, a private one this test process starts from the installed binaries
//! (once per process, on a free loopback port, in a temporary directory its reaper removes
//! when the process ends: [`crate::servers`]). When neither is there, the test is skipped
//! and says so in the run's summary ([`crate::skip`]).
//!
//! Every fresh database is `idmint_t{unix seconds}_{pid}_{n}_{purpose}`: no two tests of any
//! run share one. On a configured server, databases of that pattern older than
//! [`STALE_DATABASE_AGE_S`] (runs that ended without cleaning up) are dropped once per
//! process; nothing else there is touched. A private server goes away whole.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::{AssertSqlSafe, Connection};

use crate::servers::{PrivateMariaDb, PrivatePostgres, installed};
use crate::skip::{NO_MARIADB, NO_POSTGRES, skip};

/// Every database a test makes starts with this.
pub const DATABASE_PREFIX: &str = "idmint_t";
/// A test database older than this belongs to a finished run and is dropped.
pub const STALE_DATABASE_AGE_S: u64 = 2 * 60 * 60;
/// The longest `purpose` kept in a database name (MySQL allows 64 bytes in all).
const PURPOSE_LEN_MAX: usize = 24;

/// MySQL/MariaDB: the server and a fresh database on it.
pub mod mysql {
    use super::{Kind, Shared};

    /// Names the server the tests use instead of a private one: a URL with a database they
    /// may connect to (`mysql://root@127.0.0.1:3306/test`).
    pub const URL_VAR: &str = "IDMINT_TEST_MYSQL_URL";

    /// The admin URL of the server (configured or private), or `None` after recording that
    /// the running test is skipped. Panics when a private server was due but did not start.
    pub fn server_url() -> Option<String> {
        SERVER.url()
    }

    /// The URL of a new, empty database for `purpose` (a short word, part of its name), or
    /// `None` after recording the skip. Query parameters of the server's URL are kept.
    pub async fn fresh_database(purpose: &str) -> Option<String> {
        SERVER.fresh_database(purpose).await
    }

    /// [`fresh_database`] holding what `sql` (statements separated by `;`, e.g. a
    /// [`crate::fixtures`] text) makes. Panics when `sql` fails.
    pub async fn fresh_database_with(purpose: &str, sql: &str) -> Option<String> {
        use sqlx::{AssertSqlSafe, Connection};
        let url = fresh_database(purpose).await?;
        if sql.trim().is_empty() {
            return Some(url);
        }
        let mut conn =
            sqlx::MySqlConnection::connect(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("loading {purpose} into {url}: {e}"));
        let _ = conn.close().await;
        Some(url)
    }

    static SERVER: Shared = Shared::new(Kind::MySql);
}

/// PostgreSQL: the server and a fresh database on it.
pub mod postgres {
    use super::{Kind, Shared};

    /// Names the server the tests use instead of a private one
    /// (`postgres://postgres@127.0.0.1:5432/postgres`).
    pub const URL_VAR: &str = "IDMINT_TEST_POSTGRES_URL";

    /// The admin URL of the server (configured or private), or `None` after recording that
    /// the running test is skipped. Panics when a private server was due but did not start.
    pub fn server_url() -> Option<String> {
        SERVER.url()
    }

    /// The URL of a new, empty database for `purpose` (a short word, part of its name), or
    /// `None` after recording the skip. Query parameters of the server's URL are kept.
    pub async fn fresh_database(purpose: &str) -> Option<String> {
        SERVER.fresh_database(purpose).await
    }

    static SERVER: Shared = Shared::new(Kind::Postgres);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    MySql,
    Postgres,
}

/// Where one kind of server comes from, decided once per process.
enum Server {
    /// The variable names it.
    Configured(String),
    /// Started here; stops when the process ends (or never starts: the error).
    Private(Result<PrivateSql, String>),
    /// Neither configured nor installed.
    Missing,
}

enum PrivateSql {
    MySql(PrivateMariaDb),
    Postgres(PrivatePostgres),
}

struct Shared {
    kind: Kind,
    server: OnceLock<Server>,
    swept: AtomicBool,
}

impl Shared {
    const fn new(kind: Kind) -> Shared {
        Shared { kind, server: OnceLock::new(), swept: AtomicBool::new(false) }
    }

    fn url(&self) -> Option<String> {
        let server = self.server.get_or_init(|| self.decide());
        match server {
            Server::Configured(url) => Some(url.clone()),
            Server::Private(Ok(PrivateSql::MySql(db))) => Some(db.url("mysql")),
            Server::Private(Ok(PrivateSql::Postgres(db))) => Some(db.url("postgres")),
            Server::Private(Err(e)) => panic!("{e}"),
            Server::Missing => {
                skip(match self.kind {
                    Kind::MySql => NO_MARIADB,
                    Kind::Postgres => NO_POSTGRES,
                });
                None
            }
        }
    }

    fn decide(&self) -> Server {
        let var = match self.kind {
            Kind::MySql => mysql::URL_VAR,
            Kind::Postgres => postgres::URL_VAR,
        };
        if let Some(url) = std::env::var(var).ok().filter(|url| !url.is_empty()) {
            return Server::Configured(url);
        }
        let private = match self.kind {
            Kind::MySql if installed::mariadb().is_some() => PrivateMariaDb::start()
                .map(PrivateSql::MySql)
                .map_err(|e| format!("{var} is unset and a private mariadbd did not start: {e:#}")),
            Kind::Postgres if installed::postgres_bin().is_some() => PrivatePostgres::start()
                .map(PrivateSql::Postgres)
                .map_err(|e| format!("{var} is unset and a private postgres did not start: {e:#}")),
            _ => return Server::Missing,
        };
        Server::Private(private)
    }

    async fn fresh_database(&self, purpose: &str) -> Option<String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let admin = self.url()?;
        let configured = matches!(self.server.get(), Some(Server::Configured(_)));
        let sweep = configured && !self.swept.swap(true, Ordering::SeqCst);
        let purpose: String = purpose
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .take(PURPOSE_LEN_MAX)
            .collect();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let name = format!("{DATABASE_PREFIX}{}_{}_{n}_{purpose}", now_s(), std::process::id());
        let answer = |e: sqlx::Error| format!("{admin}: {e}");
        let made = match self.kind {
            Kind::MySql => {
                let mut conn = sqlx::MySqlConnection::connect(&admin).await.map_err(answer);
                if let Ok(conn) = &mut conn {
                    if sweep {
                        sweep_mysql(conn).await;
                    }
                    let sql = format!("CREATE DATABASE `{name}`");
                    let made = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(&mut *conn).await;
                    made.unwrap_or_else(|e| panic!("{sql}: {e}"));
                }
                conn.map(|_| ())
            }
            Kind::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&admin).await.map_err(answer);
                if let Ok(conn) = &mut conn {
                    if sweep {
                        sweep_postgres(conn).await;
                    }
                    let sql = format!("CREATE DATABASE {name}");
                    let made = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(&mut *conn).await;
                    made.unwrap_or_else(|e| panic!("{sql}: {e}"));
                }
                conn.map(|_| ())
            }
        };
        if let Err(e) = made {
            panic!("the test database server does not answer: {e}");
        }
        Some(with_database(&admin, &name))
    }
}

/// Drops MySQL test databases older than [`STALE_DATABASE_AGE_S`]; best effort.
async fn sweep_mysql(conn: &mut sqlx::MySqlConnection) {
    let names: Vec<String> = sqlx::query_scalar("SHOW DATABASES LIKE 'idmint\\_t%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_default();
    for name in names.into_iter().filter(|name| is_stale(name)) {
        let dropped = sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
            .execute(&mut *conn)
            .await;
        if let Err(e) = dropped {
            eprintln!("could not drop old test database {name}: {e}");
        }
    }
}

/// Drops PostgreSQL test databases older than [`STALE_DATABASE_AGE_S`]; best effort.
async fn sweep_postgres(conn: &mut sqlx::PgConnection) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname::text FROM pg_database WHERE datname LIKE 'idmint\\_t%'",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    for name in names.into_iter().filter(|name| is_stale(name)) {
        let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        if let Err(e) = sqlx::raw_sql(AssertSqlSafe(drop)).execute(&mut *conn).await {
            eprintln!("could not drop old test database {name}: {e}");
        }
    }
}

/// Is `name` a test database (`idmint_t{secs}_{pid}…`) made more than
/// [`STALE_DATABASE_AGE_S`] ago?
fn is_stale(name: &str) -> bool {
    let Some((secs, rest)) = name.strip_prefix(DATABASE_PREFIX).and_then(|r| r.split_once('_'))
    else {
        return false;
    };
    let pid = rest.split('_').next().unwrap_or_default();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(secs)
        && digits(pid)
        && secs
            .parse::<u64>()
            .is_ok_and(|made_s| now_s().saturating_sub(made_s) > STALE_DATABASE_AGE_S)
}

/// `url` naming the database `name` instead of its own, its query kept.
pub fn with_database(url: &str, name: &str) -> String {
    let (location, query) = url.split_once('?').map_or((url, None), |(l, q)| (l, Some(q)));
    let (scheme, rest) = location.split_once("://").unwrap_or(("", location));
    let host = rest.split('/').next().unwrap_or_default();
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{scheme}://{host}/{name}{query}")
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_database() {
        assert_eq!(with_database("mysql://root@h:3306/test", "x"), "mysql://root@h:3306/x");
        assert_eq!(
            with_database("mysql://u:p@h/test?ssl-mode=disabled", "x"),
            "mysql://u:p@h/x?ssl-mode=disabled"
        );
        assert_eq!(with_database("postgres://p@h:5432", "x"), "postgres://p@h:5432/x");
    }

    #[test]
    fn only_old_test_databases_are_stale() {
        let old = now_s() - STALE_DATABASE_AGE_S - 10;
        assert!(is_stale(&format!("idmint_t{old}_42")));
        assert!(is_stale(&format!("idmint_t{old}_42_3_pool")));
        assert!(!is_stale(&format!("idmint_t{}_42_3_pool", now_s())));
        assert!(!is_stale(&format!("idmint_tx{old}_42")));
        assert!(!is_stale("idmint_em1_2"));
        assert!(!is_stale("production"));
    }
}
