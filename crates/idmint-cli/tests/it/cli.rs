//! The binary as users run it: tag admin on the store, `serve`, `next`, restarts after
//! SIGTERM and `kill -9`, and the errors bad input gets.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use tempfile::TempDir;

/// `idmint` run in `dir`, with no `IDMINT_*` variable of the calling environment.
pub fn idmint(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idmint"));
    command.current_dir(dir);
    for (name, _) in std::env::vars() {
        if name.starts_with("IDMINT_") || name == "RUST_LOG" {
            command.env_remove(name);
        }
    }
    command
}

/// `serve`'s default store, named: the CLI creates a store only when it is named.
pub const DEFAULT_STORE: &str = "sqlite://idmint-data/idmint.db";

pub fn run_ok(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(output.status.success(), "failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

pub fn run_err(command: &mut Command) -> String {
    let Output { status, stderr, .. } = command.output().unwrap();
    assert!(!status.success(), "expected a failure");
    assert_eq!(status.code(), Some(1));
    String::from_utf8(stderr).unwrap()
}

pub struct Server {
    pub child: Child,
    pub url: String,
}

/// A 100 ms time window and lease margin: a node with a leased worker id serves snowflake
/// ids 200 ms after its start rather than 2.5 s (docs/operations.md, "Start-up delay").
/// `envs` of [`serve`] override them.
const QUICK_SNOWFLAKE: [(&str, &str); 2] =
    [("IDMINT_SNOWFLAKE_TIME_WINDOW_MS", "100"), ("IDMINT_SNOWFLAKE_LEASE_MARGIN_MS", "100")];

/// Starts `idmint serve` with `args` and reads the address it announces.
pub fn serve(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Server {
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut child = idmint(dir)
        .arg("serve")
        .args(args)
        .envs(QUICK_SNOWFLAKE)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let Some(url) = line.trim().strip_prefix("idmint listening on ") else {
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        panic!("serve did not start: {line:?}\n{log}");
    };
    Server { child, url: url.to_string() }
}

/// Waits (bounded) until `server` answers `/ready` with 200: its snowflake generator, with a
/// freshly leased worker id, issues only after the start-up delay (and `/ready` waits for
/// it: the [`QUICK_SNOWFLAKE`] variables set `[snowflake]` keys).
pub fn wait_ready(server: &Server) {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let address = server.url.trim_start_matches("http://").to_string();
    loop {
        let mut answer = String::new();
        if let Ok(mut stream) = std::net::TcpStream::connect(&address) {
            let request = format!("GET /ready HTTP/1.0\r\nHost: {address}\r\n\r\n");
            let _ = stream.write_all(request.as_bytes());
            let _ = stream.read_to_string(&mut answer);
        }
        if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
            return;
        }
        let status = answer.lines().next().unwrap_or_default().to_string();
        assert!(std::time::Instant::now() < deadline, "{address}: /ready answered {status:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn next(dir: &Path, server: &Server, tag: &str, n: u64) -> Vec<u64> {
    let out =
        run_ok(idmint(dir).args(["next", tag, "-n", &n.to_string(), "--server", &server.url]));
    let ids: Vec<u64> = out.lines().map(|l| l.parse().expect("an id per line")).collect();
    assert_eq!(ids.len() as u64, n);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids did not increase");
    ids
}

#[test]
fn ids_survive_graceful_and_hard_restarts_without_repeating() {
    let dir = TempDir::new().unwrap();
    let store = format!("sqlite://{}", dir.path().join("ids.db").display());
    let created = run_ok(idmint(dir.path()).args(["tag", "create", "order", "--store", &store]));
    assert!(created.contains("tag order"), "{created}");
    let args = ["--listen", "127.0.0.1:0", "--store", &store];

    let mut server = serve(dir.path(), &args, &[]);
    let first = next(dir.path(), &server, "order", 1000);
    assert_eq!(first.iter().collect::<std::collections::HashSet<_>>().len(), 1000);

    // kill -9: the ranges the node held are lost, never handed out again.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let mut server = serve(dir.path(), &args, &[]);
    let after_kill = next(dir.path(), &server, "order", 100);
    assert!(after_kill[0] > *first.last().unwrap(), "an id repeated after kill -9");

    // SIGTERM: a graceful stop that exits 0 and gives the unissued ids back, so the next
    // node continues exactly where this one stopped.
    let terminated =
        Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(terminated.success());
    assert!(server.child.wait().unwrap().success(), "serve did not exit cleanly on SIGTERM");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    assert!(log.contains("given back"), "{log}");
    let mut server = serve(dir.path(), &args, &[]);
    let after_term = next(dir.path(), &server, "order", 100);
    assert_eq!(after_term[0], after_kill.last().unwrap() + 1, "ids wasted across SIGTERM");

    // One node per data directory: a second one is refused while the first runs.
    let err =
        run_err(idmint(dir.path()).args(["serve", "--listen", "127.0.0.1:0", "--store", &store]));
    assert!(err.contains("in use by another idmint process"), "{err}");
    assert!(dir.path().join("idmint-data/segments.high-water").exists());
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[test]
fn defaults_use_the_embedded_store_in_the_working_directory() {
    let dir = TempDir::new().unwrap();
    // Issue 22 item 6: with no store named, the CLI uses the default store only where it
    // exists; it never creates one to report success on.
    let err = run_err(idmint(dir.path()).args(["tag", "create", "user"]));
    assert!(err.contains("--store") && err.contains("--server"), "{err}");
    assert!(!dir.path().join("idmint-data").exists(), "a store was created");
    let created = run_ok(idmint(dir.path()).args([
        "tag",
        "create",
        "user",
        "--step",
        "10",
        "--start",
        "500",
        "--store",
        DEFAULT_STORE,
    ]));
    assert!(created.contains("first id 500") && created.contains(DEFAULT_STORE), "{created}");
    assert!(dir.path().join("idmint-data/idmint.db").exists());
    let listed = run_ok(idmint(dir.path()).args(["tag", "list"]));
    assert!(listed.contains("sqlite://./idmint-data/idmint.db (from default)"), "{listed}");
    assert!(
        listed.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["user", "500", "10"])
    );
    // The environment overrides the default address; the store stays the default one.
    let mut server = serve(dir.path(), &[], &[("IDMINT_LISTEN", "127.0.0.1:0")]);
    assert_eq!(next(dir.path(), &server, "user", 3), [500, 501, 502]);
    run_ok(idmint(dir.path()).args(["tag", "set", "user", "--step", "20"]));
    run_ok(idmint(dir.path()).args(["tag", "delete", "user"]));
    assert!(run_ok(idmint(dir.path()).args(["tag", "list"])).lines().count() == 2);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[test]
fn bad_input_is_refused_with_what_is_wrong_and_how_to_fix_it() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let err = run_err(idmint(d).args(["tag", "create", "bad\ttag"]));
    assert!(err.contains("position 3") && err.contains("control"), "{err}");
    let err = run_err(idmint(d).args(["tag", "create", "idmint.key.order"]));
    assert!(err.contains("internal rows"), "{err}");
    let err = run_err(idmint(d).args(["tag", "create", "t", "--step", "0"]));
    assert!(err.contains("step 0") && err.contains("1000000"), "{err}");
    let err = run_err(idmint(d).args(["tag", "list", "--store", "ftp://x"]));
    assert!(err.contains("--store") && err.contains("sqlite://"), "{err}");
    std::fs::write(d.join("bad.toml"), "lisen = \"127.0.0.1:1\"\n").unwrap();
    let err = run_err(idmint(d).args(["serve", "--config", "bad.toml"]));
    assert!(err.contains("bad.toml") && err.contains("lisen"), "{err}");
    let err = run_err(idmint(d).args(["tag", "delete", "ghost", "--store", "memory://"]));
    assert!(err.contains("ghost does not exist"), "{err}");
    let err = run_err(idmint(d).args(["next", "order", "-n", "0"]));
    assert!(err.contains("-n 0"), "{err}");
    // A database that is down at start: a clear error, exit 1, and never the password.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for scheme in ["mysql", "postgres"] {
        let url = format!("{scheme}://idmint:s3cret@127.0.0.1:{port}/ids");
        let err = run_err(idmint(d).args(["serve", "--listen", "127.0.0.1:0", "--store", &url]));
        assert!(err.contains("cannot open the store") && err.contains("idmint:***@"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err =
        run_err(idmint(d).args(["next", "order", "--server", &format!("http://127.0.0.1:{port}")]));
    assert!(err.contains("cannot reach idmint"), "{err}");
}

/// Issue 20 item 3: `idmint tag delete` then `tag create` continues above the ids the old tag
/// handed out; `--start 1` is refused with the reason unless `--force`, which warns.
#[test]
fn a_tag_created_again_with_the_cli_never_repeats_its_ids_unless_forced() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    run_ok(idmint(d).args(["tag", "create", "reborn", "--step", "10", "--store", DEFAULT_STORE]));
    let mut server = serve(d, &["--listen", "127.0.0.1:0"], &[]);
    let served = next(d, &server, "reborn", 25);
    run_ok(idmint(d).args(["tag", "delete", "reborn"]));
    let created = run_ok(idmint(d).args(["tag", "create", "reborn", "--step", "10"]));
    assert!(!created.contains("first id 1,"), "{created}");
    let first: u64 =
        created.split("first id ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    // The running server sees the new row within its refresh; every id it serves is new.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let after = next(d, &server, "reborn", 25);
    // The node first hands out what it still held of the deleted tag (below the new row's
    // first id, never served), and the CLI says so.
    assert!(created.contains("may first hand out ids it still held"), "{created}");
    assert!(first > *served.last().unwrap(), "{created}");
    assert!(after.iter().all(|id| !served.contains(id)), "{served:?} then {after:?}");

    run_ok(idmint(d).args(["tag", "delete", "reborn"]));
    let err = run_err(idmint(d).args(["tag", "create", "reborn", "--start", "1"]));
    assert!(err.contains("--force") && err.contains("hand them out"), "{err}");
    let output = idmint(d).args(["tag", "create", "reborn", "--start", "1", "--force"]).output();
    let output = output.unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("warning"), "{output:?}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// Issue 22 item 12: a custom layout (uid-generator's bits on this year's epoch, set by
/// variables) serves ids that Leaf's decode route, the native one and `idmint decode` (reading
/// the same variables) all read under that layout; the expired `uid` preset is refused at
/// start with the keys that fix it.
#[test]
fn a_custom_layout_serves_ids_that_decode_under_it_everywhere() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let now_ms = idmint::Clock::now_ms(&idmint::SystemClock);
    let year = idmint::snowflake::UtcMs(now_ms).start_of_year();
    let epoch = year.to_string()[..10].to_string();
    let layout = [
        ("IDMINT_SNOWFLAKE_LAYOUT", "uid"),
        ("IDMINT_SNOWFLAKE_EPOCH", epoch.as_str()),
        ("IDMINT_SNOWFLAKE_WORKER", "static:7"),
    ];
    let err = run_err(
        idmint(d).args(["serve", "--listen", "127.0.0.1:0"]).env("IDMINT_SNOWFLAKE_LAYOUT", "uid"),
    );
    for says in [
        "IDMINT_SNOWFLAKE_LAYOUT",
        "ran out at 2024-11-20",
        "snowflake.epoch",
        "snowflake.time_bits",
    ] {
        assert!(err.contains(says), "{err} does not say {says:?}");
    }
    let mut server = serve(d, &["--listen", "127.0.0.1:0", "--store", "memory://"], &layout);
    wait_ready(&server);
    let get = |path: &str| {
        let address = server.url.trim_start_matches("http://").to_string();
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        use std::io::{Read, Write};
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.split_once("\r\n\r\n").unwrap().1.to_string()
    };
    let id: u64 = get("/api/snowflake/get/x").trim().parse().unwrap();
    // uid-generator's bits: 28 of seconds / 22 worker / 13 sequence.
    let (seconds, worker) = (id >> 35, (id >> 13) & ((1 << 22) - 1));
    let time_ms = year.0 + seconds * 1_000;
    assert_eq!(worker, 7);
    assert!(time_ms <= now_ms + 60_000 && time_ms + 60_000 >= now_ms, "{time_ms} vs {now_ms}");
    let leaf: serde_json::Value =
        serde_json::from_str(&get(&format!("/decodeSnowflakeId?snowflakeId={id}"))).unwrap();
    assert_eq!(leaf["workerId"], "7");
    assert!(leaf["timestamp"].as_str().unwrap().starts_with(&format!("{time_ms}(")), "{leaf}");
    let native: serde_json::Value =
        serde_json::from_str(&get(&format!("/v1/snowflake/{id}"))).unwrap();
    assert_eq!((native["layout"].as_str(), native["worker"].as_u64()), (Some("custom"), Some(7)));
    let offline = run_ok(idmint(d).args(["decode", &id.to_string()]).envs(layout));
    assert!(
        offline.contains("layout     custom (28 s-bits / 22 worker / 13 sequence"),
        "{offline}"
    );
    assert!(offline.contains("worker     7\n"), "{offline}");
    // Without the configuration, the default preset reads other parts: the layout matters.
    let preset = run_ok(idmint(d).args(["decode", &id.to_string()]));
    assert!(
        preset.contains("layout     snowflake") && !preset.contains("worker     7\n"),
        "{preset}"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
