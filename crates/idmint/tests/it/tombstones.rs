//! Issue 20 item 3: a tag deleted and created again, under load on two nodes of one MariaDB
//! database, never hands out an id a second time: the delete leaves a tombstone with the
//! tag's `max_id` in idmint's own table, a create without a start continues above it, a lower
//! start is refused unless forced, and a node's own high-water mark still protects it when
//! forced. Runs on the test kit's MariaDB in a fresh database; skipped (and reported) without one.

use std::collections::HashSet;
use std::sync::Arc;

use idmint::segment::SegmentConfig;
use idmint::store::{StoreError, TagSpec};
use idmint::{Error, Segments, Tag};
use idmint_core::{Description, StartId, Step};

/// Ids each node takes per round.
const IDS_PER_ROUND: usize = 250;

async fn node(url: &str, state_dir: Option<&std::path::Path>) -> Arc<Segments> {
    let store = idmint_store::open(&idmint_store::StoreUrl::parse(url).unwrap()).await.unwrap();
    let mut config = SegmentConfig::default().with_adaptive_step(false);
    if let Some(dir) = state_dir {
        config = config.with_state_dir(dir);
    }
    Segments::start(store, config).unwrap()
}

fn spec(tag: &Tag, start: Option<u64>, force: bool) -> TagSpec {
    TagSpec {
        tag: tag.clone(),
        step: Step::new(100).unwrap(),
        start: start.map(|s| StartId::new(s).unwrap()),
        description: Description::default(),
        force,
    }
}

/// Takes `IDS_PER_ROUND` ids from each node, interleaved, into `seen`; every id new. A node
/// that meets the tag between its delete and its creation retries.
async fn round(nodes: &[&Arc<Segments>], tag: &Tag, seen: &mut HashSet<u64>) {
    for _ in 0..IDS_PER_ROUND {
        for node in nodes {
            let id = loop {
                match node.next_id(tag).await {
                    Ok(id) => break id,
                    Err(Error::UnknownTag(_)) => continue,
                    Err(error) => panic!("{error}"),
                }
            };
            assert!(seen.insert(id), "id {id} of tag {tag} handed out twice");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_deleted_and_created_again_on_two_nodes_never_repeats_an_id() {
    let Some(url) = idmint_testkit::mysql::fresh_database("tomb").await else {
        return;
    };
    let dir_a = tempfile::tempdir().unwrap();
    let a = node(&url, Some(dir_a.path())).await;
    let b = node(&url, None).await;
    let tag = Tag::parse("reborn").unwrap();
    a.create_tag(&spec(&tag, None, false)).await.unwrap();
    let mut seen = HashSet::new();
    round(&[&a, &b], &tag, &mut seen).await;

    // Deleted on A (the HTTP admin API's path) and created again with the default start.
    a.delete_tag(&tag).await.unwrap();
    let before = *seen.iter().max().unwrap();
    let created = a.create_tag(&spec(&tag, None, false)).await.unwrap();
    round(&[&a, &b], &tag, &mut seen).await;
    assert!(created.record.max_id > before, "{:?}", created.record);
    assert_eq!(created.forced, None);

    // Again, asking for start=1: refused with the reason, nothing created.
    a.delete_tag(&tag).await.unwrap();
    let refused = a.create_tag(&spec(&tag, Some(1), false)).await.unwrap_err();
    assert!(
        matches!(refused, Error::Store(StoreError::StartBelowIssued { start: 1, .. })),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("force"), "{refused}");
    assert_eq!(a.get_tag(&tag).await, Err(Error::UnknownTag(tag.clone())));

    // Forced: said so; node A's own high-water mark still keeps A above what it served.
    let forced = a.create_tag(&spec(&tag, Some(1), true)).await.unwrap();
    assert!(forced.forced.as_deref().is_some_and(|w| w.contains("forced")), "{forced:?}");
    let mut after = HashSet::new();
    round(&[&a], &tag, &mut after).await;
    assert!(after.is_disjoint(&seen), "node A handed out an id it served before the delete");
    a.shutdown().await;
    b.shutdown().await;
}
