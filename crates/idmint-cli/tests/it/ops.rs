//! Operations through the real binary: `idmint config check` on good and bad files (what
//! `serve` would run with, secrets masked, every problem at once, no connection made), and
//! `serve --log-format json` (every line a JSON object; no line per id or request), and what
//! `serve` says on a store of several databases (snowflake ids not served, and why; nothing
//! given back at shutdown, and why); a misspelled `IDMINT_*` variable (refused by `config
//! check`, warned about by `serve`) and the variable of every flag in `serve --help`.

use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use crate::cli::{idmint, run_err, run_ok, serve};

const KEY: &str = "5f1c0b7e2a9d48e3b6c4a1f0d2e3c4b5";

/// The comment (the origin) of the line that starts with `key = `.
fn origin_of<'a>(printed: &'a str, line_start: &str) -> &'a str {
    let line = printed
        .lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start:?} in\n{printed}"));
    line.rsplit_once("# ").map_or("", |(_, origin)| origin)
}

#[test]
fn config_check_prints_what_serve_would_run_with_secrets_masked() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    // A database nothing listens on: the check must not try it.
    let file = "listen = \"0.0.0.0:8080\"\n\
                store = \"mysql://app:hunter2@127.0.0.1:1/ids\"\n\
                [segment]\n\
                refill_wait_ms = 250\n\
                [format.order]\n\
                template = \"ORD-{id:base36:8}\"\n\
                key_env = \"ORDER_KEY\"\n\
                bits = 41\n";
    std::fs::write(d.join("idmint.toml"), file).unwrap();
    let printed = run_ok(
        idmint(d)
            .args(["config", "check", "idmint.toml"])
            .env("ORDER_KEY", KEY)
            .env("IDMINT_SNOWFLAKE_WORKER", "static:7")
            .env("IDMINT_ADMIN_TOKEN", "admin-hunter3-0123456789"),
    );
    assert!(!printed.contains("hunter2") && !printed.contains(KEY), "a secret shown:\n{printed}");
    assert!(!printed.contains("hunter3"), "the admin token shown:\n{printed}");
    assert_eq!(origin_of(&printed, "admin_token = \"***\""), "IDMINT_ADMIN_TOKEN");
    assert!(printed.starts_with("# idmint configuration: valid."), "{printed}");
    for (line, origin) in [
        ("listen = \"0.0.0.0:8080\"", "idmint.toml:1"),
        ("store = \"mysql://app:***@127.0.0.1:1/ids\"", "idmint.toml:2"),
        ("refill_wait_ms = 250", "idmint.toml:4"),
        ("worker = \"static:7\"", "IDMINT_SNOWFLAKE_WORKER"),
        ("tolerance_ms = 10", "default"),
        ("template = \"ORD-{id:base36:8}\"", "idmint.toml:6"),
        ("key_env = \"ORDER_KEY\"", "idmint.toml:7"),
        ("time_zone = \"UTC\"", "default"),
    ] {
        assert_eq!(origin_of(&printed, line), origin, "{line}");
    }
    // The printed configuration is itself a valid file, resolving to the same values.
    std::fs::write(d.join("effective.toml"), &printed).unwrap();
    let again = run_ok(
        idmint(d)
            .args(["config", "check", "effective.toml"])
            .env("ORDER_KEY", KEY)
            .env("IDMINT_ADMIN_TOKEN", "admin-hunter3-0123456789"),
    );
    let values = |text: &str| -> Vec<String> {
        let lines = text.lines().filter(|l| !l.starts_with('#'));
        lines.map(|l| l.split(" #").next().unwrap_or(l).trim().to_string()).collect()
    };
    assert_eq!(values(&again), values(&printed));
    // IDMINT_CONFIG and serve's flags are honoured, as serve would honour them.
    let flagged = run_ok(
        idmint(d)
            .args(["config", "check", "--listen", "127.0.0.1:9"])
            .env("IDMINT_CONFIG", "idmint.toml")
            .env("ORDER_KEY", KEY),
    );
    assert_eq!(origin_of(&flagged, "listen = \"127.0.0.1:9\""), "--listen");
    assert_eq!(origin_of(&flagged, "refill_wait_ms = 250"), "idmint.toml:4");
}

#[test]
fn config_check_lists_every_problem_of_a_bad_file_and_serve_refuses_it() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let bad = "lisen = \"127.0.0.1:1\"\n\
               [segment]\n\
               refill_wait_ms = \"soon\"\n\
               [limits]\n\
               batch_count_max = 0\n\
               [snowflake]\n\
               worker = \"static:5000\"\n";
    std::fs::write(d.join("bad.toml"), bad).unwrap();
    let mut check = idmint(d);
    check.args(["config", "check", "bad.toml"]).env("IDMINT_SEGMENT_TAG_REFRESH_MS", "often");
    let output = check.output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty(), "an invalid configuration was printed");
    let err = String::from_utf8(output.stderr).unwrap();
    for says in [
        "5 problems:",
        "bad.toml:1:1: lisen: unknown key `lisen`; did you mean `listen`? The keys allowed here are `listen`, `grpc_listen`, `store`",
        "bad.toml:3:18: segment.refill_wait_ms: invalid type: string \"soon\", expected a whole",
        "IDMINT_SEGMENT_TAG_REFRESH_MS: \"often\" is not a whole number",
        "config key limits.batch_count_max (bad.toml:5): batch_count_max = 0 is out of range; use 1 to 100000",
        "config key snowflake.worker (bad.toml:7): \"static:5000\" is not a worker source",
    ] {
        assert!(err.contains(says), "no {says:?} in\n{err}");
    }
    // serve reads the file the same way and stops before opening anything.
    let err = run_err(idmint(d).args(["serve", "--listen", "127.0.0.1:0", "--config", "bad.toml"]));
    assert!(err.contains("4 problems:") && err.contains("unknown key `lisen`"), "{err}");
    assert!(!d.join("idmint-data").exists(), "serve opened the store of a bad configuration");
    // A syntax error: its line and column.
    std::fs::write(d.join("syntax.toml"), "listen = \"127.0.0.1:1\"\n[segment\n").unwrap();
    let err = run_err(idmint(d).args(["config", "check", "syntax.toml"]));
    assert!(err.contains("syntax.toml:2:9: TOML syntax:"), "{err}");
    let err = run_err(idmint(d).args(["config", "check", "missing.toml"]));
    assert!(err.contains("cannot read config file missing.toml"), "{err}");
}

#[test]
fn serve_logs_json_lines_and_no_line_per_id_or_request() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    run_ok(idmint(d).args([
        "tag",
        "create",
        "order",
        "--step",
        "100000",
        "--store",
        crate::cli::DEFAULT_STORE,
    ]));
    let mut server = serve(d, &["--log-format", "json", "--listen", "127.0.0.1:0"], &[]);
    crate::cli::wait_ready(&server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let get = |path: String| {
        let url = format!("{}{path}", server.url);
        runtime.block_on(async {
            let response = reqwest::get(url).await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    let log_lines = || {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::read_to_string(d.join("serve.log")).unwrap().lines().count()
    };
    assert_eq!(get("/api/segment/get/order".into()).0, 200);
    assert_eq!(get("/v1/snowflake".into()).0, 200);
    let before = log_lines();
    for _ in 0..200 {
        assert_eq!(get("/api/segment/get/order".into()).0, 200);
        assert_eq!(get("/v1/snowflake?count=10".into()).0, 200);
        assert_eq!(get("/v1/segment/nope".into()).0, 404);
        // A 501 (sequences need Redis): its cause is logged once, not per request.
        assert_eq!(get("/v1/seq/invoice".into()).0, 501);
    }
    assert_eq!(get("/v1/segment/order?count=5000".into()).0, 200);
    assert_eq!(log_lines(), before, "log lines grew with the ids and requests served");

    let term = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status();
    assert!(term.unwrap().success());
    assert!(server.child.wait().unwrap().success(), "serve did not stop cleanly");
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    let mut messages = Vec::new();
    for line in log.lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let level = event["level"].as_str().unwrap_or_else(|| panic!("no level: {line}"));
        assert!(["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level), "{line}");
        assert!(event["timestamp"].is_string(), "no timestamp: {line}");
        let message = event["message"].as_str().unwrap_or_else(|| panic!("no message: {line}"));
        messages.push(message.to_string());
    }
    for expected in ["idmint serving", "SIGTERM: shutting down", "idmint stopped"] {
        assert!(messages.iter().any(|m| m == expected), "no {expected:?} in {messages:#?}");
    }
    assert!(!log.contains('\u{1b}'), "ANSI escapes in a JSON log");
}

#[test]
fn human_logs_have_no_colours_off_a_terminal_and_bad_filters_are_refused() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let mut server = serve(d, &["--listen", "127.0.0.1:0"], &[("IDMINT_LOG", "info")]);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    assert!(log.contains("idmint serving") && !log.contains('\u{1b}'), "{log}");
    let err = run_err(idmint(d).args(["uuid"]).env("IDMINT_LOG", "info,=bad=filter"));
    assert!(err.contains("IDMINT_LOG=") && err.contains("not a log filter"), "{err}");
    let output = idmint(d).args(["--log-format", "xml", "uuid"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "a bad --log-format is a usage error");
}

/// On a store of two databases (interleaved, as Flicker's tickets are) worker-id leases
/// cannot be kept: `serve` says at start that snowflake ids are not served and how to
/// change that, `/v1/status` shows the reason and the snowflake routes answer the final 501
/// `snowflake_not_configured`. At SIGTERM the log says the store takes no ids back, not that
/// another node allocated since (there is no other node).
#[test]
fn on_two_databases_serve_says_snowflake_is_not_served_and_why_nothing_is_given_back() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let store = format!("sqlite://{0}/a.db sqlite://{0}/b.db", d.display());
    run_ok(idmint(d).args(["tag", "create", "order", "--step", "1000", "--store", &store]));
    let mut server = serve(d, &["--listen", "127.0.0.1:0", "--store", &store], &[]);
    crate::cli::wait_ready(&server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let get = |path: &str| {
        let url = format!("{}{path}", server.url);
        runtime.block_on(async {
            let response = reqwest::get(url).await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    assert_eq!(get("/api/segment/get/order").0, 200);
    let (status, body) = get("/api/snowflake/get/x");
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("snowflake_not_configured") && body.contains("static:N"), "{body}");
    let status: serde_json::Value = serde_json::from_str(&get("/v1/status").1).unwrap();
    assert_eq!(status["snowflake"]["running"], false, "{status}");
    let reason = status["snowflake"]["reason"].as_str().unwrap();
    assert!(reason.contains("worker-id leases cannot be kept on this store"), "{reason}");

    let term = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status();
    assert!(term.unwrap().success());
    assert!(server.child.wait().unwrap().success(), "serve did not stop cleanly");
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    let line = |needle: &str| log.lines().find(|l| l.contains(needle)).map(str::to_string);
    let start = line("snowflake ids not served").unwrap_or_else(|| panic!("no start line:\n{log}"));
    assert!(start.contains("WARN") && start.contains("snowflake.worker"), "{start}");
    let given = line("not given back").unwrap_or_else(|| panic!("no give-back line:\n{log}"));
    assert!(given.contains("takes no ids back") && given.contains("tags=1"), "{given}");
    assert!(!log.contains("another node allocated since"), "{log}");
}

#[test]
fn a_misspelled_variable_fails_config_check_and_serve_warns_about_it() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let misspelled = "IDMINT_SNOWFLAK_ENABLED";
    let output = idmint(d).args(["config", "check"]).env(misspelled, "false").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty(), "a configuration with a misspelled variable was printed");
    let err = String::from_utf8(output.stderr).unwrap();
    for says in [
        "IDMINT_SNOWFLAK_ENABLED: idmint reads no variable of that name, so its value is ignored",
        "did you mean IDMINT_SNOWFLAKE_ENABLED (key `snowflake.enabled`)?",
    ] {
        assert!(err.contains(says), "no {says:?} in\n{err}");
    }
    // idmint's own variables that set no key, and the test suites', are not misspellings.
    run_ok(
        idmint(d)
            .args(["config", "check"])
            .env("IDMINT_LOG", "info")
            .env("IDMINT_LOG_FORMAT", "human")
            .env("IDMINT_SERVER", "http://127.0.0.1:1")
            .env("IDMINT_TOKEN", "client-token-0123456789")
            .env("IDMINT_ADMIN_TOKEN", "admin-hunter3-0123456789")
            .env("IDMINT_TEST_MYSQL_URL", "mysql://root@127.0.0.1:1/test"),
    );
    // serve starts, with one warning naming the variable and the nearest key.
    let args = ["--listen", "127.0.0.1:0", "--store", "memory://"];
    let mut server = serve(d, &args, &[(misspelled, "false")]);
    crate::cli::wait_ready(&server);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    let warned: Vec<&str> = log.lines().filter(|line| line.contains(misspelled)).collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("WARN") && warned[0].contains("snowflake.enabled"), "{log}");
}

#[test]
fn serve_help_shows_the_variable_of_every_flag_and_a_variable_stays_its_origin() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    for command in [["serve", "--help", ""], ["config", "check", "--help"]] {
        let command: Vec<&str> = command.into_iter().filter(|a| !a.is_empty()).collect();
        let help = run_ok(idmint(d).args(&command).env("IDMINT_STORE", "mysql://u:hunter2@h/db"));
        assert!(!help.contains("hunter2"), "a password shown by {command:?}:\n{help}");
        for (key, flag) in idmint_server::FLAG_KEYS {
            let variable = idmint_server::env_var(key);
            // The flag's block of the help: its line and those below, to the next flag's.
            let mut lines =
                help.lines().skip_while(|l| !l.trim_start().starts_with(&format!("{flag} ")));
            let first = lines.next().unwrap_or_else(|| panic!("no {flag} in {command:?}:\n{help}"));
            let block: Vec<&str> = std::iter::once(first)
                .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
                .collect();
            let block = block.join("\n");
            assert!(block.contains(&format!("[env: {variable}")), "{command:?} {flag}:\n{block}");
        }
    }
    // A value from the variable is still the variable's, and a flag still beats it.
    let printed = run_ok(idmint(d).args(["config", "check"]).env("IDMINT_LISTEN", "127.0.0.1:9"));
    assert_eq!(origin_of(&printed, "listen = \"127.0.0.1:9\""), "IDMINT_LISTEN");
    let printed = run_ok(
        idmint(d).args(["config", "check", "--listen", "127.0.0.1:8"]).env("IDMINT_LISTEN", "x"),
    );
    assert_eq!(origin_of(&printed, "listen = \"127.0.0.1:8\""), "--listen");
    let err = run_err(idmint(d).args(["config", "check"]).env("IDMINT_DATA_DIR", ""));
    assert!(err.contains("IDMINT_DATA_DIR: the data directory is empty"), "{err}");
}
