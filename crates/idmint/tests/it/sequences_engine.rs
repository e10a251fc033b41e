//! The sequence engine's marks, without Redis: counters in memory whose takes the test can
//! hold, so a take can be caught in flight while the clock jumps, the marks file stops being
//! written, the marks disk stalls or the sequence is deleted. What each test checks is what
//! a `kill -9` relies on: every number handed out is in the marks file within
//! `SEQ_MARK_LAG_MS_MAX`, and the marks on disk outlive what could serve below them.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idmint::Tag;
use idmint::clock::{Clock, ManualClock, SystemClock};
use idmint::sequence::limits::{
    IDLE_AFTER_S, SEQ_MARK_LAG_MS_MAX, SEQ_MARK_WRITE_MS, SEQ_SHUTDOWN_MS_MAX,
};
use idmint::sequence::{SEQUENCE_MARKS_FILE, SequenceConfig, SequenceError, Sequences};
use idmint::store::{MemoryStore, SequenceSpec, SequenceStore};
use idmint_store::{COUNTER_MAX, CounterKey, CounterState, CounterStore, StoreError, Take};

/// A wall-clock reading for the manual clock (2026-11-27).
const START_MS: u64 = 1_795_800_000_000;
/// Longest the tests wait for something the engine does every `SEQ_MARK_WRITE_MS`.
const WAIT: Duration = Duration::from_secs(10);

/// Counters in memory, as one Redis that never goes back keeps them; a take waits while the
/// test holds `hold`.
#[derive(Default)]
struct HeldCounters {
    counters: Mutex<HashMap<CounterKey, CounterState>>,
    hold: tokio::sync::RwLock<()>,
    /// Takes that reached `hold`.
    entered: AtomicU64,
    /// While set, every take fails as a Redis that does not answer.
    failing: std::sync::atomic::AtomicBool,
    /// How long each take lasts, in µs (a round trip, so concurrent requests pile up).
    delay_us: AtomicU64,
    /// While set, every take panics (as an assertion in the engine's call would).
    panicking: std::sync::atomic::AtomicBool,
}

impl HeldCounters {
    /// Waits until `n` takes in all reached `hold`.
    async fn entered(&self, n: u64) {
        let started = Instant::now();
        while self.entered.load(Ordering::SeqCst) < n {
            assert!(started.elapsed() < WAIT, "no take reached the counters");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[async_trait]
impl CounterStore for HeldCounters {
    async fn take(&self, key: &CounterKey, n: u64, _now_s: u64) -> Result<Take, StoreError> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let _held = self.hold.read().await;
        let delay = self.delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_micros(delay)).await;
        }
        assert!(!self.panicking.load(Ordering::SeqCst), "a take panicked (test)");
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("redis://test: connection refused".to_string()));
        }
        let mut counters = self.counters.lock().unwrap();
        let Some(counter) = counters.get_mut(key) else { return Ok(Take::NeedsSeed) };
        if counter.max - counter.cur < n {
            return Ok(Take::NoRoom { cur: counter.cur, max: counter.max });
        }
        counter.cur += n;
        Ok(Take::Taken { last: counter.cur })
    }

    async fn seed(&self, key: &CounterKey, floor: u64, max: u64) -> Result<(), StoreError> {
        let mut counters = self.counters.lock().unwrap();
        let counter = counters.entry(key.clone()).or_insert(CounterState {
            cur: floor,
            max,
            current_run: true,
            ..CounterState::default()
        });
        counter.cur = counter.cur.max(floor);
        counter.max = counter.max.max(max);
        Ok(())
    }

    async fn raise_max(&self, key: &CounterKey, max: u64) -> Result<bool, StoreError> {
        let mut counters = self.counters.lock().unwrap();
        let Some(counter) = counters.get_mut(key) else { return Ok(false) };
        counter.max = counter.max.max(max);
        Ok(true)
    }

    async fn state(
        &self,
        key: &CounterKey,
        _now_s: u64,
    ) -> Result<Option<CounterState>, StoreError> {
        Ok(self.counters.lock().unwrap().get(key).copied())
    }

    async fn set_long_term(&self, _key: &CounterKey, _per_s: u64) -> Result<(), StoreError> {
        Ok(())
    }

    async fn try_lock(&self, _: &CounterKey, _: &str, _: u64) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn unlock(&self, _key: &CounterKey, _holder: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn remove(&self, name: &Tag) -> Result<(), StoreError> {
        self.counters.lock().unwrap().retain(|key, _| key.name != *name);
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn describe(&self) -> String {
        "held counters (test)".to_string()
    }
}

fn spec(name: &str) -> SequenceSpec {
    SequenceSpec {
        name: Tag::parse(name).unwrap(),
        daily: false,
        format: None,
        time_zone: "UTC".to_string(),
        created_ms: 0,
    }
}

/// An engine on `store` and `counters` with its marks in `dir`, forecasting every 10 ms.
fn start(
    store: &Arc<dyn SequenceStore>,
    counters: &Arc<HeldCounters>,
    clock: Arc<dyn Clock>,
    dir: &Path,
) -> Arc<Sequences> {
    let config = SequenceConfig {
        holder: "engine-test".to_string(),
        tick_ms: 10,
        state_dir: Some(dir.to_path_buf()),
        ..SequenceConfig::default()
    };
    let counters: Arc<dyn CounterStore> = counters.clone();
    Sequences::start(Arc::clone(store), counters, clock, config).unwrap()
}

fn marks_file(dir: &Path) -> PathBuf {
    dir.join(SEQUENCE_MARKS_FILE)
}

/// Waits until the marks file holds `name`'s mark at `mark`.
async fn wait_for_mark(dir: &Path, name: &str, mark: u64) {
    let line = format!("\n{name} {mark}\n");
    let started = Instant::now();
    while !std::fs::read_to_string(marks_file(dir)).unwrap_or_default().contains(&line) {
        assert!(started.elapsed() < WAIT, "the marks file never held {name} {mark}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A take that reached the counter before the forecast found its counter idle (the clock
/// jumped past `IDLE_AFTER_S` meanwhile) still has its number written to the marks file:
/// the counter a take holds is never dropped from the marks writer's view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_with_a_take_in_flight_is_never_dropped_from_the_marks_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    let clock = Arc::new(ManualClock::new(START_MS));
    let node = start(&store, &counters, clock.clone(), dir.path());
    node.create(spec("busy")).await.unwrap();
    let name = Tag::parse("busy").unwrap();
    assert_eq!(node.next(&name, 10).await.unwrap().numbers.last(), Some(&10));
    wait_for_mark(dir.path(), "busy", 10).await;

    let held = counters.hold.write().await;
    let entered = counters.entered.load(Ordering::SeqCst);
    let take = tokio::spawn({
        let (node, name) = (Arc::clone(&node), name.clone());
        async move { node.next(&name, 10).await }
    });
    counters.entered(entered + 1).await;
    // The counter looks idle to the forecast (several rounds at 10 ms) while the take waits.
    clock.advance((IDLE_AFTER_S + 1) * 1_000);
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(held);
    assert_eq!(take.await.unwrap().unwrap().numbers.last(), Some(&20));

    node.shutdown().await;
    let file = std::fs::read_to_string(marks_file(dir.path())).unwrap();
    assert!(file.contains("\nbusy 20\n"), "20 was handed out and is not marked:\n{file}");
}

/// A take that entered while the marks were fresh but got its numbers only after
/// `SEQ_MARK_LAG_MS_MAX` without a successful marks write (the directory is gone) hands
/// nothing out (503), and the numbers it took are never served later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_that_outlasts_the_marks_lag_bound_hands_nothing_out() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    let node = start(&store, &counters, Arc::new(SystemClock), &dir);
    node.create(spec("slow")).await.unwrap();
    let name = Tag::parse("slow").unwrap();
    node.next(&name, 10).await.unwrap();
    wait_for_mark(&dir, "slow", 10).await;

    // The marks cannot be written from now on, and one number waits to be marked (a write
    // with nothing to mark succeeds without the disk).
    std::fs::remove_dir_all(&dir).unwrap();
    node.next(&name, 10).await.unwrap();
    let held = counters.hold.write().await;
    let entered = counters.entered.load(Ordering::SeqCst);
    let take = tokio::spawn({
        let (node, name) = (Arc::clone(&node), name.clone());
        async move { node.next(&name, 10).await }
    });
    counters.entered(entered + 1).await;
    tokio::time::sleep(Duration::from_millis(SEQ_MARK_LAG_MS_MAX + 500)).await;
    drop(held);
    let refused = match take.await.unwrap() {
        Ok(ids) => panic!("{:?} handed out with marks older than the bound", ids.numbers),
        Err(error) => error,
    };
    assert!(matches!(refused, SequenceError::Unavailable { .. }), "{refused:?}");
    assert!(refused.to_string().contains("not been written"), "{refused}");

    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let next = loop {
        if let Ok(ids) = node.next(&name, 10).await {
            break ids.numbers;
        }
        assert!(started.elapsed() < WAIT, "not served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(next[0] > 30, "the refused take's numbers served: {next:?}");
    node.shutdown().await;
}

/// The marks write at shutdown on a disk that does not answer (here its temporary file is a
/// FIFO nobody reads, so opening it blocks) ends within the engine's bound, instead of
/// holding the node past its grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_within_its_bound_while_the_marks_disk_stalls() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("stalled")).await.unwrap();
    let name = Tag::parse("stalled").unwrap();
    node.next(&name, 10).await.unwrap();
    wait_for_mark(dir.path(), "stalled", 10).await;

    let mut tmp = marks_file(dir.path()).into_os_string();
    tmp.push(".tmp");
    let fifo = PathBuf::from(tmp);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    node.next(&name, 10).await.unwrap();
    // The marks writer is now stuck opening the FIFO.
    tokio::time::sleep(Duration::from_millis(SEQ_MARK_WRITE_MS + 300)).await;

    let started = Instant::now();
    let bound = Duration::from_millis(SEQ_SHUTDOWN_MS_MAX + 2_000);
    let stopped = tokio::time::timeout(bound, node.shutdown()).await;
    let took = started.elapsed();
    // Unstall the disk, so the blocked write ends and the runtime can stop.
    unstall(&fifo);
    assert!(stopped.is_ok(), "shutdown still waiting on the stalled disk after {took:?}");
    assert!(took >= Duration::from_millis(SEQ_SHUTDOWN_MS_MAX), "{took:?}");
}

/// Opens the FIFO for reading without waiting, reads what a blocked writer wrote, closes it.
fn unstall(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000;
    let Ok(mut reader) = std::fs::OpenOptions::new().read(true).custom_flags(O_NONBLOCK).open(fifo)
    else {
        return;
    };
    std::thread::sleep(Duration::from_millis(200));
    let _ = reader.read_to_end(&mut Vec::new());
}

/// A sequence deleted and created again after its ceilings went back (the ceilings table
/// restored from a backup older than the sequence) continues above what this node handed
/// out: deleting it kept its marks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_created_again_over_older_ceilings_never_repeats_this_nodes_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Arc::new(HeldCounters::default());
    let name = Tag::parse("reborn").unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("reborn")).await.unwrap();
    let first = node.next(&name, 100).await.unwrap().numbers;
    node.delete(&name).await.unwrap();
    node.shutdown().await;
    drop(node);

    // The ceilings are back to before the sequence existed.
    let restored: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let node = start(&restored, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("reborn")).await.unwrap();
    let again = node.next(&name, 100).await.unwrap().numbers;
    node.shutdown().await;
    assert!(again[0] > first[99], "served again: {} after {}", again[0], first[99]);
}

/// Issue 31: a sequence whose ceiling reached the largest number a counter holds exactly
/// (`COUNTER_MAX`) was refused as `Unavailable` (503), which clients retry forever, and each
/// retry raised its ceiling again. Every number up to the limit is served, then the sequence
/// is refused as `Exhausted`, final, naming it, the limit and the fix, and the refusals change
/// nothing in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_at_the_largest_number_is_exhausted_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Arc::new(HeldCounters::default());
    let name = Tag::parse("topped").unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("topped")).await.unwrap();
    // The ceiling and the counter just below the limit, as years of takes would leave them.
    let top = COUNTER_MAX - 3;
    store.raise_ceiling(&name, "", top).await.unwrap();
    let key = CounterKey { name: name.clone(), period: String::new() };
    counters.seed(&key, top - 2, top).await.unwrap();

    let below = node.next(&name, 2).await.unwrap().numbers;
    assert_eq!(below, [top - 1, top]);
    // The last raise stops at the limit, and every number up to it is served.
    let last = node.next(&name, 3).await.unwrap().numbers;
    assert_eq!(last, [COUNTER_MAX - 2, COUNTER_MAX - 1, COUNTER_MAX]);
    for _ in 0..2 {
        let refused = node.next(&name, 1).await.unwrap_err();
        assert!(
            matches!(&refused, SequenceError::Exhausted { name: n, limit, .. }
                if *n == name && *limit == COUNTER_MAX),
            "{refused:?}"
        );
        let message = refused.to_string();
        assert!(
            message.contains("topped")
                && message.contains(&COUNTER_MAX.to_string())
                && message.contains("new sequence"),
            "{message}"
        );
    }
    let ceiling = store.ceiling(&name, "").await.unwrap();
    assert_eq!(ceiling, COUNTER_MAX, "the refusals moved the ceiling");
    node.shutdown().await;
}

/// Spawns `node.next(name, count)`.
fn spawn_take(
    node: &Arc<Sequences>,
    name: &Tag,
    count: u64,
) -> tokio::task::JoinHandle<Result<Vec<u64>, SequenceError>> {
    let (node, name) = (Arc::clone(node), name.clone());
    tokio::spawn(async move { node.next(&name, count).await.map(|ids| ids.numbers) })
}

/// Spawns takes of `counts` one after another, each given time to queue before the next is
/// spawned (while a held take keeps the counter busy): they arrive in this order.
async fn queue_behind_a_held_take(
    node: &Arc<Sequences>,
    name: &Tag,
    counts: &[u64],
) -> Vec<tokio::task::JoinHandle<Result<Vec<u64>, SequenceError>>> {
    let mut tasks = Vec::new();
    for &count in counts {
        tasks.push(spawn_take(node, name, count));
        // Time for the request to reach the queue (the runtime has two threads).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tasks
}

/// Requests that arrive while a counter call is in flight are served by the next call, one
/// for all of them: 1 + 50 concurrent requests cost 2 counter calls, and each request gets
/// its own count of contiguous numbers, in arrival order, covering the block exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_takes_of_one_sequence_share_one_counter_call() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("shared")).await.unwrap();
    let name = Tag::parse("shared").unwrap();
    assert_eq!(node.next(&name, 10).await.unwrap().numbers.last(), Some(&10));

    let held = counters.hold.write().await;
    let entered = counters.entered.load(Ordering::SeqCst);
    let first = spawn_take(&node, &name, 1);
    counters.entered(entered + 1).await;
    let counts: Vec<u64> = (0..50).map(|i| 1 + (i * 7) % 13).collect();
    let tasks = queue_behind_a_held_take(&node, &name, &counts).await;
    assert_eq!(counters.entered.load(Ordering::SeqCst), entered + 1, "a queued request took");
    drop(held);
    assert_eq!(first.await.unwrap().unwrap(), [11]);
    let mut next = 12;
    for (task, count) in tasks.into_iter().zip(&counts) {
        let numbers = task.await.unwrap().unwrap();
        let expected: Vec<u64> = (next..next + count).collect();
        assert_eq!(numbers, expected, "not this request's part of the block, in arrival order");
        next += count;
    }
    let calls = counters.entered.load(Ordering::SeqCst) - entered;
    assert_eq!(calls, 2, "50 queued requests took {calls} counter calls, not one");
    node.shutdown().await;
}

/// A seeded simulation of the engine under concurrency: 16 tasks each take 300 times a
/// random count (1 to 20) from a counter whose calls last 200 µs, so batches form and
/// change size all the time. No number is handed out twice, each request's numbers are
/// contiguous and its count, each task's numbers increase, the counter moved by exactly the
/// sum of the counts, and far fewer calls were made than requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_concurrent_takes_are_disjoint_contiguous_increasing_and_add_up() {
    const TASKS: u64 = 16;
    const TAKES: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    counters.delay_us.store(200, Ordering::SeqCst);
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("random")).await.unwrap();
    let name = Tag::parse("random").unwrap();
    let first = node.next(&name, 1).await.unwrap().numbers[0];
    let entered = counters.entered.load(Ordering::SeqCst);

    let mut tasks = Vec::new();
    for seed in 1..=TASKS {
        let (node, name) = (Arc::clone(&node), name.clone());
        tasks.push(tokio::spawn(async move {
            // xorshift64, seeded per task: the same counts on every run.
            let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
            let mut taken = Vec::new();
            for _ in 0..TAKES {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let count = 1 + state % 20;
                let numbers = node.next(&name, count).await.unwrap().numbers;
                assert_eq!(numbers.len() as u64, count);
                assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?} not contiguous");
                taken.push(numbers);
            }
            taken
        }));
    }
    let mut all = Vec::new();
    let mut requests = 0;
    for task in tasks {
        let taken = task.await.unwrap();
        let starts: Vec<u64> = taken.iter().map(|n| n[0]).collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "a task's numbers went back");
        requests += taken.len() as u64;
        all.extend(taken.into_iter().flatten());
    }
    let total = all.len() as u64;
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len() as u64, total, "a number handed out twice");
    // Every number between the first take and the last was handed out: no gap either.
    assert_eq!(all.first(), Some(&(first + 1)));
    assert_eq!(all.last(), Some(&(first + total)));
    let key = CounterKey { name: name.clone(), period: String::new() };
    assert_eq!(counters.state(&key, 0).await.unwrap().unwrap().cur, first + total);
    let calls = counters.entered.load(Ordering::SeqCst) - entered;
    assert!(calls * 4 <= requests, "{calls} counter calls for {requests} requests");
    eprintln!("{requests} requests, {total} numbers, {calls} counter calls");
    node.shutdown().await;
}

/// A counter call that fails answers every request of its batch with the failure (503,
/// naming it), none with numbers and none left waiting; the next batch is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_counter_call_fails_every_request_of_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("failing")).await.unwrap();
    let name = Tag::parse("failing").unwrap();
    node.next(&name, 5).await.unwrap();

    let held = counters.hold.write().await;
    let entered = counters.entered.load(Ordering::SeqCst);
    let first = spawn_take(&node, &name, 1);
    counters.entered(entered + 1).await;
    let tasks = queue_behind_a_held_take(&node, &name, &[1, 2, 3, 4, 5, 6]).await;
    counters.failing.store(true, Ordering::SeqCst);
    drop(held);
    for task in std::iter::once(first).chain(tasks) {
        let refused = tokio::time::timeout(WAIT, task).await.expect("left waiting").unwrap();
        let refused = refused.expect_err("numbers from a failed call");
        assert!(matches!(refused, SequenceError::Unavailable { .. }), "{refused:?}");
        assert!(refused.to_string().contains("connection refused"), "{refused}");
    }
    counters.failing.store(false, Ordering::SeqCst);
    // Nothing the failed calls asked for was taken: the counter continues at 6.
    assert_eq!(node.next(&name, 2).await.unwrap().numbers, [6, 7]);
    node.shutdown().await;
}

/// A batch that would cross the ceiling of a sequence at its limit does not fail the
/// requests that fit alone: requests of 3, 4 and 1 with 5 numbers left get 3 numbers,
/// `Exhausted`, and 1 number, as they would one after another; then all are exhausted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_past_the_limit_serves_the_requests_that_fit_alone() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Arc::new(HeldCounters::default());
    let name = Tag::parse("brim").unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("brim")).await.unwrap();
    store.raise_ceiling(&name, "", COUNTER_MAX).await.unwrap();
    let key = CounterKey { name: name.clone(), period: String::new() };
    counters.seed(&key, COUNTER_MAX - 6, COUNTER_MAX).await.unwrap();

    let held = counters.hold.write().await;
    let entered = counters.entered.load(Ordering::SeqCst);
    let first = spawn_take(&node, &name, 1);
    counters.entered(entered + 1).await;
    let tasks = queue_behind_a_held_take(&node, &name, &[3, 4, 1]).await;
    drop(held);
    assert_eq!(first.await.unwrap().unwrap(), [COUNTER_MAX - 5]);
    let mut tasks = tasks.into_iter();
    let three = tasks.next().unwrap().await.unwrap().unwrap();
    assert_eq!(three, [COUNTER_MAX - 4, COUNTER_MAX - 3, COUNTER_MAX - 2]);
    let four = tasks.next().unwrap().await.unwrap().unwrap_err();
    assert!(matches!(four, SequenceError::Exhausted { .. }), "{four:?}");
    let one = tasks.next().unwrap().await.unwrap().unwrap();
    assert_eq!(one, [COUNTER_MAX - 1]);
    assert_eq!(node.next(&name, 1).await.unwrap().numbers, [COUNTER_MAX]);
    let refused = node.next(&name, 1).await.unwrap_err();
    assert!(matches!(refused, SequenceError::Exhausted { .. }), "{refused:?}");
    assert_eq!(store.ceiling(&name, "").await.unwrap(), COUNTER_MAX);
    node.shutdown().await;
}

/// A counter call that panics (an assertion) answers the requests of its batch with an
/// error instead of leaving them waiting, and the counter is served again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_counter_call_leaves_no_request_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(HeldCounters::default());
    let node = start(&store, &counters, Arc::new(SystemClock), dir.path());
    node.create(spec("panics")).await.unwrap();
    let name = Tag::parse("panics").unwrap();
    node.next(&name, 1).await.unwrap();

    let held = counters.hold.write().await;
    let entered = counters.entered.load(Ordering::SeqCst);
    let first = spawn_take(&node, &name, 1);
    counters.entered(entered + 1).await;
    let tasks = queue_behind_a_held_take(&node, &name, &[1, 2, 3]).await;
    counters.panicking.store(true, Ordering::SeqCst);
    drop(held);
    for task in std::iter::once(first).chain(tasks) {
        let refused = tokio::time::timeout(WAIT, task).await.expect("left waiting").unwrap();
        let refused = refused.expect_err("numbers from a panicked call");
        assert!(matches!(refused, SequenceError::Unavailable { .. }), "{refused:?}");
    }
    counters.panicking.store(false, Ordering::SeqCst);
    let again = tokio::time::timeout(WAIT, node.next(&name, 1)).await.expect("never served again");
    assert_eq!(again.unwrap().numbers, [2]);
    node.shutdown().await;
}
