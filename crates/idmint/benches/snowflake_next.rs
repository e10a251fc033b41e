//! `snowflake_next`: snowflake ids per second of one node beside the layout's own limit
//! (`(max_sequence + 1) × units per second`: 4 096 000 ids/s for 41/10/12), on 1 and 2
//! threads, over `SECONDS` of wall time each, in one run. The limit is the baseline: a
//! generator can at best exhaust every sequence of every millisecond. Results:
//! docs/PERFORMANCE.md.
//!
//! The cached generator (a ring of pre-made ids on borrowed time) is measured the same way,
//! beside a bare `AtomicU64::fetch_add` in the same run and Baidu's CachedUidGenerator
//! figure for this machine from the issue (≈ 5.3 M ids/s on 1 thread; no JVM here to rerun
//! it).
//!
//! Run: `cargo bench -p idmint --bench snowflake_next`.

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

/// Baidu's CachedUidGenerator on this machine, 1 thread (from the issue).
const BAIDU_CACHED_IDS_PER_S: f64 = 5.3e6;

/// The cached generator beside a bare atomic and Baidu's figure.
fn cached(runtime: &tokio::runtime::Runtime) {
    let layout = Layout::preset("snowflake").expect("preset");
    // A fresh generator (its own worker id) per variant, so one variant's borrowed time
    // does not count against the next one's lead bound.
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
            CachedSnowflake::start(
                generator,
                idmint::snowflake::limits::CACHED_RING_CAPACITY_DEFAULT,
                10_000,
            )
            .expect("cached")
        })
    };
    let mut rejected = 0;
    println!();
    println!(
        "| cached generator | threads | ids/s | bare fetch_add ids/s | × Baidu CachedUidGenerator (5.3 M/s) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for threads in [1usize, 2] {
        let counter = Arc::new(AtomicU64::new(0));
        let atomic = rate_of(threads, Duration::from_secs(1), {
            let counter = Arc::clone(&counter);
            move || Some(counter.fetch_add(1, Ordering::Relaxed))
        });
        let cached = start(10 + threads as u64);
        let taker = Arc::clone(&cached);
        // One second: at this rate borrowed time runs a few seconds ahead of the clock,
        // within the 10 s lead bound.
        let rate = rate_of(threads, Duration::from_secs(1), move || taker.take().expect("take"));
        rejected += cached.rejected();
        println!(
            "| snowflake layout | {threads} | {rate:.0} | {atomic:.0} | {:.1} |",
            rate / BAIDU_CACHED_IDS_PER_S
        );
    }
    println!("rejected takes: {rejected}");
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
