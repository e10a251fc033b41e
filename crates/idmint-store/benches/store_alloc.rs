//! `store_alloc`: allocations per second of each database store, and the ids/s ceiling that
//! gives at a step, beside the database's raw `UPDATE` rate measured by its own benchmark
//! tool (`mysqlslap`, `pgbench`) in the same run on the same row layout.
//!
//! ```text
//! eval "$(bash ../shared/ci/services.sh)"   # sets IDMINT_TEST_MYSQL_URL / _POSTGRES_URL
//! cargo bench -p idmint-store --bench store_alloc --features mysql,postgres
//! ```
//!
//! Each store gets a fresh database (the test kit's: on the servers those variables name,
//! else on private ones started from the installed binaries, whose figures are not the
//! shared servers'); `CLIENTS` tasks allocate for `SECONDS` on one tag, in
//! both alloc modes. The baseline runs the same statement (`UPDATE leaf_alloc SET max_id =
//! max_id + step WHERE biz_tag = 'bench'`) with the same number of clients. Interleaved
//! segment tables and Flicker ticket tables (one, and two by offset) run one tag per client,
//! as a node does (one refill at a time per tag), beside `mysqlslap` running Flickr's raw
//! `REPLACE`. Results go in docs/PERFORMANCE.md.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idmint_core::{StartId, Step, Tag};
use idmint_store::{SegmentStore, StoreUrl, TagSpec};
use sqlx::Connection;

const CLIENTS: u64 = 4;
const SECONDS: u64 = 5;
/// The step the ids/s ceiling is given for (Leaf's default step is 2000; idmint's adaptive
/// step reaches 1 000 000).
const STEPS: [u64; 2] = [1_000, 1_000_000];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "| store | mode | allocations/s | ids/s at step 1000 | ids/s at step 10^6 | raw UPDATE/s (tool) | ratio |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    if let Some((url, name)) = fresh(true).await {
        let admin = idmint_testkit::mysql::server_url().expect("the server answered before");
        let raw = mysqlslap(&admin, &name, UPDATE);
        for mode in ["update", "cas"] {
            let rate = allocations(&format!("{url}?alloc={mode}&table=t_{mode}")).await;
            row("MariaDB", mode, rate, raw, "mysqlslap");
        }
        // Two segment tables interleaved by residue: each allocation is one UPDATE on one.
        let pair = format!("{url}?table=t_even {url}?table=t_odd");
        row("MariaDB", "interleave ×2", allocations_on(&pair, CLIENTS).await, raw, "mysqlslap");
        // Flicker: one ticket is a REPLACE on the auto-increment table.
        // Concurrent REPLACEs of one stub row deadlock in InnoDB (mysqlslap's own clients
        // do), which is why a node queues its tickets per tag: the baseline is one client.
        let raw = mysqlslap_with(&admin, &name, REPLACE, 1);
        let flicker = url.replacen("mysql://", "flicker+mysql://", 1);
        let one = allocations_with(&format!("{flicker}?table=tk_solo"), 1, 1).await;
        row("MariaDB", "flicker ×1, 1 client", one, raw, "mysqlslap REPLACE, 1 client");
        let one = allocations_on(&format!("{flicker}?table=tk_one"), CLIENTS).await;
        row("MariaDB", "flicker ×1, 4 tags", one, raw, "mysqlslap REPLACE, 1 client");
        let pair = format!(
            "{flicker}?table=tk_a&increment=2&offset=1 {flicker}?table=tk_b&increment=2&offset=2"
        );
        let two = allocations_on(&pair, CLIENTS).await;
        row("MariaDB", "flicker ×2, 4 tags", two, raw, "mysqlslap REPLACE, 1 client");
    }
    if let Some((url, _name)) = fresh(false).await {
        let raw = pgbench(&url);
        for mode in ["update", "cas"] {
            let rate = allocations(&format!("{url}?alloc={mode}&table=t_{mode}")).await;
            row("PostgreSQL", mode, rate, raw, "pgbench");
        }
    }
}

fn row(store: &str, mode: &str, rate: f64, raw: Option<f64>, tool: &str) {
    let ids = |step: u64| format!("{:.2e}", rate * step as f64);
    let (raw_text, ratio) = match raw {
        Some(raw) => (format!("{raw:.0} ({tool})"), format!("{:.2}", rate / raw)),
        None => (format!("{tool} failed"), "-".to_string()),
    };
    println!(
        "| {store} | {mode} | {rate:.0} | {} | {} | {raw_text} | {ratio} |",
        ids(STEPS[0]),
        ids(STEPS[1])
    );
}

/// A fresh database of the test kit with a `leaf_alloc` row `bench` for the baseline: its
/// URL (without a query: the benchmark adds its own) and its name; `None` when there is no
/// server (the kit said so).
async fn fresh(mysql: bool) -> Option<(String, String)> {
    let url = match mysql {
        true => idmint_testkit::mysql::fresh_database("bench").await?,
        false => idmint_testkit::postgres::fresh_database("bench").await?,
    };
    let url = url.split('?').next().unwrap_or_default().to_string();
    let name = url.rsplit('/').next().unwrap_or_default().to_string();
    let table = "CREATE TABLE leaf_alloc (biz_tag varchar(128) PRIMARY KEY, max_id bigint NOT NULL, \
                 step int NOT NULL, description varchar(256), update_time timestamp)";
    let insert = "INSERT INTO leaf_alloc VALUES ('bench', 1, 1000, '', CURRENT_TIMESTAMP)";
    if mysql {
        let mut conn = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(table)).execute(&mut conn).await.expect("table");
        sqlx::raw_sql(sqlx::AssertSqlSafe(insert)).execute(&mut conn).await.expect("row");
        let tickets = "CREATE TABLE slap_tickets (id bigint unsigned NOT NULL AUTO_INCREMENT \
                       PRIMARY KEY, stub varchar(255) NOT NULL, UNIQUE KEY (stub)) ENGINE=InnoDB";
        sqlx::raw_sql(sqlx::AssertSqlSafe(tickets)).execute(&mut conn).await.expect("tickets");
    } else {
        let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(table)).execute(&mut conn).await.expect("table");
        sqlx::raw_sql(sqlx::AssertSqlSafe(insert)).execute(&mut conn).await.expect("row");
    }
    Some((url, name))
}

/// Allocations per second of `CLIENTS` tasks on one tag for `SECONDS`.
async fn allocations(url: &str) -> f64 {
    allocations_on(url, 1).await
}

/// Allocations per second of `CLIENTS` tasks for `SECONDS`, spread over `tags` tags.
async fn allocations_on(url: &str, tags: u64) -> f64 {
    allocations_with(url, tags, CLIENTS).await
}

/// Allocations per second of `clients` tasks for `SECONDS`, spread over `tags` tags.
async fn allocations_with(url: &str, tags: u64, clients: u64) -> f64 {
    let store = idmint_store::open(&StoreUrl::parse(url).expect("url")).await.expect("open");
    let mut names = Vec::new();
    for i in 0..tags {
        let tag = Tag::parse(&format!("bench{i}")).expect("tag");
        let spec = TagSpec {
            tag: tag.clone(),
            step: Step::new(1_000).expect("step"),
            start: Some(StartId::DEFAULT),
            force: false,
            description: Default::default(),
        };
        store.create_tag(&spec).await.expect("create");
        names.push(tag);
    }
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(SECONDS);
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let tag = names[(client % tags) as usize].clone();
            let (store, tag, done): (Arc<dyn SegmentStore>, _, _) =
                (Arc::clone(&store), tag, Arc::clone(&done));
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    store.allocate(&tag, None).await.expect("allocate");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Leaf's raw allocation statement.
const UPDATE: &str = "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'bench'";
/// Flickr's raw ticket statement.
const REPLACE: &str = "REPLACE INTO slap_tickets (stub) VALUES ('bench')";

/// `mysqlslap` running `query` with `CLIENTS` clients: statements per second.
fn mysqlslap(admin: &str, db: &str, query: &str) -> Option<f64> {
    mysqlslap_with(admin, db, query, CLIENTS)
}

/// `mysqlslap` running `query` with `clients` clients: statements per second.
fn mysqlslap_with(admin: &str, db: &str, query: &str, clients: u64) -> Option<f64> {
    let (user, host, port) = parts(admin)?;
    let queries = 20_000u64;
    let started = Instant::now();
    let status = Command::new("mysqlslap")
        .args([
            &format!("--user={user}"),
            &format!("--host={host}"),
            &format!("--port={port}"),
            &format!("--create-schema={db}"),
            &format!("--concurrency={clients}"),
            &format!("--number-of-queries={queries}"),
            "--iterations=1",
            &format!("--query={query}"),
        ])
        .output()
        .ok()?;
    // mysqlslap exits 0 even when a query failed; its errors are on stderr.
    if !status.status.success() || String::from_utf8_lossy(&status.stderr).contains("ERROR") {
        eprintln!("mysqlslap: {}", String::from_utf8_lossy(&status.stderr));
        return None;
    }
    // mysqlslap reports seconds; the wall time above includes its connects, so use its own.
    let text = String::from_utf8_lossy(&status.stdout);
    let seconds = text
        .lines()
        .find(|l| l.contains("Average number of seconds to run all queries"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|s| s.trim().trim_end_matches(" seconds").parse::<f64>().ok())
        .unwrap_or_else(|| started.elapsed().as_secs_f64());
    Some(queries as f64 / seconds)
}

/// `pgbench` running the raw UPDATE with `CLIENTS` clients for `SECONDS`: transactions/s.
fn pgbench(url: &str) -> Option<f64> {
    let script = std::env::temp_dir().join(format!("idmint-pgbench-{}.sql", std::process::id()));
    std::fs::write(
        &script,
        "UPDATE leaf_alloc SET max_id = max_id + step WHERE biz_tag = 'bench';\n",
    )
    .ok()?;
    let output = Command::new("pgbench")
        .args([
            "-n",
            "-f",
            script.to_str()?,
            "-c",
            &CLIENTS.to_string(),
            "-j",
            "2",
            "-T",
            &SECONDS.to_string(),
            url,
        ])
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&script);
    if !output.status.success() {
        eprintln!("pgbench: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// User, host and port of a `mysql://user[:pass]@host:port/db` URL.
fn parts(url: &str) -> Option<(String, String, String)> {
    let rest = url.split_once("://")?.1;
    let (auth, location) = rest.split_once('@')?;
    let user = auth.split(':').next()?.to_string();
    let hostport = location.split('/').next()?;
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "3306"));
    Some((user, host.to_string(), port.to_string()))
}
