//! The Redis server tests run against, and a fresh key prefix on it.
//!
//! The server is the one `IDMINT_TEST_REDIS_URL` names, or, when that is unset, a private
//! `redis-server` this test process starts (once per process, on a free loopback port, in a
//! temporary directory its reaper removes when the process ends). When neither is there,
//! the test is skipped and says so in the run's summary. Tests that flush, kill or restart
//! Redis start a [`crate::servers::PrivateRedis`] of their own instead.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ::redis as driver;

use crate::servers::{PrivateRedis, installed};
use crate::skip::{NO_REDIS, skip};

/// Names the server the tests use instead of a private one (`redis://127.0.0.1:6379`).
pub const URL_VAR: &str = "IDMINT_TEST_REDIS_URL";

/// Keys one `SCAN` step of the cleanup asks for.
const CLEANUP_BATCH: usize = 1_000;

/// Where the server comes from, decided once per process.
enum Server {
    Configured(String),
    Private(Result<PrivateRedis, String>),
    Missing,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// The URL of the server (configured or private), or `None` after recording that the
/// running test is skipped. Panics when a private server was due but did not start.
pub fn server_url() -> Option<String> {
    let server = SERVER.get_or_init(|| {
        if let Some(url) = std::env::var(URL_VAR).ok().filter(|url| !url.is_empty()) {
            return Server::Configured(url);
        }
        if installed::redis().is_none() {
            return Server::Missing;
        }
        Server::Private(PrivateRedis::start().map_err(|e| {
            format!("{URL_VAR} is unset and a private redis-server did not start: {e:#}")
        }))
    });
    match server {
        Server::Configured(url) => Some(url.clone()),
        Server::Private(Ok(redis)) => Some(redis.url()),
        Server::Private(Err(e)) => panic!("{e}"),
        Server::Missing => {
            skip(NO_REDIS);
            None
        }
    }
}

/// A `redis-server` of the test's own (for a test that flushes, kills or restarts it), or
/// `None` after recording the skip when `redis-server` is not installed. Panics when it is
/// installed but does not start.
pub fn private() -> Option<PrivateRedis> {
    if installed::redis().is_none() {
        skip(NO_REDIS);
        return None;
    }
    Some(PrivateRedis::start().unwrap_or_else(|e| panic!("a private redis-server: {e:#}")))
}

/// A key prefix no other check of any run uses: `idmint_t{unix seconds}_{pid}_{n}:`.
pub fn fresh_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    format!("idmint_t{secs}_{}_{n}:", std::process::id())
}

/// Deletes every key under a prefix on a server when dropped.
pub struct KeyCleanup {
    server: String,
    prefix: String,
}

impl KeyCleanup {
    /// A guard for the keys under `prefix` on the server at `server` (a URL).
    pub fn new(server: &str, prefix: &str) -> KeyCleanup {
        KeyCleanup { server: server.to_string(), prefix: prefix.to_string() }
    }
}

impl Drop for KeyCleanup {
    fn drop(&mut self) {
        // A plain blocking connection: Drop cannot await, and the check is over.
        let cleaned = driver::Client::open(self.server.as_str())
            .and_then(|client| client.get_connection())
            .and_then(|mut conn| {
                let mut cursor = 0_u64;
                loop {
                    let (next, keys): (u64, Vec<String>) = driver::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("{}*", self.prefix))
                        .arg("COUNT")
                        .arg(CLEANUP_BATCH)
                        .query(&mut conn)?;
                    if !keys.is_empty() {
                        let _: i64 = driver::cmd("DEL").arg(&keys).query(&mut conn)?;
                    }
                    if next == 0 {
                        return Ok(());
                    }
                    cursor = next;
                }
            });
        if let Err(e) = cleaned {
            eprintln!("could not delete the test keys {}*: {e}", self.prefix);
        }
    }
}
