//! A node short of file descriptors (issue 31, item 4): at a soft limit of 1 024, idle
//! connections from a few addresses, each under its cap, took every descriptor, so accepts
//! stopped and refills failed (the marks file could not be opened: 503 on 39 of 40
//! requests of a client connected before). `serve` raises the soft limit to the hard one
//! and keeps `limits.connections_max` below what the limit leaves the stores, the marks and
//! the logs. The binary runs under `prlimit`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The descriptor limit the node runs under, soft and hard.
const LIMIT: u64 = 256;

/// The addresses the idle connections come from (Linux routes all of 127/8 to loopback).
const ADDRESSES: [&str; 6] =
    ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7"];

/// Most idle connections opened: more than the limit, so accepts must stop before.
const IDLE_CONNECTIONS_MAX: usize = 2 * LIMIT as usize;

/// Requests of the connected client after the idle connections, each spending a whole
/// segment, so each is served by a refill that writes the marks file.
const REQUESTS: usize = 40;

/// `idmint serve` on a free port in `dir` under `prlimit --nofile=SOFT:HARD`, and its address.
fn serve_limited(dir: &Path, soft: u64, hard: u64) -> (Child, String) {
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut command = Command::new("prlimit");
    command
        .arg(format!("--nofile={soft}:{hard}"))
        .arg(env!("CARGO_BIN_EXE_idmint"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir);
    for (name, _) in std::env::vars() {
        if name.starts_with("IDMINT_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    // Every segment is the tag's step; idle connections stay open for the whole test.
    command
        .env("IDMINT_SEGMENT_ADAPTIVE_STEP", "false")
        .env("IDMINT_LIMITS_IDLE_TIMEOUT_MS", "120000");
    let mut child = command.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let Some(url) = line.trim().strip_prefix("idmint listening on http://") else {
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        panic!("serve did not start: {line:?}\n{log}");
    };
    (child, url.to_string())
}

/// One request on a kept-alive connection: the status and the body, or `None` when no
/// answer came within `wait`.
async fn request(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    body: &str,
    wait: Duration,
) -> Option<(u16, String)> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(wait, async {
        loop {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer).to_string();
            if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_string)
                    })
                    .and_then(|l| l.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if rest.len() >= length {
                    let status = head.split(' ').nth(1)?.parse().ok()?;
                    return Some((status, rest[..length].to_string()));
                }
            }
        }
    });
    read.await.ok().flatten()
}

/// A connection from `from` to `addr`.
async fn connect_from(from: &str, addr: &str) -> Option<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind(format!("{from}:0").parse().unwrap()).ok()?;
    socket.connect(addr.parse().unwrap()).await.ok()
}

/// The soft and hard "Max open files" of process `pid`.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let mut words = line["Max open files".len()..].split_whitespace();
    (words.next().unwrap().to_string(), words.next().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_descriptor_asked_for_a_connected_client_still_gets_ids_and_refills() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = serve_limited(dir.path(), LIMIT, LIMIT);
    let wait = Duration::from_secs(5);
    let mut client = connect_from("127.0.0.1", &addr).await.unwrap();
    let created = request(&mut client, "POST", "/v1/tags", r#"{"tag":"order","step":10}"#, wait);
    assert_eq!(created.await.map(|(status, _)| status), Some(201));
    // The effective limits: 256 less the reserve of the default SQLite store (64 + 12).
    let (_, status) = request(&mut client, "GET", "/v1/status", "", wait).await.unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["limits"]["connections_max"], 180, "{}", status["limits"]);
    assert_eq!(status["limits"]["client_connections_max"], 180, "{}", status["limits"]);

    // Idle connections from six addresses, each far under its cap, until accepts stop.
    let mut idle = Vec::new();
    let mut accepted = 0;
    for i in 0..IDLE_CONNECTIONS_MAX {
        let Some(mut stream) = connect_from(ADDRESSES[i % ADDRESSES.len()], &addr).await else {
            break;
        };
        let answer = request(&mut stream, "GET", "/health", "", Duration::from_millis(500)).await;
        idle.push(stream);
        match answer {
            Some((200, _)) => accepted += 1,
            _ => break,
        }
    }
    assert!(accepted > 0 && accepted < LIMIT as usize, "{accepted} connections accepted");

    // The client connected before is served, every request by a refill (marks file written).
    let mut served = 0;
    let mut refusals = Vec::new();
    for _ in 0..REQUESTS {
        match request(&mut client, "GET", "/v1/segment/order?count=10", "", wait).await {
            Some((200, _)) => served += 1,
            other => refusals.push(other),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    let first = refusals.first();
    assert_eq!(served, REQUESTS, "{} refused, the first: {first:?}\n{log}", refusals.len());
    assert!(log.contains("limits.connections_max"), "no warning that it was lowered:\n{log}");
    drop(idle);
}

#[test]
fn serve_raises_the_soft_descriptor_limit_to_the_hard_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _) = serve_limited(dir.path(), LIMIT, 4 * LIMIT);
    let limits = open_files_limits(child.id());
    let _ = child.kill();
    let _ = child.wait();
    let hard = (4 * LIMIT).to_string();
    assert_eq!(limits, (hard.clone(), hard));
}

#[test]
fn config_check_shows_the_lowered_connections_and_too_low_a_limit_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let limited = |soft_hard: &str, args: &[&str]| {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={soft_hard}"))
            .arg(env!("CARGO_BIN_EXE_idmint"))
            .args(args)
            .current_dir(dir.path());
        for (name, _) in std::env::vars() {
            if name.starts_with("IDMINT_") || name == "RUST_LOG" {
                command.env_remove(name);
            }
        }
        command.output().unwrap()
    };
    // 256 less the reserve of the default SQLite store (64 + 12): 180.
    let checked = limited("256:256", &["config", "check"]);
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let printed = String::from_utf8(checked.stdout).unwrap();
    let says = "# limits.connections_max = 4096 is lowered to 180 at start";
    assert!(printed.contains(says), "{printed}");
    // Room for fewer than 16 connections: refused before anything is opened, with the fix.
    let refused = limited("80:80", &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(refused.status.code(), Some(1));
    let error = String::from_utf8(refused.stderr).unwrap();
    assert!(error.contains("RLIMIT_NOFILE") && error.contains("LimitNOFILE"), "{error}");
    assert!(!dir.path().join("idmint-data").exists(), "the refused start created its data");
}
