//! `refill`: segment allocations per second through a node (the library's `Segments`, with
//! its marks file in a state directory on disk, as `idmint serve` runs), beside the raw
//! allocation statements run by the database's own benchmark tool in the same round.
//!
//! ```text
//! flock /tmp/idmint-bench.lock scripts/bench-refill        # the driver: builds, runs, prints
//! cargo bench -p idmint --bench refill --features mysql,postgres -- [ROUNDS] [SECONDS]
//! ```
//!
//! Each engine gets a fresh database (`idmint_bench_refill`, dropped at the end) on the
//! servers `IDMINT_TEST_MYSQL_URL` and `IDMINT_TEST_POSTGRES_URL` name (else the local
//! defaults). Every tag has step 1 and the adaptive step is off, so every id is one store
//! allocation and one refill. Per round and engine:
//!
//! - raw, 4 clients: `mariadb-slap` / `pgbench` running Leaf's allocation, `UPDATE leaf_alloc
//!   SET max_id = max_id + step WHERE biz_tag = T; SELECT max_id, step FROM leaf_alloc WHERE
//!   biz_tag = T`, each client going through 4 tags in turn; raw, 1 client on 1 tag;
//! - node, 4 tags × 4 clients (tasks taking `next_id` in a loop) and 1 tag × 1 client.
//!
//! Allocations are counted from the rows (the growth of `max_id`), so the raw figures do not
//! depend on how a tool counts statements. Prints the ratios and `uptime` per round.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idmint::Segments;
use idmint::segment::SegmentConfig;
use idmint_core::{StartId, Step, Tag};
use idmint_store::{SegmentStore, StoreUrl, TagSpec};
use sqlx::Connection;

/// The benchmark's database on each server, made fresh and dropped after.
const DATABASE: &str = "idmint_bench_refill";
/// Rounds and seconds per measurement unless given as arguments.
const ROUNDS_DEFAULT: u32 = 3;
const SECONDS_DEFAULT: u64 = 5;
/// Tags and clients per tag of the concurrent case.
const TAGS: usize = 4;
const CLIENTS_PER_TAG: usize = 4;

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    MariaDb,
    Postgres,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::MariaDb => "MariaDB",
            Engine::Postgres => "PostgreSQL",
        }
    }

    /// The server's URL (the test services' variable, else the local default), without a
    /// database.
    fn server(self) -> String {
        let (var, default) = match self {
            Engine::MariaDb => ("IDMINT_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
            Engine::Postgres => {
                ("IDMINT_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
            }
        };
        std::env::var(var).unwrap_or_else(|_| default.to_string())
    }

    /// The benchmark database's URL.
    fn url(self) -> String {
        let server = self.server();
        let base = server.split('?').next().unwrap_or_default();
        let (root, _db) = base.rsplit_once('/').expect("a URL with a database");
        format!("{root}/{DATABASE}")
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rounds = args.first().and_then(|a| a.parse().ok()).unwrap_or(ROUNDS_DEFAULT);
    let seconds = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(SECONDS_DEFAULT);
    let run = Duration::from_secs(seconds);
    let state_root = state_root();
    println!("refill: step 1, adaptive step off, marks in {}", state_root.display());
    println!(
        "| round | engine | raw 4 clients/s | node 4x4/s | ratio | raw 1 client/s | node 1x1/s | ratio | load |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    let mut ratios: Vec<(Engine, f64, f64)> = Vec::new();
    for engine in [Engine::MariaDb, Engine::Postgres] {
        fresh_database(engine).await;
        let store =
            idmint_store::open(&StoreUrl::parse(&engine.url()).expect("url")).await.expect("open");
        let raw_tags = create_tags(&*store, "raw").await;
        for round in 1..=rounds {
            let load = uptime();
            let raw4 = raw(engine, &store, &raw_tags, TAGS, run).await;
            let node4 = through_node(&store, &state_root, &format!("n{round}x4"), TAGS, run).await;
            let raw1 = raw(engine, &store, &raw_tags[..1], 1, run).await;
            let node1 = through_node(&store, &state_root, &format!("n{round}x1"), 1, run).await;
            let (r4, r1) = (node4 / raw4, node1 / raw1);
            println!(
                "| {round} | {} | {raw4:.0} | {node4:.0} | {r4:.2} | {raw1:.0} | {node1:.0} | {r1:.2} | {load} |",
                engine.name()
            );
            ratios.push((engine, r4, r1));
        }
        drop(store);
        drop_database(engine).await;
    }
    for engine in [Engine::MariaDb, Engine::Postgres] {
        let mut r4: Vec<f64> = ratios.iter().filter(|r| r.0 == engine).map(|r| r.1).collect();
        let mut r1: Vec<f64> = ratios.iter().filter(|r| r.0 == engine).map(|r| r.2).collect();
        println!(
            "{}: median ratio 4x4 {:.2} (target >= 0.7), 1x1 {:.2} (target >= 0.5)",
            engine.name(),
            median(&mut r4),
            median(&mut r1)
        );
    }
    let _ = std::fs::remove_dir_all(&state_root);
}

/// Allocations per second through a fresh `Segments` with its own state directory: `tags`
/// new tags of step 1, `CLIENTS_PER_TAG` tasks each taking ids for `run`.
async fn through_node(
    store: &Arc<dyn SegmentStore>,
    state_root: &std::path::Path,
    prefix: &str,
    tags: usize,
    run: Duration,
) -> f64 {
    let names = create_tags(&**store, prefix).await;
    let names = &names[..tags];
    let state_dir = state_root.join(prefix);
    let config =
        SegmentConfig::default().with_adaptive_step(false).with_state_dir(state_dir.clone());
    let segments = Segments::start(Arc::clone(store), config).expect("start");
    let clients = if tags == 1 { 1 } else { CLIENTS_PER_TAG };
    let before = max_ids(store, names).await;
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + run;
    let mut tasks = Vec::new();
    for tag in names {
        for _ in 0..clients {
            let (segments, tag, done) = (Arc::clone(&segments), tag.clone(), Arc::clone(&done));
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    segments.next_id(&tag).await.expect("next_id");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let allocated = max_ids(store, names).await - before;
    let served = done.load(Ordering::Relaxed);
    segments.shutdown().await;
    drop(segments);
    let _ = std::fs::remove_dir_all(&state_dir);
    // Ids served, not ranges allocated: a range still in the buffer at the end was not
    // served (at step 1, one or two per tag).
    assert!(served <= allocated, "served {served} ids of {allocated} allocated");
    served as f64 / elapsed
}

/// Allocations per second of the raw statements with `clients` clients over `tags`.
async fn raw(
    engine: Engine,
    store: &Arc<dyn SegmentStore>,
    tags: &[Tag],
    clients: usize,
    run: Duration,
) -> f64 {
    let before = max_ids(store, tags).await;
    let seconds = match engine {
        Engine::MariaDb => slap(engine, tags, clients, run),
        Engine::Postgres => pgbench(engine, tags, clients, run),
    };
    let allocated = max_ids(store, tags).await - before;
    allocated as f64 / seconds
}

/// The statements of one allocation of each tag, in turn, one per line.
fn statements(tags: &[Tag]) -> String {
    tags.iter()
        .map(|tag| {
            format!(
                "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = '{tag}';\n\
                 SELECT max_id, step FROM leaf_alloc WHERE biz_tag = '{tag}';\n"
            )
        })
        .collect()
}

/// `mariadb-slap` (or `mysqlslap`): `clients` clients running the statements until about
/// `run` passed; the seconds it reports for its queries (connections excluded).
fn slap(engine: Engine, tags: &[Tag], clients: usize, run: Duration) -> f64 {
    let url = engine.url();
    let rest = url.split_once("://").expect("url").1;
    let (auth, location) = rest.split_once('@').expect("user@host");
    let user = auth.split(':').next().unwrap_or("root");
    let hostport = location.split('/').next().unwrap_or_default();
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "3306"));
    // Sized from a short calibration so a run lasts about `run`.
    let tool = if which("mariadb-slap") { "mariadb-slap" } else { "mysqlslap" };
    let query = statements(tags).replace(";\n", ";");
    let query = query.trim_end_matches(';');
    let go = |queries: u64| -> f64 {
        let output = Command::new(tool)
            .args([
                &format!("--user={user}"),
                &format!("--host={host}"),
                &format!("--port={port}"),
                &format!("--create-schema={DATABASE}"),
                &format!("--concurrency={clients}"),
                &format!("--number-of-queries={queries}"),
                "--iterations=1",
                // The schema is the benchmark's: the tool must not drop it after its run.
                "--no-drop",
                &format!("--query={query}"),
            ])
            .output()
            .expect("run the slap tool");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && !stderr.contains("ERROR"), "{tool}: {stderr}");
        let text = String::from_utf8_lossy(&output.stdout);
        text.lines()
            .find(|l| l.contains("Average number of seconds to run all queries"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|s| s.trim().trim_end_matches(" seconds").parse::<f64>().ok())
            .expect("the tool's seconds")
    };
    let probe = 2_000u64;
    let rate = probe as f64 / go(probe).max(1e-3);
    let queries = ((rate * run.as_secs_f64()) as u64).max(probe);
    go(queries)
}

/// `pgbench`: `clients` clients running the statements for `run`; its seconds.
fn pgbench(engine: Engine, tags: &[Tag], clients: usize, run: Duration) -> f64 {
    let script = std::env::temp_dir().join(format!("idmint-refill-{}.sql", std::process::id()));
    std::fs::write(&script, statements(tags)).expect("script");
    let output = Command::new("pgbench")
        .args([
            "-n",
            "-f",
            script.to_str().expect("utf-8 path"),
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(2).to_string(),
            "-T",
            &run.as_secs().to_string(),
            &engine.url(),
        ])
        .output()
        .expect("run pgbench");
    let _ = std::fs::remove_file(&script);
    assert!(output.status.success(), "pgbench: {}", String::from_utf8_lossy(&output.stderr));
    run.as_secs_f64()
}

/// `TAGS` tags of step 1 named `{prefix}{i}`, created in the store.
async fn create_tags(store: &dyn SegmentStore, prefix: &str) -> Vec<Tag> {
    let mut tags = Vec::new();
    for i in 0..TAGS {
        let tag = Tag::parse(&format!("{prefix}{i}")).expect("tag");
        let spec = TagSpec {
            tag: tag.clone(),
            step: Step::new(1).expect("step"),
            start: Some(StartId::DEFAULT),
            force: false,
            description: Default::default(),
        };
        store.create_tag(&spec).await.expect("create the tag");
        tags.push(tag);
    }
    tags
}

/// The sum of the tags' `max_id`: at step 1, the allocations made.
async fn max_ids(store: &Arc<dyn SegmentStore>, tags: &[Tag]) -> u64 {
    let mut sum = 0;
    for tag in tags {
        sum += store.get_tag(tag).await.expect("read").expect("the row").max_id;
    }
    sum
}

async fn fresh_database(engine: Engine) {
    drop_database(engine).await;
    admin(engine, &format!("CREATE DATABASE {DATABASE}")).await;
}

async fn drop_database(engine: Engine) {
    let statement = match engine {
        Engine::MariaDb => format!("DROP DATABASE IF EXISTS {DATABASE}"),
        Engine::Postgres => format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
    };
    admin(engine, &statement).await;
}

/// Runs `statement` on the server's own database.
async fn admin(engine: Engine, statement: &str) {
    let server = engine.server();
    let statement = sqlx::AssertSqlSafe(statement.to_string());
    match engine {
        Engine::MariaDb => {
            let mut conn = sqlx::MySqlConnection::connect(&server).await.expect("connect");
            sqlx::raw_sql(statement).execute(&mut conn).await.expect("admin statement");
        }
        Engine::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&server).await.expect("connect");
            sqlx::raw_sql(statement).execute(&mut conn).await.expect("admin statement");
        }
    }
}

/// Where the nodes' state directories go: on the disk the build is on (not a tmpfs, whose
/// fsync costs nothing), or `IDMINT_TEST_BENCH_STATE_DIR`.
fn state_root() -> PathBuf {
    let root =
        std::env::var_os("IDMINT_TEST_BENCH_STATE_DIR").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-refill-state")
        });
    std::fs::create_dir_all(&root).expect("state root");
    root
}

fn which(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn uptime() -> String {
    let out = Command::new("uptime").output().map(|o| o.stdout).unwrap_or_default();
    let text = String::from_utf8_lossy(&out);
    text.split("load average:").nth(1).map_or(text.trim().to_string(), |l| l.trim().to_string())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
