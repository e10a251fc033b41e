//! `snowflake_next`: snowflake ids per second of one node beside the layout's own limit
//! (`(max_sequence + 1) × units per second`: 4 096 000 ids/s for 41/10/12), on 1 and 2
//! threads, over `SECONDS` of wall time each, in one run. The limit is the baseline: a
//! generator can at best exhaust every sequence of every millisecond. Results:
//! docs/PERFORMANCE.md.
//!
//! The cached generator (a ring of pre-made ids on borrowed time) is measured *sustained*:
//! back-to-back rounds of `CACHED_ROUND` (2 s) on one ring, takers taking as fast as they can
//! the whole time, each round beside a short bare `AtomicU64::fetch_add` on as many threads in
//! the same run (measured before the rounds: a pause between them would return lead). The first round also spends the ring's borrowed lead; once it is spent, a
//! round measures what the ring sustains, which no bounded lead lifts above the layout's
//! limit. The summary lines give the median, the first round and the rounds after it, and the
//! rejected takes (a take refused after waiting `TAKE_WAIT_MS_MAX`). Baidu uid-generator's
//! CachedUidGenerator is measured beside it by `scripts/bench-ring`.
//!
//! Run: `cargo bench -p idmint --bench snowflake_next` (`-- plain`: the uncached generator
//! only; `-- cached`: the cached ring only, what scripts/bench-ring runs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use idmint::SystemClock;
use idmint::snowflake::{SnowflakeConfig, WorkerIdSource};
use idmint::{CachedSnowflake, Snowflake};
use idmint_core::snowflake::Layout;

/// Seconds each variant runs.
const SECONDS: u64 = 3;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only = |name: &str| args.iter().any(|arg| arg == name);
    let (plain_only, cached_only) = (only("plain"), only("cached"));
    if !cached_only {
        plain(&runtime);
    }
    if !plain_only {
        cached(&runtime);
    }
}

/// The uncached generator's `try_next_id` on 1 and 2 threads, beside the layout's limit.
fn plain(runtime: &tokio::runtime::Runtime) {
    println!("| layout | threads | ids/s | layout limit ids/s | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for name in ["snowflake", "sonyflake"] {
        let layout = Layout::preset(name).expect("preset");
        let mut config = SnowflakeConfig::new(name, layout);
        config.worker = WorkerIdSource::Static(1);
        let generator =
            runtime.block_on(Snowflake::start(None, config, Arc::new(SystemClock))).expect("start");
        for threads in [1usize, 2] {
            let rate = measure(&generator, threads);
            let limit = layout.ids_per_second_limit() as f64;
            println!("| {name} | {threads} | {rate:.0} | {limit:.0} | {:.3} |", rate / limit);
            if name == "snowflake" {
                println!(
                    "plain-summary layout={name} threads={threads} ids_per_s={rate:.0} \
                     ratio_to_limit={:.3}",
                    rate / limit
                );
            }
        }
    }
}

/// Back-to-back rounds on one ring, per thread count: the first spends the borrowed lead,
/// the rest measure what the ring sustains.
const CACHED_ROUNDS: usize = 5;

/// Length of one cached round: long enough that the lead (10 s at most, spent over the first
/// rounds) and the ring's 65 536 pre-made ids do not pass for a sustained rate.
const CACHED_ROUND: Duration = Duration::from_secs(2);

/// Length of the bare `fetch_add` beside each round (a floor, not the subject).
const FLOOR_ROUND: Duration = Duration::from_millis(250);

/// The ring's lead bound in the bench: the largest, as a server configured for bursts runs.
const CACHED_LEAD_MS: u64 = 10_000;

/// Longest wait for a fresh ring to fill before its first round.
const FULL_WAIT: Duration = Duration::from_secs(5);

/// The cached generator, sustained, beside a bare atomic, on 1 and 2 threads.
fn cached(runtime: &tokio::runtime::Runtime) {
    let layout = Layout::preset("snowflake").expect("preset");
    let capacity = idmint::snowflake::limits::CACHED_RING_CAPACITY_DEFAULT;
    let start = |worker: u64| {
        let mut config = SnowflakeConfig::new("cached", layout);
        config.worker = WorkerIdSource::Static(worker);
        // The generator's own borrowing lead as high as the ring's, so its time mark lets the
        // ring run its whole lead: with the default 0 the mark, and so the ring, stays
        // `time_window_ms` ahead (docs/configuration.md, `snowflake.ring_max_lead_ms`).
        config.borrow_max_lead_ms = Some(CACHED_LEAD_MS);
        runtime.block_on(async {
            let generator =
                Snowflake::start(None, config, Arc::new(SystemClock)).await.expect("start");
            CachedSnowflake::start(generator, capacity, CACHED_LEAD_MS).expect("cached")
        })
    };
    let limit = layout.ids_per_second_limit() as f64;
    let mut rejected = 0;
    println!();
    println!("| round | threads | cached ids/s | bare fetch_add ids/s | cached / fetch_add |");
    println!("|---:|---:|---:|---:|---:|");
    let mut summaries = Vec::new();
    for threads in [1usize, 2] {
        // A fresh generator (its own worker id) per thread count, so each starts with its
        // whole lead.
        let cached = start(10 + threads as u64);
        // Timed from a full ring, as uid-generator's init fills its ring before the first
        // take.
        let waited = Instant::now();
        while cached.len() < capacity && waited.elapsed() < FULL_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The floor rounds all go first: a pause between sustained rounds would give the ring
        // back lead (a quarter second of it per pause) and inflate the next round.
        let floors: Vec<f64> = (0..CACHED_ROUNDS)
            .map(|_| {
                let counter = Arc::new(AtomicU64::new(0));
                rate_of(threads, FLOOR_ROUND, move || Some(counter.fetch_add(1, Ordering::Relaxed)))
            })
            .collect();
        let mut rates = Vec::new();
        for (round, &atomic) in (1..=CACHED_ROUNDS).zip(&floors) {
            let taker = Arc::clone(&cached);
            let rate = rate_of(threads, CACHED_ROUND, move || taker.take().expect("take"));
            println!("| {round} | {threads} | {rate:.0} | {atomic:.0} | {:.3} |", rate / atomic);
            rates.push(rate);
        }
        let round_rejected = cached.rejected();
        rejected += round_rejected;
        runtime.block_on(cached.shutdown());
        summaries.push((threads, rates, floors, round_rejected));
    }
    for (threads, rates, mut floors, rejected) in summaries {
        let first = rates[0];
        let mut after: Vec<f64> = rates[1..].to_vec();
        let (after_median, after_min, after_max) = spread(&mut after);
        let mut all = rates.clone();
        let (median, min, max) = spread(&mut all);
        let (floor_median, _, _) = spread(&mut floors);
        println!(
            "cached-summary threads={threads} rounds={CACHED_ROUNDS} round_s={} \
             median_ids_per_s={median:.0} min={min:.0} max={max:.0} first_round={first:.0} \
             after_first_median={after_median:.0} after_first_min={after_min:.0} \
             after_first_max={after_max:.0} ratio_after_first_to_limit={:.3} \
             fetch_add_median={floor_median:.0} rejected={rejected}",
            CACHED_ROUND.as_secs(),
            after_median / limit
        );
    }
    // What the lead bound allows: `t` seconds of takes from a rested ring get at most
    // `limit × (t + lead)` ids; once the lead is spent, `limit` a second.
    let round_s = CACHED_ROUND.as_secs_f64();
    let lead_s = CACHED_LEAD_MS as f64 / 1_000.0;
    let first_cap = limit * (round_s + lead_s) / round_s;
    println!(
        "lead bound: the first {round_s} s round can take at most {first_cap:.0} ids/s, a \
         sustained one at most the layout limit {limit:.0} ids/s"
    );
    println!("rejected takes: {rejected}");
}

/// Median, minimum and maximum of `values` (sorted in place).
fn spread(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (values[values.len() / 2], values[0], values[values.len() - 1])
}

/// Ids per second `threads` threads get from `next` for `duration` (`None` counts nothing).
fn rate_of(
    threads: usize,
    duration: Duration,
    next: impl Fn() -> Option<u64> + Send + Sync + Clone + 'static,
) -> f64 {
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let next = next.clone();
            std::thread::spawn(move || {
                let mut taken = 0u64;
                while Instant::now() < deadline {
                    for _ in 0..1024 {
                        if let Some(id) = next() {
                            std::hint::black_box(id);
                            taken += 1;
                        }
                    }
                }
                taken
            })
        })
        .collect();
    let taken: u64 = workers.into_iter().map(|w| w.join().expect("thread")).sum();
    taken as f64 / started.elapsed().as_secs_f64()
}

/// Ids per second `threads` threads take from `generator` for `SECONDS`.
fn measure(generator: &Arc<Snowflake>, threads: usize) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let generator = Arc::clone(generator);
            std::thread::spawn(move || {
                let mut taken = 0u64;
                while Instant::now() < deadline {
                    for _ in 0..256 {
                        match generator.try_next_id() {
                            Ok(Some(id)) => {
                                std::hint::black_box(id);
                                taken += 1;
                            }
                            Ok(None) => std::hint::spin_loop(),
                            Err(error) => panic!("{error}"),
                        }
                    }
                }
                taken
            })
        })
        .collect();
    let taken: u64 = workers.into_iter().map(|w| w.join().expect("thread")).sum();
    taken as f64 / started.elapsed().as_secs_f64()
}
