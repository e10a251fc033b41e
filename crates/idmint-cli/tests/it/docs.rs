//! The docs run: every ```` ```sh ```` and ```` ```toml ```` block of README.md and docs/*.md
//! is run against the binary under test, so a documented command or file cannot drift from
//! what idmint does. The rules (also in ARCHITECTURE.md, "Tests", and README.md,
//! "Development"):
//!
//! - Each file's blocks run in order in one fresh temporary directory, the file's own: a
//!   block sees what the blocks above it left there (files, a running server). No `IDMINT_*`
//!   variable of the calling environment is passed on.
//! - **`sh`**: one command a line (a line ending in `\` continues), run by `bash` in that
//!   directory with `idmint` on the `PATH` being the binary under test; `cargo run
//!   [--release | --profile start] --` runs it too. Every command must exit 0. A line
//!   `export NAME=VALUE` sets the variable for the file's later commands, as a shell would. A trailing comment `# -> TEXT`
//!   (after two spaces) is the command's expected stdout, compared exactly (trimmed). `curl`
//!   runs with `--fail --silent --show-error`.
//! - **`idmint serve …`** (or `cargo run … -- serve`) is started in the background on a free
//!   port (`IDMINT_LISTEN=127.0.0.1:0`, so a `--listen` in the line wins); the lines after it
//!   in the file see `127.0.0.1:8080` replaced by its address and `IDMINT_SERVER` set to it.
//!   It is stopped when the file's blocks are done.
//! - **`toml`**: written as `idmint.toml` and checked with `idmint config check idmint.toml`
//!   (exit 0), so a later `sh` block of the file can use it.
//! - A marker on the nearest non-blank line above the fence changes that:
//!   `<!-- docs-test: DIRECTIVE; DIRECTIVE -->`, with the directives
//!   - `skip REASON`: not run (Kubernetes, systemd, benchmarks, other databases); counted and
//!     printed with its reason;
//!   - `env NAME=VALUE`: a variable for the block's commands (repeat it for more);
//!   - `file NAME` (toml): written as `NAME` instead of `idmint.toml`;
//!   - `invalid` (toml): `config check` must refuse it (exit 1);
//!   - `defaults` (toml): the block must hold every key of the `keys!` table
//!     (crates/idmint-server/src/config/keys.rs) at its default, no more, no less: it is
//!     compared to what `idmint config check` prints for a file with only its `[format.*]`
//!     section headers;
//!   - `output COMMAND` (a `text` block): the block is what `COMMAND` prints (stdout, then
//!     stderr), compared exactly (trimmed, the block's indentation removed);
//!   - `mysql FIXTURE` (`leaf`, `tinyid` or `empty`): each `mysql://…/DATABASE` URL the block
//!     names for the first time becomes a fresh database of the test kit's MariaDB holding
//!     that fixture (Leaf's or Tinyid's own tables and sample rows,
//!     crates/idmint-testkit/src/fixtures.rs); the URL's query is kept, and the file's later
//!     blocks see the same database under the same URL. An `sh` block with it is a scene of
//!     its own, as a reader trying another database would run it: its `serve` gets a data
//!     directory of its own, and its servers and `export`s end with the block.
//!
//! A failure names the file, the block's line, the command and what differed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Longest a documented command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a documented `serve` may take to announce its address.
const SERVE_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn the_documented_commands_and_files_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let (mut run, mut ran, mut not_run, mut failures) = (0, Vec::new(), Vec::new(), Vec::new());
    for path in &files {
        let name = path.strip_prefix(&root).unwrap_or(path).display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let mut file_run = FileRun::new();
        for block in blocks(&text) {
            let at = format!("{name}:{} (```{} block)", block.line, block.info);
            let directives = match parse_marker(block.marker.as_deref()) {
                Ok(directives) => directives,
                Err(e) => {
                    failures.push(format!("{at}: {e}"));
                    continue;
                }
            };
            let output_of = directives.iter().find_map(|d| match d {
                Directive::Output(command) => Some(command.clone()),
                _ => None,
            });
            let runnable = matches!(block.info.as_str(), "sh" | "toml") || output_of.is_some();
            if !runnable {
                continue;
            }
            if let Some(reason) = directives.iter().find_map(|d| match d {
                Directive::Skip(reason) => Some(reason.clone()),
                _ => None,
            }) {
                not_run.push(format!("{at}: {reason}"));
                continue;
            }
            run += 1;
            ran.push(at.clone());
            let outcome = match (block.info.as_str(), output_of) {
                (_, Some(command)) => file_run.output(&command, &block.body, &directives),
                ("toml", None) => file_run.toml(&block.body, &directives),
                _ => file_run.sh(&block.body, &directives),
            };
            if let Err(e) = outcome {
                failures.push(format!("{at}: {e}"));
            }
        }
        file_run.stop();
    }
    println!("docs: {run} blocks run, {} not run:", not_run.len());
    for line in &ran {
        println!("  run: {line}");
    }
    for line in &not_run {
        println!("  not run: {line}");
    }
    assert!(run >= 8, "only {run} documented blocks ran: did the rules stop finding them?");
    assert!(
        failures.is_empty(),
        "{} documented blocks failed (the rules: crates/idmint-cli/tests/it/docs.rs):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A paragraph written twice in one file (issue 22: the README repeated one) is a copy that
/// will drift from its twin: each file's paragraphs of three lines or more are unique.
#[test]
fn no_paragraph_of_the_docs_is_repeated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut repeated = Vec::new();
    for path in reference_pages(&root) {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut seen = std::collections::HashMap::new();
        let mut line = 1;
        for paragraph in text.split("\n\n") {
            let lines = paragraph.lines().filter(|l| !l.trim().is_empty()).count();
            let start = line + paragraph.len() - paragraph.trim_start_matches('\n').len();
            line += paragraph.matches('\n').count() + 2;
            if lines < 3 || paragraph.trim_start().starts_with("```") {
                continue;
            }
            if let Some(first) = seen.insert(paragraph.trim().to_string(), start) {
                repeated.push(format!(
                    "{}:{start} repeats the paragraph of line {first}",
                    path.strip_prefix(&root).unwrap_or(&path).display()
                ));
            }
        }
    }
    assert!(repeated.is_empty(), "{}", repeated.join("\n"));
}

/// The pages the checks of names and paragraphs read: README.md, ARCHITECTURE.md and
/// docs/*.md.
fn reference_pages(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Every code span of `text` (the text between single backticks), with its line.
fn code_spans(text: &str) -> Vec<(usize, &str)> {
    let mut spans = Vec::new();
    let mut in_fence = false;
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let parts: Vec<&str> = line.split('`').collect();
        spans.extend(parts.iter().skip(1).step_by(2).map(|span| (number + 1, *span)));
    }
    spans
}

/// Every file the docs name exists: a path with a `/` (from the repository's root, `crates/`,
/// a crate, its `src/`, `tests/` or `tests/it/`), and a bare Rust file name somewhere in the
/// repository. A page that still names a file after a move or a rename fails here.
#[test]
fn every_file_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut bases = vec![root.clone(), root.join("crates")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let krate = entry.unwrap().path();
        for sub in ["", "src", "tests", "tests/it"] {
            bases.push(krate.join(sub));
        }
    }
    let mut rust_files = std::collections::BTreeSet::new();
    let mut dirs = vec![root.join("crates"), root.join("scripts")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                rust_files.insert(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let file_like = |span: &str| {
        let name = span.rsplit('/').next().unwrap_or(span);
        let extension = name.rsplit_once('.').map(|(_, e)| e);
        span.chars().all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
            && !span.starts_with('/')
            && extension.is_some_and(|e| {
                ["rs", "md", "toml", "sh", "py", "yml", "yaml", "json", "sql", "proto"].contains(&e)
            })
    };
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in reference_pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        for (line, span) in code_spans(&text) {
            let span = span.split('#').next().unwrap_or(span);
            if !file_like(span) {
                continue;
            }
            let found = if span.contains('/') {
                bases.iter().any(|base| base.join(span).exists())
            } else if span.ends_with(".rs") {
                rust_files.contains(span)
            } else {
                continue;
            };
            checked += 1;
            if !found {
                missing.push(format!("{name}:{line} names `{span}`, which does not exist"));
            }
        }
    }
    assert!(checked >= 100, "only {checked} file names checked: did the rules stop finding them?");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every `idmint …` command the docs name in a code span is one the binary has: its first
/// one or two words answer `--help`.
#[test]
fn every_idmint_command_the_docs_name_exists() {
    /// Code spans that start with `idmint` but quote its output, not a command.
    const OUTPUT: &[&str] = &["idmint listening on"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let help = |words: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_idmint"))
            .args(words)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let mut checked = std::collections::BTreeMap::new();
    let mut unknown = Vec::new();
    for page in reference_pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(&root).unwrap_or(&page).display().to_string();
        for (line, span) in code_spans(&text) {
            let Some(rest) = span.strip_prefix("idmint ") else { continue };
            if OUTPUT.iter().any(|output| span.starts_with(output)) {
                continue;
            }
            let words: Vec<&str> = rest
                .split_whitespace()
                .take(2)
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .filter(|w| !w.starts_with('-'))
                .collect();
            if words.is_empty() {
                continue;
            }
            // A second word is a subcommand, or an argument where the first takes one
            // (`idmint next order --help` answers the help of `next`).
            let known = *checked.entry(words.join(" ")).or_insert_with(|| help(&words));
            if !known {
                unknown.push(format!("{name}:{line} names `{span}`, which idmint does not have"));
            }
        }
    }
    assert!(checked.len() >= 10, "only {} commands checked", checked.len());
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
}

/// A fenced block: its info string, its first line's number, its text (indentation of the
/// fence removed) and the marker above it, if any.
struct Block {
    info: String,
    line: usize,
    body: String,
    marker: Option<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        // A fence opens a line: three backticks and an info string without backticks.
        let Some(info) = trimmed.strip_prefix("```").filter(|info| !info.contains('`')) else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let start = i;
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim())
            .filter(|l| l.starts_with("<!--"))
            .map(str::to_string);
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i];
            body.push(line.get(indent.min(line.len() - line.trim_start().len())..).unwrap_or(""));
            i += 1;
        }
        i += 1;
        found.push(Block {
            info: info.trim().to_string(),
            line: start + 1,
            body: body.join("\n"),
            marker,
        });
    }
    found
}

/// One directive of a `<!-- docs-test: … -->` marker.
enum Directive {
    Skip(String),
    Env(String, String),
    File(String),
    Invalid,
    Defaults,
    Output(String),
    MySql(String),
}

fn parse_marker(marker: Option<&str>) -> Result<Vec<Directive>, String> {
    let Some(marker) = marker else { return Ok(Vec::new()) };
    let Some(inner) = marker.strip_prefix("<!--").and_then(|m| m.strip_suffix("-->")) else {
        return Ok(Vec::new());
    };
    let Some(directives) = inner.trim().strip_prefix("docs-test:") else {
        return Ok(Vec::new());
    };
    directives
        .split(';')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            let (word, rest) = d.split_once(' ').unwrap_or((d, ""));
            let rest = rest.trim().to_string();
            Ok(match word {
                "skip" if !rest.is_empty() => Directive::Skip(rest),
                "env" => {
                    let (name, value) = rest
                        .split_once('=')
                        .ok_or_else(|| format!("`env {rest}`: write `env NAME=VALUE`"))?;
                    Directive::Env(name.to_string(), value.to_string())
                }
                "file" if !rest.is_empty() => Directive::File(rest),
                "invalid" => Directive::Invalid,
                "defaults" => Directive::Defaults,
                "output" if !rest.is_empty() => Directive::Output(rest),
                "mysql" if matches!(rest.as_str(), "leaf" | "tinyid" | "empty") => {
                    Directive::MySql(rest)
                }
                _ => {
                    return Err(format!(
                        "unknown directive `{d}` in `{marker}`; the directives are `skip REASON`, \
                         `env NAME=VALUE`, `file NAME`, `invalid`, `defaults`, `output COMMAND`, \
                         `mysql leaf|tinyid|empty` (crates/idmint-cli/tests/it/docs.rs)"
                    ));
                }
            })
        })
        .collect()
}

/// The state one documentation file's blocks share: the directory, the servers started.
struct FileRun {
    dir: TempDir,
    bin: TempDir,
    servers: Vec<Child>,
    address: Option<String>,
    /// `export`ed by an earlier command of the file.
    exports: Vec<(String, String)>,
    /// Each documented `mysql://…/DATABASE` (query removed) and the test database it stands
    /// for.
    databases: Vec<(String, String)>,
}

impl FileRun {
    fn new() -> FileRun {
        let dir = tempfile::Builder::new().prefix("idmint-docs-").tempdir().unwrap();
        let bin = TempDir::new().unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_idmint"), bin.path().join("idmint"))
            .unwrap();
        // curl fails on an HTTP error and prints no progress meter.
        std::fs::write(bin.path().join(".curlrc"), "fail\nsilent\nshow-error\n").unwrap();
        FileRun {
            dir,
            bin,
            servers: Vec::new(),
            address: None,
            exports: Vec::new(),
            databases: Vec::new(),
        }
    }

    /// `bash -c line` in the file's directory, with the block's variables.
    fn command(&self, line: &str, directives: &[Directive]) -> Command {
        let mut command = Command::new("bash");
        command.args(["-o", "pipefail", "-c", line]).current_dir(self.dir.path());
        for (name, _) in std::env::vars() {
            if name.starts_with("IDMINT_") || name == "RUST_LOG" {
                command.env_remove(name);
            }
        }
        let path = std::env::var("PATH").unwrap_or_default();
        command.env("PATH", format!("{}:{path}", self.bin.path().display()));
        command.env("CURL_HOME", self.bin.path());
        if let Some(address) = &self.address {
            command.env("IDMINT_SERVER", format!("http://{address}"));
        }
        for (name, value) in &self.exports {
            command.env(name, value);
        }
        for directive in directives {
            if let Directive::Env(name, value) = directive {
                command.env(name, value);
            }
        }
        command
    }

    fn sh(&mut self, body: &str, directives: &[Directive]) -> Result<(), String> {
        if directives.iter().any(|d| matches!(d, Directive::MySql(_))) {
            // A scene: what it starts and exports ends with it.
            let before = (self.address.clone(), self.servers.len(), self.exports.clone());
            let outcome = self.sh_lines(body, directives);
            for mut child in self.servers.drain(before.1..) {
                let _ = child.kill();
                let _ = child.wait();
            }
            (self.address, self.exports) = (before.0, before.2);
            return outcome;
        }
        self.sh_lines(body, directives)
    }

    fn sh_lines(&mut self, body: &str, directives: &[Directive]) -> Result<(), String> {
        self.databases_for(body, directives)?;
        for (line, expected) in commands(body) {
            let line = self.rewrite(&line);
            if let Some((name, value)) = export(&line) {
                self.exports.retain(|(known, _)| *known != name);
                self.exports.push((name, value));
                continue;
            }
            if is_serve(&line) {
                self.serve(&line, directives)?;
                continue;
            }
            let (status, stdout, stderr) =
                run(self.command(&line, directives)).map_err(|e| format!("`{line}`: {e}"))?;
            if !status {
                return Err(format!(
                    "`{line}` failed:\n{stderr}{stdout}\n(fix the docs or the code; a block that \
                     cannot run here takes `<!-- docs-test: skip REASON -->` above its fence)"
                ));
            }
            if let Some(expected) = expected
                && stdout.trim() != expected
            {
                return Err(format!(
                    "`{line}` printed\n  {}\nwhere the docs say\n  {expected}",
                    stdout.trim()
                ));
            }
        }
        Ok(())
    }

    fn toml(&mut self, body: &str, directives: &[Directive]) -> Result<(), String> {
        self.databases_for(body, directives)?;
        let mut body = body.to_string();
        for (documented, test) in &self.databases {
            body = replace_database(&body, documented, test);
        }
        let body = body.as_str();
        let name = directives
            .iter()
            .find_map(|d| match d {
                Directive::File(name) => Some(name.as_str()),
                _ => None,
            })
            .unwrap_or("idmint.toml");
        std::fs::write(self.dir.path().join(name), format!("{body}\n")).unwrap();
        let invalid = directives.iter().any(|d| matches!(d, Directive::Invalid));
        let check = format!("idmint config check {name}");
        let (ok, _, stderr) =
            run(self.command(&check, directives)).map_err(|e| format!("`{check}`: {e}"))?;
        match (ok, invalid) {
            (true, true) => return Err(format!("`{check}` accepted a file marked `invalid`")),
            (false, false) => return Err(format!("`{check}` refused it:\n{stderr}")),
            _ => {}
        }
        if directives.iter().any(|d| matches!(d, Directive::Defaults)) {
            self.defaults(body)?;
        }
        Ok(())
    }

    /// The "every key at its default" file against what `config check` prints for a file
    /// with only the block's `[format.*]` headers: every key of the `keys!` table, each at
    /// its default.
    fn defaults(&self, body: &str) -> Result<(), String> {
        let documented = flatten(body)?;
        let headers: String = body
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| l.starts_with("[format."))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(self.dir.path().join("headers-only.toml"), headers).unwrap();
        let check = "idmint config check headers-only.toml";
        let (ok, printed, stderr) = run(self.command(check, &[])).map_err(|e| e.to_string())?;
        if !ok {
            return Err(format!("`{check}` failed:\n{stderr}"));
        }
        let defaults = flatten(&printed)?;
        let mut problems = Vec::new();
        for (key, value) in &defaults {
            match documented.get(key) {
                None => problems.push(format!(
                    "lacks `{key} = {value}` (a key of the keys! table, \
                     crates/idmint-server/src/config/keys.rs): add it"
                )),
                Some(doc) if doc != value => problems
                    .push(format!("has `{key} = {doc}` where the default is `{key} = {value}`")),
                Some(_) => {}
            }
        }
        for key in documented.keys().filter(|k| !defaults.contains_key(*k)) {
            problems.push(format!("has `{key}`, which `idmint config check` does not print"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("the file of every key at its default {}", problems.join("; ")))
        }
    }

    fn output(
        &mut self,
        command: &str,
        body: &str,
        directives: &[Directive],
    ) -> Result<(), String> {
        let command = self.rewrite(command);
        let (_, stdout, stderr) =
            run(self.command(&command, directives)).map_err(|e| format!("`{command}`: {e}"))?;
        let printed = format!("{stdout}{stderr}");
        if printed.trim() != body.trim() {
            return Err(format!(
                "`{command}` printed\n{}\nwhere the docs say\n{}",
                printed.trim(),
                body.trim()
            ));
        }
        Ok(())
    }

    /// `cargo run … --` runs the binary under test; a server's address replaces the default.
    fn rewrite(&self, line: &str) -> String {
        let mut line = line.to_string();
        for prefix in ["cargo run --release -- ", "cargo run --profile start -- ", "cargo run -- "]
        {
            line = line.replace(prefix, "idmint ");
        }
        for (documented, test) in &self.databases {
            line = replace_database(&line, documented, test);
        }
        if let Some(address) = &self.address {
            line = line.replace("127.0.0.1:8080", address);
        }
        line
    }

    /// With a `mysql FIXTURE` directive: a fresh test database holding the fixture for each
    /// MySQL URL `body` names that the file has not named before.
    fn databases_for(&mut self, body: &str, directives: &[Directive]) -> Result<(), String> {
        let Some(fixture) = directives.iter().find_map(|d| match d {
            Directive::MySql(fixture) => Some(fixture.as_str()),
            _ => None,
        }) else {
            return Ok(());
        };
        let sql = match fixture {
            "leaf" => idmint_testkit::fixtures::LEAF_DB_SQL,
            "tinyid" => idmint_testkit::fixtures::TINYID_DB_SQL,
            _ => "",
        };
        for documented in mysql_urls(body) {
            if self.databases.iter().any(|(known, _)| *known == documented) {
                continue;
            }
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            let runtime = runtime.map_err(|e| e.to_string())?;
            let made = runtime.block_on(idmint_testkit::mysql::fresh_database_with(
                &format!("docs_{fixture}"),
                sql,
            ));
            let Some(test) = made else {
                return Err(format!("no MariaDB for {documented} (the skip is recorded)"));
            };
            let test = test.split('?').next().unwrap_or_default().to_string();
            self.databases.push((documented, test));
        }
        Ok(())
    }

    fn serve(&mut self, line: &str, directives: &[Directive]) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.path().join("serve.log")).unwrap();
        let mut command = self.command(&format!("exec env {line}"), directives);
        command.env("IDMINT_LISTEN", "127.0.0.1:0").stdout(Stdio::piped()).stderr(log);
        if directives.iter().any(|d| matches!(d, Directive::MySql(_))) {
            let data = self.dir.path().join(format!("idmint-data-{}", self.servers.len()));
            command.env("IDMINT_DATA_DIR", data);
        }
        let mut child = command.spawn().map_err(|e| format!("`{line}`: {e}"))?;
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut first = String::new();
            let _ = BufReader::new(stdout).read_line(&mut first);
            let _ = sender.send(first);
        });
        let first = receiver.recv_timeout(SERVE_TIMEOUT).unwrap_or_default();
        let Some(url) = first.trim().strip_prefix("idmint listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let log =
                std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default();
            return Err(format!("`{line}` did not start: {first:?}\n{log}"));
        };
        self.address = Some(url.trim_start_matches("http://").to_string());
        self.servers.push(child);
        Ok(())
    }

    fn stop(&mut self) {
        for mut child in self.servers.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for FileRun {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The commands of an `sh` block, each with its expected stdout (`# -> TEXT`).
fn commands(body: &str) -> Vec<(String, Option<String>)> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in body.lines() {
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        joined.push(std::mem::take(&mut current));
    }
    joined
        .into_iter()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| {
            let (command, comment) = split_comment(&l);
            let expected = comment.and_then(|c| c.strip_prefix("->")).map(|e| e.trim().to_string());
            (command.trim().to_string(), expected)
        })
        .collect()
}

/// Splits `command  # comment` at the first `#` after two spaces outside quotes.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && i >= 2 && &bytes[i - 2..i] == b"  " => {
                return (&line[..i], Some(line[i + 1..].trim()));
            }
            _ => {}
        }
    }
    (line, None)
}

/// `export NAME=VALUE` (the value unquoted): the variable a shell would keep for the next
/// commands.
fn export(line: &str) -> Option<(String, String)> {
    let (name, value) = line.strip_prefix("export ")?.trim().split_once('=')?;
    let unquoted = ['\'', '"'].iter().find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q));
    Some((name.to_string(), unquoted.unwrap_or(value).to_string()))
}

/// Each `mysql://…/DATABASE` of `text`, its query removed, in order of appearance.
fn mysql_urls(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (at, _) in text.match_indices("mysql://") {
        let url: String = text[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, '\'' | '"' | '?'))
            .collect();
        if !found.contains(&url) {
            found.push(url);
        }
    }
    found
}

/// `line` with each `documented` URL (`mysql://…/DATABASE`, at a word's end or before its
/// query) replaced by `test`.
fn replace_database(line: &str, documented: &str, test: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(documented) {
        let after = &rest[at + documented.len()..];
        let whole =
            after.chars().next().is_none_or(|c| c.is_whitespace() || matches!(c, '\'' | '"' | '?'));
        out.push_str(&rest[..at]);
        out.push_str(if whole { test } else { documented });
        rest = after;
    }
    out.push_str(rest);
    out
}

fn is_serve(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().skip_while(|w| w.contains('=')).collect();
    words.first() == Some(&"idmint")
        && words.iter().skip(1).find(|w| !w.starts_with('-')) == Some(&"serve")
}

/// Runs `command` (bounded by [`COMMAND_TIMEOUT`]): whether it exited 0, stdout, stderr.
fn run(mut command: Command) -> Result<(bool, String, String), String> {
    let dir = TempDir::new().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {} s", COMMAND_TIMEOUT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Ok((status.success(), read(&out), read(&err)))
}

/// Every key of a TOML document as `section.key` -> its value written as TOML.
fn flatten(text: &str) -> Result<BTreeMap<String, String>, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    let mut keys = BTreeMap::new();
    fn walk(prefix: &str, table: &toml::Table, keys: &mut BTreeMap<String, String>) {
        for (key, value) in table {
            let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            match value {
                toml::Value::Table(inner) => walk(&name, inner, keys),
                other => {
                    keys.insert(name, other.to_string());
                }
            }
        }
    }
    walk("", &table, &mut keys);
    Ok(keys)
}
