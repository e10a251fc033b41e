//! Tokens as operators meet them: `serve` refuses a public address without an admin token,
//! admin routes refuse without it, a guarded tag serves `idmint next --token`, and no token
//! ever reaches the log, even at debug level.

use tempfile::TempDir;

use crate::cli::{idmint, run_err, run_ok, serve};

const ADMIN: &str = "cli-admin-token-0123456789";
const SHOP: &str = "cli-shop-token-0123456789";

#[test]
fn serving_beyond_loopback_needs_an_admin_token() {
    let dir = TempDir::new().unwrap();
    let err = run_err(idmint(dir.path()).args([
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--store",
        "memory://",
    ]));
    assert!(err.contains("IDMINT_ADMIN_TOKEN") && err.contains("127.0.0.1"), "{err}");
    let short = run_err(
        idmint(dir.path())
            .args(["serve", "--listen", "0.0.0.0:0", "--store", "memory://"])
            .env("IDMINT_ADMIN_TOKEN", "short"),
    );
    assert!(short.contains("16"), "{short}");
    // With a token the same address is served.
    let mut server = serve(
        dir.path(),
        &["--listen", "0.0.0.0:0", "--store", "memory://"],
        &[("IDMINT_ADMIN_TOKEN", ADMIN)],
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[test]
fn admin_and_client_tokens_guard_their_routes_and_never_reach_the_log() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("idmint.toml"),
        "[auth.clients.shop]\ntoken_env = \"SHOP_TOKEN\"\ntags = [\"order\"]\n",
    )
    .unwrap();
    run_ok(idmint(d).args(["tag", "create", "order", "--store", crate::cli::DEFAULT_STORE]));
    let args = ["--listen", "127.0.0.1:0", "--config", "idmint.toml"];
    let envs = [("IDMINT_ADMIN_TOKEN", ADMIN), ("SHOP_TOKEN", SHOP), ("RUST_LOG", "debug")];
    let mut server = serve(d, &args, &envs);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let status = |request: reqwest::RequestBuilder| {
        runtime.block_on(async { request.send().await.unwrap().status().as_u16() })
    };
    let create = |token: Option<&str>| {
        let request = client
            .post(format!("{}/v1/tags", server.url))
            .json(&serde_json::json!({"tag": "user"}));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    assert_eq!(status(create(None)), 401);
    assert_eq!(status(create(Some(SHOP))), 403);
    assert_eq!(status(create(Some("not-the-admin-token-000"))), 403);
    assert_eq!(status(create(Some(ADMIN))), 201);
    // The guarded tag: `next` without its token is refused with the reason, with it served.
    let refused = run_err(idmint(d).args(["next", "order", "--server", &server.url]));
    assert!(refused.contains("401") && refused.contains("token"), "{refused}");
    let ids = run_ok(
        idmint(d)
            .args(["next", "order", "-n", "3", "--server", &server.url])
            .env("IDMINT_TOKEN", SHOP),
    );
    assert_eq!(ids.lines().count(), 3);
    let open = run_ok(idmint(d).args(["next", "user", "--server", &server.url]));
    assert_eq!(open.trim(), "1");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    assert!(log.contains("admin routes need the admin token"), "{log}");
    assert!(!log.contains(ADMIN) && !log.contains(SHOP), "a token reached the log:\n{log}");
    // A malformed token in the config file is refused without echoing it.
    std::fs::write(d.join("bad.toml"), "[auth]\nadmin_token = \"secret with spaces!!\"\n").unwrap();
    let err = run_err(idmint(d).args(["serve", "--config", "bad.toml", "--store", "memory://"]));
    assert!(err.contains("visible ASCII") && !err.contains("secret with"), "{err}");
}
