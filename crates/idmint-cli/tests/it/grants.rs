//! The real node on Leaf's own grants and on a Tinyid database, on the test kit's MariaDB
//! and PostgreSQL (a fresh database per test): a node whose account holds only `SELECT,
//! UPDATE` on `leaf_alloc` starts with snowflake off and serves Leaf's route and `/v1`,
//! refuses a tag deletion naming the privilege it lacks, and leaves the database holding
//! only `leaf_alloc`; a Tinyid node leaves a Tinyid database holding only Tinyid's tables;
//! `idmint schema print` prints what the store crate renders.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{AssertSqlSafe, Connection};
use tempfile::TempDir;

use crate::cli::{idmint, run_err, run_ok, serve};

#[test]
fn leafs_own_grants_serve_a_node_on_mariadb_and_leave_only_leaf_alloc() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::mysql::fresh_database("leafnode")) else {
        return;
    };
    leaf_node(&runtime, &url, true);
}

#[test]
fn leafs_own_grants_serve_a_node_on_postgresql_and_leave_only_leaf_alloc() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::postgres::fresh_database("leafnode")) else {
        return;
    };
    leaf_node(&runtime, &url, false);
}

fn leaf_node(runtime: &tokio::runtime::Runtime, admin: &str, mysql: bool) {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    let leaf = if mysql {
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint(20) \
         NOT NULL DEFAULT '1', step int(11) NOT NULL, description varchar(256) DEFAULT NULL, \
         update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE \
         CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag)) ENGINE=InnoDB"
    } else {
        "CREATE TABLE leaf_alloc (biz_tag varchar(128) NOT NULL PRIMARY KEY, max_id bigint NOT \
         NULL DEFAULT 1, step integer NOT NULL, description varchar(256), update_time \
         timestamp NOT NULL DEFAULT now())"
    };
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("idmn_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
    let (create, grantee, drop) = if mysql {
        let grantee = format!("'{name}'@'%'");
        (
            format!("CREATE USER {grantee} IDENTIFIED BY 'pw'"),
            grantee.clone(),
            format!("DROP USER {grantee}"),
        )
    } else {
        (
            format!("CREATE ROLE {name} LOGIN PASSWORD 'pw'"),
            name.clone(),
            format!("DROP OWNED BY {name}; DROP ROLE {name}"),
        )
    };
    runtime.block_on(run(
        admin,
        &format!(
            "{leaf}; INSERT INTO leaf_alloc (biz_tag, max_id, step, description) \
             VALUES ('leaf-order', 1, 1000, 'test'); {create}; \
             GRANT SELECT, UPDATE ON leaf_alloc TO {grantee}"
        ),
    ));
    let (scheme, rest) = admin.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let url = format!("{scheme}://{name}:pw@{host}");

    let mut server = serve(
        d,
        &["--listen", "127.0.0.1:0"],
        &[("IDMINT_STORE", &url), ("IDMINT_SNOWFLAKE_ENABLED", "false")],
    );
    let leaf_route = get(runtime, &format!("{}/api/segment/get/leaf-order", server.url));
    assert_eq!(leaf_route, (200, "1".to_string()));
    let (status, body) = get(runtime, &format!("{}/v1/segment/leaf-order", server.url));
    assert_eq!(status, 200, "{body}");
    let refused = run_err(idmint(d).args(["tag", "delete", "leaf-order", "--store", &url]));
    assert!(refused.contains("tag deletion needs"), "{refused}");
    let needs = if mysql { "INSERT, UPDATE on idmint_tombstones" } else { "CREATE on the schema" };
    assert!(refused.contains(needs), "{refused}");
    let refused = run_err(idmint(d).args(["tag", "create", "new-tag", "--store", &url]));
    assert!(refused.contains("tag creation needs INSERT on leaf_alloc"), "{refused}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert_eq!(runtime.block_on(tables(admin)), ["leaf_alloc"]);
    let listed = run_ok(idmint(d).args(["tag", "list", "--store", &url]));
    assert!(listed.contains("leaf-order"), "the delete changed the row: {listed}");
    runtime.block_on(run(admin, &drop));
}

/// Tinyid's two tables (its `db.sql`, reduced to the columns idmint reads) and a sample row.
const TINYID_DB_SQL: &str = "CREATE TABLE tiny_id_info (id bigint(20) unsigned NOT NULL \
    AUTO_INCREMENT, biz_type varchar(63) NOT NULL DEFAULT '', begin_id bigint(20) NOT NULL \
    DEFAULT '0', max_id bigint(20) NOT NULL DEFAULT '0', step int(11) DEFAULT '0', delta \
    int(11) NOT NULL DEFAULT '1', remainder int(11) NOT NULL DEFAULT '0', create_time \
    timestamp NOT NULL DEFAULT '2010-01-01 00:00:00', update_time timestamp NOT NULL DEFAULT \
    '2010-01-01 00:00:00', version bigint(20) NOT NULL DEFAULT '0', PRIMARY KEY (id), UNIQUE \
    KEY uniq_biz_type (biz_type)) ENGINE=InnoDB DEFAULT CHARSET=utf8; \
    CREATE TABLE tiny_id_token (id int(11) unsigned NOT NULL AUTO_INCREMENT, token \
    varchar(255) NOT NULL DEFAULT '', biz_type varchar(63) NOT NULL DEFAULT '', remark \
    varchar(255) NOT NULL DEFAULT '', create_time timestamp NOT NULL DEFAULT '2010-01-01 \
    00:00:00', update_time timestamp NOT NULL DEFAULT '2010-01-01 00:00:00', PRIMARY KEY \
    (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8; \
    INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder, version) \
    VALUES ('test', 1, 1, 100000, 1, 0, 1); \
    INSERT INTO tiny_id_token (token, biz_type, remark) VALUES ('tok', 'test', '1')";

/// A node serving Tinyid's routes from a Tinyid database (the main store), snowflake off,
/// leaves it holding Tinyid's tables only; the segment table comes with the first tag.
#[test]
fn a_tinyid_node_leaves_only_tinyids_tables() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(url) = runtime.block_on(idmint_testkit::mysql::fresh_database("tinyidnode")) else {
        return;
    };
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    runtime.block_on(run(&url, TINYID_DB_SQL));
    let mut server = serve(
        d,
        &["--listen", "127.0.0.1:0"],
        &[
            ("IDMINT_STORE", &url),
            ("IDMINT_TINYID_ENABLED", "true"),
            ("IDMINT_SNOWFLAKE_ENABLED", "false"),
        ],
    );
    let tinyid = format!("{}/tinyid/id/nextIdSimple?bizType=test&token=tok", server.url);
    assert_eq!(get(&runtime, &tinyid), (200, "2".to_string()));
    let (status, _) = get(&runtime, &format!("{}/api/segment/get/test", server.url));
    assert_eq!(status, 404);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert_eq!(runtime.block_on(tables(&url)), ["tiny_id_info", "tiny_id_token"]);
    run_ok(idmint(d).args(["tag", "create", "first", "--store", &url]));
    assert_eq!(runtime.block_on(tables(&url)), ["leaf_alloc", "tiny_id_info", "tiny_id_token"]);
}

/// `idmint schema print` prints the store crate's schema of the URL (each backend's own
/// statements, with the URL's table names), and refuses a store that has none to print.
#[test]
fn schema_print_prints_each_features_tables_and_grants() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    for (url, account) in [
        ("mysql://u:pw@db/ids?table=my_alloc&workers_table=my_workers", "'leaf'@'%'"),
        ("postgres://u:pw@db/ids?table=my_alloc", "leaf"),
    ] {
        let printed =
            run_ok(idmint(d).args(["schema", "print", "--store", url, "--account", account]));
        let parsed = idmint_store_schema(url, account);
        assert_eq!(printed, parsed);
        assert!(printed.contains("CREATE TABLE IF NOT EXISTS my_alloc"), "{printed}");
        assert!(printed.contains(&format!("GRANT SELECT, UPDATE ON my_alloc TO {account};")));
        assert!(!printed.contains("pw"), "{printed}");
    }
    let refused = run_err(idmint(d).args(["schema", "print", "--store", "sqlite://x.db"]));
    assert!(refused.contains("creates them itself"), "{refused}");
}

/// The schema as the library renders it, through the binary's own dependency.
fn idmint_store_schema(url: &str, account: &str) -> String {
    let url = idmint_store::StoreUrl::parse(url).unwrap();
    idmint_store::render_schema(&idmint_store::schema(&url, Some(account)).unwrap())
}

/// `GET url`: status and body.
fn get(runtime: &tokio::runtime::Runtime, url: &str) -> (u16, String) {
    runtime.block_on(async {
        let answer = reqwest::get(url).await.unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    })
}

/// Runs `sql` (statements separated by `;`) as the administrator of `url`'s database.
async fn run(url: &str, sql: &str) {
    let sql = AssertSqlSafe(sql.to_string());
    if url.starts_with("mysql") {
        let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
}

/// The tables of `url`'s database, by name.
async fn tables(url: &str) -> Vec<String> {
    let mut tables: Vec<String> = if url.starts_with("mysql") {
        let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::query_scalar(
            "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() ORDER BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query_scalar(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    };
    // Byte order, whatever the server's collation.
    tables.sort();
    tables
}
