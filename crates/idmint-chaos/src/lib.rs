//! idmint's chaos suite, after Jepsen's `unique-ids` workload: real `idmint serve` processes
//! and private MariaDB, PostgreSQL and Redis servers (own ports, own data directories; the
//! machine's shared servers are never touched), concurrent clients that record every
//! acknowledged id with its node, client and time, faults injected from outside the
//! processes (`kill -9`, SIGSTOP, a stopped database, a flushed Redis, a Redis failed back to
//! a copy that was behind, a restored backup, a
//! wall clock stepped back by libfaketime, lease rows deleted, a full data disk, a tag deleted
//! and created again; for strict tags and the timestamp oracle, the owner killed, paused
//! past its lease, cut off from its store in a network namespace, nodes joining and leaving,
//! and the store restored from a backup with and without a witness), and a checker that
//! reads the history, real-time order included.
//!
//! `cargo run -p idmint-chaos -- --scenario NAME` runs one scenario ([`scenarios::SCENARIOS`]);
//! the short profile of every scenario runs in CI (`idmint-cli`'s `chaos` test). Nothing here
//! adds a code path to the server: the nodes are the shipped binary.

pub mod check;
pub mod load;
pub mod netns;
pub mod node;
pub mod order;
pub mod scenario;
pub mod scenarios;
pub mod strict;

/// The private database servers the scenarios run beside and fault: the test kit's.
pub use idmint_testkit::servers;

pub use scenario::{Profile, Report, Settings};
pub use scenarios::{SCENARIOS, Scenario, scenario};

/// What a machine needs for the suite: the Debian packages whose programs the scenarios run.
/// Returns the missing ones (empty: everything is there).
pub fn missing_tools() -> Vec<&'static str> {
    use idmint_testkit::servers::installed;
    let mut missing = Vec::new();
    for (program, package) in [
        ("mariadbd", "mariadb-server"),
        ("mariadb-install-db", "mariadb-server"),
        ("mariadb-dump", "mariadb-client"),
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
        ("ip", "iproute2"),
    ] {
        if installed::find(program).is_none() {
            missing.push(package);
        }
    }
    if installed::postgres_bin().is_none() {
        missing.push("postgresql");
    }
    if !std::path::Path::new(node::LIBFAKETIME).exists() {
        missing.push("libfaketime");
    }
    missing.dedup();
    missing
}
