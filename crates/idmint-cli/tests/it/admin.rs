//! Issue 22 items 6, 8 and 15 (the CLI's part): where `tag` and `seq` commands act (the
//! configuration `serve` reads, or a running server), that they never create a store they
//! read and name the store in every answer, the first id they print, and the help, address
//! and error texts a newcomer meets.

use std::path::Path;

use serde_json::Value;
use tempfile::TempDir;

use crate::cli::{DEFAULT_STORE, Server, idmint, run_err, run_ok, serve};

const ADMIN: &str = "cli-admin-token-abcdefghij";

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn stop(mut server: Server) {
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

fn first_id(answer: &str) -> u64 {
    let after = answer.split("first id ").nth(1).unwrap_or_else(|| panic!("{answer}"));
    let digits: String =
        after.trim_start_matches("at or above ").chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

fn next_ids(d: &Path, server: &Server, tag: &str, n: u64) -> Vec<u64> {
    let out = run_ok(idmint(d).args(["next", tag, "-n", &n.to_string(), "--server", &server.url]));
    out.lines().map(|l| l.parse().unwrap()).collect()
}

/// `tag list --store sqlite:///nonexistent/x.db` made directories and an empty database;
/// `tag create foo` with nothing named made `./idmint-data/idmint.db` and said "created".
#[test]
fn commands_that_read_never_create_the_store_and_none_creates_the_default_one() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let url = format!("sqlite://{}", d.join("nonexistent/x.db").display());
    let reads: [&[&str]; 5] = [
        &["tag", "list"],
        &["tag", "show", "foo"],
        &["tag", "set", "foo", "--step", "5"],
        &["tag", "delete", "foo"],
        &["seq", "list"],
    ];
    for args in reads {
        let err = run_err(idmint(d).args(args).args(["--store", &url]));
        assert!(
            err.contains("x.db does not exist") && err.contains("nothing was created"),
            "{err}"
        );
        assert!(err.contains("--server URL"), "{err}");
    }
    assert!(!d.join("nonexistent").exists(), "a read created the store's directory");
    // A database that is not idmint's: refused as it is, given no table.
    std::fs::write(d.join("other.db"), b"").unwrap();
    let err = run_err(idmint(d).args(["tag", "list", "--store", "sqlite://other.db"]));
    assert!(err.contains("no leaf_alloc table"), "{err}");
    assert_eq!(std::fs::metadata(d.join("other.db")).unwrap().len(), 0);
    // Nothing named: the default store only where a server made it; all three ways out.
    let err = run_err(idmint(d).args(["tag", "create", "foo"]));
    assert!(err.contains("--store URL") && err.contains("--config FILE"), "{err}");
    assert!(err.contains("--server URL") && err.contains("does not exist"), "{err}");
    assert!(!d.join("idmint-data").exists(), "the default store was created");
    // A create on a store named explicitly creates it, and says where.
    let created = run_ok(idmint(d).args(["tag", "create", "foo", "--store", DEFAULT_STORE]));
    assert!(created.contains(&format!("store {DEFAULT_STORE} (from --store)")), "{created}");
}

#[test]
fn a_read_on_a_mysql_database_without_the_table_creates_none() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::mysql::fresh_database("cliread")) else {
        return;
    };
    refuses_twice(&url);
}

#[test]
fn a_read_on_a_postgresql_database_without_the_table_creates_none() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::postgres::fresh_database("cliread")) else {
        return;
    };
    refuses_twice(&url);
}

/// `tag list` on `url` is refused, twice: the first refusal created nothing.
fn refuses_twice(url: &str) {
    let dir = TempDir::new().unwrap();
    for _ in 0..2 {
        let err = run_err(idmint(dir.path()).args(["tag", "list", "--store", url]));
        assert!(
            err.contains("no leaf_alloc table") && err.contains("nothing was created"),
            "{err}"
        );
    }
    // A create on the named database makes the table; the read then answers.
    run_ok(idmint(dir.path()).args(["tag", "create", "t", "--store", url]));
    let listed = run_ok(idmint(dir.path()).args(["tag", "list", "--store", url]));
    assert!(listed.lines().any(|l| l.starts_with("t ")), "{listed}");
}

/// The CLI reads `--config`, `IDMINT_CONFIG` and `IDMINT_STORE` as `serve` does (flag >
/// variable > file), and every answer, text or JSON, names the store and its origin.
#[test]
fn the_cli_reads_the_configuration_serve_reads_and_names_the_store() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    std::fs::write(d.join("cfg.toml"), "store = \"sqlite://from-config.db\"\n").unwrap();
    let created = run_ok(idmint(d).args(["tag", "create", "a", "--config", "cfg.toml"]));
    assert!(created.contains("store sqlite://from-config.db (from cfg.toml:1)"), "{created}");
    let listed = run_ok(idmint(d).args(["tag", "list"]).env("IDMINT_CONFIG", "cfg.toml"));
    assert!(listed.contains("from-config.db") && listed.contains("\na "), "{listed}");
    // The variable beats the file; the flag beats the variable.
    let by_env = run_ok(
        idmint(d)
            .args(["tag", "create", "b", "--config", "cfg.toml"])
            .env("IDMINT_STORE", "sqlite://env.db"),
    );
    assert!(by_env.contains("store sqlite://env.db (from IDMINT_STORE)"), "{by_env}");
    let by_flag = run_ok(
        idmint(d)
            .args(["tag", "show", "a", "--store", "sqlite://from-config.db", "--output", "json"])
            .env("IDMINT_STORE", "sqlite://env.db"),
    );
    let shown = json(&by_flag);
    assert_eq!(shown["target"]["store"], "sqlite://from-config.db");
    assert_eq!(shown["target"]["origin"], "--store");
    assert_eq!(shown["tag"]["tag"], "a");
    assert_eq!(shown["tag"]["max_id"], 1);
    assert_eq!(shown["tag"]["step"], 1000);
    let list = json(&run_ok(idmint(d).args([
        "tag",
        "list",
        "--store",
        "sqlite://env.db",
        "--output",
        "json",
    ])));
    assert_eq!(list["tags"][0]["tag"], "b", "{list}");
    // A variable for a server and one for a store: ambiguous, refused.
    let err = run_err(
        idmint(d)
            .args(["tag", "list"])
            .env("IDMINT_STORE", "sqlite://env.db")
            .env("IDMINT_SERVER", "http://127.0.0.1:1"),
    );
    assert!(err.contains("IDMINT_SERVER") && err.contains("--store URL"), "{err}");
}

/// What an operator of a remote node needs: every tag command through a running server on
/// MySQL, the admin token from the variable or a file, the server's store named.
#[test]
fn tag_commands_act_through_a_running_server_on_mysql() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::mysql::fresh_database("cliserver")) else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let server =
        serve(d, &["--listen", "127.0.0.1:0", "--store", &url], &[("IDMINT_ADMIN_TOKEN", ADMIN)]);
    let at = server.url.clone();
    let err = run_err(idmint(d).args(["tag", "create", "foo", "--server", &at]));
    assert!(err.contains("401") && err.contains("IDMINT_ADMIN_TOKEN"), "{err}");
    let created = run_ok(
        idmint(d)
            .args(["tag", "create", "foo", "--step", "100", "--server", &at])
            .env("IDMINT_ADMIN_TOKEN", ADMIN),
    );
    assert!(created.contains("store mysql://") && created.contains(&at), "{created}");
    assert!(!d.join("idmint-data/idmint.db").exists(), "a SQLite store was made beside MySQL");
    let first = first_id(&created);
    assert_eq!(next_ids(d, &server, "foo", 3), [first, first + 1, first + 2]);

    std::fs::write(d.join("token"), format!("{ADMIN}\n")).unwrap();
    let updated = run_ok(idmint(d).args([
        "tag",
        "set",
        "foo",
        "--step",
        "200",
        "--server",
        &at,
        "--admin-token-file",
        "token",
    ]));
    assert!(updated.contains("updated tag foo: step 200"), "{updated}");
    let shown =
        json(&run_ok(idmint(d).args(["tag", "show", "foo", "--server", &at, "--output", "json"])));
    assert_eq!(shown["target"]["server"], at.as_str());
    assert!(shown["target"]["store"].as_str().unwrap().starts_with("mysql://"), "{shown}");
    assert_eq!(shown["tag"]["step"], 200);
    assert_eq!(shown["tag"]["segments"]["current"]["next_id"], first + 3);
    let listed = run_ok(idmint(d).args(["tag", "list", "--server", &at]));
    assert!(listed.lines().any(|l| l.starts_with("foo ")), "{listed}");
    // The store read directly, as the server's configuration names it.
    let direct = run_ok(idmint(d).args(["tag", "list", "--store", &url]));
    assert!(direct.lines().any(|l| l.starts_with("foo ")), "{direct}");

    // An HTTP client is told the route, not only the command.
    let body = runtime.block_on(async {
        reqwest::get(format!("{at}/v1/segment/ghost")).await.unwrap().text().await.unwrap()
    });
    assert!(body.contains("POST /v1/tags") && body.contains("idmint tag create ghost"), "{body}");

    let deleted = run_ok(
        idmint(d)
            .args(["tag", "delete", "foo", "--output", "json"])
            .env("IDMINT_SERVER", &at)
            .env("IDMINT_ADMIN_TOKEN", ADMIN),
    );
    let deleted = json(&deleted);
    assert_eq!(deleted["action"], "deleted");
    assert_eq!(deleted["tag"]["tag"], "foo");
    let err = run_err(idmint(d).args(["tag", "show", "foo", "--server", &at]));
    assert!(err.contains("404") && err.contains("POST /v1/tags"), "{err}");
    stop(server);
}

/// Issue 22 item 15: the CLI said "next id 1" of a tag whose first id served was 1000 (a
/// Flicker or interleaved store hands out blocks of the step, block 0 never).
#[test]
fn the_first_id_printed_is_the_first_id_served() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let single = "sqlite://one.db";
    let created =
        run_ok(idmint(d).args(["tag", "create", "one", "--start", "7", "--store", single]));
    assert_eq!(first_id(&created), 7, "{created}");
    let server = serve(d, &["--listen", "127.0.0.1:0", "--store", single, "--data-dir", "d1"], &[]);
    assert_eq!(next_ids(d, &server, "one", 1), [7]);
    stop(server);

    let set = "sqlite://a.db sqlite://b.db";
    let created =
        run_ok(idmint(d).args(["tag", "create", "order", "--step", "1000", "--store", set]));
    assert!(created.contains("first id at or above 1000,"), "{created}");
    let server = serve(d, &["--listen", "127.0.0.1:0", "--store", set, "--data-dir", "d2"], &[]);
    let served = next_ids(d, &server, "order", 1)[0];
    assert!((1000..3000).contains(&served), "printed {created}, served {served}");
    stop(server);
}

/// Issue 22 item 8: `serve --help` never named the admin token, `--store`'s help omitted
/// Redis, Flicker and sets of URLs, and `--listen localhost:8080` was refused.
#[test]
fn serve_help_names_the_admin_token_and_every_store_and_listen_takes_host_names() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let help = run_ok(idmint(d).args(["serve", "--help"]));
    for word in ["IDMINT_ADMIN_TOKEN", "redis://", "flicker+mysql://", "separated by spaces"] {
        assert!(help.contains(word), "serve --help lacks {word}:\n{help}");
    }
    let help = run_ok(idmint(d).args(["tag", "list", "--help"]));
    assert!(help.contains("--server") && help.contains("--admin-token-file"), "{help}");
    let server = serve(d, &["--listen", "localhost:0", "--store", "memory://"], &[]);
    assert!(server.url.starts_with("http://127.0.0.1:"), "{}", server.url);
    stop(server);
    let err = run_err(idmint(d).args(["serve", "--listen", "no-such-host.invalid:8080"]));
    assert!(err.contains("does not resolve") && err.contains("localhost:8080"), "{err}");
}

/// `decode X --tag order` without a config file blamed the id alone.
#[test]
fn decode_of_a_tag_without_its_format_section_says_where_it_looked() {
    let dir = TempDir::new().unwrap();
    let err = run_err(idmint(dir.path()).args(["decode", "ORD-7K3", "--tag", "order"]));
    assert!(err.contains("[format.order]") && err.contains("--config FILE"), "{err}");
    let plain = run_ok(idmint(dir.path()).args(["decode", "42", "--tag", "order"]));
    assert!(plain.contains("plain ids") && plain.contains("id         42"), "{plain}");
}

/// `seq` commands through a running server (its `/v1/seqs` routes), the store named.
#[cfg(feature = "redis")]
#[test]
fn seq_commands_act_through_a_running_server() {
    let Some(redis) = idmint_testkit::redis::private() else { return };
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let args = ["--listen", "127.0.0.1:0", "--store", "memory://", "--redis", &redis.url()];
    let server = serve(d, &args, &[]);
    let at = server.url.clone();
    let created = run_ok(idmint(d).args(["seq", "create", "bills", "--daily", "--server", &at]));
    assert!(
        created.contains("sequence bills: daily") && created.contains("memory://"),
        "{created}"
    );
    let listed =
        json(&run_ok(idmint(d).args(["seq", "list", "--server", &at, "--output", "json"])));
    assert_eq!(listed["sequences"][0]["name"], "bills", "{listed}");
    assert_eq!(listed["target"]["server"], at.as_str());
    let deleted = run_ok(idmint(d).args(["seq", "delete", "bills", "--server", &at]));
    assert!(deleted.contains("deleted sequence bills"), "{deleted}");
    let err = run_err(idmint(d).args(["seq", "delete", "bills", "--server", &at]));
    assert!(err.contains("404") && err.contains("POST /v1/seqs"), "{err}");
    stop(server);
}

/// A strict tag through the binary: created with `--strict` through one server (a store named
/// directly is refused, untouched), its ids taken on the other server of the same SQLite
/// file (forwarded to the owner over gRPC) and then on the owner, increasing from `--start`.
#[test]
fn a_strict_tag_is_created_through_a_server_and_served_by_both() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let url = format!("sqlite://{}", d.join("shared.db").display());
    run_ok(idmint(d).args(["tag", "create", "plain", "--store", &url]));
    let refused = run_err(idmint(d).args(["tag", "create", "chat", "--strict", "--store", &url]));
    assert!(refused.contains("--server URL"), "{refused}");
    let serve_on = |data: &str| {
        serve(d, &["--listen", "127.0.0.1:0", "--store", &url, "--data-dir", data], &[])
    };
    let (a, b) = (serve_on("a"), serve_on("b"));
    let created = run_ok(
        idmint(d).args(["tag", "create", "chat", "--strict", "--start", "50", "--server", &a.url]),
    );
    assert!(created.contains("chat"), "{created}");
    let on_b = next_ids(d, &b, "chat", 3);
    assert_eq!(on_b, vec![50, 51, 52]);
    let on_a = next_ids(d, &a, "chat", 2);
    assert_eq!(on_a, vec![53, 54]);
    let listed = run_ok(idmint(d).args(["tag", "list", "--server", &b.url, "--output", "json"]));
    assert!(listed.contains("\"strict\""), "{listed}");
    // The timestamp oracle on the same two nodes, one forwarding to the other, and a
    // timestamp decoded offline.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tso = |server: &Server| -> u64 {
        let body = runtime.block_on(async {
            reqwest::get(format!("{}/v1/tso", server.url)).await.unwrap().text().await.unwrap()
        });
        json(&body)["first"].as_u64().unwrap_or_else(|| panic!("{body}"))
    };
    let (on_a, on_b) = (tso(&a), tso(&b));
    assert!(on_b > on_a, "{on_b} after {on_a}");
    let decoded = run_ok(idmint(d).args(["decode", "--tso", &on_b.to_string()]));
    let physical = on_b >> 18;
    assert!(decoded.contains(&format!("({physical} ms)")), "{decoded}");
    assert!(decoded.contains(&format!("logical    {}", on_b & 0x3FFFF)), "{decoded}");
    stop(a);
    stop(b);
}
