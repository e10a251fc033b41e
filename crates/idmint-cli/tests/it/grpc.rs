//! `serve --grpc-listen`: gRPC on its own port, announced on stdout; `next` reaches the ids
//! through either port (gRPC there, HTTP on the HTTP-only port); a bad gRPC address refused.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use tempfile::TempDir;

use crate::cli::{idmint, run_err, run_ok};

#[test]
fn grpc_on_its_own_port_and_next_through_either_port() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    let mut child = idmint(d)
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .args(["--store", "memory://"])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    // Kept open until the end: the server writes both lines to it.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        out.read_line(line).unwrap();
    }
    let http = lines[0].trim().strip_prefix("idmint listening on ").unwrap().to_string();
    let grpc = lines[1].trim().strip_prefix("idmint gRPC listening on ");
    let grpc = grpc.unwrap_or_else(|| panic!("no gRPC line: {lines:?}")).to_string();
    assert_ne!(http, grpc);
    let created = reqwest::blocking_post(&format!("{http}/v1/tags"), r#"{"tag":"order"}"#);
    assert_eq!(created, 201);
    let via_grpc = run_ok(idmint(d).args(["next", "order", "-n", "3", "--server", &grpc]));
    let via_http = run_ok(idmint(d).args(["next", "order", "-n", "2", "--server", &http]));
    let ids: Vec<u64> =
        via_grpc.lines().chain(via_http.lines()).map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 5);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_bad_grpc_address_is_refused_before_anything_opens() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let err = run_err(idmint(d).args(["config", "check", "--grpc-listen", "localhost"]));
    assert!(err.contains("--grpc-listen") && err.contains("127.0.0.1:9090"), "{err}");
    let err = run_err(idmint(d).args([
        "serve",
        "--listen",
        "127.0.0.1:7001",
        "--grpc-listen",
        "127.0.0.1:7001",
    ]));
    assert!(err.contains("HTTP address's port"), "{err}");
    let shown = run_ok(idmint(d).args(["config", "check", "--grpc-listen", "127.0.0.1:9090"]));
    assert!(shown.contains("grpc_listen = \"127.0.0.1:9090\""), "{shown}");
}

/// A tiny blocking POST of JSON, answering the status (the tests' reqwest is async).
mod reqwest {
    pub fn blocking_post(url: &str, body: &str) -> u16 {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let response = ::reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            response.status().as_u16()
        })
    }
}
