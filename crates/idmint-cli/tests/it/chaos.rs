//! The chaos suite's short profile (`crates/idmint-chaos`) against this crate's `idmint`
//! binary: private MariaDB, PostgreSQL and Redis servers, nodes killed, paused, cut off from
//! their store and their clocks stepped back, lease rows deleted, a data disk filled, a tag
//! deleted and created again (the disk-full scenario mounts a tmpfs: CI runs as root), and
//! for strict tags and the oracle the owner killed, paused, cut off from its store in a
//! network namespace (root again), nodes joining and leaving, and the store restored from a
//! backup with and without a witness, checked for real-time order. Every scenario must pass, the unsafe ones by being flagged by the checker. Runs when `IDMINT_TEST_CHAOS` is set (`.ci/run` sets it and
//! installs libfaketime); then a missing tool is a failure, not a skip. Unset, the skip is
//! recorded for the run's summary.

use idmint_chaos::{Profile, SCENARIOS, Settings, missing_tools};

#[test]
fn chaos_short_profile_holds_every_guarantee_and_flags_the_unsafe_configuration() {
    if idmint_testkit::opt_in("IDMINT_TEST_CHAOS", idmint_testkit::skip::NO_CHAOS).is_none() {
        return;
    }
    let missing = missing_tools();
    assert!(missing.is_empty(), "the chaos suite needs: apt-get install {}", missing.join(" "));
    let settings = Settings {
        profile: Profile::Short,
        duration: None,
        idmint: env!("CARGO_BIN_EXE_idmint").into(),
    };
    let mut failed = Vec::new();
    for scenario in &SCENARIOS {
        let report = scenario.run(&settings).unwrap_or_else(|e| panic!("{}: {e:#}", scenario.name));
        eprintln!("{report}");
        if !report.passed() {
            failed.push(report.to_string());
        }
    }
    assert!(failed.is_empty(), "scenarios failed:\n{}", failed.join("\n"));
}
