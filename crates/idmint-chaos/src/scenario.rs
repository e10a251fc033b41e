//! What a scenario run produces and the pieces every scenario uses: the profile (short for CI,
//! long on demand), the run context (work directory, runtime, fault log), the report with its
//! numeric pass criteria, and the criteria most scenarios share.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use idmint_core::snowflake::Layout;

use crate::check::Checked;
use crate::load::{Load, Op, Outcome, Targets, Workload};
use crate::node::Node;

/// How long and how hard a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Seconds per scenario, a few hundred thousand ids: CI.
    Short,
    /// Minutes per scenario, 10^7 ids or more: on demand, results in docs/GUARANTEES.md.
    Long,
}

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The profile.
    pub profile: Profile,
    /// Overrides the length of the loaded phase the scenario stretches (its main phase).
    pub duration: Option<Duration>,
    /// The `idmint` binary to run as nodes.
    pub idmint: PathBuf,
}

/// One scenario's context: the settings, a runtime for the clients, a work directory for
/// the nodes, the clock every time is measured on, and the faults injected so far.
pub struct Run {
    /// The settings.
    pub settings: Settings,
    /// Runs the clients.
    pub runtime: tokio::runtime::Runtime,
    /// The nodes' directories live here (removed at the end).
    pub work: tempfile::TempDir,
    /// Time zero of the history.
    pub t0: Instant,
    /// The faults injected, with their times.
    pub faults: Vec<String>,
}

impl Run {
    /// A fresh context.
    pub fn new(settings: &Settings) -> Result<Run> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the clients' runtime")?;
        Ok(Run {
            settings: settings.clone(),
            runtime,
            work: tempfile::Builder::new().prefix("idmint-chaos").tempdir()?,
            t0: Instant::now(),
            faults: Vec::new(),
        })
    }

    /// `short` in the short profile, `long` in the long one.
    pub fn pick<T>(&self, short: T, long: T) -> T {
        match self.settings.profile {
            Profile::Short => short,
            Profile::Long => long,
        }
    }

    /// The main phase's length: `--duration` if given, else the profile's.
    pub fn main_phase(&self, short_s: u64, long_s: u64) -> Duration {
        self.settings.duration.unwrap_or(Duration::from_secs(self.pick(short_s, long_s)))
    }

    /// Milliseconds since time zero.
    pub fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// Records a fault (and prints it, so a long run shows progress).
    pub fn fault(&mut self, what: impl fmt::Display) {
        let line = format!("{:.1} s: {what}", self.t0.elapsed().as_secs_f64());
        eprintln!("  {line}");
        self.faults.push(line);
    }

    /// Node `name` (not started) in the work directory: `idmint serve` with `args` and `envs`.
    pub fn node(&self, name: &str, args: &[String], envs: &[(&str, String)]) -> Result<Node> {
        Node::new(&self.settings.idmint, self.work.path(), name, args, envs)
    }

    /// Nodes `n1` to `nCOUNT`, alike, started.
    pub fn start_nodes(
        &self,
        count: usize,
        args: &[String],
        envs: &[(&str, String)],
    ) -> Result<Vec<Node>> {
        (1..=count)
            .map(|i| {
                let mut node = self.node(&format!("n{i}"), args, envs)?;
                node.start()?;
                Ok(node)
            })
            .collect()
    }

    /// Starts the clients on `targets`.
    pub fn load(&self, targets: &Targets, workload: &Workload) -> Load {
        Load::start(self.runtime.handle(), targets, workload, self.t0)
    }

    /// Waits until the node at `url` answers ids on `path` (a node connects to Redis in the
    /// background after it listens): the load starts on serving nodes. At most 15 s.
    pub fn await_ids(&self, url: &str, path: &str) -> Result<()> {
        let url = format!("{url}{path}");
        self.runtime.block_on(async {
            // A snowflake node with a leased worker id starts issuing only once its lease
            // settled (2.5 s with the default keys), so the bound is well above that.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(response) = reqwest::get(&url).await
                    && response.status() == 200
                {
                    return Ok(());
                }
                ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{url} did not answer ids within 30 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    }

    /// Runs `idmint ARGS` (an admin command such as `tag create`) to success.
    pub fn idmint(&self, args: &[&str]) -> Result<String> {
        match self.try_idmint(args)? {
            Ok(stdout) => Ok(stdout),
            Err(stderr) => anyhow::bail!("idmint {}: {stderr}", args.join(" ")),
        }
    }

    /// Runs `idmint ARGS`: `Ok(stdout)` when it succeeds, `Err(stderr)` when it refuses (exits
    /// non-zero), for a command the scenario expects may be refused.
    pub fn try_idmint(&self, args: &[&str]) -> Result<Result<String, String>> {
        let output = Command::new(&self.settings.idmint)
            .current_dir(self.work.path())
            .args(args)
            .output()
            .with_context(|| format!("running {}", self.settings.idmint.display()))?;
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_string();
        Ok(if output.status.success() {
            Ok(text(&output.stdout))
        } else {
            Err(text(&output.stderr))
        })
    }

    /// An admin request (`method` on `url`, `Authorization: Bearer token`, a JSON `body`):
    /// the status and, for an error, the JSON body's `error.code` (`?` when there is none).
    pub fn admin(
        &self,
        method: reqwest::Method,
        url: &str,
        token: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(u16, String)> {
        self.runtime.block_on(async {
            let mut request = reqwest::Client::new()
                .request(method.clone(), url)
                .bearer_auth(token)
                .timeout(Duration::from_secs(10));
            if let Some(body) = body {
                request = request.json(&body);
            }
            let response = request.send().await.with_context(|| format!("{method} {url}"))?;
            let status = response.status().as_u16();
            let code = if response.status().is_success() {
                String::new()
            } else {
                let body = response.json::<serde_json::Value>().await.unwrap_or_default();
                body["error"]["code"].as_str().unwrap_or("?").to_string()
            };
            Ok((status, code))
        })
    }
}

/// Sleeps on the harness's thread (the clients run on the runtime meanwhile).
pub fn sleep(duration: Duration) {
    std::thread::sleep(duration);
}

/// A numeric pass criterion and what was measured.
#[derive(Debug, Clone)]
pub struct Criterion {
    /// What must hold.
    pub what: String,
    /// What the run measured.
    pub measured: String,
    /// Did it hold?
    pub pass: bool,
}

/// A criterion.
pub fn criterion(what: impl Into<String>, measured: impl Into<String>, pass: bool) -> Criterion {
    Criterion { what: what.into(), measured: measured.into(), pass }
}

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The guarantee it tests.
    pub guarantee: &'static str,
    /// The checker's findings.
    pub checked: Checked,
    /// Answers other than ids, by kind (`503 unavailable`, `unreachable`).
    pub refusals: BTreeMap<String, u64>,
    /// The faults injected.
    pub faults: Vec<String>,
    /// The pass criteria.
    pub criteria: Vec<Criterion>,
    /// How long the scenario took, setup included.
    pub elapsed: Duration,
}

impl Report {
    /// Did every criterion hold?
    pub fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.pass)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        writeln!(
            f,
            "{verdict} {} ({:.0} s): {}",
            self.scenario,
            self.elapsed.as_secs_f64(),
            self.guarantee
        )?;
        let c = &self.checked;
        writeln!(
            f,
            "  {} ids ({}) in {} requests; duplicates {}, not increasing {}, worker ids shared {}; faults {}",
            c.ids,
            c.ids_by_tag_text(),
            c.ops,
            c.duplicates,
            c.not_increasing,
            c.owner_overlaps,
            self.faults.len()
        )?;
        if c.ordered_values > 0 {
            writeln!(
                f,
                "  real-time order: {} values checked; {} order violations, {} repeats",
                c.ordered_values, c.order_violations, c.repeats
            )?;
        }
        if !self.refusals.is_empty() {
            let refusals: Vec<String> =
                self.refusals.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            writeln!(f, "  answers other than ids: {}", refusals.join(", "))?;
        }
        for c in &self.criteria {
            writeln!(f, "  [{}] {}: {}", if c.pass { "ok" } else { "FAILED" }, c.what, c.measured)?;
        }
        for example in &self.checked.examples {
            writeln!(f, "  ! {example}")?;
        }
        Ok(())
    }
}

/// Answers other than ids, by kind: `STATUS CODE` or `unreachable`.
pub fn refusals(history: &[Op]) -> BTreeMap<String, u64> {
    let mut kinds = BTreeMap::new();
    for op in history {
        let kind = match &op.outcome {
            Outcome::Ids(_) | Outcome::Range { .. } => continue,
            Outcome::Refused { status, code } => format!("{status} {code}"),
            Outcome::Unreachable => "unreachable".to_string(),
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    kinds
}

/// The criteria every scenario holds: no duplicate (nor 0), increasing per node, at least
/// `min_ids` ids checked, and for snowflake ids one owner per worker id.
pub fn standard_criteria(checked: &Checked, min_ids: u64, snowflake: bool) -> Vec<Criterion> {
    let mut criteria = vec![
        criterion(
            "no id acknowledged twice, none is 0",
            format!("{} duplicates, {} zeros", checked.duplicates, checked.zeros),
            checked.duplicates == 0 && checked.zeros == 0,
        ),
        criterion(
            "each client's ids increase per node",
            format!("{} out of order", checked.not_increasing),
            checked.not_increasing == 0,
        ),
        criterion(
            format!("at least {min_ids} ids checked"),
            checked.ids.to_string(),
            checked.ids >= min_ids,
        ),
    ];
    if checked.ordered_values > 0 {
        criteria.push(criterion(
            "real-time order: a value answered before a request was sent is below its values",
            format!("{} violations in {} values", checked.order_violations, checked.ordered_values),
            checked.order_violations == 0,
        ));
        criteria.push(criterion(
            "no strict id or timestamp answered twice",
            format!("{} repeats", checked.repeats),
            checked.repeats == 0,
        ));
    }
    if snowflake {
        criteria.push(criterion(
            "a worker id has one owner at a time",
            format!("{} overlaps", checked.owner_overlaps),
            checked.owner_overlaps == 0,
        ));
    }
    criteria
}

/// Every answer other than ids is one of `allowed` (`STATUS CODE` or `unreachable`).
pub fn only_refusals(refusals: &BTreeMap<String, u64>, allowed: &[&str]) -> Criterion {
    let other: Vec<String> = refusals
        .iter()
        .filter(|(kind, _)| !allowed.contains(&kind.as_str()))
        .map(|(kind, n)| format!("{kind}: {n}"))
        .collect();
    criterion(
        format!("errors are typed and expected: only {}", allowed.join(", ")),
        if other.is_empty() { "none other".to_string() } else { other.join(", ") },
        other.is_empty(),
    )
}

/// The first time after `after_ms` that `node` acknowledged ids.
pub fn first_ids_after(history: &[Op], node: usize, after_ms: u64) -> Option<u64> {
    history
        .iter()
        .filter(|op| op.node == node && op.at_ms >= after_ms && op.count() > 0)
        .map(Op::done_ms)
        .min()
}

/// Did every node in `nodes` acknowledge ids in the last `window_ms` of the history?
pub fn all_serving_at_end(history: &[Op], nodes: &[usize], window_ms: u64) -> Criterion {
    let end = history.iter().map(|op| op.at_ms).max().unwrap_or(0);
    let silent: Vec<usize> = nodes
        .iter()
        .copied()
        .filter(|&n| first_ids_after(history, n, end.saturating_sub(window_ms)).is_none())
        .collect();
    criterion(
        format!("every node serves ids in the last {window_ms} ms"),
        if silent.is_empty() { "all".to_string() } else { format!("silent: {silent:?}") },
        silent.is_empty(),
    )
}

/// What a scenario hands back to [`Scenario::run`](crate::scenarios::Scenario::run): the
/// history, the node names, the layout (snowflake) and its own criteria.
#[derive(Default)]
pub struct Outcomes {
    pub(crate) history: Vec<Op>,
    pub(crate) nodes: Vec<String>,
    pub(crate) layout: Option<Layout>,
    /// The tags checked for real-time order (strict tags, the oracle).
    pub(crate) ordered: Vec<&'static str>,
    pub(crate) min_ids: u64,
    pub(crate) criteria: Vec<Criterion>,
    /// An unsafe scenario: passes when the checker flags the history.
    pub(crate) expect_flagged: bool,
}

/// The nodes' base URLs, as the load's targets.
pub(crate) fn targets(nodes: &[&Node]) -> Targets {
    Arc::new(Mutex::new(nodes.iter().map(|n| n.url()).collect()))
}

/// The nodes' names.
pub(crate) fn names(nodes: &[&Node]) -> Vec<String> {
    nodes.iter().map(|n| n.name.clone()).collect()
}

/// `pairs` as a node's environment.
pub(crate) fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}
