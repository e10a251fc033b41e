//! Skipped tests, reported where anyone sees them: a test that cannot run calls [`skip`]
//! with the reason, which says so on stderr (seen with `--nocapture` only) and appends a line
//! `REASON<TAB>PACKAGE: TEST` to a file of its test process under the skip directory. The repository's
//! test command (`scripts/test`) empties that directory, runs `cargo test --workspace`, and
//! prints one line per reason: "3 tests skipped: no mariadbd; install …". CI fails when
//! anything was skipped.
//!
//! The reasons are the constants below, so a summary groups every test skipped for one
//! cause under one line.

use std::io::Write;
use std::path::PathBuf;

/// Names the skip directory; `scripts/test` sets it. Unset, the directory is
/// `TARGET/idmint-skips`, found from the test binary's own path (`TARGET/debug/deps/…`).
pub const SKIP_DIR_VAR: &str = "IDMINT_TEST_SKIP_DIR";

/// MariaDB is neither configured nor installed.
pub const NO_MARIADB: &str = "no mariadbd; install mariadb-server (Debian/Ubuntu) or mariadb \
                              (Homebrew), or set IDMINT_TEST_MYSQL_URL";
/// PostgreSQL is neither configured nor installed.
pub const NO_POSTGRES: &str = "no initdb/pg_ctl; install postgresql (Debian/Ubuntu) or \
                               postgresql@17 (Homebrew), or set IDMINT_TEST_POSTGRES_URL";
/// Redis is neither configured nor installed.
pub const NO_REDIS: &str = "no redis-server; install redis-server (Debian/Ubuntu) or redis \
                            (Homebrew), or set IDMINT_TEST_REDIS_URL";
/// The chaos suite's short profile was not asked for.
pub const NO_CHAOS: &str = "IDMINT_TEST_CHAOS is not set: the chaos suite needs Linux, root \
                            and libfaketime (apt install libfaketime; scripts/test then runs \
                            it), or set IDMINT_TEST_CHAOS=1";
/// The OpenAPI validator and fuzz have no Python.
pub const NO_PYTHON: &str = "IDMINT_TEST_PYTHON is not set: scripts/test makes a venv with \
                             openapi-spec-validator and schemathesis when python3 -m venv and \
                             pip work (apt install python3-venv), or name such a Python";
/// The dashboard test has no browser.
pub const NO_CHROMIUM: &str = "IDMINT_TEST_CHROMIUM is not set: install chromium (apt install \
                               chromium; scripts/test then finds it), or name one, e.g. \
                               IDMINT_TEST_CHROMIUM=/usr/bin/chromium";
/// The alert rules' tests have no promtool.
pub const NO_PROMTOOL: &str = "IDMINT_TEST_PROMTOOL is not set: install promtool (apt install \
                               prometheus; scripts/test then finds it), or name one, e.g. \
                               IDMINT_TEST_PROMTOOL=/usr/bin/promtool";
/// The full-disk tests were told not to mount a tmpfs.
pub const NO_TMPFS: &str = "IDMINT_TEST_SKIP_TMPFS is set; the full-disk tests mount a tmpfs \
                            (Linux, root)";

/// Records that the running test is skipped for `reason` (one of the constants of this
/// module, or a sentence of the same form) and says so on stderr.
///
/// The test is named by its thread (libtest names each test's thread after it). A record
/// that cannot be written is said on stderr; the skip still happens.
pub fn skip(reason: &str) {
    let current = std::thread::current();
    let test = match current.name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "(a test on the main thread)".to_string(),
    };
    eprintln!("skipped: {reason}");
    let Some(dir) = skip_dir() else {
        return eprintln!("(the skip is not recorded: no skip directory)");
    };
    // Cargo names the package in the environment of the tests it runs.
    let package = std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| binary_name());
    let file = dir.join(format!("{package}-{}-{}.tsv", binary_name(), std::process::id()));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&file)?;
        // One write per line: concurrent tests of one process append whole lines.
        out.write_all(format!("{reason}\t{package}: {test}\n").as_bytes())
    });
    if let Err(e) = written {
        eprintln!("(the skip is not recorded in {}: {e})", file.display());
    }
}

/// Where skips are recorded: [`SKIP_DIR_VAR`], else `TARGET/idmint-skips`.
pub fn skip_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(SKIP_DIR_VAR) {
        return Some(PathBuf::from(dir));
    }
    // TARGET/debug/deps/it-HASH (tests) or TARGET/debug/NAME (examples, build scripts).
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir = dir.parent()?;
    }
    Some(dir.parent()?.join("idmint-skips"))
}

/// The test binary's name without cargo's hash (`it-0123abcd` -> `it`).
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem =
        exe.as_deref().and_then(|p| p.file_stem()).and_then(|s| s.to_str()).unwrap_or("test");
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
        _ => stem.to_string(),
    }
}
