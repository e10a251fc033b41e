//! The Prometheus alert rules shipped in `deploy/prometheus/`: every series they read is
//! one `/metrics` serves (named in `metrics.rs`), every alert is explained in
//! docs/operations.md and has a case where it fires and one where it must not in
//! `idmint-alerts.test.yml`; with `IDMINT_TEST_PROMTOOL` naming a promtool (scripts/test
//! finds one; Debian's `prometheus` package has it), `promtool check rules` accepts the file
//! and `promtool test rules` passes those cases. Without it that test is skipped, and the
//! run's summary says so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory of the rules and their tests.
fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names after `key: ` on the lines of `text` (`alert: X`, `alertname: X`).
fn values_of<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix(": "))
        .map(str::trim)
        .collect()
}

/// Every `idmint_…` or `process_…` name in `text` (metric names: letters, digits, `_`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("idmint_") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String =
            text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        names.insert(name);
    }
    names
}

#[test]
fn the_alert_rules_read_real_series_and_each_is_documented_and_tested() {
    let rules = read(&rules_dir().join("idmint-alerts.yml"));
    let tests = read(&rules_dir().join("idmint-alerts.test.yml"));
    let metrics = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/metrics.rs"));
    let operations = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"));
    let expressions: String = rules
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter(|line| !line.contains("summary:") && !line.contains("description:"))
        .collect::<Vec<_>>()
        .join("\n");
    let read_series = metric_names(&expressions);
    assert!(read_series.len() >= 8, "{read_series:?}");
    for name in &read_series {
        assert!(metrics.contains(&format!("\"{name}\"")), "{name}: /metrics serves no such series");
    }
    let alerts = values_of(&rules, "- alert");
    assert!(alerts.len() >= 8, "{alerts:?}");
    let cases = values_of(&tests, "alertname");
    for alert in &alerts {
        assert!(operations.contains(&format!("`{alert}`")), "docs/operations.md omits {alert}");
        assert!(
            cases.iter().filter(|case| *case == alert).count() >= 2,
            "{alert}: no firing and not-firing case in idmint-alerts.test.yml"
        );
    }
    // A case expecting no alert says so explicitly; each alert has one.
    let quiet = tests.matches("exp_alerts: []").count();
    assert_eq!(quiet, alerts.len(), "one not-firing case per alert");
}

#[test]
fn promtool_accepts_the_alert_rules_and_passes_their_tests() {
    let no_promtool = idmint_testkit::skip::NO_PROMTOOL;
    let Some(promtool) = idmint_testkit::opt_in("IDMINT_TEST_PROMTOOL", no_promtool) else {
        return;
    };
    for args in
        [["check", "rules", "idmint-alerts.yml"], ["test", "rules", "idmint-alerts.test.yml"]]
    {
        let output = Command::new(&promtool)
            .args(args)
            .current_dir(rules_dir())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {promtool}: {e}"));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "promtool {}:\n{said}", args.join(" "));
        assert!(said.contains("SUCCESS"), "promtool {}:\n{said}", args.join(" "));
    }
}
