//! The workspace's one-job-per-crate rules, checked on each crate's sources and Cargo.toml:
//! the invariants ARCHITECTURE.md states for each crate, each test named there beside the
//! line it checks (and that citation checked here too, so the map and the tests stay one).
//!
//! A source is read without its `//` comments (doc links are not code) and without its unit
//! tests (`#[cfg(test)] mod …` on: a test may spawn a thread or read the clock). Each rule is
//! a function of the sources, tested on planted breaches, so it can fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A crate's sources: each file's path from `crates/` and its code.
type Files = Vec<(String, String)>;

/// What the core may not name: I/O, processes, async, a clock.
const CORE_FORBIDDEN: [&str; 9] = [
    "std::fs",
    "std::net",
    "std::process",
    "std::io",
    "tokio",
    "async",
    "Future",
    "SystemTime",
    "Instant::now",
];

/// Every way this workspace spawns a task or a thread.
const SPAWNS: [&str; 7] = [
    "spawn(",
    "spawn_blocking",
    "spawn_on",
    "spawn_local",
    "JoinSet",
    "TaskTracker",
    "thread::Builder",
];

/// Every way to read the wall clock (std, jiff, chrono).
const WALL_CLOCK_READS: [&str; 5] =
    ["SystemTime::now", "UNIX_EPOCH.elapsed", "Timestamp::now", "Zoned::now", "Utc::now"];

/// What only the server may name: HTTP and gRPC.
const TRANSPORT_NAMES: [&str; 6] = ["StatusCode", "http::", "axum", "tonic", "hyper", "reqwest"];

/// The invariant tests ARCHITECTURE.md must cite (as ``(test `NAME`)``) beside their lines.
const CITED_TESTS: [&str; 9] = [
    "the_core_does_no_io_and_reads_no_clock",
    "only_the_library_the_client_and_sqlite_spawn",
    "http_and_grpc_only_in_the_server",
    "protobuf_types_only_in_grpc_rs_and_the_client",
    "the_wall_clock_is_read_by_system_clock_alone",
    "the_server_modules_keep_the_import_rules",
    "no_crate_has_an_import_circle",
    "architecture_md_maps_every_crate_and_cites_its_tests",
    "the_test_tools_stay_out_of_the_product",
];

#[test]
fn the_core_does_no_io_and_reads_no_clock() {
    let manifest = read(&crates_dir().join("idmint-core/Cargo.toml"));
    let section = crate_section(&read(&architecture_md()), "idmint-core");
    let unnamed: Vec<String> = dependencies(&manifest)
        .into_iter()
        .filter(|dep| !section.contains(&format!("`{dep}`")))
        .collect();
    assert!(unnamed.is_empty(), "idmint-core depends on {unnamed:?}, unnamed in its section");
    let broken = core_breaches(&crate_files("idmint-core"));
    assert!(broken.is_empty(), "the core names I/O or a clock:\n{}", broken.join("\n"));
}

#[test]
fn only_the_library_the_client_and_sqlite_spawn() {
    let mut broken = Vec::new();
    for name in ["idmint-server", "idmint-cli", "idmint-core", "idmint-proto"] {
        broken.extend(spawn_breaches(&crate_files(name), &[]));
    }
    broken.extend(spawn_breaches(
        &crate_files("idmint-store"),
        &[("idmint-store/src/sqlite.rs", "spawn_blocking")],
    ));
    let client = "idmint-client/src/client.rs";
    broken.extend(spawn_breaches(
        &crate_files("idmint-client"),
        &[(client, "spawn("), (client, "spawn_on"), (client, "TaskTracker")],
    ));
    assert!(broken.is_empty(), "tasks spawned outside their owners:\n{}", broken.join("\n"));
    // The library does spawn (else the rule above would say nothing about where tasks live).
    let library = crate_files("idmint");
    assert!(library.iter().any(|(_, code)| names(code, "TaskTracker")), "idmint spawns nothing?");
}

#[test]
fn http_and_grpc_only_in_the_server() {
    let mut broken = Vec::new();
    for name in ["idmint", "idmint-store", "idmint-core"] {
        broken.extend(transport_breaches(&crate_files(name)));
        let manifest = read(&crates_dir().join(name).join("Cargo.toml"));
        for dep in dependencies(&manifest) {
            if ["axum", "tonic", "http", "hyper", "reqwest", "idmint-proto"].contains(&dep.as_str())
            {
                broken.push(format!("{name} depends on {dep}"));
            }
        }
    }
    assert!(broken.is_empty(), "HTTP or gRPC below the server:\n{}", broken.join("\n"));
}

#[test]
fn protobuf_types_only_in_grpc_rs_and_the_client() {
    let mut files = Files::new();
    let mut depending = BTreeSet::new();
    for name in workspace_crates() {
        if name == "idmint-proto" {
            continue;
        }
        files.extend(crate_files(&name));
        let manifest = read(&crates_dir().join(&name).join("Cargo.toml"));
        if dependencies(&manifest).iter().any(|dep| dep == "idmint-proto") {
            depending.insert(name);
        }
    }
    let broken = protobuf_breaches(&files);
    assert!(
        broken.is_empty(),
        "protobuf types outside grpc.rs and the client:\n{}",
        broken.join("\n")
    );
    let expected: BTreeSet<String> =
        ["idmint-client", "idmint-server"].into_iter().map(String::from).collect();
    assert_eq!(depending, expected, "crates depending on idmint-proto (normal dependencies)");
}

#[test]
fn the_wall_clock_is_read_by_system_clock_alone() {
    let mut files = Files::new();
    for name in workspace_crates() {
        // The test tools read the machine's clock on purpose (deadlines, reports).
        if name != "idmint-chaos" && name != "idmint-testkit" {
            files.extend(crate_files(&name));
        }
    }
    let broken = wall_clock_breaches(&files);
    assert!(broken.is_empty(), "wall clock read outside SystemClock:\n{}", broken.join("\n"));
}

#[test]
fn the_test_tools_stay_out_of_the_product() {
    let idmint_deps = |name: &str| -> BTreeSet<String> {
        let manifest = read(&crates_dir().join(name).join("Cargo.toml"));
        dependencies(&manifest).into_iter().filter(|dep| dep.starts_with("idmint")).collect()
    };
    assert_eq!(idmint_deps("idmint-testkit"), BTreeSet::new(), "the test kit links idmint");
    let chaos: BTreeSet<String> =
        ["idmint-core", "idmint-testkit"].into_iter().map(String::from).collect();
    assert_eq!(idmint_deps("idmint-chaos"), chaos, "the chaos suite's idmint crates");
    for name in workspace_crates() {
        if name != "idmint-chaos" {
            assert!(!idmint_deps(&name).contains("idmint-testkit"), "{name} depends on the kit");
        }
    }
}

#[test]
fn architecture_md_maps_every_crate_and_cites_its_tests() {
    let map = read(&architecture_md());
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let sources =
        read(&tests.join("architecture.rs")) + &read(&tests.join("architecture/crate_rules.rs"));
    let broken = map_breaches(&map, &workspace_crates(), &sources);
    assert!(broken.is_empty(), "ARCHITECTURE.md out of step:\n{}", broken.join("\n"));
}

#[test]
fn each_rule_finds_its_planted_breach() {
    let file = |path: &str, text: &str| vec![(path.to_string(), code_of(text))];
    let sqlite = [("idmint-store/src/sqlite.rs", "spawn_blocking")];
    let core = |path, text| !core_breaches(&file(path, text)).is_empty();
    let spawn = |path, text| !spawn_breaches(&file(path, text), &sqlite).is_empty();
    let transport = |path, text| !transport_breaches(&file(path, text)).is_empty();
    let protobuf = |path, text| !protobuf_breaches(&file(path, text)).is_empty();
    let clock = |path, text| !wall_clock_breaches(&file(path, text)).is_empty();
    // Clean code passes every rule.
    assert!(!core("idmint-core/src/a.rs", "let x = now_ms + 1; // tokio"));
    assert!(!spawn("idmint-cli/src/a.rs", "fn respawn() {}"));
    assert!(!spawn("idmint-store/src/sqlite.rs", "tokio::task::spawn_blocking(f)"));
    assert!(!transport("idmint/src/a.rs", "// axum\nlet url = \"https://x\";"));
    assert!(!protobuf("idmint-server/src/grpc.rs", "use idmint_proto::v1;"));
    assert!(!clock("idmint/src/clock.rs", "SystemTime::now()"));
    // Each planted breach is found.
    assert!(core("idmint-core/src/a.rs", "use std::fs::File;"));
    assert!(core("idmint-core/src/a.rs", "let t = Instant::now();"));
    assert!(core("idmint-core/src/a.rs", "pub async fn take(&self) {}"));
    assert!(core("idmint-core/src/a.rs", "async fn f() { tokio::task::yield_now().await }"));
    assert!(spawn("idmint-cli/src/serve.rs", "tokio::spawn(retry());"));
    assert!(spawn("idmint-store/src/mysql.rs", "tokio::task::spawn_blocking(f)"));
    assert!(spawn("idmint-store/src/sqlite.rs", "tokio::spawn(f)"));
    assert!(transport("idmint/src/a.rs", "use axum::http::StatusCode;"));
    assert!(protobuf("idmint-server/src/http/leases.rs", "idmint_proto::v1::Range"));
    assert!(clock("idmint/src/formats.rs", "jiff::Zoned::now()"));
    // Code from the unit tests on is not read; code before them is.
    let tested = "fn f() {}\n#[cfg(test)]\nmod tests { fn t() { std::thread::spawn(|| ()); } }";
    assert!(!spawn("idmint-core/src/a.rs", tested));
    assert!(spawn("idmint-core/src/a.rs", &format!("tokio::spawn(f);\n{tested}")));
    // The map: a crate without its section, a cited test that does not exist, an uncited one.
    let crates = vec!["idmint-core".to_string()];
    let tests: String = CITED_TESTS.iter().map(|t| format!("fn {t}() {{}}\n")).collect();
    let cites: String = CITED_TESTS.iter().map(|t| format!("(test `{t}`)\n")).collect();
    let map = format!("### `idmint-core`\n{cites}");
    assert_eq!(map_breaches(&map, &crates, &tests), Vec::<String>::new());
    assert!(!map_breaches(&cites, &crates, &tests).is_empty());
    assert!(!map_breaches(&format!("{map}(test `gone`)"), &crates, &tests).is_empty());
    let uncited = map.replace("(test `no_crate_has_an_import_circle`)", "");
    assert!(!map_breaches(&uncited, &crates, &tests).is_empty());
}

/// The core's files that name I/O, async or a clock.
fn core_breaches(files: &Files) -> Vec<String> {
    let mut found = Vec::new();
    for (path, code) in files {
        for needle in CORE_FORBIDDEN {
            if names(code, needle) {
                found.push(format!("{path} names {needle}"));
            }
        }
    }
    found
}

/// Every spawn in `files` but those `allowed` (file, spawn) pairs.
fn spawn_breaches(files: &Files, allowed: &[(&str, &str)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, code) in files {
        for spawn in SPAWNS {
            if names(code, spawn) && !allowed.contains(&(path.as_str(), spawn)) {
                found.push(format!("{path} names {spawn}"));
            }
        }
    }
    found
}

/// Every file of `files` that names HTTP or gRPC.
fn transport_breaches(files: &Files) -> Vec<String> {
    let mut found = Vec::new();
    for (path, code) in files {
        for needle in TRANSPORT_NAMES {
            if names(code, needle) {
                found.push(format!("{path} names {needle}"));
            }
        }
    }
    found
}

/// Every file but the server's `grpc.rs` and the client's that names a protobuf type.
fn protobuf_breaches(files: &Files) -> Vec<String> {
    let allowed =
        |path: &str| path == "idmint-server/src/grpc.rs" || path.starts_with("idmint-client/src/");
    files
        .iter()
        .filter(|(path, code)| {
            !allowed(path) && (names(code, "idmint_proto") || names(code, "prost"))
        })
        .map(|(path, _)| format!("{path} names idmint_proto or prost"))
        .collect()
}

/// Every file but `SystemClock`'s and the memory store's (its `update_time` column, seconds
/// that never reach an id) that reads the wall clock.
fn wall_clock_breaches(files: &Files) -> Vec<String> {
    // The store crate's `clock.rs` is the clock of the stores on this machine (memory,
    // SQLite), by which their worker leases expire.
    let allowed =
        ["idmint/src/clock.rs", "idmint-store/src/memory.rs", "idmint-store/src/clock.rs"];
    let mut found = Vec::new();
    for (path, code) in files {
        for read in WALL_CLOCK_READS {
            if names(code, read) && !allowed.contains(&path.as_str()) {
                found.push(format!("{path} reads the wall clock ({read})"));
            }
        }
    }
    found
}

/// What is out of step between ARCHITECTURE.md (`map`), the crates and the tests' `sources`:
/// a crate without its `` ### `NAME` `` section, a cited test that does not exist, an
/// invariant test of [`CITED_TESTS`] not cited.
fn map_breaches(map: &str, crates: &[String], sources: &str) -> Vec<String> {
    let mut found = Vec::new();
    for name in crates {
        if !map.contains(&format!("### `{name}`")) {
            found.push(format!("no section ### `{name}`"));
        }
    }
    // A citation may break across lines: read the map with its whitespace runs as spaces.
    let map = map.split_whitespace().collect::<Vec<_>>().join(" ");
    let cited: BTreeSet<&str> = map
        .match_indices("(test `")
        .filter_map(|(at, open)| {
            let rest = &map[at + open.len()..];
            rest.find('`').map(|end| &rest[..end])
        })
        .collect();
    for test in &cited {
        if !sources.contains(&format!("fn {test}(")) {
            found.push(format!("cites test {test}, which does not exist"));
        }
    }
    for test in CITED_TESTS {
        if !cited.contains(test) {
            found.push(format!("does not cite test {test}"));
        }
    }
    found
}

/// Whether `code` names `needle` as a word of its own (not the tail of a longer name:
/// `respawn(` is no `spawn(`).
fn names(code: &str, needle: &str) -> bool {
    code.match_indices(needle).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// `text` without `//` comments and from its unit tests (`#[cfg(test)]` before a `mod`) on.
fn code_of(text: &str) -> String {
    let mut code = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        code.push(line.find("//").map_or(line, |at| &line[..at]));
    }
    code.join("\n")
}

/// The `.rs` files of crate `name` (under `src/`), as code.
fn crate_files(name: &str) -> Files {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&crates_dir().join(name).join("src"), &mut paths);
    assert!(!paths.is_empty(), "no sources for crate {name}");
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(crates_dir()).unwrap().to_string_lossy().into_owned();
            (relative.replace('\\', "/"), code_of(&read(&path)))
        })
        .collect()
}

/// The names of a manifest's normal dependencies (`[dependencies]`, not dev, build or
/// target-specific ones).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_section = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_section = line == "[dependencies]";
            continue;
        }
        if in_section
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once(['=', '.'])
        {
            found.push(name.trim().to_string());
        }
    }
    found
}

/// ARCHITECTURE.md's section on crate `name`: from its `` ### `NAME` `` heading to the next
/// heading.
fn crate_section(map: &str, name: &str) -> String {
    let heading = format!("### `{name}`");
    let at = map.find(&heading).unwrap_or_else(|| panic!("ARCHITECTURE.md has no {heading}"));
    let rest = &map[at + heading.len()..];
    let end = rest.find("\n#").unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The directories under `crates/` that hold a crate.
fn workspace_crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 9, "only {names:?} under {}", crates_dir().display());
    names
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn architecture_md() -> PathBuf {
    crates_dir().join("../ARCHITECTURE.md")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
