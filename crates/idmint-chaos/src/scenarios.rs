//! The scenarios: each starts its own servers, loads them, injects its faults, checks the
//! history and judges numeric criteria. The unsafe scenarios pass only when the checker
//! flags their history.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use idmint_core::snowflake::Layout;

use crate::check::check;
use crate::load::{Op, Outcome, Targets, Workload};
use crate::node::{FakeClock, Node};
use crate::scenario::{
    Report, Run, Settings, all_serving_at_end, criterion, first_ids_after, only_refusals, refusals,
    sleep, standard_criteria,
};
use crate::servers::{PrivateMariaDb, PrivatePostgres, PrivateRedis};

/// A scenario: its name, the guarantee it tests, and how to run it.
pub struct Scenario {
    /// The name `--scenario` takes.
    pub name: &'static str,
    /// The guarantee under test, in a sentence.
    pub guarantee: &'static str,
    run: fn(&mut Run, &mut Outcomes) -> Result<()>,
}

/// Every scenario, in the order `--scenario all` runs them.
pub const SCENARIOS: [Scenario; 8] = [
    Scenario {
        name: "kill9",
        guarantee: "segment ids never repeat while nodes of one MariaDB store are killed with -9 and restarted under load",
        run: kill9,
    },
    Scenario {
        name: "db-outage",
        guarantee: "a PostgreSQL outage is served from the buffer, then with fast 503s, then recovered from without a restart",
        run: db_outage,
    },
    Scenario {
        name: "redis",
        guarantee: "sequence numbers never repeat while Redis is flushed and restarted under load",
        run: redis,
    },
    Scenario {
        name: "clock",
        guarantee: "snowflake ids never repeat or go back when a node's wall clock steps back 10 s at run time and across a restart",
        run: clock,
    },
    Scenario {
        name: "sigstop",
        guarantee: "a node paused past its worker-id lease issues no id with that worker id once another node holds it",
        run: sigstop,
    },
    Scenario {
        name: "restore",
        guarantee: "a store rolled back to an older backup does not make a node re-issue ids (regression guard), live and across a restart",
        run: restore,
    },
    Scenario {
        name: "unsafe-static-worker",
        guarantee: "the checker can fail: two nodes forced onto one static worker id MUST be flagged",
        run: unsafe_static_worker,
    },
    Scenario {
        name: "unsafe-restore-without-marks",
        guarantee: "the checker can fail: a store rolled back while the node's marks are lost MUST be flagged",
        run: unsafe_restore_without_marks,
    },
];

/// Finds a scenario by name.
pub fn scenario(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// What a scenario hands back to [`Scenario::run`]: the history, the node names, the layout
/// (snowflake) and its own criteria.
#[derive(Default)]
pub struct Outcomes {
    history: Vec<Op>,
    nodes: Vec<String>,
    layout: Option<Layout>,
    min_ids: u64,
    criteria: Vec<crate::scenario::Criterion>,
    /// An unsafe scenario: passes when the checker flags the history.
    expect_flagged: bool,
}

impl Scenario {
    /// Runs the scenario and judges it.
    pub fn run(&self, settings: &Settings) -> Result<Report> {
        let started = Instant::now();
        let mut run = Run::new(settings)?;
        let mut out = Outcomes::default();
        (self.run)(&mut run, &mut out).with_context(|| format!("scenario {}", self.name))?;
        let checked = check(&out.history, &out.nodes, out.layout);
        let refusals = refusals(&out.history);
        let criteria = if out.expect_flagged {
            let mut criteria = vec![criterion(
                "the checker flags the run (duplicates or a worker id held twice)",
                format!(
                    "{} duplicates, {} overlapping worker spans",
                    checked.duplicates, checked.owner_overlaps
                ),
                checked.flagged(),
            )];
            criteria.extend(out.criteria);
            criteria
        } else {
            let mut criteria = standard_criteria(&checked, out.min_ids, out.layout.is_some());
            criteria.extend(out.criteria);
            criteria
        };
        Ok(Report {
            scenario: self.name,
            guarantee: self.guarantee,
            checked,
            refusals,
            faults: run.faults,
            criteria,
            elapsed: started.elapsed(),
        })
    }
}

fn targets(nodes: &[&Node]) -> Targets {
    Arc::new(Mutex::new(nodes.iter().map(|n| n.url()).collect()))
}

/// The two nodes of a two-node scenario.
fn two(nodes: Vec<Node>) -> [Node; 2] {
    nodes.try_into().unwrap_or_else(|_| unreachable!("start_nodes(2, …) starts two nodes"))
}

fn names(nodes: &[&Node]) -> Vec<String> {
    nodes.iter().map(|n| n.name.clone()).collect()
}

fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// Three nodes on one private MariaDB serving two tags, each node killed with -9 in turn and
/// started again.
fn kill9(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = PrivateMariaDb::start()?;
    db.sql("mysql", "CREATE DATABASE chaos")?;
    let url = db.url("chaos");
    // Two tags on one store, both counting from 1: each must stay unique on its own.
    for tag in ["order", "user"] {
        run.idmint(&["tag", "create", tag, "--step", "1000", "--store", &url])?;
    }
    // Segments of about a second's ids, so the three nodes allocate all the time.
    let envs = env(&[("IDMINT_SEGMENT_SEGMENT_DURATION_S", "1")]);
    let args = vec!["--store".to_string(), url.clone()];
    let mut nodes = run.start_nodes(3, &args, &envs)?;
    let all: Vec<&Node> = nodes.iter().collect();
    let (targets, node_names) = (targets(&all), names(&all));
    let rate = run.pick(30_000, 120_000);
    let tags = [("order", "/v1/segment/order"), ("user", "/v1/segment/user")];
    let workload = Workload::new(&tags, run.pick(100, 1000), 6, rate);
    let load = run.load(&targets, &workload);
    let phase = run.main_phase(12, 90);
    let interval = Duration::from_millis(run.pick(1_500, 3_000));
    let end = Instant::now() + phase;
    let mut kills = 0;
    while Instant::now() + interval < end {
        sleep(interval);
        let node = &mut nodes[kills % 3];
        node.kill9()?;
        run.fault(format!("kill -9 {}", node.name));
        sleep(Duration::from_millis(300));
        node.start()?;
        kills += 1;
    }
    sleep(Duration::from_secs(2));
    out.history = load.stop(run.runtime.handle());
    let refusals = refusals(&out.history);
    out.criteria.push(criterion(
        "at least 3 nodes killed with -9 and restarted",
        kills.to_string(),
        kills >= 3,
    ));
    out.criteria.push(only_refusals(&refusals, &["unreachable"]));
    out.criteria.push(all_serving_at_end(&out.history, &[0, 1, 2], 1_500));
    out.nodes = node_names;
    out.min_ids = rate * phase.as_secs() / 2;
    Ok(())
}

/// Two nodes on a private PostgreSQL that is stopped under load and started again.
fn db_outage(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let mut db = PrivatePostgres::start()?;
    db.sql("postgres", "CREATE DATABASE chaos")?;
    let url = db.url("chaos");
    let step = run.pick(10_000, 100_000);
    run.idmint(&["tag", "create", "order", "--step", &step.to_string(), "--store", &url])?;
    // Fixed segments of half a second's ids: the buffer runs out early in the outage.
    let envs = env(&[("IDMINT_SEGMENT_ADAPTIVE_STEP", "false")]);
    let args = vec!["--store".to_string(), url.clone()];
    let [mut a, mut b]: [Node; 2] = two(run.start_nodes(2, &args, &envs)?);
    let (targets, node_names) = (targets(&[&a, &b]), names(&[&a, &b]));
    let rate = step * 2;
    let mut workload =
        Workload::new(&[("order", "/v1/segment/order")], run.pick(50, 1000), 4, rate);
    workload.timeout_ms = 10_000;
    let load = run.load(&targets, &workload);
    sleep(Duration::from_secs(run.pick(3, 20)));
    let outage = run.main_phase(8, 30);
    db.stop()?;
    let stopped_ms = run.now_ms();
    run.fault(format!("PostgreSQL stopped for {} s", outage.as_secs()));
    sleep(outage);
    db.launch()?;
    let started_ms = run.now_ms();
    run.fault("PostgreSQL started");
    sleep(Duration::from_secs(run.pick(6, 40)));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;

    let buffered = h
        .iter()
        .filter(|op| op.at_ms > stopped_ms && op.done_ms() < started_ms)
        .map(|op| op.ids().len() as u64)
        .sum::<u64>();
    out.criteria.push(criterion(
        "buffered ids are served after the store stops",
        format!("{buffered} ids"),
        buffered > 0,
    ));
    let mut refused: Vec<u64> = h
        .iter()
        .filter(|op| {
            op.at_ms > stopped_ms
                && op.at_ms < started_ms
                && matches!(op.outcome, Outcome::Refused { .. })
        })
        .map(|op| op.latency_us)
        .collect();
    refused.sort_unstable();
    let quantile = |q: f64| {
        refused
            .get(((refused.len() as f64 * q) as usize).min(refused.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
            / 1000
    };
    let (p50, p99, max) =
        (quantile(0.5), quantile(0.99), refused.last().copied().unwrap_or(0) / 1000);
    out.criteria.push(criterion(
        "then fast 503s: median under 50 ms, none over the refill wait + store timeout (4 s)",
        format!("{} refusals; p50 {p50} ms, p99 {p99} ms, max {max} ms", refused.len()),
        !refused.is_empty() && p50 < 50 && max <= 4_500,
    ));
    out.criteria.push(only_refusals(&refusals(h), &["503 unavailable"]));
    for (node, name) in [(0, "n1"), (1, "n2")] {
        let back = first_ids_after(h, node, started_ms).map(|t| t - started_ms);
        out.criteria.push(criterion(
            format!("{name} serves again within 10 s of the store's return, not restarted"),
            format!(
                "{} ms, started {} time(s)",
                back.map_or("never".to_string(), |t| t.to_string()),
                [&a, &b][node].starts
            ),
            back.is_some_and(|t| t <= 10_000) && [&a, &b][node].starts == 1,
        ));
    }
    ensure!(a.running() && b.running(), "a node died during the outage:\n{}\n{}", a.log(), b.log());
    out.nodes = node_names;
    out.min_ids = rate;
    Ok(())
}

/// Two nodes serving two sequences (ceilings on a private PostgreSQL, counter on a private
/// Redis) while Redis is flushed and killed and started empty.
fn redis(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = PrivatePostgres::start()?;
    db.sql("postgres", "CREATE DATABASE chaos")?;
    let mut redis = PrivateRedis::start()?;
    let url = db.url("chaos");
    // Two sequences on one Redis: a flush loses both counters at once.
    let sequences = [("orders", "/v1/seq/orders"), ("invoices", "/v1/seq/invoices")];
    for (name, _) in sequences {
        run.idmint(&["seq", "create", name, "--store", &url])?;
    }
    let args = vec!["--store".to_string(), url.clone(), "--redis".to_string(), redis.url()];
    let [a, b]: [Node; 2] = two(run.start_nodes(2, &args, &[])?);
    for node in [&a, &b] {
        for (_, path) in sequences {
            run.await_ids(&node.url(), path)?;
        }
    }
    let (targets, node_names) = (targets(&[&a, &b]), names(&[&a, &b]));
    let rate = run.pick(20_000, 120_000);
    let workload = Workload::new(&sequences, run.pick(100, 1000), 4, rate);
    let load = run.load(&targets, &workload);
    let phase = run.main_phase(10, 90);
    let interval = Duration::from_millis(run.pick(2_000, 6_000));
    let end = Instant::now() + phase;
    let mut faults = 0;
    let mut last_fault_ms = 0;
    while Instant::now() + interval < end {
        sleep(interval);
        if faults % 3 == 2 {
            redis.kill()?;
            run.fault("Redis killed (nothing saved)");
            sleep(Duration::from_millis(500));
            redis.launch()?;
            run.fault("Redis started empty");
        } else {
            redis.flush()?;
            run.fault("Redis FLUSHALL");
        }
        last_fault_ms = run.now_ms();
        faults += 1;
    }
    sleep(Duration::from_secs(3));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    out.criteria.push(criterion(
        "at least 2 flushes and 1 restart of Redis",
        format!("{faults} faults"),
        faults >= 3,
    ));
    out.criteria.push(only_refusals(&refusals(h), &["503 sequence_unavailable"]));
    for (node, name) in node_names.iter().enumerate() {
        let back = first_ids_after(h, node, last_fault_ms).map(|t| t - last_fault_ms);
        out.criteria.push(criterion(
            format!("{name} serves again within 3 s of the last fault"),
            back.map_or("never".to_string(), |t| format!("{t} ms")),
            back.is_some_and(|t| t <= 3_000),
        ));
    }
    out.nodes = node_names;
    out.min_ids = rate * phase.as_secs() / 2;
    Ok(())
}

/// Two snowflake nodes (static worker ids, the time mark in their data directories); n1 runs
/// under libfaketime and its clock is stepped back 10 s while it serves, then again while it
/// is down after a `kill -9`.
fn clock(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let fake = FakeClock::new(run.work.path())?;
    let worker = |n: &str| env(&[("IDMINT_SNOWFLAKE_WORKER", n)]);
    let mut a = run.node("n1", &[], &worker("static:1"))?.with_fake_clock(&fake);
    let mut b = run.node("n2", &[], &worker("static:2"))?;
    a.start()?;
    b.start()?;
    let (targets, node_names) = (targets(&[&a, &b]), names(&[&a, &b]));
    let rate = run.pick(20_000, 150_000);
    let workload = Workload::new(&[("snowflake", "/v1/snowflake")], run.pick(100, 1000), 4, rate);
    let load = run.load(&targets, &workload);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    fake.set_offset_s(-10)?;
    let stepped_ms = run.now_ms();
    run.fault("n1's wall clock stepped back 10 s (libfaketime)");
    sleep(Duration::from_secs(14));
    a.kill9()?;
    fake.set_offset_s(-20)?;
    run.fault("n1 killed with -9; its clock stepped back 10 s more while down");
    a.start()?;
    let restarted_ms = run.now_ms();
    run.fault("n1 started with the clock 20 s behind");
    sleep(Duration::from_secs(16) + warm);
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    let behind = |from: u64, to: u64| {
        h.iter()
            .filter(|op| op.node == 0 && op.at_ms >= from && op.at_ms < to)
            .filter(
                |op| matches!(&op.outcome, Outcome::Refused { code, .. } if code == "clock_behind"),
            )
            .count()
    };
    let refused_live = behind(stepped_ms, restarted_ms);
    let refused_restart = behind(restarted_ms, u64::MAX);
    out.criteria.push(criterion(
        "n1 refuses with clock_behind after each step (the step took effect)",
        format!("{refused_live} at run time, {refused_restart} after the restart"),
        refused_live > 0 && refused_restart > 0,
    ));
    for (what, from, limit_ms) in
        [("the run-time step", stepped_ms, 13_000), ("the restart", restarted_ms, 15_000)]
    {
        let back = first_ids_after(h, 0, from + 2_000).map(|t| t - from);
        out.criteria.push(criterion(
            format!("n1 serves again by itself within {} s of {what}", limit_ms / 1000),
            back.map_or("never".to_string(), |t| format!("{t} ms")),
            back.is_some_and(|t| t <= limit_ms),
        ));
    }
    out.criteria.push(only_refusals(&refusals(h), &["503 clock_behind", "unreachable"]));
    out.nodes = node_names;
    out.layout = Layout::preset("snowflake");
    out.min_ids = rate * warm.as_secs();
    Ok(())
}

/// Snowflake nodes leasing worker ids from a private MariaDB; n1 is paused with SIGSTOP past
/// its lease, n3 starts and takes n1's worker id, then n1 is resumed.
fn sigstop(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = PrivateMariaDb::start()?;
    db.sql("mysql", "CREATE DATABASE chaos")?;
    let (ttl_ms, margin_ms) = run.pick((2_000u64, 1_000u64), (6_000, 3_000));
    let envs = env(&[
        ("IDMINT_SNOWFLAKE_WORKER", "lease"),
        ("IDMINT_SNOWFLAKE_LEASE_TTL_MS", &ttl_ms.to_string()),
        ("IDMINT_SNOWFLAKE_LEASE_MARGIN_MS", &margin_ms.to_string()),
    ]);
    let args = vec!["--store".to_string(), db.url("chaos")];
    let [a, b]: [Node; 2] = two(run.start_nodes(2, &args, &envs)?);
    let mut c = run.node("n3", &args, &envs)?;
    let targets = targets(&[&a, &b]);
    let rate = run.pick(20_000, 150_000);
    let mut workload =
        Workload::new(&[("snowflake", "/v1/snowflake")], run.pick(100, 1000), 4, rate);
    workload.timeout_ms = 1_000;
    let load = run.load(&targets, &workload);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    a.pause()?;
    let paused_ms = run.now_ms();
    run.fault("n1 paused with SIGSTOP");
    sleep(Duration::from_millis(ttl_ms + margin_ms + 1_000));
    c.start()?;
    targets.lock().expect("targets lock").push(c.url());
    run.fault("n3 started (the lease of n1's worker id has expired)");
    sleep(Duration::from_millis(2_000));
    a.resume()?;
    let resumed_ms = run.now_ms();
    run.fault("n1 resumed with SIGCONT");
    sleep(Duration::from_secs(8) + warm);
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    let layout = Layout::preset("snowflake").context("the snowflake preset")?;
    let workers = |node: usize, from: u64, to: u64| {
        let mut w: Vec<u64> = h
            .iter()
            .filter(|op| op.node == node && op.at_ms >= from && op.at_ms < to)
            .flat_map(|op| op.ids().iter().filter_map(|&id| layout.decode(id)).map(|p| p.worker))
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    let (before, taken, after) =
        (workers(0, 0, paused_ms), workers(2, 0, u64::MAX), workers(0, resumed_ms, u64::MAX));
    out.criteria.push(criterion(
        "n3 took n1's worker id while n1 was paused (the fault was real)",
        format!("n1 before {before:?}, n3 {taken:?}"),
        before.len() == 1 && taken == before,
    ));
    out.criteria.push(criterion(
        "after resuming, n1 issues no id with the worker id n3 holds",
        format!("n1 after {after:?}"),
        after.iter().all(|w| !taken.contains(w)),
    ));
    // A new lease serves only after its start-up delay: min(time_window_ms, TTL) + margin,
    // with the default 3 s window (docs/operations.md, "Start-up delay").
    let settle_ms = ttl_ms.min(3_000) + margin_ms;
    let limit_ms = 10_000 + settle_ms;
    let back = first_ids_after(h, 0, resumed_ms).map(|t| t - resumed_ms);
    out.criteria.push(criterion(
        format!("n1 serves again within {} s of resuming, under a new lease", limit_ms / 1000),
        back.map_or("never".to_string(), |t| format!("{t} ms")),
        back.is_some_and(|t| t <= limit_ms) && !after.is_empty(),
    ));
    out.criteria.push(only_refusals(
        &refusals(h),
        &[
            "503 worker_lease_not_proven",
            "503 lease_settling",
            "503 snowflake_unavailable",
            "unreachable",
        ],
    ));
    out.nodes = vec!["n1".into(), "n2".into(), "n3".into()];
    out.layout = Some(layout);
    out.min_ids = rate * warm.as_secs();
    Ok(())
}

/// One node on a private MariaDB whose `leaf_alloc` rows are rolled back to a backup taken
/// earlier: once while the node serves, once while it is down after a `kill -9`.
fn restore(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    restore_with(run, out, true)
}

/// As `restore`, but the node's marks (`segments.high-water`) are deleted before it starts
/// again, as when a node's data directory is lost with the store: the checker must flag the
/// ids served again. Shows the `restore` scenario would catch a guard that did nothing.
fn unsafe_restore_without_marks(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    restore_with(run, out, false)
}

fn restore_with(run: &mut Run, out: &mut Outcomes, keep_marks: bool) -> Result<()> {
    let db = PrivateMariaDb::start()?;
    db.sql("mysql", "CREATE DATABASE chaos")?;
    let url = db.url("chaos");
    run.idmint(&["tag", "create", "order", "--step", "1000", "--store", &url])?;
    let envs = env(&[("IDMINT_SEGMENT_ADAPTIVE_STEP", "false")]);
    let mut a = run.node("n1", &["--store".to_string(), url], &envs)?;
    a.start()?;
    let targets = targets(&[&a]);
    let rate = run.pick(20_000, 120_000);
    let workload = Workload::new(&[("order", "/v1/segment/order")], run.pick(50, 500), 4, rate);
    let load = run.load(&targets, &workload);
    let phase = run.main_phase(3, 30);
    let backup = db.dump("chaos", "leaf_alloc")?;
    run.fault("backup of leaf_alloc taken");
    sleep(phase);
    let jumps = |node: &Node| node.log().matches("the store went backwards").count();
    db.restore("chaos", &backup)?;
    run.fault("leaf_alloc restored from the backup while n1 serves");
    sleep(phase);
    let live_jumps = jumps(&a);
    a.kill9()?;
    db.restore("chaos", &backup)?;
    run.fault("n1 killed with -9; leaf_alloc restored from the backup again");
    if !keep_marks {
        std::fs::remove_file(a.data_dir().join("segments.high-water"))?;
        run.fault("n1's marks deleted (its data directory lost)");
    }
    a.start()?;
    run.fault("n1 started");
    sleep(phase);
    out.history = load.stop(run.runtime.handle());
    out.nodes = vec!["n1".into()];
    if !keep_marks {
        out.expect_flagged = true;
        return Ok(());
    }
    let restart_jumps = jumps(&a) - live_jumps;
    out.criteria.push(criterion(
        "the guard caught each rollback (the faults were real)",
        format!("{live_jumps} refusals while serving, {restart_jumps} after the restart"),
        live_jumps > 0 && restart_jumps > 0,
    ));
    out.criteria.push(only_refusals(&refusals(&out.history), &["503 unavailable", "unreachable"]));
    out.criteria.push(all_serving_at_end(&out.history, &[0], 1_000));
    out.min_ids = rate * phase.as_secs();
    Ok(())
}

/// Two snowflake nodes forced onto worker id 7 (`static:7`, each with its own store): a
/// configuration idmint cannot protect, which the checker must flag.
fn unsafe_static_worker(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let envs = env(&[("IDMINT_SNOWFLAKE_WORKER", "static:7")]);
    let [a, b]: [Node; 2] = two(run.start_nodes(2, &[], &envs)?);
    let (targets, node_names) = (targets(&[&a, &b]), names(&[&a, &b]));
    let workload = Workload::new(
        &[("snowflake", "/v1/snowflake")],
        run.pick(100, 1000),
        4,
        run.pick(20_000, 150_000),
    );
    let load = run.load(&targets, &workload);
    sleep(run.main_phase(4, 20));
    out.history = load.stop(run.runtime.handle());
    out.nodes = node_names;
    out.layout = Layout::preset("snowflake");
    out.expect_flagged = true;
    Ok(())
}
