//! Which tables idmint creates, and with which privileges it runs, on MariaDB and
//! PostgreSQL, each check in a fresh database of the test kit's server: `create_tables=false`
//! issues no DDL at all (a missing table is a final error naming it and `idmint schema
//! print`); a mistyped `table=` beside a Leaf table is refused naming the Leaf table; a Tinyid
//! database gets no segment table until a tag is created there; the schema `idmint schema
//! print` prints, applied by an administrator, lets an account with exactly its grants run
//! every feature without creating anything. Accounts are made per check, uniquely named,
//! and dropped at its end.

use std::sync::atomic::{AtomicU32, Ordering};

use idmint_core::{Step, Tag};
use idmint_store::{
    StoreError, StoreUrl, TagSpec, open, open_sequences, open_workers, render_schema, schema,
};
use sqlx::{AssertSqlSafe, Connection};

use crate::conformance::spec;

/// The two database servers.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Mysql,
    Postgres,
}

/// A fresh database, as its administrator sees it.
struct Database {
    kind: Kind,
    /// The administrator's URL of the database.
    admin: String,
}

impl Database {
    async fn fresh(kind: Kind, purpose: &str) -> Option<Database> {
        let admin = match kind {
            Kind::Mysql => idmint_testkit::mysql::fresh_database(purpose).await?,
            Kind::Postgres => idmint_testkit::postgres::fresh_database(purpose).await?,
        };
        Some(Database { kind, admin })
    }

    /// Runs `sql` (statements separated by `;`) as the administrator.
    async fn run(&self, sql: &str) {
        let sql = AssertSqlSafe(sql.to_string());
        match self.kind {
            Kind::Mysql => {
                let mut conn = sqlx::MySqlConnection::connect(&self.admin).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
            Kind::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.admin).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
        }
    }

    /// The database's tables, by name.
    async fn tables(&self) -> Vec<String> {
        let mut tables: Vec<String> = match self.kind {
            Kind::Mysql => {
                let mut conn = sqlx::MySqlConnection::connect(&self.admin).await.unwrap();
                sqlx::query_scalar(
                    "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() ORDER BY 1",
                )
                .fetch_all(&mut conn)
                .await
                .unwrap()
            }
            Kind::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.admin).await.unwrap();
                sqlx::query_scalar(
                    "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
                )
                .fetch_all(&mut conn)
                .await
                .unwrap()
            }
        };
        // Byte order, whatever the server's collation.
        tables.sort();
        tables
    }

    /// The administrator's store URL with idmint's `params`.
    fn url(&self, params: &str) -> StoreUrl {
        StoreUrl::parse(&with_params(&self.admin, params)).unwrap()
    }

    /// A new account that may log in and do nothing else yet: its name as GRANT statements
    /// write it, and its store URL with `params`.
    async fn account(&self, params: &str) -> Account {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("idmt_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        let grantee = match self.kind {
            Kind::Mysql => {
                self.run(&format!("CREATE USER '{name}'@'%' IDENTIFIED BY 'pw-{name}'")).await;
                format!("'{name}'@'%'")
            }
            Kind::Postgres => {
                self.run(&format!("CREATE ROLE {name} LOGIN PASSWORD 'pw-{name}'")).await;
                name.clone()
            }
        };
        let (scheme, rest) = self.admin.split_once("://").unwrap();
        let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        let url = with_params(&format!("{scheme}://{name}:pw-{name}@{rest}"), params);
        Account { name, grantee, url: StoreUrl::parse(&url).unwrap() }
    }

    /// Drops the account (and, on PostgreSQL, its grants here).
    async fn drop_account(&self, account: Account) {
        let name = account.name;
        match self.kind {
            Kind::Mysql => self.run(&format!("DROP USER '{name}'@'%'")).await,
            Kind::Postgres => self.run(&format!("DROP OWNED BY {name}; DROP ROLE {name}")).await,
        }
    }
}

/// An account of one check.
struct Account {
    name: String,
    /// The name as GRANT statements write it.
    grantee: String,
    /// Its store URL.
    url: StoreUrl,
}

fn with_params(url: &str, params: &str) -> String {
    if params.is_empty() {
        return url.to_string();
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{params}")
}

/// Leaf's table, as its scripts make it.
fn leaf_ddl(kind: Kind, table: &str) -> String {
    match kind {
        Kind::Mysql => format!(
            "CREATE TABLE {table} (biz_tag varchar(128) NOT NULL DEFAULT '', \
             max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, \
             description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL \
             DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag)) \
             ENGINE=InnoDB"
        ),
        Kind::Postgres => format!(
            "CREATE TABLE {table} (biz_tag varchar(128) NOT NULL PRIMARY KEY, \
             max_id bigint NOT NULL DEFAULT 1, step integer NOT NULL, \
             description varchar(256), update_time timestamp NOT NULL DEFAULT now())"
        ),
    }
}

fn tag(name: &str) -> Tag {
    Tag::parse(name).unwrap()
}

fn step(n: u64) -> Option<Step> {
    Some(Step::new(n).unwrap())
}

/// A create without a start: it continues above a tombstone.
fn spec_without_start(name: &str) -> TagSpec {
    TagSpec { start: None, ..spec(name, 1, 100, "") }
}

macro_rules! on_both {
    ($check:ident) => {
        mod $check {
            #[tokio::test]
            async fn mysql() {
                super::$check(super::Kind::Mysql).await;
            }

            #[tokio::test]
            async fn postgres() {
                super::$check(super::Kind::Postgres).await;
            }
        }
    };
}

on_both!(create_tables_false_issues_no_ddl);
on_both!(a_mistyped_table_is_refused_naming_the_leaf_table);
on_both!(the_printed_schema_lets_an_account_with_its_grants_run_every_feature);
on_both!(leafs_own_grants_serve_segments_and_refuse_the_rest_by_name);

/// `create_tables=false`: a missing table is a final error naming it and `idmint schema
/// print`, at start (the segment table) or when a feature is used (tombstones, worker
/// leases, sequences); the database holds only the table the administrator made.
async fn create_tables_false_issues_no_ddl(kind: Kind) {
    let Some(db) = Database::fresh(kind, "noddl").await else { return };
    let url = db.url("create_tables=false");
    let refused = open(&url).await.err().expect("opened without a segment table");
    assert!(matches!(refused, StoreError::MissingTable { .. }), "{refused:?}");
    let text = refused.to_string();
    assert!(text.contains("leaf_alloc") && text.contains("idmint schema print"), "{text}");
    assert_eq!(db.tables().await, Vec::<String>::new());

    db.run(&leaf_ddl(kind, "leaf_alloc")).await;
    let store = open(&url).await.unwrap();
    store.create_tag(&spec("kept", 1, 10, "")).await.unwrap();
    assert_eq!(store.allocate(&tag("kept"), None).await.unwrap().range.start(), 1);
    let refused = store.delete_tag(&tag("kept")).await.unwrap_err();
    assert!(
        matches!(&refused, StoreError::MissingTable { table, .. } if table == "idmint_tombstones"),
        "{refused:?}"
    );
    assert!(store.get_tag(&tag("kept")).await.unwrap().is_some(), "the delete changed the row");
    let workers = open_workers(&url).await.unwrap();
    let space = crate::workers::space("noddl");
    let refused = workers.acquire_lease(&crate::workers::request(&space, 3, "n")).await;
    assert!(
        matches!(&refused, Err(StoreError::MissingTable { table, .. }) if table == "idmint_workers"),
        "{refused:?}"
    );
    let sequences = open_sequences(&url).await.unwrap();
    let refused =
        sequences.create_sequence(&crate::sequences::spec("sq", false, None, "UTC")).await;
    assert!(matches!(refused, Err(StoreError::MissingTable { .. })), "{refused:?}");
    assert_eq!(db.tables().await, ["leaf_alloc"]);
}

/// A `table=` naming no table, on a database that holds a Leaf table, is refused naming the
/// Leaf table (a new empty table would answer `unknown tag` to every Leaf client), and
/// nothing is created; `create_tables=true` asks for the new table and gets it.
async fn a_mistyped_table_is_refused_naming_the_leaf_table(kind: Kind) {
    let Some(db) = Database::fresh(kind, "typo").await else { return };
    db.run(&leaf_ddl(kind, "leaf_alloc")).await;
    let refused = open(&db.url("table=leaf_aloc")).await.err().expect("opened a mistyped table");
    let text = refused.to_string();
    assert!(matches!(refused, StoreError::Absent { .. }), "{refused:?}");
    assert!(text.contains("leaf_alloc") && text.contains("leaf_aloc"), "{text}");
    assert!(text.contains("create_tables=true"), "{text}");
    assert_eq!(db.tables().await, ["leaf_alloc"]);
    // The right name is served; creating a second table is there for the asking.
    open(&db.url("")).await.unwrap();
    open(&db.url("table=leaf_aloc&create_tables=true")).await.unwrap();
    assert_eq!(db.tables().await, ["leaf_alloc", "leaf_aloc"]);
}

/// What `idmint schema print` prints, applied by an administrator, lets an account with
/// exactly those grants run every feature on a node that creates nothing
/// (`create_tables=false`): segments, tag creation and deletion with its tombstone, worker
/// leases and assignments, sequences.
async fn the_printed_schema_lets_an_account_with_its_grants_run_every_feature(kind: Kind) {
    let Some(db) = Database::fresh(kind, "schema").await else { return };
    let account = db.account("create_tables=false").await;
    let printed = render_schema(&schema(&db.url(""), Some(&account.grantee)).unwrap());
    assert!(printed.contains("CREATE TABLE IF NOT EXISTS leaf_alloc"), "{printed}");
    assert!(
        printed.contains(&format!("GRANT SELECT, UPDATE ON leaf_alloc TO {}", account.grantee))
    );
    db.run(&printed).await;
    let before = db.tables().await;

    let store = open(&account.url).await.unwrap();
    store.create_tag(&spec("every", 1, 10, "")).await.unwrap();
    let first = store.allocate(&tag("every"), step(20)).await.unwrap().range;
    store.delete_tag(&tag("every")).await.unwrap();
    let again = store.create_tag(&spec_without_start("every")).await.unwrap();
    assert!(again.max_id >= first.end(), "{again:?} repeats {first:?}");
    let workers = open_workers(&account.url).await.unwrap();
    let space = crate::workers::space("schema");
    let lease = workers.acquire_lease(&crate::workers::request(&space, 3, "n")).await.unwrap();
    workers.release_lease(&lease).await.unwrap();
    workers.assign_worker(&crate::workers::assign(&space, 100, 1)).await.unwrap();
    let sequences = open_sequences(&account.url).await.unwrap();
    let name = crate::sequences::tag("sq.schema");
    sequences
        .create_sequence(&crate::sequences::spec("sq.schema", false, None, "UTC"))
        .await
        .unwrap();
    assert_eq!(sequences.raise_ceiling(&name, "", 100).await.unwrap(), 100);
    sequences.delete_sequence(&name).await.unwrap();
    assert_eq!(db.tables().await, before, "the account created a table");
    db.drop_account(account).await;
}

/// An account with Leaf's own grants (`SELECT, UPDATE` on `leaf_alloc`) opens the store and
/// serves ids, creating nothing; deleting a tag is refused naming the privilege it lacks and
/// changes nothing, and so is creating one.
async fn leafs_own_grants_serve_segments_and_refuse_the_rest_by_name(kind: Kind) {
    let Some(db) = Database::fresh(kind, "leafgrants").await else { return };
    db.run(&leaf_ddl(kind, "leaf_alloc")).await;
    db.run(
        "INSERT INTO leaf_alloc (biz_tag, max_id, step, description) VALUES ('leaf', 1, 100, '')",
    )
    .await;
    let account = db.account("").await;
    db.run(&format!("GRANT SELECT, UPDATE ON leaf_alloc TO {}", account.grantee)).await;

    let store = open(&account.url).await.unwrap();
    assert_eq!(store.allocate(&tag("leaf"), None).await.unwrap().range.start(), 1);
    let refused = store.delete_tag(&tag("leaf")).await.unwrap_err();
    let text = refused.to_string();
    assert!(matches!(refused, StoreError::Denied { .. }), "{refused:?}");
    assert!(text.contains("tag deletion needs") && text.contains("idmint schema print"), "{text}");
    match kind {
        Kind::Mysql => assert!(text.contains("INSERT, UPDATE on idmint_tombstones"), "{text}"),
        Kind::Postgres => assert!(text.contains("CREATE on the schema"), "{text}"),
    }
    assert_eq!(store.get_tag(&tag("leaf")).await.unwrap().map(|r| r.max_id), Some(101));
    let refused = store.create_tag(&spec("new", 1, 10, "")).await.unwrap_err();
    assert!(refused.to_string().contains("tag creation needs INSERT on leaf_alloc"), "{refused}");
    assert_eq!(db.tables().await, ["leaf_alloc"]);
    db.drop_account(account).await;
}

/// A Tinyid database (its `tiny_id_info`) gets no segment table at start: the store serves
/// as if it were empty, and the table comes with the first tag created there.
#[tokio::test]
async fn a_tinyid_database_gets_no_segment_table_until_a_tag_is_created() {
    let Some(db) = Database::fresh(Kind::Mysql, "tinyidlazy").await else { return };
    db.run(
        "CREATE TABLE tiny_id_info (id bigint unsigned NOT NULL AUTO_INCREMENT, \
         biz_type varchar(63) NOT NULL DEFAULT '', max_id bigint NOT NULL DEFAULT 0, \
         step int DEFAULT 0, delta int NOT NULL DEFAULT 1, remainder int NOT NULL DEFAULT 0, \
         version bigint NOT NULL DEFAULT 0, PRIMARY KEY (id))",
    )
    .await;
    let store = open(&db.url("")).await.unwrap();
    store.ping().await.unwrap();
    assert_eq!(store.list_tags().await.unwrap(), Vec::new());
    assert!(store.get_tag(&tag("t")).await.unwrap().is_none());
    let unknown = store.allocate(&tag("t"), None).await.unwrap_err();
    assert!(matches!(unknown, StoreError::TagNotFound(_)), "{unknown:?}");
    assert_eq!(db.tables().await, ["tiny_id_info"]);
    // Another store (another node) creates the first tag: this one sees it.
    let other = open(&db.url("")).await.unwrap();
    other.create_tag(&spec("t", 1, 10, "")).await.unwrap();
    assert_eq!(db.tables().await, ["leaf_alloc", "tiny_id_info"]);
    assert_eq!(store.allocate(&tag("t"), None).await.unwrap().range.start(), 1);
    // With create_tables=false a Tinyid database never gets one.
    let Some(db) = Database::fresh(Kind::Mysql, "tinyidnoddl").await else { return };
    db.run("CREATE TABLE tiny_id_info (id bigint NOT NULL, PRIMARY KEY (id))").await;
    let store = open(&db.url("create_tables=false")).await.unwrap();
    let refused = store.create_tag(&spec("t", 1, 10, "")).await.unwrap_err();
    assert!(matches!(refused, StoreError::MissingTable { .. }), "{refused:?}");
    assert_eq!(db.tables().await, ["tiny_id_info"]);
}
