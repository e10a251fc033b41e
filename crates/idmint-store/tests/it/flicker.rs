//! Flicker ticket databases against the test kit's MariaDB (`IDMINT_TEST_MYSQL_URL`'s, else a
//! private one; skipped and reported without either). Each check uses its own ticket tables in this run's fresh database (made by
//! `mysql.rs`); two tables are two independent auto-increment counters, as two ticket servers
//! are, and the settings `increment`/`offset` are applied per session by idmint, so nothing
//! on the shared server changes. One of them is reached through a [`Gate`] the test cuts.

use std::collections::BTreeSet;
use std::sync::Arc;

use idmint_store::{SegmentStore, StoreError, StoreUrl};
use sqlx::{Connection, MySqlConnection, Row};

use crate::conformance::{spec, tag};
use crate::gate::{Gate, upstream};
use crate::mysql::{database_url, fresh_table};

/// A Flicker URL for ticket table `table` in this run's database, with more parameters.
fn flicker_url(base: &str, table: &str, params: &str) -> String {
    let base = base.replacen("mysql://", "flicker+mysql://", 1);
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}table={table}&{params}")
}

async fn open(urls: &[String]) -> Result<Arc<dyn SegmentStore>, StoreError> {
    idmint_store::open(&StoreUrl::parse(&urls.join(" "))?).await
}

/// Why opening `urls` was refused; panics if it was not.
async fn refusal(urls: &[String]) -> StoreError {
    match open(urls).await {
        Ok(store) => panic!("{} was opened", store.describe()),
        Err(error) => error,
    }
}

#[tokio::test]
async fn two_ticket_databases_interleave_by_offset_and_one_can_go_away() {
    let Some(base) = database_url().await else { return };
    let (a, b) = (fresh_table("tickets_a"), fresh_table("tickets_b"));
    let gate = Gate::start(&upstream(&base)).await;
    let urls = |node: &str| {
        [
            flicker_url(&base, &a, &format!("increment=2&offset=1&node={node}")),
            flicker_url(&gate.url(&base), &b, &format!("increment=2&offset=2&node={node}")),
        ]
    };
    let one = open(&urls("n1")).await.unwrap();
    let two = open(&urls("n2")).await.unwrap();
    let created = one.create_tag(&spec("order", 1, 100, "orders")).await.unwrap();
    assert_eq!(created.step, 100);
    let t = tag("order");

    // Two nodes take blocks of 100 ids concurrently, 100 000 ids in all; database b goes
    // away halfway.
    let mut claimed = BTreeSet::new();
    let mut last_end = [0, 0];
    let mut after_cut = BTreeSet::new();
    for round in 0..500 {
        if round == 250 {
            gate.cut();
        }
        let (x, y) = tokio::join!(one.allocate(&t, None), two.allocate(&t, None));
        for (node, allocation) in [x, y].into_iter().enumerate() {
            let range = allocation.unwrap_or_else(|e| panic!("round {round}: {e}")).range;
            assert_eq!(range.len(), 100);
            assert!(range.start() >= last_end[node], "node {node} went back: {range:?}");
            last_end[node] = range.end();
            if round >= 251 {
                after_cut.insert((range.start() / 100) % 2);
            }
            for id in range.ids() {
                assert!(claimed.insert(id), "id {id} handed out twice");
            }
        }
    }
    assert_eq!(claimed.len(), 100_000);
    assert_eq!(
        after_cut,
        BTreeSet::from([1]),
        "only database a (odd tickets) served after the cut"
    );

    // Each node keeps its own stub row per tag, as Flickr's did.
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    let stubs: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT stub FROM {a} WHERE stub NOT LIKE '%/raise' ORDER BY stub"
    )))
    .fetch_all(&mut raw)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(stubs, ["order/n1", "order/n2"]);

    // Database b comes back behind a; it is raised past a's tickets before it serves again.
    gate.restore();
    let mut rejoined = false;
    // b is retried once its backoff (at most SOURCE_BACKOFF_MS_MAX) has passed.
    for _ in 0..2 * idmint_store::SOURCE_BACKOFF_MS_MAX / 100 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let range = one.allocate(&t, None).await.unwrap().range;
        assert!(range.start() >= last_end[0], "{range:?} after {}", last_end[0]);
        last_end[0] = range.end();
        for id in range.ids() {
            assert!(claimed.insert(id), "id {id} handed out twice after b came back");
        }
        if (range.start() / 100) % 2 == 0 {
            rejoined = true;
            break;
        }
    }
    assert!(rejoined, "database b never served again");
}

#[tokio::test]
async fn a_set_that_could_collide_is_refused_at_start() {
    let Some(base) = database_url().await else { return };
    let (a, b) = (fresh_table("tickets_c"), fresh_table("tickets_d"));
    for (params, reason) in [
        (["increment=2&offset=1", "increment=2&offset=1"], "share auto_increment_offset residue 1"),
        (["increment=2&offset=1", "increment=3&offset=2"], "increment 2 and 3"),
        // The server's own settings (1 and 1 on this server) for both: one residue.
        (["", ""], "number 2 but auto_increment_increment is 1"),
    ] {
        let refused =
            refusal(&[flicker_url(&base, &a, params[0]), flicker_url(&base, &b, params[1])]).await;
        assert!(refused.to_string().contains(reason), "{params:?}: {refused}");
    }
    // One database with the server's settings is a set of one.
    let single = open(&[flicker_url(&base, &a, "")]).await.unwrap();
    single.create_tag(&spec("solo", 1000, 1, "")).await.unwrap();
    let first = single.allocate(&tag("solo"), None).await.unwrap().range;
    assert!(first.start() >= 1000 && first.len() == 1, "{first:?}");
    let refused = single.set_step(&tag("solo"), idmint_core::Step::new(5).unwrap()).await;
    assert!(refused.unwrap_err().to_string().contains("is fixed"));
}

#[tokio::test]
async fn a_database_down_at_start_is_skipped_only_when_its_settings_are_known() {
    let Some(base) = database_url().await else { return };
    let (a, b) = (fresh_table("tickets_e"), fresh_table("tickets_f"));
    let gate = Gate::start(&upstream(&base)).await;
    gate.cut();
    let down = |params: &str| flicker_url(&gate.url(&base), &b, params);
    let refused = refusal(&[flicker_url(&base, &a, "increment=2&offset=1"), down("")]).await;
    assert!(refused.to_string().contains("Add increment=N&offset=I"), "{refused}");
    let store =
        open(&[flicker_url(&base, &a, "increment=2&offset=1"), down("increment=2&offset=2")])
            .await
            .unwrap();
    store.create_tag(&spec("partial", 1, 100, "")).await.unwrap_err();
    // Served by a alone (the creation reached a; b is recorded when it answers).
    let t = tag("partial");
    let range = store.allocate(&t, None).await.unwrap().range;
    assert_eq!((range.start() / 100) % 2, 1, "{range:?}");
    // Every database down: refused, without a password.
    gate.cut();
    let refused = refusal(&[down("increment=2&offset=2")]).await;
    assert!(matches!(refused, StoreError::Unavailable(_)), "{refused}");
}

/// Every exotic tag on two interleaved ticket databases: created, listed and read back as
/// itself (the tag table holds UTF-8), each allocating whole blocks no other tag gets; the
/// stub rows of tags beyond the plain alphabet are hashes, never the tag's text in SQL.
#[tokio::test]
async fn every_tag_a_leaf_row_holds_takes_tickets() {
    let Some(base) = database_url().await else { return };
    let (a, b) = (fresh_table("tickets_xa"), fresh_table("tickets_xb"));
    let store = open(&[
        flicker_url(&base, &a, "increment=2&offset=1&node=n1"),
        flicker_url(&base, &b, "increment=2&offset=2&node=n1"),
    ])
    .await
    .unwrap();
    let names = crate::conformance::exotic_tags();
    for name in &names {
        store.create_tag(&spec(name, 1, 10, name)).await.unwrap();
    }
    let mut claimed = BTreeSet::new();
    for name in &names {
        let t = tag(name);
        assert_eq!(store.get_tag(&t).await.unwrap().unwrap().description, *name);
        for _ in 0..3 {
            for id in store.allocate(&t, None).await.unwrap().range.ids() {
                assert!(claimed.insert(id), "{name:?}: id {id} handed out twice");
            }
        }
    }
    let mut listed: Vec<String> =
        store.list_tags().await.unwrap().into_iter().map(|r| r.tag.to_string()).collect();
    let mut want = names.clone();
    listed.sort();
    want.sort();
    assert_eq!(listed, want);
    let mut raw = MySqlConnection::connect(&base).await.unwrap();
    let stubs: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT stub FROM {a}")))
        .fetch_all(&mut raw)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(stubs.iter().any(|s| s.starts_with('#')), "{stubs:?}");
    assert!(stubs.iter().all(|s| s.is_ascii() && !s.contains('\'')), "{stubs:?}");
}
