//! `seq_next`: sequence ids per second from one node, single (`count=1`) and batched
//! (`count=100`), beside `redis-benchmark` running `INCR` on the same Redis in the same run
//! (the bare cost of one Redis round trip per request, non-pipelined, same concurrency).
//! Results: docs/PERFORMANCE.md.
//!
//! Run: `cargo bench -p idmint --features redis --bench seq_next` with the Redis at
//! `IDMINT_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`); keys go under a fresh prefix
//! and are deleted afterwards (the `INCR` key too).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idmint::SystemClock;
use idmint::sequence::SequenceConfig;
use idmint::store::{MemoryStore, SequenceSpec, SequenceStore};
use idmint::{Sequences, Tag};
use idmint_store::CounterStore;
use idmint_store::redis::{RedisCounters, RedisUrl};

/// Concurrent clients, for idmint and redis-benchmark alike.
const CLIENTS: usize = 50;
/// Seconds each idmint variant runs.
const SECONDS: u64 = 3;

fn main() {
    let url = std::env::var("IDMINT_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("rt");
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos();
    let prefix = format!("idmint_bench{nanos}:");
    let (host, port) = host_port(&url);

    let incr_key = format!("{prefix}incr");
    let baseline = redis_benchmark(&host, &port, &incr_key);
    println!("| measurement | clients | requests/s | ids/s | × redis-benchmark INCR |");
    println!("|---|---:|---:|---:|---:|");
    println!("| redis-benchmark `INCR` | {CLIENTS} | {baseline:.0} | {baseline:.0} | 1.00 |");

    runtime.block_on(async {
        let store: Arc<dyn SequenceStore> = Arc::new(MemoryStore::new());
        let redis = RedisUrl::parse(&url).expect("url").with_prefix(&prefix).expect("prefix");
        let counters: Arc<dyn CounterStore> =
            Arc::new(RedisCounters::connect(&redis).await.expect("redis"));
        let node = Sequences::start(
            store,
            Arc::clone(&counters),
            Arc::new(SystemClock),
            SequenceConfig::default(),
        ).expect("sequences");
        let spec = SequenceSpec {
            name: Tag::parse("bench").expect("tag"),
            daily: false,
            format: None,
            time_zone: "UTC".to_string(),
            created_ms: 0,
        };
        node.create(spec).await.expect("create");
        for count in [1u64, 100] {
            let waits_before = node.waits();
            let (requests, ids, waits_after_1s) = measure(&node, count).await;
            println!(
                "| idmint sequence, count={count} | {CLIENTS} | {requests:.0} | {ids:.0} | {:.2} (ids {:.1}) |",
                requests / baseline,
                ids / baseline
            );
            println!(
                "  waits for a raise: {} in the first second, {} after",
                waits_after_1s - waits_before,
                node.waits() - waits_after_1s
            );
        }
        println!("reseeds: {}, raises: {}", node.reseeds(), node.raises());
        node.delete(&Tag::parse("bench").expect("tag")).await.expect("delete");
        node.shutdown().await;
    });
    let _ = Command::new("redis-cli").args(["-h", &host, "-p", &port, "DEL", &incr_key]).output();
}

/// Requests and ids per second of `CLIENTS` tasks asking for `count` ids each time, and the
/// node's wait count one second in.
async fn measure(node: &Arc<Sequences>, count: u64) -> (f64, f64, u64) {
    let name = Tag::parse("bench").expect("tag");
    let requests = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (node, name, requests) = (Arc::clone(node), name.clone(), Arc::clone(&requests));
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    node.next(&name, count).await.expect("ids");
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waits_after_1s = node.waits();
    for task in tasks {
        task.await.expect("task");
    }
    let per_s = requests.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    (per_s, per_s * count as f64, waits_after_1s)
}

/// `redis-benchmark` `INCR` of one key: requests per second.
fn redis_benchmark(host: &str, port: &str, key: &str) -> f64 {
    let output = Command::new("redis-benchmark")
        .args(["-h", host, "-p", port, "-c", &CLIENTS.to_string(), "-n", "200000", "-q"])
        .args(["INCR", key])
        .output()
        .expect("redis-benchmark is installed (Debian package redis-tools)");
    let text = String::from_utf8_lossy(&output.stdout);
    // The last line: "INCR idmint_bench…: 91234.56 requests per second, p50=…".
    let line = text.rsplit(['\r', '\n']).find(|l| l.contains("requests per second"));
    line.and_then(|l| l.split(": ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot read redis-benchmark's output: {text}"))
}

fn host_port(url: &str) -> (String, String) {
    let rest = url.trim_start_matches("redis://");
    let authority = rest.split(['/', '?']).next().unwrap_or("127.0.0.1:6379");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = authority.split_once(':').unwrap_or((authority, "6379"));
    (host.to_string(), port.to_string())
}
