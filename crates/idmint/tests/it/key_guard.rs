//! The key guard of permuted tags: the first node records its key's fingerprint in the
//! store's tag metadata (or, on stores without it, in a legacy guard row of the segment
//! table); the same key is accepted again (other nodes, restarts), a different key or width
//! is refused, a first key on a tag that already allocated ids is refused, `force` rewrites
//! the record, and of nodes racing to record different keys one wins. The record never holds
//! the key. A node with tag metadata moves legacy guard rows out of the segment table at
//! start (`migration` at the end: SQLite, MySQL, PostgreSQL).

use std::sync::Arc;

use idmint::format::{FormatError, KEY_GUARD_NAME, KeyGuard, claim_key, key_guard_tag};
use idmint::segment::{Count, SegmentConfig};
use idmint::store::{MemoryStore, SegmentStore, StoreError, TagMetaStore, TagSpec};
use idmint::{Segments, Tag};
use idmint_core::permute::{Permutation, PermuteKey};
use idmint_core::{Description, StartId, Step};

fn permutation(key: &str, bits: u32) -> Permutation {
    Permutation::new(&PermuteKey::parse_hex(key).unwrap(), bits).unwrap()
}

const KEY_A: &str = "000102030405060708090a0b0c0d0e0f";
const KEY_B: &str = "f0e0d0c0b0a090807060504030201000";

async fn create(segments: &Segments, name: &str) -> Tag {
    let tag = Tag::parse(name).unwrap();
    let spec = TagSpec {
        tag: tag.clone(),
        step: Step::new(100).unwrap(),
        start: Some(StartId::DEFAULT),
        force: false,
        description: Description::new("").unwrap(),
    };
    segments.create_tag(&spec).await.unwrap();
    tag
}

/// A memory store, its segments, and the key guard in its tag metadata.
fn memory() -> (Arc<MemoryStore>, Arc<Segments>, KeyGuard) {
    let store = Arc::new(MemoryStore::new());
    let segments = Segments::start(Arc::clone(&store) as _, SegmentConfig::default()).unwrap();
    let guard = KeyGuard::Meta(Arc::clone(&store) as _);
    (store, segments, guard)
}

#[tokio::test]
async fn a_key_change_is_refused_unless_forced() {
    for row in [false, true] {
        let (store, segments, meta) = memory();
        let guard = if row { KeyGuard::Row } else { meta };
        let tag = create(&segments, "order").await;
        let a = permutation(KEY_A, 41);
        claim_key(&segments, &guard, &tag, &a, false).await.unwrap();
        // Same key again (a second node, a restart): accepted, also on a second node's view.
        let other_node =
            Segments::start(Arc::clone(&store) as _, SegmentConfig::default()).unwrap();
        claim_key(&other_node, &guard, &tag, &a, false).await.unwrap();
        segments.next_ids(&tag, Count::new(10).unwrap()).await.unwrap();

        for changed in [permutation(KEY_B, 41), permutation(KEY_A, 40)] {
            let err = claim_key(&other_node, &guard, &tag, &changed, false).await.unwrap_err();
            assert!(matches!(err, FormatError::KeyChanged { .. }), "{err}");
            assert!(err.to_string().contains("force_key_change = true"), "{err}");
        }
        let guard_row = segments.get_tag(&key_guard_tag(&tag).unwrap()).await;
        let recorded = if row {
            guard_row.unwrap().description
        } else {
            // The metadata holds the record; the segment table holds no row for it.
            assert!(guard_row.is_err(), "a guard row beside the metadata");
            store.meta(&tag, KEY_GUARD_NAME).await.unwrap().unwrap()
        };
        assert!(recorded.contains(&format!("{:016x}", a.fingerprint())));
        assert!(!recorded.contains(KEY_A), "the record holds the key");

        let b = permutation(KEY_B, 41);
        claim_key(&other_node, &guard, &tag, &b, true).await.unwrap();
        claim_key(&segments, &guard, &tag, &b, false).await.unwrap();
        let old = claim_key(&segments, &guard, &tag, &a, false).await;
        assert!(old.is_err(), "the old key is now refused");
    }
}

/// Nodes starting together with different keys for one unused tag, each having read "no key
/// recorded" before any writes: exactly one records its key, every other is refused naming
/// the racing record, and the record is the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_nodes_racing_with_different_keys_one_wins() {
    let (store, segments, _) = memory();
    let tag = create(&segments, "raced").await;
    let keys: Vec<String> = (1..=RACERS as u8).map(|i| format!("{i:02x}").repeat(16)).collect();
    let gate = ReadTogether {
        inner: Arc::clone(&store),
        first_reads: std::sync::atomic::AtomicUsize::new(0),
        barrier: tokio::sync::Barrier::new(RACERS),
    };
    let guard = KeyGuard::Meta(Arc::new(gate));
    let claims = keys.iter().map(|key| {
        let (segments, guard, tag) = (Arc::clone(&segments), guard.clone(), tag.clone());
        let permutation = permutation(key, 41);
        tokio::spawn(async move {
            let claimed = claim_key(&segments, &guard, &tag, &permutation, false).await;
            (claimed, permutation.fingerprint())
        })
    });
    let mut winners = Vec::new();
    for claim in claims.collect::<Vec<_>>() {
        match claim.await.unwrap() {
            (Ok(()), fingerprint) => winners.push(fingerprint),
            (Err(FormatError::KeyChanged { reason, .. }), _) => {
                assert!(reason.contains("another node recorded"), "{reason}");
            }
            (Err(other), _) => panic!("{other}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:x?}");
    let recorded = store.meta(&tag, KEY_GUARD_NAME).await.unwrap().unwrap();
    assert!(recorded.contains(&format!("{:016x}", winners[0])), "{recorded}");
}

/// Nodes in [`of_nodes_racing_with_different_keys_one_wins`].
const RACERS: usize = 8;

/// A memory store whose first [`RACERS`] reads wait for one another: every racer reads before
/// any writes.
struct ReadTogether {
    inner: Arc<MemoryStore>,
    first_reads: std::sync::atomic::AtomicUsize,
    barrier: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl TagMetaStore for ReadTogether {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        let value = self.inner.meta(tag, name).await;
        if self.first_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < RACERS {
            self.barrier.wait().await;
        }
        value
    }

    async fn compare_and_set_meta(
        &self,
        tag: &Tag,
        name: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError> {
        self.inner.compare_and_set_meta(tag, name, expected, new).await
    }

    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError> {
        self.inner.meta_of_every_tag(name).await
    }
}

#[tokio::test]
async fn a_first_key_for_a_tag_that_issued_ids_is_refused_unless_forced() {
    let (_store, segments, meta) = memory();
    let key = permutation(KEY_A, 32);
    for (guard, missing) in [
        (meta, "key guard (in idmint_tag_meta) is missing"),
        (KeyGuard::Row, "key guard row idmint.key.used-row is missing"),
    ] {
        let row = matches!(guard, KeyGuard::Row);
        let suffix = if row { "-row" } else { "" };
        let fresh = create(&segments, &format!("fresh{suffix}")).await;
        claim_key(&segments, &guard, &fresh, &key, false).await.unwrap();
        let used = create(&segments, &format!("used{suffix}")).await;
        segments.next_id(&used).await.unwrap();
        let err = claim_key(&segments, &guard, &used, &key, false).await.unwrap_err();
        assert!(err.to_string().contains(missing), "{err}");
        claim_key(&segments, &guard, &used, &key, true).await.unwrap();
        claim_key(&segments, &guard, &used, &key, false).await.unwrap();
        // A tag too long for a guard row is refused with the limit; the metadata takes it.
        let long = create(&segments, &format!("{}{suffix}", "t".repeat(120))).await;
        let claimed = claim_key(&segments, &guard, &long, &key, false).await;
        match claimed {
            Err(err) => assert!(row && err.to_string().contains("at most 117 bytes"), "{err}"),
            Ok(()) => assert!(!row, "a guard row for a tag of 124 bytes"),
        }
    }
}

/// On stores without tag metadata (the fallback), the guard is an internal row: in the store,
/// out of every listing, never served, never nameable.
#[tokio::test]
async fn guard_rows_are_out_of_the_tag_namespace() {
    let store: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let segments = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let tag = create(&segments, "order").await;
    claim_key(&segments, &KeyGuard::Row, &tag, &permutation(KEY_A, 41), false).await.unwrap();
    let guard = key_guard_tag(&tag).unwrap();
    assert!(guard.is_internal());
    // The store holds the row; the listing every transport shows does not.
    assert!(store.list_tags().await.unwrap().iter().any(|r| r.tag == guard));
    let listed: Vec<Tag> = segments.list_tags().await.unwrap().into_iter().map(|r| r.tag).collect();
    assert_eq!(listed, vec![tag.clone()]);
    // It never allocates, and no user input names it, in any ASCII case.
    let err = segments.next_id(&guard).await.unwrap_err();
    assert!(matches!(err, idmint::Error::UnknownTag(_)), "{err}");
    for name in ["idmint.key.order", "IDMINT.KEY.order", "idmint.KEY.order"] {
        let err = Tag::parse(name).unwrap_err();
        assert!(err.to_string().contains("idmint's internal rows"), "{err}");
    }
    // A user tag named almost like a guard row is a tag like any other.
    let near = create(&segments, "idmint.keys.order").await;
    assert_eq!(segments.next_id(&near).await.unwrap(), 1);
}

/// On stores without tag metadata (the fallback), a guard row deleted by hand is reported as
/// missing, with how to record it again.
#[tokio::test]
async fn a_deleted_guard_row_is_reported_as_missing() {
    let store: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let segments = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let tag = create(&segments, "order").await;
    let a = permutation(KEY_A, 41);
    let guard = KeyGuard::Row;
    claim_key(&segments, &guard, &tag, &a, false).await.unwrap();
    segments.next_id(&tag).await.unwrap();
    // Someone deletes the guard row behind idmint's back (SQL, an older backup).
    store.delete_tag(&key_guard_tag(&tag).unwrap()).await.unwrap();
    let restarted = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let err = claim_key(&restarted, &guard, &tag, &a, false).await.unwrap_err().to_string();
    assert!(err.contains("key guard row idmint.key.order is missing"), "{err}");
    assert!(err.contains("deleted"), "{err}");
    claim_key(&restarted, &guard, &tag, &a, true).await.unwrap();
    claim_key(&restarted, &guard, &tag, &a, false).await.unwrap();
}

mod migration {
    //! A node with tag metadata moves the legacy guard rows an earlier version left in the
    //! segment table (made here by a node on the same store without tag metadata, as that
    //! version made them): after its start no `idmint.key.*` row is left in the table, the
    //! record is in `idmint_tag_meta`, the tag's ids and public ids go on unchanged, and a
    //! different key is still refused. A row that disagrees with the metadata stops the
    //! start, naming both.

    use idmint::node::{FormatConfig, NodeStartError};
    use idmint::sequence::time_zone;
    use idmint::{IdFormat, NodeBuilder, NodeConfig, Tag};
    use idmint_core::{Description, Step};
    use idmint_store::{Backend, StoreUrl, TagSpec};

    use super::{KEY_A, KEY_B, KEY_GUARD_NAME, permutation};
    use idmint::format::FormatError;

    const TEMPLATE: &str = "O-{id:base36:8}";

    fn config(url: &StoreUrl, key: &str) -> NodeConfig {
        let mut config = NodeConfig::new(url.clone());
        let format = format(key);
        let tag = Tag::parse("order").unwrap();
        config.formats = vec![FormatConfig { tag, format, force_key_change: false }];
        config
    }

    fn format(key: &str) -> IdFormat {
        IdFormat::new(TEMPLATE, time_zone("UTC").unwrap(), Some(permutation(key, 41))).unwrap()
    }

    /// The public text of internal id `id` under `key`.
    fn text(key: &str, id: u64) -> String {
        let format = format(key);
        let renderer = format.at(&format.zoned(0)).unwrap();
        renderer.render(id).unwrap()
    }

    async fn guard_rows(url: &StoreUrl) -> Vec<(String, String)> {
        let store = idmint_store::open(url).await.unwrap();
        let rows = store.list_tags().await.unwrap().into_iter();
        let guards =
            rows.filter(|r| r.tag.as_str().to_ascii_lowercase().starts_with("idmint.key."));
        guards.map(|r| (r.tag.as_str().to_string(), r.description)).collect()
    }

    /// The whole story on the store `url` names (empty).
    async fn legacy_rows_move_to_the_metadata(url: StoreUrl) {
        let order = Tag::parse("order").unwrap();
        let store = idmint_store::open(&url).await.unwrap();
        let spec = TagSpec {
            tag: order.clone(),
            step: Step::new(10).unwrap(),
            start: None,
            force: false,
            description: Description::new("orders").unwrap(),
        };
        store.create_tag(&spec).await.unwrap();
        // An earlier version: the key guard as a row of the segment table.
        let legacy = NodeBuilder::new(config(&url, KEY_A)).segment_store(store).start().await;
        let legacy = legacy.unwrap();
        let mut last = 0;
        for _ in 0..3 {
            let next = legacy.next_public_text_by_name("order").await.unwrap().to_string();
            let internal_id = format(KEY_A).decode(&next).unwrap().internal_id;
            assert!(internal_id > last, "{next} is internal id {internal_id}, after {last}");
            assert_eq!(next, text(KEY_A, internal_id));
            last = internal_id;
        }
        legacy.shutdown().await;
        let rows = guard_rows(&url).await;
        assert_eq!(rows.len(), 1, "{rows:?}");
        let recorded = rows[0].1.clone();

        // This version: the row moves, the ids go on where they were.
        let node = NodeBuilder::new(config(&url, KEY_A)).start().await.unwrap();
        assert_eq!(guard_rows(&url).await, [], "a guard row is left in the segment table");
        let meta = Backend::open(&url).await.unwrap().tag_meta().unwrap();
        assert_eq!(meta.meta(&order, KEY_GUARD_NAME).await.unwrap(), Some(recorded.clone()));
        let next = node.next_public_text_by_name("order").await.unwrap().to_string();
        let internal_id = format(KEY_A).decode(&next).unwrap().internal_id;
        assert!(internal_id > last, "{next} is internal id {internal_id}, after {last}");
        assert_eq!(next, text(KEY_A, internal_id));
        node.shutdown().await;

        // A different key is still refused, by the metadata.
        let refused = NodeBuilder::new(config(&url, KEY_B)).start().await.err().unwrap();
        let NodeStartError::FormatKey { source: FormatError::KeyChanged { .. }, .. } = &refused
        else {
            panic!("{refused:?}")
        };
        // A second start with the same key moves nothing and passes.
        let again = NodeBuilder::new(config(&url, KEY_A)).start().await.unwrap();
        again.shutdown().await;

        // A legacy row that disagrees with the metadata stops the start, naming both.
        let row = Tag::internal(&order).unwrap();
        let other = recorded.replace("41 bits", "40 bits");
        let spec = TagSpec { tag: row, description: Description::new(&other).unwrap(), ..spec };
        idmint_store::open(&url).await.unwrap().create_tag(&spec).await.unwrap();
        let refused = NodeBuilder::new(config(&url, KEY_A)).start().await.err().unwrap();
        let NodeStartError::FormatKey { source, .. } = &refused else { panic!("{refused:?}") };
        let message = source.to_string();
        assert!(matches!(source, FormatError::KeyGuardConflict { .. }), "{message}");
        assert!(message.contains(&recorded) && message.contains(&other), "{message}");
        assert!(message.contains("idmint.key.order"), "{message}");
        assert_eq!(guard_rows(&url).await.len(), 1, "the disputed row was deleted");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_legacy_guard_rows_move_to_the_metadata() {
        let dir = tempfile::tempdir().unwrap();
        legacy_rows_move_to_the_metadata(StoreUrl::Sqlite(dir.path().join("idmint.db"))).await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_legacy_guard_rows_move_to_the_metadata() {
        let Some(url) = idmint_testkit::mysql::fresh_database("keymove").await else { return };
        legacy_rows_move_to_the_metadata(StoreUrl::parse(&url).unwrap()).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_legacy_guard_rows_move_to_the_metadata() {
        let Some(url) = idmint_testkit::postgres::fresh_database("keymove").await else { return };
        legacy_rows_move_to_the_metadata(StoreUrl::parse(&url).unwrap()).await;
    }

    /// A keyed tag on a store without tag metadata (a segment store handed in alone, as
    /// Flicker and interleaved sets are) keeps its guard row: the fallback.
    #[tokio::test]
    async fn without_metadata_the_guard_stays_a_row() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite(dir.path().join("idmint.db"));
        let store = idmint_store::open(&url).await.unwrap();
        let node = NodeBuilder::new(config(&url, KEY_A)).segment_store(store).start().await;
        node.unwrap().shutdown().await;
        assert_eq!(guard_rows(&url).await.len(), 1);
        let meta = Backend::open(&url).await.unwrap().tag_meta().unwrap();
        let order = Tag::parse("order").unwrap();
        assert_eq!(meta.meta(&order, KEY_GUARD_NAME).await.unwrap(), None);
    }
}
