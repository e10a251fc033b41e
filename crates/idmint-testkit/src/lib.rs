//! idmint's test kit: what the tests of every crate share, so that each is written once.
//!
//! - [`servers`]: private MariaDB, PostgreSQL and Redis servers started from the installed
//!   binaries, on free loopback ports, each in a directory of its own that its reaper removes
//!   (the chaos suite's servers are these).
//! - [`mysql`], [`postgres`], [`redis`]: the server a test runs against (the one its
//!   `IDMINT_TEST_*_URL` names, else a private one started once per test process) and a fresh
//!   database or key prefix on it.
//! - [`fixtures`]: Leaf's and Tinyid's own tables and sample rows.
//! - [`skip`](mod@skip): a test that cannot run records why; `scripts/test` prints the summary and CI
//!   fails on any skip. [`opt_in`] does it for the variables that switch a test on.
//! - [`suite!`]: one `#[tokio::test]` per check of a suite (conformance, workers,
//!   sequences), for one backend's factory.
//!
//! A dev-dependency only (and a dependency of `idmint-chaos`, itself a test tool); never
//! published. It links no idmint crate, so every crate's tests can use it.

pub mod fixtures;
pub mod redis;
pub mod servers;
pub mod skip;
mod sql;

pub use skip::skip;
pub use sql::{DATABASE_PREFIX, STALE_DATABASE_AGE_S, mysql, postgres, with_database};

/// The value of the opt-in variable `var` (a test that runs only when it is set), or `None`
/// after recording that the running test is skipped for `reason`.
pub fn opt_in(var: &str, reason: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            skip(reason);
            None
        }
    }
}

/// Generates one `#[tokio::test]` per check of a suite, in the calling module.
///
/// `checks` is the suite's module, `runner` a function of it that takes the subject the
/// factory made and one check (`async fn runner(subject, check)`), `subject` the backend's
/// factory, an `async fn() -> Option<Subject>` that yields a fresh subject on every call
/// (checks run in parallel, each alone in its store) or `None` once it recorded that the
/// backend cannot run here ([`skip()`], which the server functions of this kit do).
///
/// ```text
/// idmint_testkit::suite! {
///     checks: crate::conformance, runner: run, subject: fresh,
///     tests: [first_allocation_is_start_to_start_plus_step, ping_answers],
/// }
/// ```
#[macro_export]
macro_rules! suite {
    (
        checks: $($suite:ident)::+, runner: $runner:ident, subject: $factory:path,
        tests: [$($check:ident),* $(,)?] $(,)?
    ) => {
        $crate::suite!(@each [$($suite)::+] $runner $factory; $($check),*);
    };
    // One test at a time: the suite's path and the check repeat at different depths.
    (@each [$($suite:ident)::+] $runner:ident $factory:path; $check:ident $(, $rest:ident)*) => {
        // Multi-threaded so that concurrency checks race for real; two workers is enough.
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $check() {
            let Some(subject) = $factory().await else { return };
            $($suite)::+::$runner(subject, $($suite)::+::$check).await;
        }
        $crate::suite!(@each [$($suite)::+] $runner $factory; $($rest),*);
    };
    (@each [$($suite:ident)::+] $runner:ident $factory:path;) => {};
}
