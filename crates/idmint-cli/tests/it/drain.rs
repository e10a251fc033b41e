//! The drain at SIGTERM (issue 31, item 6): the binary gives every served tag's unissued ids
//! back in batches and says so in one line, not a line per tag, and the next start
//! continues where it stopped.

use std::process::Command;

use tempfile::TempDir;

use crate::cli::{serve, wait_ready};

/// Tags served before the SIGTERM: more than one batch (`GIVE_BACK_BATCH_MAX`, 500).
const TAGS: usize = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_gives_every_tag_back_in_one_log_line_and_the_next_start_continues() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let store = format!("sqlite://{}/ids.db", d.display());
    let args = ["--listen", "127.0.0.1:0", "--store", store.as_str()];
    let envs = [("IDMINT_SEGMENT_ADAPTIVE_STEP", "false")];
    let mut server = serve(d, &args, &envs);
    wait_ready(&server);
    let client = reqwest::Client::new();
    let mut served = Vec::with_capacity(TAGS);
    for i in 0..TAGS {
        let tag = format!("tag{i}");
        let created = client
            .post(format!("{}/v1/tags", server.url))
            .json(&serde_json::json!({"tag": tag, "step": 1000}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        served.push(next_id(&client, &server.url, &tag).await);
    }
    let term = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status();
    assert!(term.unwrap().success());
    assert!(server.child.wait().unwrap().success(), "serve did not stop cleanly");
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("given back")).collect();
    assert_eq!(lines.len(), 1, "one summary line:\n{log}");
    let summary = lines[0];
    for field in [format!("tags={TAGS}"), format!("given_back={TAGS}"), "cut_off=0".into()] {
        assert!(summary.contains(&field), "{summary} does not say {field}");
    }

    // The next start continues right after each id served: every tail went back.
    let server = serve(d, &args, &envs);
    wait_ready(&server);
    for (i, before) in served.iter().enumerate().step_by(37) {
        let after = next_id(&client, &server.url, &format!("tag{i}")).await;
        assert_eq!(after, before + 1, "tag{i}");
    }
    let mut server = server;
    let _ = server.child.kill();
    let _ = server.child.wait();
}

/// One id of `tag` from Leaf's route.
async fn next_id(client: &reqwest::Client, base: &str, tag: &str) -> u64 {
    let answer = client.get(format!("{base}/api/segment/get/{tag}")).send().await.unwrap();
    assert_eq!(answer.status(), 200, "{tag}");
    answer.text().await.unwrap().trim().parse().unwrap()
}
