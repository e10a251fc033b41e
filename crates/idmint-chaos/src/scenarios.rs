//! The scenarios: each starts its own servers, loads them, injects its faults, checks the
//! history and judges numeric criteria. The unsafe scenarios pass only when the checker
//! flags their history.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use idmint_core::snowflake::Layout;

use crate::check::check;
use crate::load::{Op, Outcome, Workload};
use crate::node::{FakeClock, Node, SmallDisk};
use crate::scenario::{Outcomes, env, names, targets};
use crate::scenario::{
    Report, Run, Settings, all_serving_at_end, criterion, first_ids_after, only_refusals, refusals,
    sleep, standard_criteria,
};
use crate::servers::{PrivateMariaDb, PrivatePostgres, PrivateRedis, free_port};
use crate::strict;

/// A scenario: its name, the guarantee it tests, and how to run it.
pub struct Scenario {
    /// The name `--scenario` takes.
    pub name: &'static str,
    /// The guarantee under test, in a sentence.
    pub guarantee: &'static str,
    run: fn(&mut Run, &mut Outcomes) -> Result<()>,
}

/// Every scenario, in the order `--scenario all` runs them.
pub const SCENARIOS: [Scenario; 19] = [
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
        name: "redis-failback",
        guarantee: "sequence numbers never repeat when Redis fails back to a copy that was behind (same server, same run_id, older data), for a node restarted meanwhile and an idle node that never restarted",
        run: redis_failback,
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
        name: "worker-rows-deleted",
        guarantee: "a worker-id lease row deleted under a live node never lets two nodes issue with one worker id (fencing tokens are never reused)",
        run: worker_rows_deleted,
    },
    Scenario {
        name: "disk-full",
        guarantee: "segment ids never repeat when the embedded store's disk fills up under load, is freed, and the node restarts; while full, only typed 503s",
        run: disk_full,
    },
    Scenario {
        name: "tag-recreate",
        guarantee: "a segment tag deleted and created again under load on two nodes (HTTP and CLI) never issues its ids again",
        run: tag_recreate,
    },
    Scenario {
        name: "strict-kill9",
        guarantee: "strict ids and oracle timestamps increase in real time across 3 nodes while each one's owner is killed with -9 under load; the failover gap is measured",
        run: strict::owner_kill9,
    },
    Scenario {
        name: "strict-sigstop",
        guarantee: "an owner of a strict tag and the oracle paused with SIGSTOP past its lease, then resumed, never answers below what the new owner answered",
        run: strict::owner_sigstop,
    },
    Scenario {
        name: "strict-partition",
        guarantee: "an owner cut off from its store but not from its clients (its own network namespace) stops serving before another node takes over; real-time order holds",
        run: strict::owner_partition,
    },
    Scenario {
        name: "strict-membership",
        guarantee: "strict ids and oracle timestamps keep real-time order while nodes join and leave under load, owners included",
        run: strict::membership,
    },
    Scenario {
        name: "strict-restore-witness",
        guarantee: "with a witness, a MariaDB store restored from an older backup (segment rows, leases, tag metadata) while 3 nodes serve, and again across a kill -9 of every node, never makes a node repeat a plain id another node served, nor a strict id or timestamp answered before",
        run: strict::restore_witness,
    },
    Scenario {
        name: "unsafe-static-worker",
        guarantee: "the checker can fail: two nodes forced onto one static worker id must be flagged",
        run: unsafe_static_worker,
    },
    Scenario {
        name: "unsafe-restore-without-marks",
        guarantee: "the checker can fail: a store rolled back while the node's marks are lost must be flagged",
        run: unsafe_restore_without_marks,
    },
    Scenario {
        name: "unsafe-strict-lease-ignored",
        guarantee: "the checker can fail: an owner that keeps serving strict ids after losing its lease (strict.unsafe_ignore_lease_loss) must be flagged for real-time order",
        run: strict::unsafe_lease_ignored,
    },
    Scenario {
        name: "unsafe-strict-restore-without-witness",
        guarantee: "the checker can fail: strict-restore-witness without the witness must be flagged (strict ids answered again, out of real-time order)",
        run: strict::unsafe_restore_without_witness,
    },
];

/// Finds a scenario by name.
pub fn scenario(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

impl Scenario {
    /// Runs the scenario and judges it.
    pub fn run(&self, settings: &Settings) -> Result<Report> {
        let started = Instant::now();
        let mut run = Run::new(settings)?;
        let mut out = Outcomes::default();
        (self.run)(&mut run, &mut out).with_context(|| format!("scenario {}", self.name))?;
        let checked = check(&out.history, &out.nodes, out.layout, &out.ordered);
        let refusals = refusals(&out.history);
        let criteria = if out.expect_flagged {
            let mut criteria = vec![criterion(
                "the checker flags the run (duplicates, a worker id held twice, or real-time order)",
                format!(
                    "{} duplicates, {} overlapping worker spans, {} order violations, {} repeats",
                    checked.duplicates,
                    checked.owner_overlaps,
                    checked.order_violations,
                    checked.repeats
                ),
                // A strict scenario's control must fail the real-time order check itself.
                if out.ordered.is_empty() {
                    checked.flagged()
                } else {
                    checked.order_violations > 0
                },
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

/// The two nodes of a two-node scenario.
fn two(nodes: Vec<Node>) -> [Node; 2] {
    nodes.try_into().unwrap_or_else(|_| unreachable!("start_nodes(2, …) starts two nodes"))
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
    // The outage starts when the stop does: a fast shutdown refuses new sessions and ends
    // the open ones at once, while `pg_ctl -w` returns only after the checkpoint, seconds
    // later on a busy machine, by when the nodes may have served their whole buffers.
    let stopped_ms = run.now_ms();
    db.stop()?;
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

/// A primary Redis and its replica (ceilings on a private PostgreSQL). n1 serves a sequence
/// from the primary while the replica is cut off, so the counter runs ahead of the copy.
/// Then the fail-back, under n1's load: the lagging replica is promoted, the old primary
/// made its replica (a full resync hands it the older data, under its own `run_id`; n1 is
/// refused meanwhile), n1 killed with -9, and the old primary promoted again. n2, up all
/// along but serving nothing, joins the load first, alone for a while (a node with no marks
/// of its own: only the counter's replication history tells it the data went back); then
/// n1 starts again (its marks on disk, no memory of the counter). Neither may serve a number
/// twice.
fn redis_failback(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = PrivatePostgres::start()?;
    db.sql("postgres", "CREATE DATABASE chaos")?;
    let url = db.url("chaos");
    // A full sync starts at once (the default waits 5 s for more replicas).
    let fast_sync = ["--repl-diskless-sync-delay", "0"];
    let primary = PrivateRedis::start_with(free_port()?, None, &fast_sync)?;
    let primary_port = primary.port().to_string();
    let mut replica_args = fast_sync.to_vec();
    replica_args.extend(["--replicaof", "127.0.0.1", &primary_port]);
    let replica = PrivateRedis::start_with(free_port()?, None, &replica_args)?;
    replica.wait_in_sync()?;
    let sequences = [("orders", "/v1/seq/orders")];
    run.idmint(&["seq", "create", "orders", "--store", &url])?;
    let args = vec!["--store".to_string(), url.clone(), "--redis".to_string(), primary.url()];
    let [mut a, b]: [Node; 2] = two(run.start_nodes(2, &args, &[])?);
    run.await_ids(&a.url(), "/v1/seq/orders")?;
    // n2 starts like n1 (it connects to Redis) but takes no number until it joins the load.
    let targets = targets(&[&a]);
    let node_names = names(&[&a, &b]);
    let rate = run.pick(10_000, 60_000);
    let workload = Workload::new(&sequences, run.pick(50, 500), 4, rate);
    let load = run.load(&targets, &workload);
    let phase = run.main_phase(4, 30);
    sleep(phase / 2);
    replica.cut_off()?;
    run.fault("replica cut off (REPLICAOF a dead port), keeping its copy");
    sleep(phase);
    let counter = "idmint:seq:{orders}:";
    let ahead = redis_number(&primary, counter)?;
    replica.promote()?;
    run.fault("the lagging replica promoted");
    primary.replicate(replica.port())?;
    primary.wait_in_sync()?;
    let back = redis_number(&primary, counter)?;
    run.fault(format!("old primary resynced from it in full: counter {ahead} -> {back}"));
    a.kill9()?;
    run.fault("n1 killed with -9");
    primary.promote()?;
    run.fault("old primary promoted again (same run_id, older data)");
    targets.lock().map_err(|_| anyhow::anyhow!("the targets' lock is poisoned"))?.push(b.url());
    let joined_ms = run.now_ms();
    run.fault("n2 (idle until now, never restarted) joins the load");
    sleep(phase / 2);
    a.start()?;
    run.fault("n1 started again");
    sleep(phase);
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    out.criteria.push(criterion(
        "the fail-back put the counter back (the fault was real)",
        format!("counter {ahead} before, {back} after the resync"),
        back < ahead,
    ));
    let distrusted: usize =
        [&a, &b].iter().map(|n| n.log().matches("sequence counter distrusted").count()).sum();
    out.criteria.push(criterion(
        "a node logged that it distrusted the counter",
        format!("{distrusted} lines"),
        distrusted > 0,
    ));
    // n1 answers `sequences_not_running` between its restart and its first Redis connection.
    let allowed = ["503 sequence_unavailable", "503 sequences_not_running", "unreachable"];
    out.criteria.push(only_refusals(&refusals(h), &allowed));
    let served = first_ids_after(h, 1, joined_ms).map(|t| t - joined_ms);
    out.criteria.push(criterion(
        "n2 serves once it joins",
        served.map_or("never".to_string(), |t| format!("after {t} ms")),
        served.is_some(),
    ));
    out.criteria.push(all_serving_at_end(h, &[0, 1], 1_000));
    out.nodes = node_names;
    out.min_ids = rate * phase.as_secs() / 2;
    Ok(())
}

/// A hash field `cur` of a private Redis, as a number (0 when missing).
fn redis_number(redis: &PrivateRedis, hash: &str) -> Result<u64> {
    let text = redis.cli(&["HGET", hash, "cur"])?;
    Ok(text.trim().parse().unwrap_or(0))
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
    // A leased worker id issues only once its lease settled: load starts after that, so n1
    // holds its worker id with ids issued before it is paused.
    for node in [&a, &b] {
        run.await_ids(&node.url(), "/v1/snowflake")?;
    }
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
    // A new lease serves only after its start-up delay: time_window_ms + margin, with the
    // default 1 s window and no borrowing (docs/operations.md, "Start-up delay").
    let settle_ms = 1_000 + margin_ms;
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
    let backup = db.dump("chaos", &["leaf_alloc"])?;
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

/// Snowflake nodes leasing worker ids from a private MariaDB (the default `lease` worker and
/// TTL). Just after the holder of worker id 0 renews its lease, every row of `idmint_workers`
/// is deleted by hand and a new node starts at once: it finds no row and leases id 0 too.
/// Before issue 20's fix the old holder went on renewing the new holder's row (both tokens
/// are 1) and the two nodes issued under one worker id.
///
/// The checker's one-owner check is what this scenario is about: it is not enough that the
/// old holder stops at its next renewal or mark raise, since the new node may issue before
/// then (its row is new, nothing tells it an old fence is still open). Both must never issue
/// with one worker id at once, so the new holder of a never-held row cannot issue before the
/// fence an unseen old holder may still hold has closed.
fn worker_rows_deleted(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = PrivateMariaDb::start()?;
    db.sql("mysql", "CREATE DATABASE chaos")?;
    // The default TTL (10 s) renews every 3.3 s: after a renewal the holder leaves its row
    // alone for seconds, ample time for a new node to start and lease the same id.
    let envs = env(&[("IDMINT_SNOWFLAKE_WORKER", "lease")]);
    let args = vec!["--store".to_string(), db.url("chaos")];
    let mut nodes = vec![run.node("n1", &args, &envs)?];
    nodes[0].start()?;
    run.await_ids(&nodes[0].url(), "/v1/snowflake")?;
    let targets = targets(&[&nodes[0]]);
    let rate = run.pick(20_000, 150_000);
    let mut workload =
        Workload::new(&[("snowflake", "/v1/snowflake")], run.pick(100, 1000), 4, rate);
    workload.timeout_ms = 2_000;
    let load = run.load(&targets, &workload);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    let mut deletions_ms = Vec::new();
    for round in 1..=run.pick(1, 3) {
        // With every row gone the new node leases the lowest id, 0: delete just after the
        // renewal of worker id 0's row, so its holder does not come back to it for seconds.
        await_lease_renewal(&db, 0)?;
        db.sql("chaos", "DELETE FROM idmint_workers")?;
        deletions_ms.push(run.now_ms());
        let mut node = run.node(&format!("n{}", round + 1), &args, &envs)?;
        node.start()?;
        targets.lock().expect("targets lock").push(node.url());
        run.fault(format!(
            "every idmint_workers row deleted just after worker id 0's renewal; {} started at once",
            node.name
        ));
        nodes.push(node);
        // Several renewals and mark raises of the old holder: it must find out by then. The
        // new node issues only once its lease settled (2.5 s with the default keys), so the
        // round lasts long enough to see it serve.
        sleep(Duration::from_secs(run.pick(18, 30)));
    }
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    let layout = Layout::preset("snowflake").context("the snowflake preset")?;
    let issued_with = |node: usize, worker: u64, from: u64, to: u64| {
        h.iter()
            .filter(|op| op.node == node && op.at_ms >= from && op.at_ms < to)
            .flat_map(|op| op.ids().iter().filter_map(|&id| layout.decode(id)))
            .any(|parts| parts.worker == worker)
    };
    let workers_of = |node: usize| {
        let mut w: Vec<u64> = h
            .iter()
            .filter(|op| op.node == node)
            .flat_map(|op| op.ids().iter().filter_map(|&id| layout.decode(id)).map(|p| p.worker))
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    };
    for (round, &at_ms) in deletions_ms.iter().enumerate() {
        let new = round + 1;
        // The fault is real when some node was issuing with worker id 0 as its row went.
        let holders: Vec<&str> = (0..new)
            .filter(|&n| issued_with(n, 0, at_ms.saturating_sub(2_000), at_ms))
            .map(|n| nodes[n].name.as_str())
            .collect();
        let taken = workers_of(new);
        out.criteria.push(criterion(
            format!(
                "the rows went under a live holder of worker id 0 and {} served",
                nodes[new].name
            ),
            format!("holders {holders:?}; {} issued with worker ids {taken:?}", nodes[new].name),
            !holders.is_empty() && !taken.is_empty(),
        ));
    }
    // The old holder must stop issuing with the lost id (the checker's one-owner check), then
    // either lease another id or keep refusing with a typed 503: both are safe.
    let end = h.iter().map(|op| op.at_ms).max().unwrap_or(0);
    let last: Vec<&Op> = h.iter().filter(|op| op.node == 0 && op.at_ms + 2_000 >= end).collect();
    let serving = last.iter().filter(|op| !op.ids().is_empty()).count();
    let typed = last.iter().all(|op| match &op.outcome {
        Outcome::Ids(_) | Outcome::Range { .. } => true,
        Outcome::Refused { status, .. } => *status == 503,
        Outcome::Unreachable => false,
    });
    out.criteria.push(criterion(
        "in the last 2 s n1 serves (another worker id) or refuses with typed 503s",
        format!(
            "{} requests, {serving} answered ids, n1's worker ids {:?}",
            last.len(),
            workers_of(0)
        ),
        !last.is_empty() && typed,
    ));
    let new_nodes: Vec<usize> = (1..nodes.len()).collect();
    out.criteria.push(all_serving_at_end(h, &new_nodes, 1_500));
    // The old holder's renewal or mark raise fails (`LeaseLost`) and closes its fence; a
    // node that leased a worker id waits until any earlier holder's ids are behind it.
    out.criteria.push(only_refusals(
        &refusals(h),
        &["503 worker_lease_not_proven", "503 lease_settling", "503 snowflake_unavailable"],
    ));
    out.nodes = names(&nodes.iter().collect::<Vec<_>>());
    out.layout = Some(layout);
    out.min_ids = rate * warm.as_secs();
    Ok(())
}

/// Waits until the `expires_ms` of worker id `worker`'s lease row changes (a renewal), polling
/// the private MariaDB; at most the default TTL and 5 s more.
fn await_lease_renewal(db: &PrivateMariaDb, worker: u64) -> Result<()> {
    let sql = format!("SELECT expires_ms FROM idmint_workers WHERE worker_id = {worker}");
    let first = db.sql("chaos", &sql)?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = db.sql("chaos", &sql)?;
        if !first.trim().is_empty() && now != first {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "worker id {worker}'s lease row was not renewed within 15 s ({first:?}, then {now:?})"
        );
        sleep(Duration::from_millis(5));
    }
}

/// The size of `disk-full`'s data disk: the store and the marks fill it within seconds.
const DISK_FULL_BYTES: u64 = 2 * 1024 * 1024;

/// One node on the embedded SQLite store, its data directory (store, marks) on a 2 MiB tmpfs,
/// serving one tag with a fixed step of 1 000 in batches of 10. The disk is filled to the last
/// byte and kept full under load, then freed; the node is killed with -9 and started again.
/// Before issue 20's fix the restarted node served 1 000 ids a second time.
fn disk_full(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let envs = env(&[("IDMINT_SEGMENT_ADAPTIVE_STEP", "false")]);
    let mut dir = run.work.path().join("n1");
    dir.push("data");
    // Mounted before the node exists, so it is unmounted after the node is dropped.
    let disk = SmallDisk::mount(&dir, DISK_FULL_BYTES)?;
    let store = format!("sqlite://{}", dir.join("idmint.db").display());
    run.idmint(&["tag", "create", "order", "--step", "1000", "--store", &store])?;
    let mut a = run.node("n1", &["--store".to_string(), store], &envs)?;
    ensure!(a.data_dir() == dir, "the node's data directory moved: {}", a.data_dir().display());
    a.start()?;
    run.await_ids(&a.url(), "/v1/segment/order")?;
    let targets = targets(&[&a]);
    let rate = run.pick(10_000, 40_000);
    let workload = Workload::new(&[("order", "/v1/segment/order")], 10, 4, rate);
    let load = run.load(&targets, &workload);
    let warm = Duration::from_secs(run.pick(2, 20));
    sleep(warm);
    let mut filled = disk.fill()?;
    let full_ms = run.now_ms();
    run.fault(format!("the data disk filled ({} KiB of filler)", filled / 1024));
    // Kept full: whatever the store frees (a write-ahead log it truncates) is taken again at
    // once.
    let full_until = Instant::now() + run.main_phase(4, 30);
    while Instant::now() < full_until {
        sleep(Duration::from_millis(100));
        filled += disk.fill()?;
    }
    // The room the node gets back when the filler goes: none would mean the disk was full of
    // the node's own files only, and freeing it would test nothing.
    out.criteria.push(criterion(
        "the filler took room on the disk, so deleting it frees some",
        format!("{} KiB of filler", filled / 1024),
        filled > 0,
    ));
    disk.free()?;
    let freed_ms = run.now_ms();
    run.fault("the filler deleted: the disk has room again");
    sleep(Duration::from_secs(1));
    a.kill9()?;
    a.start()?;
    let restarted_ms = run.now_ms();
    run.fault("n1 killed with -9 and started again");
    sleep(Duration::from_secs(run.pick(4, 20)));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    let during = |from: u64, to: u64| {
        let ops = h.iter().filter(|op| op.at_ms >= from && op.at_ms < to);
        ops.fold((0u64, 0u64), |(ids, refused), op| match op.outcome {
            Outcome::Ids(ref v) => (ids + v.len() as u64, refused),
            _ => (ids, refused + 1),
        })
    };
    let (full_ids, full_refused) = during(full_ms, freed_ms);
    out.criteria.push(criterion(
        "the node refused while the disk was full (the fault was real)",
        format!("{full_refused} refusals and {full_ids} ids while full"),
        full_refused > 0,
    ));
    let back = first_ids_after(h, 0, restarted_ms).map(|t| t - restarted_ms);
    out.criteria.push(criterion(
        "n1 serves again within 10 s of its restart",
        back.map_or("never".to_string(), |t| format!("{t} ms")),
        back.is_some_and(|t| t <= 10_000),
    ));
    out.criteria.push(all_serving_at_end(h, &[0], 1_500));
    // A refill that cannot commit or cannot make its mark durable fails with a 503; issue 20's
    // fix may name a failed local write `local_state` (a 500 before it), so a 503 of that
    // code is accepted too. `unreachable`: the node is down for its restart.
    out.criteria
        .push(only_refusals(&refusals(h), &["503 unavailable", "503 local_state", "unreachable"]));
    out.nodes = vec!["n1".into()];
    out.min_ids = rate * warm.as_secs() / 2;
    Ok(())
}

/// The admin token of `tag-recreate`'s nodes.
const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789";

/// How `tag-recreate` deletes a tag and creates it again in one round.
#[derive(Clone, Copy)]
enum Recreate {
    /// `DELETE /v1/tags/order` and `POST /v1/tags` on one node, with the admin token.
    Http { node: usize },
    /// `idmint tag delete` and `idmint tag create` on the store.
    Cli,
}

/// Two nodes on one private MariaDB serving one tag (fixed step 1 000) under load, while the
/// tag is deleted and created again: over HTTP on n1 with the default start, with the CLI and
/// `--start 1`, over HTTP on n2 with `start: 1`, with the CLI and the default start. A lower
/// start may be refused with a typed error (issue 20's fix does); then the tag is created
/// with the default start. Before the fix 1 000–1 030 ids repeated.
fn tag_recreate(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = PrivateMariaDb::start()?;
    db.sql("mysql", "CREATE DATABASE chaos")?;
    let url = db.url("chaos");
    run.idmint(&["tag", "create", "order", "--step", "1000", "--store", &url])?;
    let envs =
        env(&[("IDMINT_SEGMENT_ADAPTIVE_STEP", "false"), ("IDMINT_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let args = vec!["--store".to_string(), url.clone()];
    let [a, b]: [Node; 2] = two(run.start_nodes(2, &args, &envs)?);
    for node in [&a, &b] {
        run.await_ids(&node.url(), "/v1/segment/order")?;
    }
    let (targets, node_names) = (targets(&[&a, &b]), names(&[&a, &b]));
    let rate = run.pick(20_000, 100_000);
    let workload = Workload::new(&[("order", "/v1/segment/order")], run.pick(20, 200), 4, rate);
    let load = run.load(&targets, &workload);
    let warm = run.main_phase(2, 20);
    sleep(warm);
    let urls = [a.url(), b.url()];
    let plan = [
        (Recreate::Http { node: 0 }, None),
        (Recreate::Cli, Some(1)),
        (Recreate::Http { node: 1 }, Some(1)),
        (Recreate::Cli, None),
    ];
    // Admin answers that were not typed (a 5xx, or an error without a code).
    let mut untyped = Vec::new();
    let (mut rounds, mut refused) = (0, Vec::new());
    for &(how, start) in plan.iter().cycle().take(run.pick(4, 12)) {
        let start_text = start.map_or("the default start".to_string(), |s| format!("start {s}"));
        match how {
            Recreate::Http { node } => {
                let tag_url = format!("{}/v1/tags/order", urls[node]);
                let (status, code) =
                    run.admin(reqwest::Method::DELETE, &tag_url, ADMIN_TOKEN, None)?;
                ensure!(status == 204, "DELETE {tag_url}: {status} {code}");
                run.fault(format!("tag deleted: DELETE /v1/tags/order on {}", node_names[node]));
                sleep(Duration::from_millis(300));
                let (status, code) = create_over_http(run, &urls[node], start)?;
                if status == 201 {
                    run.fault(format!("tag created: POST /v1/tags, {start_text}"));
                } else {
                    if status >= 500 || code == "?" {
                        untyped.push(format!("POST /v1/tags ({start_text}): {status} {code}"));
                    }
                    refused.push(format!("POST {status} {code}"));
                    run.fault(format!("POST /v1/tags, {start_text}: refused {status} {code}"));
                    let (status, code) = create_over_http(run, &urls[node], None)?;
                    ensure!(status == 201, "POST /v1/tags (the default start): {status} {code}");
                    run.fault("tag created: POST /v1/tags, the default start");
                }
            }
            Recreate::Cli => {
                run.idmint(&["tag", "delete", "order", "--store", &url])?;
                run.fault("tag deleted: idmint tag delete");
                sleep(Duration::from_millis(300));
                let default_start = ["tag", "create", "order", "--step", "1000", "--store", &url];
                let mut create = default_start.to_vec();
                let start_arg = start.map(|s| s.to_string());
                if let Some(start) = &start_arg {
                    create.extend(["--start", start]);
                }
                match run.try_idmint(&create)? {
                    Ok(_) => run.fault(format!("tag created: idmint tag create, {start_text}")),
                    Err(reason) => {
                        refused.push("CLI".to_string());
                        run.fault(format!("idmint tag create, {start_text}: refused: {reason}"));
                        run.idmint(&default_start)?;
                        run.fault("tag created: idmint tag create, the default start");
                    }
                }
            }
        }
        rounds += 1;
        sleep(Duration::from_millis(run.pick(1_500, 8_000)));
    }
    // The last 1.5 s, judged below, start 2 s after the last create: a node may take about a
    // second to see a tag created elsewhere (its cache of unknown names).
    sleep(Duration::from_secs(2));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    out.criteria.push(criterion(
        "the tag was deleted and created again under load (HTTP and CLI; the faults were real)",
        format!("{rounds} rounds; a lower start refused {} time(s) {refused:?}", refused.len()),
        rounds >= 4,
    ));
    out.criteria.push(criterion(
        "admin answers are typed: 2xx, or a 4xx with a code",
        if untyped.is_empty() { "all".to_string() } else { untyped.join("; ") },
        untyped.is_empty(),
    ));
    out.criteria.push(all_serving_at_end(h, &[0, 1], 1_500));
    // Between a delete and the create a node may answer 404 `unknown_tag`; a refill racing
    // the delete may fail with 503 `unavailable`. Issue 20's fix is not expected to add a
    // code on the id path; the lead adjusts this list if it does.
    out.criteria.push(only_refusals(&refusals(h), &["404 unknown_tag", "503 unavailable"]));
    out.nodes = node_names;
    out.min_ids = rate * warm.as_secs() / 2;
    Ok(())
}

/// `POST /v1/tags` of tag `order` (step 1 000, `start` if given) on the node at `url`.
fn create_over_http(run: &Run, url: &str, start: Option<u64>) -> Result<(u16, String)> {
    let mut body = serde_json::json!({"tag": "order", "step": 1000});
    if let Some(start) = start {
        body["start"] = start.into();
    }
    run.admin(reqwest::Method::POST, &format!("{url}/v1/tags"), ADMIN_TOKEN, Some(body))
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

#[cfg(test)]
mod tests {
    use super::SCENARIOS;

    /// docs/GUARANTEES.md's table of scenarios is this list, in this order: the docs name
    /// every scenario and say what it shows as `--list` does.
    #[test]
    fn the_guarantees_page_lists_every_scenario_as_the_harness_does() {
        let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/GUARANTEES.md");
        let text = std::fs::read_to_string(page).unwrap();
        let table = text.split("## Chaos scenarios").nth(1).expect("a section Chaos scenarios");
        let rows: Vec<(String, String)> = table
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.strip_prefix("| `")?.splitn(2, "` | ").collect();
                let [name, shows] = cells[..] else { return None };
                Some((name.to_string(), shows.trim_end_matches(" |").replace('`', "")))
            })
            .collect();
        let expected: Vec<(String, String)> =
            SCENARIOS.iter().map(|s| (s.name.to_string(), s.guarantee.to_string())).collect();
        assert_eq!(rows, expected);
    }
}
