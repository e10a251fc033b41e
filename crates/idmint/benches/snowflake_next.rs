//! `snowflake_next`: snowflake ids per second of one node beside the layout's own limit
//! (`(max_sequence + 1) × units per second`: 4 096 000 ids/s for 41/10/12), on 1 and 2
//! threads, over `SECONDS` of wall time each, in one run. The limit is the baseline: a
//! generator can at best exhaust every sequence of every millisecond. Results:
//! docs/PERFORMANCE.md.
//!
//! Run: `cargo bench -p idmint --bench snowflake_next`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idmint::{Snowflake, SnowflakeConfig, SystemClock, WorkerIdSource};
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
