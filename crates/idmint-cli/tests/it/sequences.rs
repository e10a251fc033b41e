//! Issue 6's end-to-end check: `idmint seq create` on the SQLite store, `idmint serve
//! --redis` on a private `redis-server`, clients fetching sequence ids over HTTP while the
//! test flushes Redis twice and restarts it: no id repeats, and each client's ids increase.

use std::collections::HashSet;
use std::time::Duration;

use crate::cli::{idmint, run_ok, serve};

#[test]
fn a_redis_flush_or_restart_under_http_load_loses_and_repeats_nothing() {
    let Some(mut redis) = idmint_testkit::redis::private() else { return };
    let dir = tempfile::TempDir::new().unwrap();
    let d = dir.path();
    let created =
        run_ok(idmint(d).args(["seq", "create", "orders", "--store", crate::cli::DEFAULT_STORE]));
    assert!(created.contains("sequence orders"), "{created}");
    let daily =
        run_ok(idmint(d).args(["seq", "create", "bills", "--daily", "--time-zone", "+08:00"]));
    assert!(daily.contains("{date:%Y%m%d}{seq:06}"), "{daily}");
    let mut server = serve(d, &["--listen", "127.0.0.1:0", "--redis", &redis.url()], &[]);
    let base = server.url.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Clients fetch until the disruptions are over, so the load spans all of them.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (base, stop) = (base.clone(), std::sync::Arc::clone(&stop));
            runtime.spawn(async move {
                let client = reqwest::Client::new();
                let (mut ids, mut refused) = (Vec::new(), 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let url = format!("{base}/v1/seq/orders?count=50");
                    match client.get(url).send().await {
                        Ok(r) if r.status() == 200 => {
                            let body: serde_json::Value = r.json().await.unwrap();
                            ids.extend(
                                body["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()),
                            );
                        }
                        // 503 while Redis is down: refused, never wrong.
                        Ok(r) => {
                            assert_eq!(r.status(), 503);
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(error) => panic!("{error}"),
                    }
                }
                (ids, refused)
            })
        })
        .collect();
    for step in 0..3 {
        std::thread::sleep(Duration::from_millis(300));
        if step < 2 {
            redis.cli(&["FLUSHALL"]).unwrap();
        } else {
            redis.kill().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            redis.launch().unwrap();
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut seen, mut refused) = (HashSet::new(), 0);
    for client in clients {
        let (ids, client_refused) = runtime.block_on(client).unwrap();
        refused += client_refused;
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a client's ids went back");
        for id in ids {
            assert!(seen.insert(id), "id {id} served twice");
        }
    }
    assert!(seen.len() >= 4_000, "only {} ids", seen.len());
    eprintln!(
        "{} ids unique over two flushes and a restart; {refused} requests refused",
        seen.len()
    );
    let bill: serde_json::Value = runtime.block_on(async {
        reqwest::get(format!("{base}/v1/seq/bills")).await.unwrap().json().await.unwrap()
    });
    let first = bill["ids"][0].as_str().unwrap();
    assert!(first.ends_with("000001") && first.len() == 14, "{bill}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
