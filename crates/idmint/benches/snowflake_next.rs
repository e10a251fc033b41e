//! `snowflake_next`: snowflake ids per second of one node beside the layout's own limit
//! (`(max_sequence + 1) × units per second`: 4 096 000 ids/s for 41/10/12), on 1 and 2
//! threads, over `SECONDS` of wall time each, in one run. The limit is the baseline: a
//! generator can at best exhaust every sequence of every millisecond. Results:
//! docs/PERFORMANCE.md.
//!
//! The cached generator (a ring of pre-made ids on borrowed time) is measured in rounds on
//! fresh rings, each beside a bare `AtomicU64::fetch_add` on as many threads in the same run;
//! the summary lines give the median, spread and rejected takes. Baidu uid-generator's
//! CachedUidGenerator is measured beside it by `scripts/bench-ring` (a JDK model of its take,
//! `scripts/peers/CachedUid.java`).
//!
//! Run: `cargo bench -p idmint --bench snowflake_next` (`-- cached`: the cached variants only).

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
    // `-- cached` runs the cached variants only (what scripts/bench-ring runs).
    if std::env::args().skip(1).any(|arg| arg == "cached") {
        cached(&runtime);
        return;
    }
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
        }
    }
    cached(&runtime);
}

/// Rounds of the cached variants, each on a fresh ring; the summary gives their median.
const CACHED_ROUNDS: usize = 11;

/// Length of one cached round. Short because a burst may borrow at most the ring's lead
/// (10 s) of time: at 4 096 ids a millisecond, `t` seconds of takes get at most
/// 4 096 000 × (10 + t) ids, so a round of 0.1 s measures the take up to 414 M ids/s (above a
/// bare `fetch_add` here), where a 1 s round measures the lead bound from 45 M ids/s on (the
/// old bench's 1-thread figure was that bound).
const CACHED_ROUND: Duration = Duration::from_millis(100);

/// Longest wait for a fresh ring to fill before a round.
const FULL_WAIT: Duration = Duration::from_secs(5);

/// The cached generator beside a bare atomic, in rounds interleaved on 1 and 2 threads.
fn cached(runtime: &tokio::runtime::Runtime) {
    let layout = Layout::preset("snowflake").expect("preset");
    let capacity = idmint::snowflake::limits::CACHED_RING_CAPACITY_DEFAULT;
    // A fresh generator (its own worker id) per round, so one round's borrowed time does
    // not count against the next one's lead bound.
    let start = |worker: u64| {
        let mut config = SnowflakeConfig::new("cached", layout);
        config.worker = WorkerIdSource::Static(worker);
        // The generator's own borrowing lead as high as the ring's, so its time mark lets the
        // ring run its whole lead: with the default 0 the mark, and so the ring, stays
        // `time_window_ms` ahead (docs/configuration.md, `snowflake.ring_max_lead_ms`).
        config.borrow_max_lead_ms = Some(10_000);
        runtime.block_on(async {
            let generator =
                Snowflake::start(None, config, Arc::new(SystemClock)).await.expect("start");
            CachedSnowflake::start(generator, capacity, 10_000).expect("cached")
        })
    };
    let mut rejected = 0;
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut floors: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    println!();
    println!("| round | threads | cached ids/s | bare fetch_add ids/s | cached / fetch_add |");
    println!("|---:|---:|---:|---:|---:|");
    let mut worker = 10;
    for round in 1..=CACHED_ROUNDS {
        for threads in [1usize, 2] {
            let counter = Arc::new(AtomicU64::new(0));
            let atomic = rate_of(threads, CACHED_ROUND, {
                let counter = Arc::clone(&counter);
                move || Some(counter.fetch_add(1, Ordering::Relaxed))
            });
            worker += 1;
            let cached = start(worker);
            // Timed from a full ring, as uid-generator's init fills its ring before the first
            // take.
            let waited = Instant::now();
            while cached.len() < capacity && waited.elapsed() < FULL_WAIT {
                std::thread::sleep(Duration::from_millis(1));
            }
            let taker = Arc::clone(&cached);
            let rate = rate_of(threads, CACHED_ROUND, move || taker.take().expect("take"));
            rejected += cached.rejected();
            runtime.block_on(cached.shutdown());
            println!("| {round} | {threads} | {rate:.0} | {atomic:.0} | {:.3} |", rate / atomic);
            rates[threads - 1].push(rate);
            floors[threads - 1].push(atomic);
        }
    }
    for threads in [1usize, 2] {
        let (rate, floor) = (&mut rates[threads - 1], &mut floors[threads - 1]);
        let (median, min, max) = spread(rate);
        let (floor_median, _, _) = spread(floor);
        println!(
            "cached-summary threads={threads} rounds={CACHED_ROUNDS} median_ids_per_s={median:.0} \
             min={min:.0} max={max:.0} fetch_add_median={floor_median:.0} ratio_to_fetch_add={:.3}",
            median / floor_median
        );
    }
    // What the lead bound lets a round take: above it a round measures the bound, not the
    // take.
    let round_s = CACHED_ROUND.as_secs_f64();
    let lead_cap = layout.ids_per_second_limit() as f64 * (10.0 + round_s) / round_s;
    println!("lead bound: a {round_s} s round can take at most {lead_cap:.0} ids/s");
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
