//! The scenarios of strict tags and the timestamp oracle: three or more nodes on one private
//! MariaDB serving one strict tag (`order`) and the oracle, clients on every node (so most
//! takes are forwarded to the owner), batches of 1 and 100, every answer checked for
//! real-time order across the cluster. Faults: the owner killed with -9, paused with SIGSTOP
//! past its lease, cut off from the store but not from its clients (a network namespace),
//! nodes joining and leaving; and the unsafe control, the fence disabled by configuration,
//! which the checker must flag.
//!
//! The owner is read from the store's lease rows (`idmint_workers`, space `tso` for the
//! oracle and `strict:…` for the tag; the holder is the owner's peer address, its URL here),
//! never guessed. The nodes run with the library's lease defaults (TTL 3 s, margin 1 s).
//!
//! The restore scenarios run the same cluster beside a plain tag served by every node, and
//! restore the store's segment rows, leases and tag metadata from an early backup while the
//! nodes serve and across a `kill -9` of every node: `strict-restore-witness` with a witness
//! (a second database no restore touches), which must show no repeat and no order violation,
//! and its `unsafe-` twin without one, which the checker must flag.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::load::{Load, Op, Outcome, Targets, Workload};
use crate::netns::Partition;
use crate::node::Node;
use crate::scenario::{Outcomes, env, names, targets};
use crate::scenario::{
    Run, all_serving_at_end, criterion, first_ids_after, only_refusals, refusals, sleep,
};
use crate::servers::PrivateMariaDb;

/// The strict tag the scenarios serve.
const TAG: &str = "order";
/// The plain tag the restore scenarios serve beside the strict one, from every node.
const PLAIN: &str = "plain";
const PLAIN_PATH: &str = "/v1/segment/plain";
/// The tables a restore takes back: the segment rows, the leases (the strict tag's and the
/// oracle's marks) and the tag metadata (their recorded ceilings).
const RESTORED: [&str; 3] = ["leaf_alloc", "idmint_workers", "idmint_tag_meta"];
/// What a node logs when the witness refuses a range the store handed it, when its own marks
/// do, and when it loses a strict tag's lease.
const WITNESS_REFUSED: &str = "the store returned a range below the witness's mark";
const STORE_WENT_BACK: &str = "the store went backwards";
const STRICT_LEASE_LOST: &str = "strict tag lease lost";
/// A new strict owner found the store's ceiling behind the witness's and started above it.
const STRICT_ABOVE_WITNESS: &str = "behind the witness's mark";
/// What the clients ask for: the strict tag and the oracle.
const TAGS: [(&str, &str); 2] = [(TAG, "/v1/segment/order"), ("tso", "/v1/tso")];
/// The tags checked for real-time order.
const ORDERED: [&str; 2] = [TAG, "tso"];
/// Batch sizes the clients go round.
const COUNTS: [u64; 2] = [1, 100];
/// The strict lease's TTL and margin (the library's defaults, which the nodes run with).
const LEASE_TTL_MS: u64 = 3_000;
const LEASE_MARGIN_MS: u64 = 1_000;
/// The longest failover gap allowed after a `kill -9` of the owner: TTL + margin + 1 s.
const GAP_MS_MAX: u64 = LEASE_TTL_MS + LEASE_MARGIN_MS + 1_000;
/// The longest failover gap allowed after the owner is paused: a take forwarded to a paused
/// owner holds on for the peer call's bound (2 s) before it is routed again, so that on top.
const GAP_PAUSED_MS_MAX: u64 = GAP_MS_MAX + 2_000;
/// The longest silence allowed while the owner is cut off from its store: its renewal
/// waits out a store call's bound (3 s) before the gate's end counts, so that on top.
const GAP_CUT_MS_MAX: u64 = GAP_MS_MAX + 3_000;
/// The nodes' admin token: it also authorises forwarded takes between them.
const ADMIN_TOKEN: &str = "chaos-strict-admin-token-0123456789";
/// The answers other than ids a strict scenario expects: a take waiting out a failover past
/// its bound, and a node that is down.
const ALLOWED: [&str; 3] = ["503 unavailable", "503 tso_unavailable", "unreachable"];

/// The owner of the strict tag killed with -9, then the owner of the oracle, each started
/// again once another node serves; the failover gap after each kill is reported.
pub fn owner_kill9(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = mariadb()?;
    // n1 owns the tag (it created it), n2 the oracle (its first take): two owners to kill.
    let (mut nodes, targets) = three_nodes(run, &db, &[], &envs(false), 1)?;
    let (load, rate) = strict_load(run, &targets);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    let mut gaps = Vec::new();
    let mut moved = Vec::new();
    for round in 0..run.pick(2, 8) {
        let what = ORDERED[round % 2];
        let owner = await_owner(&db, &nodes, what)?;
        let killed_us = now_us(run);
        nodes[owner].kill9()?;
        run.fault(format!("kill -9 {} (owner of {what})", nodes[owner].name));
        gaps.push((what, killed_us));
        let now = await_moved(&db, &nodes, &[what], owner, GAP_MS_MAX + 1_000)?;
        moved.push(format!("{} -> {}", nodes[owner].name, now.join(", ")));
        nodes[owner].start()?;
        run.fault(format!("{} started again", nodes[owner].name));
        sleep(Duration::from_secs(run.pick(2, 6)));
    }
    sleep(Duration::from_secs(2));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    out.criteria.push(criterion(
        "each killed owner's tag moved to another node",
        moved.join("; "),
        true,
    ));
    out.criteria.push(gap_criterion(h, &gaps, "kill -9", GAP_MS_MAX));
    out.criteria.push(only_refusals(&refusals(h), &ALLOWED));
    out.criteria.push(all_serving_at_end(h, &[0, 1, 2], 1_500));
    out.nodes = names(&nodes.iter().collect::<Vec<_>>());
    out.ordered = ORDERED.to_vec();
    out.min_ids = rate * warm.as_secs() / 2;
    Ok(())
}

/// The owner of the tag and the oracle paused with SIGSTOP past its lease (TTL + margin +
/// 1 s), then resumed: another node owns both meanwhile, and the old owner must not answer
/// from its old window.
pub fn owner_sigstop(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    sigstop_with(run, out, false)
}

/// As `strict-sigstop`, with `strict.unsafe_ignore_lease_loss`: the resumed owner serves from
/// its old window below the new owner's ids, which the checker must flag.
pub fn unsafe_lease_ignored(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    sigstop_with(run, out, true)
}

fn sigstop_with(run: &mut Run, out: &mut Outcomes, unsafe_fence: bool) -> Result<()> {
    let db = mariadb()?;
    let (nodes, targets) = three_nodes(run, &db, &[], &envs(unsafe_fence), 0)?;
    let (load, rate) = strict_load(run, &targets);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    // One pause is enough to catch the unsafe control; after it the stale owners keep
    // serving their old windows, so no node asks for the lease again and it may not move.
    let rounds = if unsafe_fence { 1 } else { run.pick(1, 4) };
    let mut moved = Vec::new();
    let mut gaps = Vec::new();
    let mut resumed_ms = 0;
    for _ in 0..rounds {
        // Pause whoever owns the tag now (n1 at first).
        let owner = await_owner(&db, &nodes, TAG)?;
        let paused_us = now_us(run);
        nodes[owner].pause()?;
        run.fault(format!("{} (owner of {TAG}) paused with SIGSTOP", nodes[owner].name));
        gaps.extend([(TAG, paused_us), ("tso", paused_us)]);
        let past_lease_ms = LEASE_TTL_MS + LEASE_MARGIN_MS + 1_000;
        let now = await_moved(&db, &nodes, &ORDERED, owner, past_lease_ms)?;
        moved.push(format!("{}: {}", nodes[owner].name, now.join(", ")));
        nodes[owner].resume()?;
        resumed_ms = run.now_ms();
        let paused_s = (resumed_ms * 1000 - paused_us) as f64 / 1e6;
        run.fault(format!("{} resumed with SIGCONT after {paused_s:.1} s", nodes[owner].name));
        sleep(Duration::from_secs(run.pick(6, 20)));
    }
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    out.criteria.push(criterion(
        "while the owner was paused another node owned the tag and the oracle (the fault was real)",
        moved.join("; "),
        true,
    ));
    out.nodes = names(&nodes.iter().collect::<Vec<_>>());
    out.ordered = ORDERED.to_vec();
    if unsafe_fence {
        out.expect_flagged = true;
        return Ok(());
    }
    out.criteria.push(gap_criterion(h, &gaps, "SIGSTOP", GAP_PAUSED_MS_MAX));
    out.criteria.push(only_refusals(&refusals(h), &ALLOWED));
    let nodes_all: Vec<usize> = (0..nodes.len()).collect();
    let back = (0..nodes.len())
        .map(|n| first_ids_after(h, n, resumed_ms).map(|t| t - resumed_ms))
        .max()
        .flatten();
    out.criteria.push(criterion(
        "every node serves within 10 s of the last resume",
        back.map_or("never".to_string(), |t| format!("{t} ms")),
        back.is_some_and(|t| t <= 10_000),
    ));
    out.criteria.push(all_serving_at_end(h, &nodes_all, 1_500));
    out.min_ids = rate * warm.as_secs() / 2;
    Ok(())
}

/// The owner of the tag and the oracle (n1) in a network namespace of its own: its store
/// link is taken down for TTL + margin + 4 s (30 s in the long profile) while its clients and
/// peers still reach it, then brought up again.
pub fn owner_partition(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    // Declared first, so the nodes (and the namespace's process) are gone when it is removed.
    let mut partition = Partition::new(run.runtime.handle())?;
    let db = mariadb()?;
    let relay = partition.relay(([127, 0, 0, 1], db.port()).into())?;
    let envs = envs(false);
    let inner_args = vec!["--store".to_string(), format!("mysql://root@{relay}/chaos")];
    let mut n1 = run
        .node("n1", &inner_args, &envs)?
        .with_host(&partition.inner_host)
        .in_netns(partition.netns());
    n1.start()?;
    let args = vec!["--store".to_string(), db.url("chaos")];
    let mut nodes = vec![n1];
    for name in ["n2", "n3"] {
        let mut node = run.node(name, &args, &envs)?.with_host(&partition.outer_host);
        node.start()?;
        nodes.push(node);
    }
    place(run, &nodes, 0, 0)?;
    let (targets, node_names) =
        (targets(&nodes.iter().collect::<Vec<_>>()), names(&nodes.iter().collect::<Vec<_>>()));
    let (load, rate) = strict_load(run, &targets);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    let cut = Duration::from_millis(run.pick(LEASE_TTL_MS + LEASE_MARGIN_MS + 4_000, 30_000));
    let cut_us = now_us(run);
    partition.cut_store()?;
    run.fault(format!(
        "n1 (owner of both) cut off from the store for {} s; its clients still reach it",
        cut.as_secs()
    ));
    let moved = await_moved(&db, &nodes, &ORDERED, 0, cut.as_millis() as u64)?;
    partition.heal_store()?;
    let healed_ms = run.now_ms();
    run.fault("n1's store link up again");
    sleep(Duration::from_secs(run.pick(10, 20)));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    let cut_ms = cut_us / 1000;
    let during =
        h.iter().filter(|op| op.node == 0 && op.at_ms > cut_ms + 1_000 && op.done_ms() < healed_ms);
    let (mut refused, mut unreachable) = (0, 0);
    for op in during {
        match op.outcome {
            Outcome::Refused { .. } => refused += 1,
            Outcome::Unreachable => unreachable += 1,
            _ => {}
        }
    }
    out.criteria.push(criterion(
        "another node owned both while n1 was cut off (the fault was real)",
        moved.join(", "),
        true,
    ));
    out.criteria.push(criterion(
        "n1 stayed reachable while cut off: it answered its clients with typed refusals",
        format!("{refused} refusals, {unreachable} unanswered"),
        refused > 0,
    ));
    // The owner serves from memory until its gate closes: the gap is the longest silence
    // between the cut and the heal, not the time to the first answer after the cut.
    let silences: Vec<(&str, u64)> = ORDERED
        .iter()
        .map(|tag| (*tag, longest_silence_ms(h, tag, cut_us, healed_ms * 1000)))
        .collect();
    let text: Vec<String> =
        silences.iter().map(|(tag, ms)| format!("{tag} {:.1} s", *ms as f64 / 1e3)).collect();
    out.criteria.push(criterion(
        format!(
            "failover gap during the cut (longest time without a fresh id or timestamp) at most \
             {} s (lease TTL 3 s, margin 1 s, store calls bounded to 3 s)",
            GAP_CUT_MS_MAX / 1000
        ),
        text.join(", "),
        silences.iter().all(|(_, ms)| *ms <= GAP_CUT_MS_MAX),
    ));
    let back = first_ids_after(h, 0, healed_ms).map(|t| t - healed_ms);
    out.criteria.push(criterion(
        "n1 serves again within 15 s of the store link coming back, not restarted",
        format!(
            "{}, started {} time(s)",
            back.map_or("never".to_string(), |t| format!("{t} ms")),
            nodes[0].starts
        ),
        back.is_some_and(|t| t <= 15_000) && nodes[0].starts == 1,
    ));
    out.criteria.push(only_refusals(&refusals(h), &ALLOWED));
    out.criteria.push(all_serving_at_end(h, &[0, 1, 2], 1_500));
    out.nodes = node_names;
    out.ordered = ORDERED.to_vec();
    out.min_ids = rate * warm.as_secs() / 2;
    Ok(())
}

/// Nodes joining and leaving under load: two nodes at first (n1 owns both), then in turn a
/// node joins (a new one, or one that left, started again) and the owner of the tag or of
/// the oracle leaves (SIGTERM: it gives its leases back); a node that left takes no client
/// requests, as a load balancer would drain it.
pub fn membership(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    let db = mariadb()?;
    let args = vec!["--store".to_string(), db.url("chaos")];
    let envs = envs(false);
    let mut nodes = run.start_nodes(2, &args, &envs)?;
    place(run, &nodes, 0, 0)?;
    let targets = targets(&nodes.iter().collect::<Vec<_>>());
    let (load, rate) = strict_load(run, &targets);
    let warm = run.main_phase(3, 30);
    sleep(warm);
    let interval = Duration::from_millis(run.pick(3_000, 8_000));
    let mut leaves = Vec::new();
    let mut moved = Vec::new();
    for step in 0..run.pick(4, 16) {
        if step % 2 == 0 {
            // Join: a node that left comes back, or a new one (at most 4).
            let left = (0..nodes.len()).find(|&n| !nodes[n].running());
            let n = match left {
                Some(n) if nodes.len() >= 4 || step % 4 == 2 => n,
                _ => {
                    let node = run.node(&format!("n{}", nodes.len() + 1), &args, &envs)?;
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            nodes[n].start()?;
            set_target(&targets, n, &nodes[n].url());
            run.fault(format!("{} joins", nodes[n].name));
        } else {
            let what = ORDERED[(step / 2) % 2];
            let owner = await_owner(&db, &nodes, what)?;
            let live = (0..nodes.len()).filter(|&n| nodes[n].running()).count();
            ensure!(live >= 2, "one node left: none may leave");
            set_target(&targets, owner, "");
            let left_us = now_us(run);
            nodes[owner].stop()?;
            run.fault(format!("{} (owner of {what}) leaves (SIGTERM)", nodes[owner].name));
            leaves.push((what, left_us));
            let now = await_moved(&db, &nodes, &[what], owner, LEASE_MARGIN_MS)?;
            moved.push(format!("{} -> {}", nodes[owner].name, now.join(", ")));
        }
        sleep(interval);
    }
    sleep(Duration::from_secs(2));
    out.history = load.stop(run.runtime.handle());
    let h = &out.history;
    out.criteria.push(criterion(
        "nodes joined and owners left under load (the faults were real)",
        moved.join("; "),
        !moved.is_empty(),
    ));
    out.criteria.push(gap_criterion(h, &leaves, "a leave", GAP_MS_MAX));
    out.criteria.push(only_refusals(&refusals(h), &ALLOWED));
    let live: Vec<usize> = (0..nodes.len()).filter(|&n| nodes[n].running()).collect();
    out.criteria.push(all_serving_at_end(h, &live, 1_500));
    out.nodes = names(&nodes.iter().collect::<Vec<_>>());
    out.ordered = ORDERED.to_vec();
    out.min_ids = rate * warm.as_secs() / 2;
    Ok(())
}

/// A store restored from a backup under a witness: three nodes serving the strict tag and
/// the oracle, and a plain tag (`PLAIN`, step 1 000, adaptive step off) whose ranges go to
/// every node, each node run with `--witness` (the database `witness` on the same MariaDB,
/// which no restore touches). The tables `RESTORED` are backed up once every node holds a
/// range and the tag and the oracle have owners, then restored while the nodes serve, and
/// again while every node is down after a `kill -9`, before they all start again.
pub fn restore_witness(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    restore_with(run, out, true)
}

/// As `strict-restore-witness`, without the witness: a new owner starts above the restored
/// ceiling, below strict ids already answered (and in some runs a node serves plain ids
/// another node served), which the checker must flag.
pub fn unsafe_restore_without_witness(run: &mut Run, out: &mut Outcomes) -> Result<()> {
    restore_with(run, out, false)
}

fn restore_with(run: &mut Run, out: &mut Outcomes, witness: bool) -> Result<()> {
    let db = mariadb()?;
    db.sql("mysql", "CREATE DATABASE witness")?;
    run.idmint(&["tag", "create", PLAIN, "--step", "1000", "--store", &db.url("chaos")])?;
    let args = if witness { vec!["--witness".to_string(), db.url("witness")] } else { vec![] };
    let mut envs = envs(false);
    envs.push(("IDMINT_SEGMENT_ADAPTIVE_STEP", "false".to_string()));
    let (mut nodes, targets) = three_nodes(run, &db, &args, &envs, 1)?;
    for node in &nodes {
        run.await_ids(&node.url(), PLAIN_PATH)?;
    }
    // Every node holds a range of the plain tag, and the tag and the oracle have owners. The
    // backup comes before the load: a strict ceiling is raised a window (10 s of ids at the
    // measured rate) ahead, so one backed up under load would still be above what the short
    // phase answers.
    let backup = Backup::take(&db)?;
    run.fault(format!("backup of {} taken: {backup}", RESTORED.join(", ")));
    let (load, rate) = strict_load(run, &targets);
    let plain = Workload::new(&[(PLAIN, PLAIN_PATH)], 50, run.pick(6, 8), rate);
    let plain_load = run.load(&targets, &plain);
    let phase = run.main_phase(3, 30);
    sleep(phase);
    let logs = log_ends(&nodes);
    let live = restore(run, &db, &backup, "while every node serves")?;
    sleep(phase);
    let guarded = Guarded::since(&nodes, &logs, live.max_id.0);
    for node in &mut nodes {
        node.kill9()?;
    }
    run.fault("every node killed with -9");
    let restart = restore(run, &db, &backup, "while every node is down")?;
    for node in &mut nodes {
        node.start()?;
    }
    let started_ms = run.now_ms();
    run.fault("every node started again");
    sleep(phase);
    out.history = Load::stop_all(vec![load, plain_load], run.runtime.handle());
    let h = &out.history;
    let (live_text, live_real) = live.below_answered(h);
    let (restart_text, restart_real) = restart.below_answered(h);
    out.criteria.push(criterion(
        "each restore took the store below ids already answered (the faults were real)",
        format!("while serving: {live_text}; across the restart: {restart_text}"),
        live_real && restart_real,
    ));
    out.nodes = names(&nodes.iter().collect::<Vec<_>>());
    out.ordered = ORDERED.to_vec();
    if !witness {
        out.expect_flagged = true;
        return Ok(());
    }
    out.criteria.push(criterion(
        "after the restore while serving, the nodes refused the ranges it handed out again and \
         gave up the strict leases it took back",
        guarded.to_string(),
        guarded.refused() > 0 && guarded.leases_lost > 0,
    ));
    let whole = Guarded::since(&nodes, &vec![0; nodes.len()], 0);
    out.criteria.push(criterion(
        "a new strict owner found the store's ceiling behind the witness's and started above it",
        whole.to_string(),
        whole.above_witness > 0,
    ));
    out.criteria.push(only_refusals(&refusals(h), &ALLOWED));
    let back = (0..nodes.len())
        .map(|n| first_ids_after(h, n, started_ms).map(|t| t - started_ms))
        .max()
        .flatten();
    out.criteria.push(criterion(
        "every node serves within 10 s of the restart",
        back.map_or("never".to_string(), |t| format!("{t} ms")),
        back.is_some_and(|t| t <= 10_000),
    ));
    out.criteria.push(all_serving_at_end(h, &[0, 1, 2], 1_500));
    out.min_ids = rate * phase.as_secs();
    Ok(())
}

/// The strict scenarios' cluster: three nodes on `db`'s database `chaos`, run with `args` after
/// the store's and with `envs`; n1 owns the tag and node `tso_owner` the oracle. Also the
/// load's targets, every node.
fn three_nodes(
    run: &Run,
    db: &PrivateMariaDb,
    args: &[String],
    envs: &[(&'static str, String)],
    tso_owner: usize,
) -> Result<(Vec<Node>, Targets)> {
    let mut all = vec!["--store".to_string(), db.url("chaos")];
    all.extend_from_slice(args);
    let nodes = run.start_nodes(3, &all, envs)?;
    place(run, &nodes, 0, tso_owner)?;
    let targets = targets(&nodes.iter().collect::<Vec<_>>());
    Ok((nodes, targets))
}

/// The strict scenarios' load on `targets` at the profile's rate; and the rate.
fn strict_load(run: &Run, targets: &Targets) -> (Load, u64) {
    let rate = run.pick(10_000, 40_000);
    (run.load(targets, &workload(run.pick(6, 8), rate)), rate)
}

/// A backup of [`RESTORED`] and what it holds: the plain tag's `max_id` and the strict tag's
/// recorded ceiling (`idmint_tag_meta`), read just after it (at or above the backup's: the
/// nodes are idle, and a refill meanwhile would only raise them).
struct Backup {
    path: PathBuf,
    max_id: u64,
    ceiling: u64,
}

impl Backup {
    fn take(db: &PrivateMariaDb) -> Result<Backup> {
        let path = db.dump("chaos", &RESTORED)?;
        Ok(Backup { path, max_id: max_id(db)?, ceiling: ceiling(db)? })
    }
}

impl std::fmt::Display for Backup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PLAIN}'s max_id {}, {TAG}'s ceiling {}", self.max_id, self.ceiling)
    }
}

/// What a restore took back: the plain tag's `max_id` and the strict tag's recorded ceiling,
/// from what the store held just before it to the backup's, and when it began.
struct Rollback {
    at_ms: u64,
    max_id: (u64, u64),
    ceiling: (u64, u64),
}

impl Rollback {
    /// Whether the restored `max_id` and ceiling lie below ids answered before the restore,
    /// and the figures: the danger the guards must meet.
    fn below_answered(&self, history: &[Op]) -> (String, bool) {
        let highest = |tag: &str| {
            let answered = history.iter().filter(|op| &*op.tag == tag && op.done_ms() < self.at_ms);
            answered.filter_map(Op::span).map(|(_, last)| last).max().unwrap_or(0)
        };
        let (plain, strict) = (highest(PLAIN), highest(TAG));
        let (m, c) = (self.max_id, self.ceiling);
        let text = format!(
            "{PLAIN}'s max_id {} -> {} (ids up to {plain} answered), {TAG}'s ceiling {} -> {} \
             (ids up to {strict} answered)",
            m.0, m.1, c.0, c.1
        );
        (text, m.1 < plain && c.1 < strict)
    }
}

/// Restores `backup` into the database `chaos`, recording the fault (`when`) and what it took
/// back.
fn restore(run: &mut Run, db: &PrivateMariaDb, backup: &Backup, when: &str) -> Result<Rollback> {
    let (max_id_now, ceiling_now) = (max_id(db)?, ceiling(db)?);
    let at_ms = run.now_ms();
    db.restore("chaos", &backup.path)?;
    run.fault(format!("{} restored from the backup {when}", RESTORED.join(", ")));
    Ok(Rollback {
        at_ms,
        max_id: (max_id_now, backup.max_id),
        ceiling: (ceiling_now, backup.ceiling),
    })
}

/// What the nodes logged about a restore: the plain ranges refused by a node's own marks and
/// by the witness, and the strict leases lost.
struct Guarded {
    by_marks: usize,
    by_witness: usize,
    leases_lost: usize,
    /// Strict owners that started above the witness's mark, the store's being behind it.
    above_witness: usize,
}

impl Guarded {
    /// Read from the nodes' logs after `ends` ([`log_ends`]); a witness refusal counts when
    /// its range starts below `max_id`, the plain tag's `max_id` before the restore (a range
    /// above it was refused because refills raced, not because of the restore).
    fn since(nodes: &[Node], ends: &[usize], max_id: u64) -> Guarded {
        let lines: Vec<String> = nodes
            .iter()
            .zip(ends)
            .flat_map(|(node, &end)| {
                let log = node.log();
                log.get(end..).unwrap_or_default().lines().map(str::to_string).collect::<Vec<_>>()
            })
            .collect();
        let count = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
        let by_witness = lines
            .iter()
            .filter(|l| l.contains(WITNESS_REFUSED))
            .filter(|l| field(l, "start").is_some_and(|start| start < max_id))
            .count();
        Guarded {
            by_marks: count(STORE_WENT_BACK),
            by_witness,
            leases_lost: count(STRICT_LEASE_LOST),
            above_witness: count(STRICT_ABOVE_WITNESS),
        }
    }

    fn refused(&self) -> usize {
        self.by_marks + self.by_witness
    }
}

impl std::fmt::Display for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ranges refused by a node's own marks, {} by the witness; {} strict leases lost, \
             {} strict owners started above the witness's mark",
            self.by_marks, self.by_witness, self.leases_lost, self.above_witness
        )
    }
}

/// Where each node's log ends now.
fn log_ends(nodes: &[Node]) -> Vec<usize> {
    nodes.iter().map(|n| n.log().len()).collect()
}

/// The number after ` NAME=` in a log line.
fn field(line: &str, name: &str) -> Option<u64> {
    let value = line.split(&format!(" {name}=")).nth(1)?;
    value.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

fn max_id(db: &PrivateMariaDb) -> Result<u64> {
    let sql = format!("SELECT max_id FROM leaf_alloc WHERE biz_tag = '{PLAIN}'");
    number(&db.sql("chaos", &sql)?)
}

fn ceiling(db: &PrivateMariaDb) -> Result<u64> {
    let sql = format!("SELECT value FROM idmint_tag_meta WHERE tag = '{TAG}' AND name = 'ceiling'");
    number(&db.sql("chaos", &sql)?)
}

fn number(text: &str) -> Result<u64> {
    text.trim().parse().with_context(|| format!("{text:?} is not a number"))
}

/// A private MariaDB with the database `chaos`.
fn mariadb() -> Result<PrivateMariaDb> {
    let db = PrivateMariaDb::start()?;
    db.sql("mysql", "CREATE DATABASE chaos")?;
    Ok(db)
}

/// The nodes' environment: the admin token (forwarded takes carry it), no snowflake engine
/// (its worker leases would only add store traffic), and the unsafe fence when asked.
fn envs(unsafe_fence: bool) -> Vec<(&'static str, String)> {
    let mut envs =
        env(&[("IDMINT_ADMIN_TOKEN", ADMIN_TOKEN), ("IDMINT_SNOWFLAKE_ENABLED", "false")]);
    if unsafe_fence {
        envs.push(("IDMINT_STRICT_UNSAFE_IGNORE_LEASE_LOSS", "true".into()));
    }
    envs
}

/// The workload: `clients` clients on every node asking for the tag and the oracle in
/// batches of 1 and 100, at `rate` values per second together; a take may wait out a
/// failover (TTL + margin), so the timeout is above that.
fn workload(clients: u32, rate: u64) -> Workload {
    let mut workload = Workload::new(&TAGS, 1, clients, rate).strict(&COUNTS);
    workload.timeout_ms = GAP_MS_MAX + 1_000;
    workload
}

/// Creates the strict tag on node `tag_owner` (the creating node owns it) and takes the
/// oracle's first timestamp on node `tso_owner`; checks the lease rows say so, and that every
/// node serves both.
fn place(run: &Run, nodes: &[Node], tag_owner: usize, tso_owner: usize) -> Result<()> {
    let url = format!("{}/v1/tags", nodes[tag_owner].url());
    let body = serde_json::json!({"tag": TAG, "strict": true});
    let (status, code) = run.admin(reqwest::Method::POST, &url, ADMIN_TOKEN, Some(body))?;
    ensure!(status == 201, "POST {url} (a strict tag): {status} {code}");
    run.await_ids(&nodes[tso_owner].url(), "/v1/tso?count=1")?;
    for node in nodes {
        run.await_ids(&node.url(), "/v1/segment/order")?;
        run.await_ids(&node.url(), "/v1/tso?count=1")?;
    }
    Ok(())
}

/// The node holding the live lease of `what` (`tso`, or the strict tag) by the store's lease
/// rows and clock: its holder is the node's peer address, its URL here.
fn owner_of(db: &PrivateMariaDb, nodes: &[Node], what: &str) -> Result<Option<usize>> {
    let space = if what == "tso" { "space = 'tso'" } else { "space LIKE 'strict:%'" };
    let sql = format!(
        "SELECT holder FROM idmint_workers WHERE {space} AND expires_ms > \
         (TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
    );
    let holders = db.sql("chaos", &sql)?;
    let holder = holders.lines().map(str::trim).find(|h| !h.is_empty());
    Ok(holder.and_then(|h| nodes.iter().position(|n| n.url() == h)))
}

/// The node that owns `what` by the store's lease rows, waiting up to 10 s while none does
/// (a tag moving to its home node is held by nobody for the store's margin).
fn await_owner(db: &PrivateMariaDb, nodes: &[Node], what: &str) -> Result<usize> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(owner) = owner_of(db, nodes, what)? {
            return Ok(owner);
        }
        if std::time::Instant::now() >= deadline {
            bail!("no node owns {what}");
        }
        sleep(Duration::from_millis(100));
    }
}

/// Waits at least `min_ms`, then until the store's lease rows name a node other than `from`
/// as the owner of each of `what` (at most 20 s more); their names as `what: node`.
fn await_moved(
    db: &PrivateMariaDb,
    nodes: &[Node],
    what: &[&str],
    from: usize,
    min_ms: u64,
) -> Result<Vec<String>> {
    sleep(Duration::from_millis(min_ms));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let owners: Vec<Option<usize>> =
            what.iter().map(|w| owner_of(db, nodes, w)).collect::<Result<_>>()?;
        if owners.iter().all(|o| o.is_some_and(|n| n != from)) {
            return Ok(what
                .iter()
                .zip(owners)
                .map(|(w, o)| format!("{w}: {}", node_name(nodes, o)))
                .collect());
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{what:?} did not move from {} within 20 s of the fault's minimum ({min_ms} ms)",
            nodes[from].name
        );
        sleep(Duration::from_millis(100));
    }
}

fn node_name(nodes: &[Node], index: Option<usize>) -> String {
    index.map_or("nobody".to_string(), |n| nodes[n].name.clone())
}

fn set_target(targets: &crate::load::Targets, node: usize, url: &str) {
    let mut targets = targets.lock().expect("targets lock");
    if targets.len() <= node {
        targets.resize(node + 1, String::new());
    }
    targets[node] = url.to_string();
}

fn now_us(run: &Run) -> u64 {
    run.t0.elapsed().as_micros() as u64
}

/// The failover gap after a fault at `from_us` on `tag`: until the first answer to a request
/// sent after the fault, on any node (ms).
pub fn failover_gap_ms(history: &[Op], tag: &str, from_us: u64) -> Option<u64> {
    history
        .iter()
        .filter(|op| &*op.tag == tag && op.sent_us >= from_us && op.count() > 0)
        .map(|op| op.done_us() - from_us)
        .min()
        .map(|us| us / 1000)
}

/// The longest time from `from_us` to `to_us` in which no request of `tag` was answered
/// values (ms): between answers, and from `from_us` to the first.
pub fn longest_silence_ms(history: &[Op], tag: &str, from_us: u64, to_us: u64) -> u64 {
    let mut done: Vec<u64> = history
        .iter()
        .filter(|op| &*op.tag == tag && op.count() > 0)
        .map(Op::done_us)
        .filter(|&t| t >= from_us && t <= to_us)
        .collect();
    done.sort_unstable();
    let mut last = from_us;
    let mut longest = 0;
    for t in done.into_iter().chain([to_us]) {
        longest = longest.max(t - last);
        last = t;
    }
    longest / 1000
}

/// Each gap after `faults` (tag, time) at most `limit_ms`.
fn gap_criterion(
    history: &[Op],
    faults: &[(&str, u64)],
    after: &str,
    limit_ms: u64,
) -> crate::scenario::Criterion {
    let gaps: Vec<(&str, Option<u64>)> =
        faults.iter().map(|&(tag, at)| (tag, failover_gap_ms(history, tag, at))).collect();
    let text: Vec<String> = gaps
        .iter()
        .map(|(tag, gap)| {
            format!("{tag} {}", gap.map_or("never".into(), |g| format!("{:.1} s", g as f64 / 1e3)))
        })
        .collect();
    criterion(
        format!(
            "failover gap after {after} (no fresh id or timestamp) at most {:.0} s (lease TTL 3 s, margin 1 s)",
            limit_ms as f64 / 1e3
        ),
        text.join(", "),
        gaps.iter().all(|(_, gap)| gap.is_some_and(|g| g <= limit_ms)),
    )
}
