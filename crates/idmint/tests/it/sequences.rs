//! Sequences end to end on real Redis: ids never repeat while Redis is flushed, restarted
//! empty and restarted from an older snapshot; the forecast raises the ceiling ahead of a
//! steady load (no request waits) and not without load; daily sequences restart at 1 at
//! midnight of their time zone; a sequence is served up to the limit, then exhausted. The
//! flush and restart tests run a private `redis-server` (own port and directory, removed
//! afterwards); the others use the test kit's Redis (`IDMINT_TEST_REDIS_URL`'s, else a
//! private one) under a fresh key prefix. Without `redis-server` they are skipped and the
//! run's summary says so.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idmint::clock::{Clock, ManualClock, SystemClock};
use idmint::sequence::limits::{SEQ_MARK_LAG_MS_MAX, SEQ_MARK_WRITE_MS};
use idmint::sequence::{SEQUENCE_MARKS_FILE, SequenceConfig, SequenceError};
use idmint::store::{MemoryStore, SequenceSpec, SequenceStore};
use idmint::{Sequences, Tag};
use idmint_store::redis::{RedisCounters, RedisUrl, driver};
use idmint_store::{CounterStore, StoreError};

use crate::redis_keys::{fresh_prefix, fresh_url};

async fn counters(url: &str, prefix: &str) -> Arc<dyn CounterStore> {
    let url = RedisUrl::parse(url).unwrap().with_prefix(prefix).unwrap();
    Arc::new(RedisCounters::connect(&url).await.unwrap())
}

fn spec(name: &str, daily: bool, format: Option<&str>) -> SequenceSpec {
    SequenceSpec {
        name: Tag::parse(name).unwrap(),
        daily,
        format: format.map(str::to_string),
        time_zone: "UTC".to_string(),
        created_ms: 0,
    }
}

fn config(node: &str) -> SequenceConfig {
    SequenceConfig { holder: node.to_string(), ..SequenceConfig::default() }
}

/// Two nodes × two tasks × 100 000 ids of one sequence while Redis is flushed twice, killed
/// and restarted empty, and killed and restarted from a snapshot older than the ids served
/// since: no id repeats, and each task's ids increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_id_repeats_when_redis_is_flushed_or_restarted_from_an_old_snapshot() {
    const PER_TASK: usize = 100_000;
    let Some(mut redis) = idmint_testkit::redis::private() else { return };
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let prefix = fresh_prefix();
    let nodes: Vec<Arc<Sequences>> = {
        let mut nodes = Vec::new();
        for node in ["a", "b"] {
            let counters = counters(&redis.url(), &prefix).await;
            nodes.push(
                Sequences::start(Arc::clone(&store), counters, Arc::new(SystemClock), config(node))
                    .unwrap(),
            );
        }
        nodes
    };
    nodes[0].create(spec("orders", false, None)).await.unwrap();
    let name = Tag::parse("orders").unwrap();

    let mut tasks = Vec::new();
    for node in &nodes {
        for _ in 0..2 {
            let (node, name) = (Arc::clone(node), name.clone());
            tasks.push(tokio::spawn(async move {
                let mut ids: Vec<u64> = Vec::with_capacity(PER_TASK);
                let mut refused = 0u64;
                while ids.len() < PER_TASK {
                    let count = (1 + ids.len() % 37) as u64;
                    match node.next(&name, count).await {
                        Ok(got) => ids.extend(got.numbers),
                        // Redis down for a moment: refused, never wrong.
                        Err(_) => {
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                (ids, refused)
            }));
        }
    }
    // Progress is the counter's `cur`, read through node a; each phase waits for it to
    // move by `n` (reseeds move it further), within 60 s.
    let progress = || async {
        let status = nodes[0].status(&Tag::parse("orders").unwrap()).await;
        status.map(|s| s.cur).unwrap_or(0)
    };
    let advance = |n: u64| {
        let progress = &progress;
        async move {
            let (start, deadline) = (progress().await, Instant::now() + Duration::from_secs(60));
            while progress().await < start + n {
                assert!(Instant::now() < deadline, "the load stalled");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    advance(40_000).await;
    redis.cli(&["FLUSHALL"]).unwrap();
    advance(30_000).await;
    redis.cli(&["FLUSHALL"]).unwrap();
    advance(30_000).await;
    // Killed and restarted with nothing on disk.
    redis.kill().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    redis.launch().unwrap();
    advance(30_000).await;
    // A snapshot now, more ids served after it, then kill -9 and restart from it: the
    // counters come back older than what was handed out, under a new run_id.
    redis.cli(&["SAVE"]).unwrap();
    advance(30_000).await;
    redis.kill().unwrap();
    redis.launch().unwrap();

    let mut seen = HashSet::new();
    let (mut refused, mut total) = (0, 0);
    for task in tasks {
        let (ids, task_refused) = task.await.unwrap();
        refused += task_refused;
        total += ids.len();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a task's ids went back");
        for id in ids {
            assert!(seen.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(seen.len(), total);
    assert!(total >= 4 * PER_TASK);
    // The case only the run check catches: ids served after a snapshot by one node, the
    // server restarted from that snapshot, and a node that never took from the counter
    // taking first. Its ids must not be the ones node a handed out.
    redis.cli(&["SAVE"]).unwrap();
    for _ in 0..100 {
        seen.extend(nodes[0].next(&name, 50).await.unwrap().numbers);
    }
    redis.kill().unwrap();
    redis.launch().unwrap();
    let fresh = Sequences::start(
        Arc::clone(&store),
        counters(&redis.url(), &prefix).await,
        Arc::new(SystemClock),
        config("c"),
    )
    .unwrap();
    for _ in 0..100 {
        for id in fresh.next(&name, 50).await.unwrap().numbers {
            assert!(seen.insert(id), "id {id} handed out again after a restart from a snapshot");
        }
    }
    fresh.shutdown().await;
    let reseeds: u64 = nodes.iter().map(|n| n.reseeds()).sum();
    // Two flushes, an empty restart and an old snapshot: each is one reseed at least (both
    // nodes may reseed the same loss); the first seed of the new sequence is not one.
    assert!(reseeds >= 4, "{reseeds} reseeds");
    eprintln!(
        "{total} ids unique; {reseeds} reseeds, {refused} requests refused while Redis was down"
    );
    for node in nodes {
        node.shutdown().await;
    }
}

/// A node restarted after serving numbers finds the counter put back below them in the same
/// data set (same `run_id` and `master_replid`: the hash written directly, as a restore into
/// the running server would): it reseeds above the marks it wrote to its state directory
/// rather than serve them again. Once after a shutdown, once after a drop without one (a
/// crash) more than [`SEQ_MARK_WRITE_MS`] after the last take; each time the counter is put
/// back 500 below the last number served, above every earlier mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_never_serves_below_its_marks_on_disk() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let config = SequenceConfig { state_dir: Some(dir.path().to_path_buf()), ..config("m") };
    let start = || async {
        let counters: Arc<dyn CounterStore> = Arc::new(RedisCounters::connect(&url).await.unwrap());
        Sequences::start(Arc::clone(&store), counters, Arc::new(SystemClock), config.clone())
            .unwrap()
    };
    let mut raw = url.connect().await.unwrap();
    let name = Tag::parse("marked").unwrap();
    let mut served = HashSet::new();
    let serve = async |node: &Sequences| {
        let mut numbers = Vec::new();
        for _ in 0..10 {
            numbers.extend(node.next(&name, 100).await.unwrap().numbers);
        }
        numbers
    };

    let mut node = start().await;
    node.create(spec("marked", false, None)).await.unwrap();
    let numbers = serve(&node).await;
    let mut last = *numbers.last().unwrap();
    served.extend(numbers);
    for crash in [false, true] {
        if crash {
            // The marks task writes within SEQ_MARK_WRITE_MS; then the node dies unshut.
            tokio::time::sleep(Duration::from_millis(SEQ_MARK_WRITE_MS + 500)).await;
        } else {
            node.shutdown().await;
            let file = std::fs::read_to_string(dir.path().join(SEQUENCE_MARKS_FILE)).unwrap();
            assert!(file.contains(&format!("\nmarked {last}\n")), "{file}");
        }
        drop(node);
        let mut put_back = driver::cmd("HSET");
        put_back.arg(raw.key("seq:{marked}:")).arg("cur").arg(last - 500);
        let _: i64 = put_back.query_async(&mut raw).await.unwrap();
        node = start().await;
        let numbers = serve(&node).await;
        for &id in &numbers {
            assert!(served.insert(id), "{id} served again after a restart (crash: {crash})");
        }
        last = *numbers.last().unwrap();
        assert_eq!(node.reseeds(), 1, "crash: {crash}");
    }
    node.shutdown().await;
    assert_eq!(served.len(), 3_000);
}

/// While the marks file cannot be written (here its directory vanished), numbers are served
/// for at most `SEQ_MARK_LAG_MS_MAX` after the last write that succeeded, then refused with
/// 503 naming the file; once it can be written again they are served again, and the file
/// holds every number served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_stop_while_the_marks_cannot_be_written_and_resume_after() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("state");
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters: Arc<dyn CounterStore> = Arc::new(RedisCounters::connect(&url).await.unwrap());
    let config = SequenceConfig { state_dir: Some(dir.clone()), ..config("w") };
    let node = Sequences::start(store, counters, Arc::new(SystemClock), config).unwrap();
    node.create(spec("written", false, None)).await.unwrap();
    let name = Tag::parse("written").unwrap();
    node.next(&name, 10).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let started = Instant::now();
    let refused = loop {
        match node.next(&name, 10).await {
            Ok(_) => {
                assert!(started.elapsed() < Duration::from_millis(SEQ_MARK_LAG_MS_MAX + 2_000))
            }
            Err(error) => break error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(SEQ_MARK_LAG_MS_MAX - SEQ_MARK_WRITE_MS), "{waited:?}");
    assert!(
        refused.contains(SEQUENCE_MARKS_FILE) && refused.contains("not been written"),
        "{refused}"
    );
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let last = loop {
        if let Ok(ids) = node.next(&name, 10).await {
            break *ids.numbers.last().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(5), "not served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    node.shutdown().await;
    let file = std::fs::read_to_string(dir.join(SEQUENCE_MARKS_FILE)).unwrap();
    assert!(file.contains(&format!("\nwritten {last}\n")), "{file}");
}

/// A damaged sequence marks file refuses the start, naming the file and the fix; a second
/// engine on one state directory is refused while the first holds it.
#[tokio::test]
async fn a_damaged_or_shared_marks_file_refuses_the_start() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let config = SequenceConfig { state_dir: Some(dir.path().to_path_buf()), ..config("d") };
    let start = || async {
        let counters: Arc<dyn CounterStore> = Arc::new(RedisCounters::connect(&url).await.unwrap());
        Sequences::start(Arc::clone(&store), counters, Arc::new(SystemClock), config.clone())
    };
    let first = start().await.unwrap();
    let shared = start().await.unwrap_err().to_string();
    assert!(shared.contains("in use by another idmint process"), "{shared}");
    first.shutdown().await;
    drop(first);
    std::fs::write(dir.path().join(SEQUENCE_MARKS_FILE), "marked 12\n").unwrap();
    let damaged = start().await.unwrap_err().to_string();
    assert!(damaged.contains("is damaged") && damaged.contains("Restore it"), "{damaged}");
}

/// Under a steady load the forecast raises the ceiling before it is reached, so no request
/// waits; without load it raises nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forecast_raises_ahead_of_a_steady_load_and_not_without_load() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters: Arc<dyn CounterStore> = Arc::new(RedisCounters::connect(&url).await.unwrap());
    // Short horizons so a few seconds of load exercise it: keep 3 s of room, raise 6 s.
    // Forecast every 200 ms: the first seed lasts 1.25 s, and with the default 1 s tick a
    // tick could land just before the seed runs out, leaving the raise a few ms to finish
    // on a loaded machine (a wait, seen once in CI).
    let config = SequenceConfig { forecast_s: 3, raise_s: 6, tick_ms: 200, ..config("f") };
    let node =
        Sequences::start(Arc::clone(&store), counters, Arc::new(SystemClock), config).unwrap();
    node.create(spec("steady", false, None)).await.unwrap();
    node.create(spec("idle", false, None)).await.unwrap();
    let (steady, idle) = (Tag::parse("steady").unwrap(), Tag::parse("idle").unwrap());
    node.next(&idle, 1).await.unwrap();

    // 8 000 ids/s for 6 s: the first seed (10 000) lasts about a second; after that only
    // the forecast keeps requests from finding the ceiling.
    let started = Instant::now();
    let mut taken = 0u64;
    while started.elapsed() < Duration::from_secs(6) {
        node.next(&steady, 80).await.unwrap();
        taken += 80;
        let due = Duration::from_micros(taken * 1_000_000 / 8_000);
        if let Some(ahead) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(ahead).await;
        }
    }
    assert_eq!(node.waits(), 0, "a request found the ceiling under a steady load");
    assert!(node.raises() >= 2, "{} raises", node.raises());
    let busy = node.status(&steady).await.unwrap();
    assert!(busy.max - busy.cur >= 8_000, "room {} after the load", busy.max - busy.cur);
    // The idle sequence was seeded once and never raised.
    let quiet = node.status(&idle).await.unwrap();
    assert_eq!((quiet.cur, quiet.max), (1, idmint::sequence::limits::SEQ_RAISE_MIN));
    assert_eq!(store.ceiling(&idle, "").await.unwrap(), idmint::sequence::limits::SEQ_RAISE_MIN);
    node.shutdown().await;
}

/// A daily sequence in UTC+8 across its midnight on an injected clock: the new day's first
/// id is 1 with the new date, and no formatted id repeats across the two days and two nodes
/// whose clocks differ by 300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_sequences_restart_at_one_after_midnight_in_their_zone() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    // 2026-11-22T15:59:59.000Z is 23:59:59 in UTC+8.
    let before_midnight = 1_795_363_199_000;
    let early = Arc::new(ManualClock::new(before_midnight));
    let late = Arc::new(ManualClock::new(before_midnight + 300));
    let mut nodes = Vec::new();
    for (node, clock) in [("early", &early), ("late", &late)] {
        let counters = Arc::new(RedisCounters::connect(&url).await.unwrap());
        let clock = Arc::clone(clock) as Arc<dyn Clock>;
        nodes.push(Sequences::start(Arc::clone(&store), counters, clock, config(node)).unwrap());
    }
    let mut daily = spec("invoice", true, None);
    daily.time_zone = "+08:00".to_string();
    let created = nodes[0].create(daily).await.unwrap();
    assert_eq!(created.format.as_deref(), Some(idmint::sequence::limits::DAILY_FORMAT_DEFAULT));
    let name = Tag::parse("invoice").unwrap();

    let mut seen = HashSet::new();
    let first = nodes[0].next(&name, 3).await.unwrap();
    assert_eq!(first.period, "20261122");
    assert_eq!(first.formatted.as_deref().unwrap()[0], "20261122000001");
    let mut record = |ids: idmint::sequence::SequenceIds| {
        for id in ids.formatted.unwrap() {
            assert!(seen.insert(id.clone()), "{id} twice");
        }
    };
    record(first);
    // Across midnight in 100 ms steps: for a while one node is on the new day while the
    // other is still on the old one.
    for _ in 0..20 {
        for node in &nodes {
            record(node.next(&name, 5).await.unwrap());
        }
        early.advance(100);
        late.advance(100);
    }
    let next_day = nodes[1].next(&name, 1).await.unwrap();
    assert_eq!(next_day.period, "20261123");
    record(next_day);
    let firsts: Vec<&String> = seen.iter().filter(|id| id.ends_with("000001")).collect();
    assert_eq!(firsts.len(), 2, "each day starts at 1: {firsts:?}");
    assert!(seen.contains("20261123000001"));
    // Each day has its own ceiling in the store.
    assert!(store.ceiling(&name, "20261122").await.unwrap() >= 1);
    assert!(store.ceiling(&name, "20261123").await.unwrap() >= 1);
    for node in nodes {
        node.shutdown().await;
    }
}

/// Bad requests and definitions are refused with what is wrong; a missing sequence is
/// named.
#[tokio::test]
async fn bad_requests_and_definitions_are_refused_with_the_fix() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(RedisCounters::connect(&url).await.unwrap());
    let node = Sequences::start(store, counters, Arc::new(SystemClock), config("x")).unwrap();
    let missing = node.next(&Tag::parse("nope").unwrap(), 1).await.unwrap_err();
    assert!(missing.to_string().contains("idmint seq create nope"), "{missing}");
    let bad_daily = node.create(spec("d", true, Some("{date:%m%d}{seq:04}"))).await.unwrap_err();
    assert!(bad_daily.to_string().contains("year, month and day"), "{bad_daily}");
    let mut bad_zone = spec("z", false, None);
    bad_zone.time_zone = "Mars/Olympus".to_string();
    assert!(node.create(bad_zone).await.unwrap_err().to_string().contains("time zone"));
    node.create(spec("ok", false, Some("S{seq:08}"))).await.unwrap();
    let ok = Tag::parse("ok").unwrap();
    let too_many = node.next(&ok, idmint::sequence::limits::SEQ_COUNT_MAX + 1).await.unwrap_err();
    assert!(too_many.to_string().contains("ask for 1 to"), "{too_many}");
    let ids = node.next(&ok, 2).await.unwrap();
    assert_eq!(ids.formatted.unwrap(), ["S00000001", "S00000002"]);
    node.delete(&ok).await.unwrap();
    assert!(node.next(&ok, 1).await.is_err());
    node.shutdown().await;
}

/// A Redis that refuses `INFO` to idmint's user (here an ACL with `-@dangerous`, on a private
/// server) fails every take at once with the store's final refusal, which the server answers
/// 501 `sequence_store_unsupported`; never `Unavailable` (503), which clients retry forever.
#[tokio::test]
async fn a_redis_that_refuses_info_fails_takes_as_final_not_unavailable() {
    if idmint_testkit::servers::installed::redis().is_none() {
        idmint_testkit::skip(idmint_testkit::skip::NO_REDIS);
        return;
    }
    let redis = idmint_testkit::servers::PrivateRedis::start().unwrap();
    let acl = ["ACL", "SETUSER", "hardened", "on", ">secret", "~*", "&*", "+@all", "-@dangerous"];
    redis.cli(&acl).unwrap();
    let url = format!("redis://hardened:secret@127.0.0.1:{}", redis.port());
    let counters = counters(&url, "acl:").await;
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let node = Sequences::start(store, counters, Arc::new(SystemClock), config("a")).unwrap();
    node.create(spec("hardened", false, None)).await.unwrap();
    let name = Tag::parse("hardened").unwrap();
    let started = Instant::now();
    let refused = node.next(&name, 1).await.unwrap_err();
    assert!(matches!(refused, SequenceError::Store(StoreError::Unsupported { .. })), "{refused:?}");
    assert!(refused.to_string().contains("ACL SETUSER"), "{refused}");
    assert!(started.elapsed() < Duration::from_millis(500), "waited {:?}", started.elapsed());
    redis.cli(&["ACL", "SETUSER", "hardened", "+info"]).unwrap();
    assert_eq!(node.next(&name, 1).await.unwrap().numbers, [1]);
    node.shutdown().await;
}

/// Issue 31: on real Redis, a sequence whose ceiling sits just below the largest number a
/// counter holds exactly is served up to that number, then refused as the final `Exhausted`
/// (never the retryable `Unavailable`), and the refusals leave its ceiling where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_is_served_up_to_the_limit_then_exhausted_on_redis() {
    use idmint::sequence::limits::COUNTER_MAX;
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = Arc::new(RedisCounters::connect(&url).await.unwrap());
    let node = Sequences::start(Arc::clone(&store), counters, Arc::new(SystemClock), config("top"))
        .unwrap();
    node.create(spec("top", false, None)).await.unwrap();
    let name = Tag::parse("top").unwrap();
    store.raise_ceiling(&name, "", COUNTER_MAX - 5).await.unwrap();

    // The seed's raise is cut to the limit: the counter starts at the old ceiling.
    let first = node.next(&name, 1).await.unwrap().numbers;
    assert_eq!(first, [COUNTER_MAX - 4]);
    let last = node.next(&name, 4).await.unwrap().numbers;
    assert_eq!(last, [COUNTER_MAX - 3, COUNTER_MAX - 2, COUNTER_MAX - 1, COUNTER_MAX]);
    for _ in 0..3 {
        let refused = node.next(&name, 1).await.unwrap_err();
        assert!(matches!(refused, SequenceError::Exhausted { .. }), "{refused:?}");
    }
    assert_eq!(store.ceiling(&name, "").await.unwrap(), COUNTER_MAX);
    node.shutdown().await;
}

/// On a real Redis, concurrent requests of one sequence on one node share counter calls:
/// 400 requests of random counts in flight at once cost a handful of take scripts (counted
/// by the server's own `INFO commandstats`), not 400, and still get disjoint, contiguous
/// numbers that add up to the counter's advance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_redis_call_serves_many_concurrent_requests() {
    const REQUESTS: u64 = 400;
    let Some(redis) = idmint_testkit::redis::private() else { return };
    let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
    let counters = counters(&redis.url(), &fresh_prefix()).await;
    let node =
        Sequences::start(Arc::clone(&store), counters, Arc::new(SystemClock), config("batch"))
            .unwrap();
    node.create(spec("batched", false, None)).await.unwrap();
    let name = Tag::parse("batched").unwrap();
    // Seeded: the requests below find room and only take.
    let first = node.next(&name, 1).await.unwrap().numbers[0];
    redis.cli(&["CONFIG", "RESETSTAT"]).unwrap();

    let counts: Vec<u64> = (0..REQUESTS).map(|i| 1 + (i * 31 + 7) % 17).collect();
    let tasks: Vec<_> = counts
        .iter()
        .map(|&count| {
            let (node, name) = (Arc::clone(&node), name.clone());
            tokio::spawn(async move { node.next(&name, count).await.unwrap().numbers })
        })
        .collect();
    let mut all = Vec::new();
    for (task, count) in tasks.into_iter().zip(&counts) {
        let numbers = task.await.unwrap();
        assert_eq!(numbers.len() as u64, *count);
        assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?} not contiguous");
        all.extend(numbers);
    }
    let total: u64 = counts.iter().sum();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len() as u64, total, "a number handed out twice");
    assert_eq!((all[0], all[all.len() - 1]), (first + 1, first + total));

    let stats = redis.cli(&["INFO", "commandstats"]).unwrap();
    let calls = |command: &str| -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    };
    let scripts = calls("evalsha") + calls("eval");
    assert!(scripts >= 1 && scripts * 10 <= REQUESTS, "{scripts} scripts for {REQUESTS} requests");
    eprintln!("{REQUESTS} concurrent requests, {scripts} script calls");
    node.shutdown().await;
}
