//! Test keys on the shared Redis (`IDMINT_TEST_REDIS_URL`): a key prefix per check that no
//! other check of any run uses, and a guard that deletes the prefix's keys when dropped,
//! even after a failed assertion. Shared by idmint-store's and idmint's tests (`#[path]`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use idmint_store::redis::{RedisUrl, driver};

/// The variable naming the shared test Redis.
pub const URL_VAR: &str = "IDMINT_TEST_REDIS_URL";

/// Keys one `SCAN` step of the cleanup asks for.
const CLEANUP_BATCH: usize = 1_000;

/// A URL of the shared test Redis with a fresh prefix, and the guard that deletes its keys;
/// `None` when the variable is not set.
pub fn fresh_url() -> Option<(RedisUrl, Cleanup)> {
    let base = std::env::var(URL_VAR).ok()?;
    let prefix = fresh_prefix();
    let url = RedisUrl::parse(&base).unwrap().with_prefix(&prefix).unwrap();
    Some((url, Cleanup { server: base, prefix }))
}

/// A key prefix no other check of any run uses: `idmint_t{unix seconds}_{pid}_{n}:`.
pub fn fresh_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    format!("idmint_t{secs}_{}_{n}:", std::process::id())
}

/// Deletes every key under `prefix` on `server` when dropped.
pub struct Cleanup {
    server: String,
    prefix: String,
}

impl Drop for Cleanup {
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
