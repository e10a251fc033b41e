//! A deterministic, seeded simulation: several nodes (each its own `Segments`, with its own
//! seeded configuration) share one store that injects latency and errors and, at a seeded
//! moment, is restored from a backup taken earlier (its `max_id` goes back). Paused tokio
//! time on a current-thread runtime is the manual clock that drives the step policy, so a
//! seed replays exactly. Every acknowledged id is checked against a model.
//!
//! Each run simulates `SEEDS_PER_RUN` fresh seeds and prints them; replay one with
//! `IDMINT_SIM_SEED=<seed> cargo test -p idmint simulation -- --nocapture`.
//!
//! The model is what the store-regression guard promises. A node never hands out an id
//! twice, restore or not, and after the restore it serves only from the segments it held at
//! that moment or at and above its high-water mark (the end of the highest range it held).
//! Across nodes ids are unique too, except inside the window the restore reopened
//! (`[max_id at the backup, max_id at the restore)`): a node's mark covers its own ranges,
//! not those other nodes were given after its last allocation, so such a range can be served
//! again by the node that meets the restored store first. Repeats inside the window are
//! counted and printed, repeats outside it fail the run. Liveness: once the store heals,
//! every node serves again; a panic in any task (an engine `assert!`) fails the run.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idmint::segment::{Count, IdRange, SegmentConfig};
use idmint::{Error, Segments, Tag};
use idmint_core::limits::{REFILL_RETRY_MS_MAX, REFILL_WAIT_MS_MAX};
use idmint_core::{BufferSnapshot, PreloadRatio, SegmentSnapshot};
use tokio::time::Instant;

use crate::test_store::{Mode, TestStore};

const SEEDS_PER_RUN: u64 = 4;
const NODES: usize = 4;
const CLIENTS_PER_NODE: usize = 2;
const SIMULATED_MS: u64 = 20_000;

#[test]
fn nodes_on_a_faulty_store_restored_from_a_backup_never_repeat_themselves() {
    for seed in seeds() {
        println!("simulation seed {seed} (replay: IDMINT_SIM_SEED={seed})");
        let outcome = simulate(seed);
        println!("  {outcome}");
    }
}

#[test]
fn a_seed_replays_exactly() {
    let seed = seeds()[0];
    println!("simulation seed {seed} (replay: IDMINT_SIM_SEED={seed})");
    let first = simulate(seed);
    assert_eq!(simulate(seed), first, "seed {seed} did not replay");
}

/// What one seed produced; two runs of a seed must produce the same.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    acknowledged: u64,
    refused: u64,
    /// `[max_id at the backup, max_id at the restore)`.
    reopened: (u64, u64),
    repeated_across_nodes: u64,
    /// Compare-and-sets that moved the store past ids a node had served.
    jumps: u64,
    max_id_after_shutdown: u64,
    /// FNV-1a of every client's answers in order.
    digest: u64,
}

/// One client's answers, in order.
#[derive(Default)]
struct Answers {
    /// Ranges acknowledged, with when they were asked for (paused-clock milliseconds). A
    /// request asked before the restore may hold ids taken before it.
    ranges: Vec<(u64, IdRange)>,
    refused: u64,
}

/// The restore, as the model needs it.
struct Restore {
    /// `[max_id at the backup, max_id at the restore)`.
    reopened: (u64, u64),
    /// Paused-clock milliseconds of the restore.
    at_ms: u64,
    /// Each node's segments at that moment (`None`: it served nothing yet).
    held: Vec<Option<BufferSnapshot>>,
}

fn simulate(seed: u64) -> Outcome {
    count_panics();
    let panics = PANICS.with(Cell::get);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let outcome = runtime.block_on(run(seed));
    // A task that panicked (a refill hitting one of the engine's `assert!`s) is swallowed by
    // tokio; the node then waits for a refill that never comes. It fails the seed.
    assert_eq!(PANICS.with(Cell::get), panics, "seed {seed}: a task panicked (see above)");
    outcome
}

thread_local! {
    /// Panics on this thread: the simulation's runtime runs every task on it.
    static PANICS: Cell<u64> = const { Cell::new(0) };
}

/// Counts panics per thread, then reports them as before.
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.set(p.get() + 1));
            report(info);
        }));
    });
}

async fn run(seed: u64) -> Outcome {
    let mut rng = Rng::new(seed);
    let store = TestStore::new(rng.next());
    let tag = store.create("sim", 1 + rng.below(2_000)).await;
    let faults =
        Mode::Faulty { fail_permille: 20 + rng.below(280), delay_ms_max: 1 + rng.below(40) };
    store.set_mode(faults);
    let nodes: Vec<Arc<Segments>> = (0..NODES)
        .map(|_| Segments::start(store.clone(), node_config(&mut rng)).unwrap())
        .collect();
    let started = Instant::now();
    let end = started + Duration::from_millis(SIMULATED_MS);
    // An old backup, restored late: every node allocated since, so every node's guard meets
    // the restored store at its next refill.
    let backup_at = Duration::from_millis(1_000 + rng.below(SIMULATED_MS / 5));
    let restore_after = Duration::from_millis(SIMULATED_MS / 2 + rng.below(SIMULATED_MS / 5));
    let restore = {
        let (store, tag, nodes) = (store.clone(), tag.clone(), nodes.clone());
        tokio::spawn(restore_a_backup(store, tag, nodes, backup_at, restore_after, started, end))
    };
    let mut clients = Vec::new();
    for node in &nodes {
        for _ in 0..CLIENTS_PER_NODE {
            let (node, tag, seed) = (Arc::clone(node), tag.clone(), rng.next());
            clients.push(tokio::spawn(client(node, tag, seed, started, end)));
        }
    }
    let mut answers: Vec<Answers> = Vec::new();
    for client in clients {
        answers.push(client.await.unwrap());
    }
    let restore = restore.await.unwrap();
    // The store heals: every node serves again, its guard has not wedged it.
    store.set_mode(Mode::Normal);
    for (n, node) in nodes.iter().enumerate() {
        let id = recover(node, &tag).await.unwrap_or_else(|| panic!("seed {seed}: node {n} stuck"));
        let at_ms = (Instant::now() - started).as_millis() as u64;
        answers[n * CLIENTS_PER_NODE].ranges.push((at_ms, IdRange::new(id, id + 1).unwrap()));
    }
    for node in &nodes {
        node.shutdown().await;
    }
    let mut outcome = check(seed, &answers, &restore);
    outcome.jumps = store.raised.load(Ordering::SeqCst);
    outcome.max_id_after_shutdown = store.max_id(&tag).await;
    outcome
}

/// Takes a backup (reads `max_id`) after `backup_at`, and restores it once `restore_after`
/// passed and something was allocated since, noting what every node held at that moment.
async fn restore_a_backup(
    store: Arc<TestStore>,
    tag: Tag,
    nodes: Vec<Arc<Segments>>,
    backup_at: Duration,
    restore_after: Duration,
    started: Instant,
    end: Instant,
) -> Restore {
    tokio::time::sleep(backup_at).await;
    let backup = store.max_id(&tag).await;
    tokio::time::sleep(restore_after).await;
    let latest = end - Duration::from_secs(3);
    while store.max_id(&tag).await == backup && Instant::now() < latest {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The memory store answers without yielding, so on this single thread no refill lands
    // between the snapshots and the restore.
    let held = nodes.iter().map(|node| node.snapshot(&tag)).collect();
    let lost = store.max_id(&tag).await;
    store.restore_max_id(&tag, backup).await;
    let at_ms = (Instant::now() - started).as_millis() as u64;
    Restore { reopened: (backup, lost), at_ms, held }
}

/// A seeded configuration: refill wait at its maximum (see below), segment duration, adaptive
/// step, preload ratio and tag refresh drawn from `rng`.
fn node_config(rng: &mut Rng) -> SegmentConfig {
    // The longest refill wait: a request then waits only while a refill attempt runs, and
    // every attempt here ends (with ids or a published failure) within the 2 s retry backoff
    // plus a few store delays, so no wait ends on its deadline. A deadline and a refill
    // landing in the same millisecond would be decided by tokio's randomly ordered
    // `select!`, and the seed might not replay.
    SegmentConfig::default()
        .with_refill_wait_ms(REFILL_WAIT_MS_MAX)
        .unwrap()
        .with_segment_duration_s(1 + rng.below(5))
        .unwrap()
        .with_adaptive_step(rng.below(4) != 0)
        .with_preload_ratio(PreloadRatio::new((1 + rng.below(9)) as f64 / 10.0).unwrap())
        .with_tag_refresh_ms(1_000 + rng.below(10_000))
        .unwrap()
}

/// Takes single ids and batches at a seeded pace until `end`, with now and then a long idle
/// spell, so the rate (and the step sized for it) swings.
async fn client(
    node: Arc<Segments>,
    tag: Tag,
    seed: u64,
    started: Instant,
    end: Instant,
) -> Answers {
    let mut rng = Rng::new(seed);
    let mut answers = Answers::default();
    while Instant::now() < end {
        let asked_ms = (Instant::now() - started).as_millis() as u64;
        let result = if rng.below(4) == 0 {
            node.next_id(&tag).await.map(|id| vec![IdRange::new(id, id + 1).unwrap()])
        } else {
            node.next_ids(&tag, Count::new(1 + rng.below(40)).unwrap()).await
        };
        match result {
            Ok(ranges) => answers.ranges.extend(ranges.into_iter().map(|r| (asked_ms, r))),
            Err(Error::Unavailable { .. }) => answers.refused += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
        let pause_ms = if rng.below(3_000) == 0 { 1_000 + rng.below(3_000) } else { rng.below(8) };
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
    answers
}

/// One id from `node` once the store is healthy, trying for up to 20 s (the retry backoff
/// of a refill that failed just before is at most 2 s).
async fn recover(node: &Segments, tag: &Tag) -> Option<u64> {
    for _ in 0..10 {
        match node.next_id(tag).await {
            Ok(id) => return Some(id),
            Err(Error::Unavailable { .. }) => {
                tokio::time::sleep(Duration::from_millis(REFILL_RETRY_MS_MAX)).await;
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    None
}

/// Checks every answer against the model (see the module comment); `answers` holds
/// `CLIENTS_PER_NODE` clients per node, in node order.
fn check(seed: u64, answers: &[Answers], restore: &Restore) -> Outcome {
    let (reopened, restored_ms) = (restore.reopened, restore.at_ms);
    let mut digest = Fnv::default();
    let mut served: Vec<(u64, usize)> = Vec::new();
    for (client, answer) in answers.iter().enumerate() {
        let node = client / CLIENTS_PER_NODE;
        let held = restore.held[node];
        let mut last = 0;
        for &(asked_ms, range) in &answer.ranges {
            assert!(range.start() > last, "seed {seed}: client {client} saw ids go down");
            last = range.end() - 1;
            if let Some(held) = held.filter(|_| asked_ms > restored_ms) {
                for id in range.ids() {
                    assert!(
                        id >= held.high_water
                            || in_segment(held.current, id)
                            || in_segment(held.next, id),
                        "seed {seed}: after the restore node {node} served id {id}, below its \
                         mark {} and outside the segments it held: {held:?}",
                        held.high_water
                    );
                }
            }
            served.extend(range.ids().map(|id| (id, node)));
            digest.write(range.start());
            digest.write(range.len());
        }
        digest.write(answer.refused);
    }
    served.sort_unstable();
    let mut repeated_across_nodes = 0;
    for pair in served.windows(2) {
        let ((id, a), (next, b)) = (pair[0], pair[1]);
        if id != next {
            continue;
        }
        assert_ne!(a, b, "seed {seed}: node {a} handed out id {id} twice");
        assert!(
            (reopened.0..reopened.1).contains(&id),
            "seed {seed}: nodes {a} and {b} both handed out id {id}, outside the window \
             [{}, {}) the restore reopened",
            reopened.0,
            reopened.1
        );
        repeated_across_nodes += 1;
    }
    Outcome {
        acknowledged: served.len() as u64,
        refused: answers.iter().map(|a| a.refused).sum(),
        reopened,
        repeated_across_nodes,
        jumps: 0,
        max_id_after_shutdown: 0,
        digest: digest.0,
    }
}

fn in_segment(segment: Option<SegmentSnapshot>, id: u64) -> bool {
    segment.is_some_and(|s| s.range.ids().contains(&id))
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ids acknowledged, {} requests refused; restore reopened [{}, {}): {} ids \
             served again by another node, {} jumps past it; max_id {} after shutdown; \
             digest {:016x}",
            self.acknowledged,
            self.refused,
            self.reopened.0,
            self.reopened.1,
            self.repeated_across_nodes,
            self.jumps,
            self.max_id_after_shutdown,
            self.digest
        )
    }
}

/// `IDMINT_SIM_SEED` alone, or `SEEDS_PER_RUN` seeds drawn from the time and process.
pub(crate) fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("IDMINT_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut rng = Rng::new(now ^ u64::from(std::process::id()));
    (0..SEEDS_PER_RUN).map(|_| rng.next()).collect()
}

/// splitmix64: every choice of the simulation, replayable from the seed. Its outputs seed
/// further generators (the store's, each client's) whose streams do not overlap.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// FNV-1a over u64 words.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, word: u64) {
        for byte in word.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
