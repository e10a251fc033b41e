//! Test keys on the test Redis (the test kit's: the server `IDMINT_TEST_REDIS_URL` names, else
//! a private `redis-server` of the test process): a key prefix per check that no other check
//! of any run uses, and a guard that deletes the prefix's keys when dropped, even after a
//! failed assertion. Shared by idmint-store's, idmint's and idmint-server's tests (`#[path]`).

use idmint_store::redis::RedisUrl;

pub use idmint_testkit::redis::KeyCleanup as Cleanup;

/// A URL of the test Redis with a fresh prefix, and the guard that deletes its keys; `None`
/// once the test kit recorded that the test is skipped (no server configured or installed).
pub fn fresh_url() -> Option<(RedisUrl, Cleanup)> {
    let server = idmint_testkit::redis::server_url()?;
    let prefix = fresh_prefix();
    let url = RedisUrl::parse(&server).unwrap().with_prefix(&prefix).unwrap();
    Some((url, Cleanup::new(&server, &prefix)))
}

/// A key prefix no other check of any run uses: `idmint_t{unix seconds}_{pid}_{n}:`.
pub fn fresh_prefix() -> String {
    idmint_testkit::redis::fresh_prefix()
}
