//! The oracle benchmark of `scripts/bench-strict` (issue 35): timestamps per second from
//! idmint's gRPC `Tso` beside tsoracle's client (`get_ts`, `get_ts_batch`), same run, same
//! callers, interleaved rounds. It starts no server: the script gives it both addresses.
//!
//! ```text
//! bench-tso --idmint http://127.0.0.1:P --tsoracle http://127.0.0.1:Q \
//!     [--counts 1,1000] [--callers 1,32] [--seconds 3] [--rounds 5]
//! ```
//!
//! Every caller is a task calling in a loop on one shared client (idmint: one tonic channel,
//! one RPC per call; tsoracle: one `Client`, which coalesces concurrent calls into one RPC).
//! Each caller checks that every answer is above its last, so a broken oracle fails the run.
//! Prints every round with the 1-minute load after it, then the medians and the ratios.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idmint_proto::v1::TsoRequest;
use idmint_proto::v1::id_mint_client::IdMintClient;
use tonic::transport::Channel;

/// What one measurement ran against.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Target {
    Idmint,
    Tsoracle,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Idmint => "idmint Tso",
            Target::Tsoracle => "tsoracle",
        }
    }
}

/// Both clients, shared by every caller.
#[derive(Clone)]
struct Clients {
    idmint: IdMintClient<Channel>,
    tsoracle: Arc<tsoracle_client::Client>,
}

struct Args {
    idmint: String,
    tsoracle: String,
    counts: Vec<u32>,
    callers: Vec<usize>,
    seconds: u64,
    rounds: usize,
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let channel = Channel::from_shared(args.idmint.clone())
        .expect("a valid idmint URL")
        .connect()
        .await
        .unwrap_or_else(|e| fail(&format!("idmint at {}: {e}", args.idmint)));
    let tsoracle = tsoracle_client::Client::connect(vec![args.tsoracle.clone()])
        .await
        .unwrap_or_else(|e| fail(&format!("tsoracle at {}: {e}", args.tsoracle)));
    let clients = Clients { idmint: IdMintClient::new(channel), tsoracle: Arc::new(tsoracle) };
    println!("load before: {:.2}", load1());
    // Warm-up: both servers and clients, every shape, once, not counted.
    for &count in &args.counts {
        for &callers in &args.callers {
            for target in [Target::Idmint, Target::Tsoracle] {
                measure(&clients, target, count, callers, Duration::from_secs(1)).await;
            }
        }
    }
    let mut results: BTreeMap<(u32, usize, Target), Vec<f64>> = BTreeMap::new();
    let mut loads = Vec::new();
    for round in 1..=args.rounds {
        for &count in &args.counts {
            for &callers in &args.callers {
                // Interleaved: the order reversed every other round.
                let mut order = [Target::Idmint, Target::Tsoracle];
                if round % 2 == 0 {
                    order.reverse();
                }
                for target in order {
                    let seconds = Duration::from_secs(args.seconds);
                    let rate = measure(&clients, target, count, callers, seconds).await;
                    let load = load1();
                    loads.push(load);
                    println!(
                        "round {round} count {count:>4} callers {callers:>3} {:<10} \
                         {rate:>13.0} timestamps/s  load {load:.2}",
                        target.name()
                    );
                    results.entry((count, callers, target)).or_default().push(rate);
                }
            }
        }
    }
    report(&results, &loads, &args);
}

/// Timestamps per second of `callers` tasks taking batches of `count` from `target` for
/// `seconds`.
async fn measure(
    clients: &Clients,
    target: Target,
    count: u32,
    callers: usize,
    seconds: Duration,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (clients, stop) = (clients.clone(), Arc::clone(&stop));
            tokio::spawn(async move { caller(clients, target, count, stop).await })
        })
        .collect();
    tokio::time::sleep(seconds).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0u64;
    for task in tasks {
        total += task.await.unwrap_or_else(|e| fail(&format!("a caller panicked: {e}")));
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// One caller: takes until `stop`, checking every answer is above its last; returns how
/// many timestamps it took.
async fn caller(clients: Clients, target: Target, count: u32, stop: Arc<AtomicBool>) -> u64 {
    let (mut last, mut taken) = (0u64, 0u64);
    let Clients { mut idmint, tsoracle } = clients;
    while !stop.load(Ordering::Relaxed) {
        let (first, end) = match target {
            Target::Idmint => {
                let request = TsoRequest { count: u64::from(count) };
                let answer = idmint.tso(request).await.unwrap_or_else(|e| {
                    fail(&format!("idmint Tso: {e}"));
                });
                let answer = answer.into_inner();
                if answer.count != u64::from(count) {
                    fail(&format!("idmint answered {} timestamps for {count}", answer.count));
                }
                (answer.first, answer.first + answer.count - 1)
            }
            Target::Tsoracle if count == 1 => {
                let ts = tsoracle.get_ts().await.unwrap_or_else(|e| fail(&format!("get_ts: {e}")));
                (ts.0, ts.0)
            }
            Target::Tsoracle => {
                let batch = tsoracle
                    .get_ts_batch(count)
                    .await
                    .unwrap_or_else(|e| fail(&format!("get_ts_batch: {e}")));
                if batch.len() != count as usize {
                    fail(&format!("tsoracle answered {} timestamps for {count}", batch.len()));
                }
                (batch[0].0, batch[batch.len() - 1].0)
            }
        };
        if first <= last {
            fail(&format!("{}: {first} after {last}", target.name()));
        }
        last = end;
        taken += u64::from(count);
    }
    taken
}

/// The medians, ranges and ratios as a Markdown table.
fn report(results: &BTreeMap<(u32, usize, Target), Vec<f64>>, loads: &[f64], args: &Args) {
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
    };
    let low = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let high = loads.iter().copied().fold(0.0, f64::max);
    println!();
    println!(
        "{} rounds of {} s per row; load {low:.2} - {high:.2}; load after: {:.2}",
        args.rounds,
        args.seconds,
        load1()
    );
    println!(
        "| count | callers | idmint Tso, timestamps/s (range) | tsoracle (range) | idmint / tsoracle |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for &count in &args.counts {
        for &callers in &args.callers {
            let ours = &results[&(count, callers, Target::Idmint)];
            let theirs = &results[&(count, callers, Target::Tsoracle)];
            let range = |v: &[f64]| {
                let (lo, hi) = (
                    v.iter().copied().fold(f64::INFINITY, f64::min),
                    v.iter().copied().fold(0.0, f64::max),
                );
                format!("{lo:.0} - {hi:.0}")
            };
            println!(
                "| {count} | {callers} | {:.0} ({}) | {:.0} ({}) | {:.2} |",
                median(ours),
                range(ours),
                median(theirs),
                range(theirs),
                median(ours) / median(theirs)
            );
        }
    }
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn parse_args() -> Args {
    let mut args = Args {
        idmint: String::new(),
        tsoracle: String::new(),
        counts: vec![1, 1000],
        callers: vec![1, 32],
        seconds: 3,
        rounds: 5,
    };
    let list = |text: &str| -> Vec<u64> {
        text.split(',')
            .map(|v| v.parse().unwrap_or_else(|_| fail(&format!("not a number: {v}"))))
            .collect()
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--idmint" => args.idmint = value,
            "--tsoracle" => args.tsoracle = value,
            "--counts" => args.counts = list(&value).into_iter().map(|v| v as u32).collect(),
            "--callers" => args.callers = list(&value).into_iter().map(|v| v as usize).collect(),
            "--seconds" => args.seconds = list(&value)[0],
            "--rounds" => args.rounds = list(&value)[0] as usize,
            _ => fail(&format!("unknown flag {flag}")),
        }
    }
    if args.idmint.is_empty() || args.tsoracle.is_empty() {
        fail("--idmint URL and --tsoracle URL are required");
    }
    args
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}
