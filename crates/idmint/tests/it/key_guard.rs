//! The key guard of permuted tags: the first node records its key's fingerprint in the
//! store; the same key is accepted again (other nodes, restarts), a different key or width
//! is refused, a first key on a tag that already allocated ids is refused, and
//! `force` rewrites the record. The guard row never holds the key.

use std::sync::Arc;

use idmint::format::{FormatError, claim_key, key_guard_tag};
use idmint::segment::{Count, SegmentConfig};
use idmint::store::{MemoryStore, SegmentStore, TagSpec};
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

#[tokio::test]
async fn a_key_change_is_refused_unless_forced() {
    let store: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let segments = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let tag = create(&segments, "order").await;
    let a = permutation(KEY_A, 41);
    claim_key(&segments, &tag, &a, false).await.unwrap();
    // Same key again (a second node, a restart): accepted, also on a second node's view.
    let other_node = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    claim_key(&other_node, &tag, &a, false).await.unwrap();
    segments.next_ids(&tag, Count::new(10).unwrap()).await.unwrap();

    for changed in [permutation(KEY_B, 41), permutation(KEY_A, 40)] {
        let err = claim_key(&other_node, &tag, &changed, false).await.unwrap_err();
        assert!(matches!(err, FormatError::KeyChanged { .. }), "{err}");
        assert!(err.to_string().contains("force_key_change = true"), "{err}");
    }
    let row = segments.get_tag(&key_guard_tag(&tag).unwrap()).await.unwrap();
    assert!(row.description.contains(&format!("{:016x}", a.fingerprint())));
    assert!(!row.description.contains(KEY_A), "the guard row holds the key");

    let b = permutation(KEY_B, 41);
    claim_key(&other_node, &tag, &b, true).await.unwrap();
    claim_key(&segments, &tag, &b, false).await.unwrap();
    assert!(claim_key(&segments, &tag, &a, false).await.is_err(), "the old key is now refused");
}

#[tokio::test]
async fn a_first_key_for_a_tag_that_issued_ids_is_refused_unless_forced() {
    let store: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let segments = Segments::start(store, SegmentConfig::default()).unwrap();
    let fresh = create(&segments, "fresh").await;
    claim_key(&segments, &fresh, &permutation(KEY_A, 32), false).await.unwrap();
    let used = create(&segments, "used").await;
    segments.next_id(&used).await.unwrap();
    let err = claim_key(&segments, &used, &permutation(KEY_A, 32), false).await.unwrap_err();
    assert!(err.to_string().contains("key guard row idmint.key.used is missing"), "{err}");
    claim_key(&segments, &used, &permutation(KEY_A, 32), true).await.unwrap();
    // A tag too long for its guard row is refused with the limit.
    let long = Tag::parse(&"t".repeat(120)).unwrap();
    let err = claim_key(&segments, &long, &permutation(KEY_A, 32), false).await.unwrap_err();
    assert!(err.to_string().contains("at most 117 bytes"), "{err}");
}

#[tokio::test]
async fn guard_rows_are_out_of_the_tag_namespace() {
    let store: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let segments = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let tag = create(&segments, "order").await;
    claim_key(&segments, &tag, &permutation(KEY_A, 41), false).await.unwrap();
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

#[tokio::test]
async fn a_deleted_guard_row_is_reported_as_missing() {
    let store: Arc<dyn SegmentStore> = Arc::new(MemoryStore::new());
    let segments = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let tag = create(&segments, "order").await;
    let a = permutation(KEY_A, 41);
    claim_key(&segments, &tag, &a, false).await.unwrap();
    segments.next_id(&tag).await.unwrap();
    // Someone deletes the guard row behind idmint's back (SQL, an older backup).
    store.delete_tag(&key_guard_tag(&tag).unwrap()).await.unwrap();
    let restarted = Segments::start(Arc::clone(&store), SegmentConfig::default()).unwrap();
    let err = claim_key(&restarted, &tag, &a, false).await.unwrap_err().to_string();
    assert!(err.contains("key guard row idmint.key.order is missing"), "{err}");
    assert!(err.contains("deleted"), "{err}");
    claim_key(&restarted, &tag, &a, true).await.unwrap();
    claim_key(&restarted, &tag, &a, false).await.unwrap();
}
