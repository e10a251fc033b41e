//! What `idmint schema print` prints: the DDL of every table idmint may create on a store
//! URL's backend, feature by feature, with the URL's table names, and the GRANT statements
//! each feature needs, so a DBA can create the tables and grant an account exactly what the
//! features it uses need (and run the node with `create_tables=false`). The statements are
//! the backends' own (`mysql.rs`, `postgres.rs` and their `workers.rs`, `sequences.rs`), so
//! what is printed is what idmint would run.
//!
//! It must not connect to anything: it only reads the URL.

#[cfg(any(feature = "mysql", feature = "postgres"))]
use crate::{CEILINGS_TABLE, SEQUENCES_TABLE, TAG_META_TABLE, TOMBSTONES_TABLE};
use crate::{StoreError, StoreUrl};

/// One feature's part of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaPart {
    /// What the part serves, and when idmint creates its tables itself.
    pub feature: String,
    /// `CREATE TABLE` statements, each without its final `;`.
    pub tables: Vec<String>,
    /// `GRANT` statements, each without its final `;`.
    pub grants: Vec<String>,
}

/// The schema of the store `url` names, per feature; `account` is the grantee as written in
/// the GRANT statements (`'idmint'@'%'` on MySQL, `idmint` on PostgreSQL when `None`).
/// Refuses URLs whose tables idmint keeps itself (SQLite, memory, Redis) or that are not one
/// database (interleaved sets, Flicker), saying why.
pub fn schema(url: &StoreUrl, account: Option<&str>) -> Result<Vec<SchemaPart>, StoreError> {
    #[cfg(not(any(feature = "mysql", feature = "postgres")))]
    let _ = account;
    match url {
        #[cfg(feature = "mysql")]
        StoreUrl::Mysql(sql) => {
            use crate::mysql::{segment_ddl, tombstones_ddl};
            let o = &sql.options;
            let ddl = Ddl {
                segment: segment_ddl(o.table.as_str()),
                tombstones: tombstones_ddl(),
                workers: crate::mysql::workers_ddl(o.workers_table.as_str()),
                worker_node: crate::mysql::worker_node_ddl(o.worker_node_table.as_str()),
                sequences: crate::mysql::sequences_ddl(),
                ceilings: crate::mysql::ceilings_ddl(),
                meta: crate::mysql::meta_ddl(),
            };
            Ok(parts(sql, ddl, account.unwrap_or("'idmint'@'%'")))
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(sql) => {
            use crate::postgres::{segment_ddl, tombstones_ddl};
            let o = &sql.options;
            let ddl = Ddl {
                segment: segment_ddl(o.table.as_str()),
                tombstones: tombstones_ddl(),
                workers: crate::postgres::workers_ddl(o.workers_table.as_str()),
                worker_node: crate::postgres::worker_node_ddl(o.worker_node_table.as_str()),
                sequences: crate::postgres::sequences_ddl(),
                ceilings: crate::postgres::ceilings_ddl(),
                meta: crate::postgres::meta_ddl(),
            };
            Ok(parts(sql, ddl, account.unwrap_or("idmint")))
        }
        StoreUrl::Sqlite(_) | StoreUrl::Memory => Err(StoreError::BadUrl {
            url: url.to_string(),
            reason: "the embedded store keeps its tables in idmint's own file and creates them \
                     itself when it opens it (the memory store keeps none): there is no DDL to \
                     apply; name a mysql:// or postgres:// URL"
                .to_string(),
        }),
        _ => Err(StoreError::BadUrl {
            url: url.to_string(),
            reason: "the schema is printed for one MySQL/MariaDB or PostgreSQL database: name \
                     one mysql:// or postgres:// URL (Flicker ticket databases and Redis keep \
                     their own tables or keys)"
                .to_string(),
        }),
    }
}

/// The parts as text: comments naming each feature, its DDL, then its grants.
pub fn render_schema(parts: &[SchemaPart]) -> String {
    let mut text = String::new();
    for part in parts {
        text.push_str(&format!("-- {}\n", part.feature));
        for statement in part.tables.iter().chain(&part.grants) {
            text.push_str(statement);
            text.push_str(";\n");
        }
        text.push('\n');
    }
    text
}

/// The statements of one backend, with the URL's table names.
#[cfg(any(feature = "mysql", feature = "postgres"))]
struct Ddl {
    segment: String,
    tombstones: String,
    workers: String,
    worker_node: String,
    sequences: String,
    ceilings: String,
    meta: String,
}

#[cfg(any(feature = "mysql", feature = "postgres"))]
fn parts(sql: &crate::SqlUrl, ddl: Ddl, account: &str) -> Vec<SchemaPart> {
    let o = &sql.options;
    let (t, workers, worker_node) =
        (o.table.as_str(), o.workers_table.as_str(), o.worker_node_table.as_str());
    let grant =
        |privileges: &str, table: &str| format!("GRANT {privileges} ON {table} TO {account}");
    vec![
        SchemaPart {
            feature: format!(
                "Segment ids (Leaf's own grants; idmint creates {t} at start on a database \
                 without a Leaf table)"
            ),
            tables: vec![ddl.segment],
            grants: vec![grant("SELECT, UPDATE", t)],
        },
        SchemaPart {
            feature: format!(
                "Tag deletion: its tombstones (idmint creates {TOMBSTONES_TABLE} at the first \
                 deletion)"
            ),
            tables: vec![ddl.tombstones],
            grants: vec![grant("DELETE", t), grant("SELECT, INSERT, UPDATE", TOMBSTONES_TABLE)],
        },
        SchemaPart {
            feature: "Tag creation (reads the tombstones, once the table exists)".to_string(),
            tables: Vec::new(),
            grants: vec![grant("INSERT", t), grant("SELECT", TOMBSTONES_TABLE)],
        },
        SchemaPart {
            feature: format!(
                "Snowflake worker-id leases, snowflake.worker = \"lease\" (idmint creates \
                 {workers} at the first lease)"
            ),
            tables: vec![ddl.workers],
            grants: vec![grant("SELECT, INSERT, UPDATE", workers)],
        },
        SchemaPart {
            feature: format!(
                "Store-assigned worker ids, snowflake.worker = \"store-assigned\" (idmint creates \
                 {worker_node} at the first assignment)"
            ),
            tables: vec![ddl.worker_node],
            grants: vec![grant("SELECT, INSERT", worker_node)],
        },
        SchemaPart {
            feature: format!(
                "Sequences (idmint creates {SEQUENCES_TABLE} and {CEILINGS_TABLE} at the first \
                 sequence call)"
            ),
            tables: vec![ddl.sequences, ddl.ceilings],
            grants: vec![
                grant("SELECT, INSERT, UPDATE, DELETE", SEQUENCES_TABLE),
                grant("SELECT, INSERT, UPDATE, DELETE", CEILINGS_TABLE),
            ],
        },
        SchemaPart {
            feature: format!(
                "Public id formats with a key: the key guard (idmint creates {TAG_META_TABLE} at \
                 the first start with a keyed format; moving a guard row idmint.key.TAG out of \
                 {t}, once, needs the tag deletion's grants)"
            ),
            tables: vec![ddl.meta],
            grants: vec![grant("SELECT, INSERT, UPDATE", TAG_META_TABLE)],
        },
    ]
}
