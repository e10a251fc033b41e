//! The take by name (`Segments::next_id_by_name`, `Node::next_public_text_by_name`), what a
//! transport calls with the name straight from the request: it answers every name exactly
//! as parsing it and taking by the `Tag` does (the ids, and every refusal: a bad name, an
//! internal row's name in any ASCII case, an unknown tag), and never serves an internal row.

use std::sync::Arc;

use idmint::node::{FormatConfig, NodeError};
use idmint::segment::{ByNameError, SegmentConfig};
use idmint::sequence::time_zone;
use idmint::{IdFormat, Node, NodeBuilder, NodeConfig, Segments, Tag};
use idmint_core::limits::TAG_LEN_MAX;
use idmint_core::{Description, StartId, Step};
use idmint_store::{MemoryStore, SegmentStore, StoreUrl, TagSpec};

/// The tags both stores hold: plain and non-ASCII names, both 128 bytes long.
fn served() -> Vec<String> {
    vec![
        "order".to_string(),
        "订单".to_string(),
        "x".repeat(TAG_LEN_MAX),
        format!("{}ab", "订".repeat(42)),
    ]
}

/// Every kind of name a request can carry.
fn names() -> Vec<String> {
    let mut names = served();
    names.extend(
        [
            "nope",
            "Order",
            "order ",
            " order",
            "",
            "a\nb",
            "ab\u{202E}c",
            "idmint.keys",
            "idmint.key.order",
            "IDMINT.KEY.order",
            "Idmint.Key.Order",
            "iDmInT.kEy.order",
            "idmint.key.",
            "idmint.key.订单",
        ]
        .map(String::from),
    );
    names.push("y".repeat(TAG_LEN_MAX));
    names.push(format!("{}cd", "订".repeat(42)));
    names.push("x".repeat(TAG_LEN_MAX + 1));
    names.push("订".repeat(43));
    names
}

async fn store_with_rows() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let internal = ["idmint.key.order", "IDMINT.KEY.order", "idmint.key.订单"];
    let tags = served().into_iter().map(|n| Tag::parse(&n).unwrap());
    let rows = tags.chain(internal.map(|n| Tag::from_stored(n).unwrap()));
    for tag in rows {
        let spec = TagSpec {
            tag,
            step: Step::new(3).unwrap(),
            start: Some(StartId::DEFAULT),
            force: false,
            description: Description::default(),
        };
        store.create_tag(&spec).await.unwrap();
    }
    store
}

/// The path a transport took before: parse the name, then take by the tag.
async fn by_tag(segments: &Segments, name: &str) -> Result<u64, ByNameError> {
    let tag = Tag::parse(name)?;
    Ok(segments.next_id(&tag).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_name_answers_every_name_as_its_parsed_tag_does() {
    let (store_a, store_b) = (store_with_rows().await, store_with_rows().await);
    let by_name = Segments::start(store_a.clone(), SegmentConfig::default()).unwrap();
    let parsed = Segments::start(store_b.clone(), SegmentConfig::default()).unwrap();
    let mut served_ids = 0;
    // Several rounds: the first request of a name loads it, later ones hit the registry, and
    // a step of 3 makes most rounds cross a refill.
    for round in 0..7 {
        for name in names() {
            let expected = by_tag(&parsed, &name).await;
            let got = by_name.next_id_by_name(&name).await;
            assert_eq!(got, expected, "{name:?}, round {round}");
            served_ids += u64::from(got.is_ok());
            if !served().contains(&name) {
                // The synchronous take of a served tag depends on when its refill lands (the
                // two nodes refill on their own); of any other name it is `None`, by name as
                // by tag.
                assert_eq!(by_name.try_next_id_by_name(&name), None, "{name:?}");
                let tag_hit = Tag::parse(&name).ok().and_then(|tag| parsed.try_next_id(&tag));
                assert_eq!(tag_hit, None, "{name:?}");
            }
        }
    }
    assert_eq!(served_ids, 7 * served().len() as u64, "every served tag answered every round");
    for name in ["idmint.key.order", "IDMINT.KEY.order", "idmint.key.订单"] {
        let row = Tag::from_stored(name).unwrap();
        for store in [&store_a, &store_b] {
            let max_id = store.get_tag(&row).await.unwrap().unwrap().max_id;
            assert_eq!(max_id, 1, "{name}: an internal row was allocated from");
        }
        assert!(by_name.snapshot(&row).is_none(), "{name} is served");
    }
    by_name.shutdown().await;
    parsed.shutdown().await;
}

#[tokio::test]
async fn node_by_name_answers_as_the_parsed_tag_formats_included() {
    async fn node() -> Node {
        let store = store_with_rows().await;
        let mut config = NodeConfig::new(StoreUrl::Memory);
        let format = IdFormat::new("C-{id}", time_zone("UTC").unwrap(), None).unwrap();
        let tag = Tag::parse("订单").unwrap();
        config.formats = vec![FormatConfig { tag, format, force_key_change: false }];
        NodeBuilder::new(config).stores(store).start().await.unwrap()
    }
    let (by_name, parsed) = (node().await, node().await);
    for round in 0..4 {
        for name in names() {
            let expected = match Tag::parse(&name) {
                Ok(tag) => parsed.next_public_text(&tag).await,
                Err(error) => Err(NodeError::Tag(error)),
            };
            let got = by_name.next_public_text_by_name(&name).await;
            assert_eq!(format!("{got:?}"), format!("{expected:?}"), "{name:?}, round {round}");
        }
    }
    assert_eq!(by_name.next_public_text_by_name("订单").await.unwrap(), "C-5");
    let bad = by_name.next_public_text_by_name("IDMINT.KEY.order").await.unwrap_err();
    assert!(matches!(bad, NodeError::Tag(idmint::TagError::Reserved)), "{bad:?}");
    by_name.shutdown().await;
    parsed.shutdown().await;
}

/// A thread reads the registry through its snapshot of it (`LAST_REGISTRY`): a tag deleted
/// through the node is not served from a snapshot taken before, by name or by tag, and one
/// created again is served by its new generator. The snapshot is made to hold the tag by
/// switching between two nodes on this thread (each switch reloads it).
#[tokio::test]
async fn a_threads_registry_snapshot_follows_deletes_and_creates() {
    let store = store_with_rows().await;
    let other = Segments::start(store_with_rows().await, SegmentConfig::default()).unwrap();
    let segments = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
    let order = Tag::parse("order").unwrap();
    assert_eq!(segments.next_id_by_name("order").await, Ok(1));
    assert_eq!(other.next_id_by_name("order").await, Ok(1));
    assert_eq!(segments.try_next_id_by_name("order"), Some(2), "a snapshot holding the tag");
    segments.delete_tag(&order).await.unwrap();
    let unknown = Err(ByNameError::Segment(idmint::Error::UnknownTag(order.clone())));
    assert_eq!(segments.try_next_id_by_name("order"), None, "served after its delete");
    assert_eq!(segments.next_id_by_name("order").await, unknown);
    assert_eq!(segments.next_id(&order).await, Err(idmint::Error::UnknownTag(order.clone())));
    assert_eq!(other.next_id_by_name("order").await, Ok(2));
    let spec = TagSpec {
        tag: order.clone(),
        step: Step::new(3).unwrap(),
        start: None,
        force: false,
        description: Description::default(),
    };
    segments.create_tag(&spec).await.unwrap();
    let again = segments.next_id_by_name("order").await.unwrap();
    assert!(again > 3, "the tag created again continues above the old one's ids: {again}");
    segments.shutdown().await;
    other.shutdown().await;
}
