//! Several stateless nodes on one database: three `idmint serve` processes on one MariaDB
//! (and, separately, one PostgreSQL) database, concurrent clients fetching 300 000 ids
//! through all three, one node killed with SIGKILL while they fetch and started again. No id may
//! repeat, and each client sees each node's ids increase.
//!
//! Runs on the test kit's servers (`IDMINT_TEST_MYSQL_URL` / `IDMINT_TEST_POSTGRES_URL`, else
//! private ones) in a fresh database per test; skipped, and reported, when neither is there.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cli::{Server, idmint, run_ok, serve};

/// Ids all clients fetch together.
const IDS_TOTAL: u64 = 300_000;
/// Concurrent clients.
const CLIENTS: u64 = 6;

#[test]
fn three_nodes_on_one_mariadb_never_repeat_an_id() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::mysql::fresh_database("multinode")) else {
        return;
    };
    three_nodes(&runtime, &url);
}

#[test]
fn three_nodes_on_one_postgresql_never_repeat_an_id() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::postgres::fresh_database("multinode")) else {
        return;
    };
    three_nodes(&runtime, &url);
}

fn three_nodes(runtime: &tokio::runtime::Runtime, url: &str) {
    let dir = tempfile::TempDir::new().unwrap();
    let d = dir.path();
    for tag in ["order", "user"] {
        run_ok(idmint(d).args(["tag", "create", tag, "--step", "1000", "--store", url]));
    }
    let mut nodes: Vec<Server> = (0..3).map(|n| start_node(d, url, n)).collect();
    let bases: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();

    // Clients fetch concurrently, round-robin over the nodes, with batch sizes from 1 to
    // 997; each records (node, tag, ids) per answer.
    let per_client = IDS_TOTAL / CLIENTS;
    let progress = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let fetch = |bases: Vec<String>, phase: u64| {
        let (progress, refused) = (Arc::clone(&progress), Arc::clone(&refused));
        runtime.block_on(async move {
            let client = reqwest::Client::new();
            let mut tasks = Vec::new();
            for c in 0..CLIENTS {
                let (client, bases) = (client.clone(), bases.clone());
                let (progress, refused) = (Arc::clone(&progress), Arc::clone(&refused));
                tasks.push(tokio::spawn(async move {
                    let mut answers: Vec<(usize, &'static str, Vec<u64>)> = Vec::new();
                    let (mut got, mut i) = (0, c);
                    let target = per_client / 3;
                    while got < target {
                        let node = (i % 3) as usize;
                        let tag = if i % 5 == 0 { "user" } else { "order" };
                        let count = 1 + (i * 7919 + phase) % 997;
                        i += 1;
                        let response = client
                            .get(format!("{}/v1/segment/{tag}?count={count}", bases[node]))
                            .send()
                            .await;
                        let Ok(response) = response else {
                            refused.fetch_add(1, Ordering::Relaxed);
                            continue;
                        };
                        if !response.status().is_success() {
                            refused.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        let body: serde_json::Value = response.json().await.unwrap();
                        let ids: Vec<u64> = body["ids"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_u64().unwrap())
                            .collect();
                        assert_eq!(ids.len() as u64, count, "a short batch was acknowledged");
                        got += count;
                        progress.fetch_add(count, Ordering::Relaxed);
                        answers.push((node, tag, ids));
                    }
                    answers
                }));
            }
            let mut all = Vec::new();
            for task in tasks {
                all.push(task.await.unwrap());
            }
            all
        })
    };
    let mut history = fetch(bases.clone(), 0);

    // SIGKILL node 1 while the clients are fetching (its requests in flight fail and the
    // clients move on to the next node), then start it again on the same data directory.
    let mut victim = nodes.remove(1);
    let kill_at = progress.load(Ordering::Relaxed) + IDS_TOTAL / 9;
    let watched = Arc::clone(&progress);
    let killer = std::thread::spawn(move || {
        while watched.load(Ordering::Relaxed) < kill_at {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        victim.child.kill().unwrap();
        victim.child.wait().unwrap();
    });
    let refused_before = refused.load(Ordering::Relaxed);
    history.extend(fetch(bases, 1));
    killer.join().unwrap();
    assert!(refused.load(Ordering::Relaxed) > refused_before, "the kill hit no request");
    nodes.insert(1, start_node(d, url, 1));
    let bases: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    history.extend(fetch(bases, 2));

    let mut seen = HashSet::new();
    let mut total = 0u64;
    for client in &history {
        let mut last: std::collections::HashMap<(usize, &str), u64> = Default::default();
        for (node, tag, ids) in client {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "a batch was not increasing");
            if let Some(&previous) = last.get(&(*node, *tag)) {
                // Across the restart node 1 is a new process; it still never goes back.
                assert!(ids[0] > previous, "node {node} went back on {tag}");
            }
            last.insert((*node, *tag), *ids.last().unwrap());
            for id in ids {
                assert!(seen.insert((*tag, *id)), "id {id} of {tag} handed out twice");
            }
            total += ids.len() as u64;
        }
    }
    assert!(total >= IDS_TOTAL, "only {total} ids fetched");
    for mut node in nodes {
        node.child.kill().unwrap();
        node.child.wait().unwrap();
    }
}

fn start_node(dir: &Path, url: &str, n: usize) -> Server {
    let data_dir = dir.join(format!("node{n}"));
    serve(
        dir,
        &["--listen", "127.0.0.1:0", "--store", url, "--data-dir", data_dir.to_str().unwrap()],
        &[],
    )
}

/// Issue 5's end-to-end check: two servers on one MariaDB database lease different worker
/// ids, serve Leaf's snowflake route (one of them from the cached ring) and decode their own
/// ids; `idmint decode` agrees offline.
#[test]
fn two_servers_on_one_mariadb_lease_different_snowflake_worker_ids() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::mysql::fresh_database("multinode")) else {
        return;
    };
    let dir = tempfile::TempDir::new().unwrap();
    let d = dir.path();
    let plain = start_node(d, &url, 0);
    let data_dir = d.join("node1");
    let cached = serve(
        d,
        &["--listen", "127.0.0.1:0", "--store", &url, "--data-dir", data_dir.to_str().unwrap()],
        &[("IDMINT_SNOWFLAKE_CACHED", "true")],
    );
    let mut workers = Vec::new();
    let mut seen = HashSet::new();
    for node in [&plain, &cached] {
        crate::cli::wait_ready(node);
        let (ids, decoded) = runtime.block_on(async {
            let client = reqwest::Client::new();
            let mut ids = Vec::new();
            for key in ["a", "b", "c"] {
                let text = client
                    .get(format!("{}/api/snowflake/get/{key}", node.url))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                ids.push(text.parse::<u64>().unwrap_or_else(|_| panic!("not an id: {text}")));
            }
            let decoded: serde_json::Value = client
                .get(format!("{}/decodeSnowflakeId?snowflakeId={}", node.url, ids[0]))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (ids, decoded)
        });
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        seen.extend(ids.iter().copied());
        let worker = decoded["workerId"].as_str().unwrap().to_string();
        let offline = run_ok(idmint(d).args(["decode", &ids[0].to_string()]));
        assert!(offline.contains(&format!("worker     {worker}\n")), "{offline}");
        workers.push(worker);
    }
    assert_ne!(workers[0], workers[1], "two servers on one store share a worker id");
    assert_eq!(seen.len(), 6);
    for mut node in [plain, cached] {
        node.child.kill().unwrap();
        node.child.wait().unwrap();
    }
}
