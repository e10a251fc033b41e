//! `client_rounds`: the Rust client's ids per second from its local ranges, against an idmint
//! server that is already running, in sustained rounds printed the way the peers' harnesses
//! print theirs (scripts/peers/harness/PeerRounds.java), so that scripts/bench-client can set
//! it beside Tinyid's Java client `TinyId.nextId` on the same server in the same run.
//!
//! Run: `cargo bench -p idmint-client --bench client_rounds -- --server URL [--tag bench]
//! [--threads 1,2] [--seconds 2] [--rounds 5] [--warmup 5] [--load-max L]`.
//!
//! One client (`Client::connect`, its leases over gRPC on a runtime of [`CLIENT_WORKERS`]
//! worker) takes from the tag in two ways, each on every thread count: `by_name`,
//! `Client::next_id(tag).await` (the tag named per call, as `TinyId.nextId(bizType)` names
//! it), and `handle`, `TagIds::next_id().await` on a handle. Per way and thread count: an
//! untimed warm-up (the client's first leases are small until it has measured a rate), then
//! rounds of at least `--seconds`; each taking thread `block_on`s one loop per round and reads
//! the clock every [`BATCH`] ids. Every id is checked to be above the thread's previous one.
//! Lines (one per round, then one per way and thread count):
//!   round peer=idmint_client_WAY threads=T n=N seconds=S ids=I ids_per_s=R rejected=0
//!     not_increasing=K load1=L noisy=0|1
//!   summary peer=idmint_client_WAY threads=T rounds=N kept=M median_ids_per_s=R min=A max=B
//!     rejected=0 all_noisy=0|1
//! A round whose 1-minute load average ends above `--load-max` (default: cores + 1) is noisy
//! and left out of the median (all count when all are noisy).

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use idmint_client::Client;
use tokio::runtime::Runtime;

/// Workers of the client's runtime (its lease calls and refills), as in `client_grpc`; the
/// taking threads are outside it.
const CLIENT_WORKERS: usize = 1;
/// Takes between two clock reads.
const BATCH: u64 = 4096;
/// Longest round or warm-up accepted, against a mistyped `--seconds`.
const ROUND_SECONDS_MAX: f64 = 600.0;

/// What the command line asks for.
struct Options {
    server: String,
    tag: String,
    threads: Vec<usize>,
    seconds: f64,
    rounds: usize,
    warmup: f64,
    load_max: f64,
}

/// How a round takes its ids.
#[derive(Clone, Copy)]
enum Way {
    /// `Client::next_id(tag).await`, the tag named per call.
    ByName,
    /// `TagIds::next_id().await` on a handle.
    Handle,
}

/// One thread's count in one round.
struct Taken {
    ids: u64,
    not_increasing: u64,
    elapsed: Duration,
}

fn main() -> anyhow::Result<()> {
    let options = options()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CLIENT_WORKERS)
        .thread_name("client")
        .enable_all()
        .build()?;
    let client = runtime
        .block_on(Client::connect([options.server.as_str()]))
        .context("connecting to the server")?;
    for (way, name) in [(Way::ByName, "by_name"), (Way::Handle, "handle")] {
        for &threads in &options.threads {
            run(&runtime, &client, &options, way, name, threads)?;
        }
    }
    runtime.block_on(client.close());
    Ok(())
}

/// The warm-up, the rounds and the summary of one way on one thread count.
fn run(
    runtime: &Runtime,
    client: &Client,
    options: &Options,
    way: Way,
    name: &str,
    threads: usize,
) -> anyhow::Result<()> {
    round(runtime, client, &options.tag, way, threads, options.warmup)?;
    let mut rates = Vec::new();
    for n in 1..=options.rounds {
        let taken = round(runtime, client, &options.tag, way, threads, options.seconds)?;
        let ids: u64 = taken.iter().map(|t| t.ids).sum();
        let not_increasing: u64 = taken.iter().map(|t| t.not_increasing).sum();
        let seconds = taken.iter().map(|t| t.elapsed).max().unwrap_or_default().as_secs_f64();
        let rate = ids as f64 / seconds;
        let load = load1();
        let noisy = load > options.load_max;
        rates.push((rate, noisy));
        println!(
            "round peer=idmint_client_{name} threads={threads} n={n} seconds={seconds:.3} \
             ids={ids} ids_per_s={rate:.0} rejected=0 not_increasing={not_increasing} \
             load1={load:.2} noisy={}",
            u8::from(noisy)
        );
    }
    let mut kept: Vec<f64> = rates.iter().filter(|(_, noisy)| !noisy).map(|(r, _)| *r).collect();
    let all_noisy = kept.is_empty();
    if all_noisy {
        kept = rates.iter().map(|(r, _)| *r).collect();
    }
    kept.sort_by(f64::total_cmp);
    let k = kept.len();
    let median = if k % 2 == 1 { kept[k / 2] } else { (kept[k / 2 - 1] + kept[k / 2]) / 2.0 };
    println!(
        "summary peer=idmint_client_{name} threads={threads} rounds={} kept={} \
         median_ids_per_s={median:.0} min={:.0} max={:.0} rejected=0 all_noisy={}",
        options.rounds,
        if all_noisy { 0 } else { k },
        kept[0],
        kept[k - 1],
        u8::from(all_noisy)
    );
    Ok(())
}

/// One round: `threads` threads take for `seconds`, started together.
fn round(
    runtime: &Runtime,
    client: &Client,
    tag: &str,
    way: Way,
    threads: usize,
    seconds: f64,
) -> anyhow::Result<Vec<Taken>> {
    let barrier = Barrier::new(threads);
    let length = Duration::from_secs_f64(seconds);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<Taken> {
                    let handle = client.tag(tag)?;
                    barrier.wait();
                    runtime.block_on(async {
                        let start = Instant::now();
                        let (mut ids, mut not_increasing, mut last) = (0u64, 0u64, 0u64);
                        loop {
                            for _ in 0..BATCH {
                                let id = match way {
                                    Way::ByName => client.next_id(tag).await?,
                                    Way::Handle => handle.next_id().await?,
                                };
                                not_increasing += u64::from(id <= last);
                                last = black_box(id);
                            }
                            ids += BATCH;
                            let elapsed = start.elapsed();
                            if elapsed >= length {
                                return Ok(Taken { ids, not_increasing, elapsed });
                            }
                        }
                    })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| bail!("a taking thread panicked")))
            .collect()
    })
}

/// Reads the command line (cargo's own `--bench` flag is skipped).
fn options() -> anyhow::Result<Options> {
    let mut options = Options {
        server: String::new(),
        tag: "bench".to_string(),
        threads: vec![1, 2],
        seconds: 2.0,
        rounds: 5,
        warmup: 5.0,
        load_max: std::thread::available_parallelism().map_or(2, usize::from) as f64 + 1.0,
    };
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server" => options.server = value,
            "--tag" => options.tag = value,
            "--threads" => {
                options.threads = value
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .context("--threads")?
            }
            "--seconds" => options.seconds = value.parse().context("--seconds")?,
            "--rounds" => options.rounds = value.parse().context("--rounds")?,
            "--warmup" => options.warmup = value.parse().context("--warmup")?,
            "--load-max" => options.load_max = value.parse().context("--load-max")?,
            _ => bail!("unknown option {flag}"),
        }
    }
    ensure!(!options.server.is_empty(), "--server URL is required");
    ensure!(options.rounds >= 1, "--rounds must be at least 1");
    ensure!(!options.threads.is_empty() && !options.threads.contains(&0), "--threads: 1 or more");
    for s in [options.seconds, options.warmup] {
        ensure!(s > 0.0 && s <= ROUND_SECONDS_MAX, "round lengths: above 0, at most 600 s");
    }
    Ok(options)
}

/// The 1-minute load average, as `uptime` prints it (-1 where /proc is absent).
fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(-1.0)
}
