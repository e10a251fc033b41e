//! The take by name (`Segments::next_id_by_name`, `Node::next_public_text_by_name`), what a
//! transport calls with the name straight from the request: it answers every name exactly
//! as parsing it and taking by the `Tag` does (the ids, and every refusal: a bad name, an
//! internal row's name in any ASCII case, an unknown tag), and never serves an internal row.

use std::sync::Arc;

use idmint::node::{FormatConfig, NodeError, PublicIds};
use idmint::segment::{ByNameError, Count, SegmentConfig};
use idmint::sequence::time_zone;
use idmint::{IdFormat, Node, NodeBuilder, NodeConfig, Segments, Tag};
use idmint_core::limits::TAG_LEN_MAX;
use idmint_core::{Description, StartId, Step};
use idmint_store::{MemoryStore, RangeStore, SegmentStore, StoreUrl, TagSpec};

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

/// The row of `tag` with step 3 from `start` (the store's default when `None`).
fn spec(tag: Tag, start: Option<StartId>) -> TagSpec {
    TagSpec {
        tag,
        step: Step::new(3).unwrap(),
        start,
        force: false,
        description: Description::default(),
    }
}

async fn store_with_rows() -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let internal = ["idmint.key.order", "IDMINT.KEY.order", "idmint.key.订单"];
    let tags = served().into_iter().map(|n| Tag::parse(&n).unwrap());
    let rows = tags.chain(internal.map(|n| Tag::from_stored(n).unwrap()));
    for tag in rows {
        store.create_tag(&spec(tag, Some(StartId::DEFAULT))).await.unwrap();
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
                Ok(tag) => match parsed.next_public_ids(&tag, Count::ONE).await {
                    Ok(PublicIds::Numbers(ids)) => Ok(ids[0].to_string()),
                    Ok(PublicIds::Texts(texts)) => Ok(texts[0].clone()),
                    Err(error) => Err(format!("{error:?}")),
                },
                Err(error) => Err(format!("{:?}", NodeError::Tag(error))),
            };
            let got = by_name.next_public_text_by_name(&name).await;
            let got = got.map(|text| text.to_string()).map_err(|error| format!("{error:?}"));
            assert_eq!(got, expected, "{name:?}, round {round}");
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
    segments.create_tag(&spec(order.clone(), None)).await.unwrap();
    let again = segments.next_id_by_name("order").await.unwrap();
    assert!(again > 3, "the tag created again continues above the old one's ids: {again}");
    segments.shutdown().await;
    other.shutdown().await;
}

/// A segments engine on a store of its own holding `order` (step 3) from `start`.
async fn order_from(start: u64) -> Arc<Segments> {
    let store = Arc::new(MemoryStore::new());
    let order = spec(Tag::parse("order").unwrap(), Some(StartId::new(start).unwrap()));
    store.create_tag(&order).await.unwrap();
    Segments::start(store, SegmentConfig::default()).unwrap()
}

/// A take by a `Tag`, by an equal `Tag` of another allocation and by the name all draw from
/// the one generator: one increasing sequence, whichever way each take names the tag. A
/// thread remembers the entries it last found (`LAST_REGISTRY`); the other names in between
/// make it change entry, and every way of finding it must agree.
#[tokio::test]
async fn every_way_of_naming_a_tag_takes_from_its_one_generator() {
    let store = store_with_rows().await;
    let segments = Segments::start(store, SegmentConfig::default()).unwrap();
    let parsed = Tag::parse("order").unwrap();
    assert_eq!(segments.try_next_id_by_name("order"), None, "served before its first request");
    assert_eq!(segments.next_id(&parsed).await, Ok(1));
    let equal = Tag::parse("order").unwrap();
    assert!(!std::ptr::eq(parsed.as_str(), equal.as_str()));
    let other = Tag::parse("订单").unwrap();
    assert_eq!(segments.try_next_id_by_name("Order"), None);
    assert_eq!(segments.try_next_id_by_name("idmint.key.order"), None);
    let mut last = 1;
    let mut other_last = 0;
    for round in 0..30 {
        let id = match round % 5 {
            0 => segments.next_id(&parsed).await.unwrap(),
            1 => segments.next_id(&equal).await.unwrap(),
            2 => segments.next_id_by_name("order").await.unwrap(),
            3 => match segments.try_next_id(&parsed) {
                Some(id) => id,
                None => segments.next_id(&parsed).await.unwrap(),
            },
            _ => {
                let id = segments.next_id(&other).await.unwrap();
                assert!(id > other_last, "订单: {id} after {other_last}");
                other_last = id;
                // Its entry is the thread's last hit now; the next take of `order` moves it back.
                continue;
            }
        };
        assert_eq!(id, last + 1, "round {round}");
        last = id;
    }
    segments.shutdown().await;
}

/// A take by a `Tag` the caller holds follows the registry: after the tag is deleted
/// nothing is served by it, and after it is created again the same `Tag` takes from the new
/// generator (above every id the old one handed out), never from the old generator's
/// remaining ids.
#[tokio::test]
async fn a_take_by_a_held_tag_follows_deletes_and_creates() {
    let segments = order_from(1).await;
    let order = Tag::parse("order").unwrap();
    assert_eq!(segments.next_id(&order).await, Ok(1));
    // The old generator holds ids 3.. in its buffer from here on.
    assert_eq!(segments.try_next_id(&order), Some(2));
    segments.delete_tag(&order).await.unwrap();
    let unknown = idmint::Error::UnknownTag(order.clone());
    assert_eq!(segments.try_next_id(&order), None, "served by its Tag after its delete");
    assert_eq!(segments.next_id(&order).await, Err(unknown));
    assert_eq!(segments.try_next_id_by_name("order"), None);
    segments.create_tag(&spec(order.clone(), None)).await.unwrap();
    let first = segments.next_id(&order).await.unwrap();
    assert!(first > 3, "the old generator's id {first} was served after the create");
    for _ in 0..10 {
        let id = segments.next_id(&order).await.unwrap();
        assert!(id > first, "{id} after {first}");
    }
    segments.shutdown().await;
}

/// Two engines on one thread, each serving `order` from its own store (ids from 1 and from
/// 1000), taken from in turn by one shared `Tag`
/// and by name: each answers from its own generator. A thread's snapshot of one registry
/// must never answer for the other, though both have made the same number of changes.
#[tokio::test]
async fn two_engines_on_one_thread_never_answer_for_each_other() {
    let (low, high) = (order_from(1).await, order_from(1_000).await);
    let order = Tag::parse("order").unwrap();
    let mut next = [1, 1_000];
    for round in 0..40 {
        for (i, segments) in [&low, &high].into_iter().enumerate() {
            let id = match round % 3 {
                0 => segments.next_id(&order).await.unwrap(),
                1 => segments.next_id_by_name("order").await.unwrap(),
                _ => match segments.try_next_id(&order) {
                    Some(id) => id,
                    None => segments.next_id(&order).await.unwrap(),
                },
            };
            assert_eq!(id, next[i], "engine {i}, round {round}");
            next[i] += 1;
        }
    }
    low.shutdown().await;
    high.shutdown().await;
}

/// Another thread keeps its snapshot of an engine's registry after the engine is dropped
/// (until its next lookup). A new engine, likely at the same address, serving `order`
/// through the very same `Tag` allocation, must be read afresh by that thread: its ids come
/// from the new store (from 1000), never from the dropped engine's generator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_engine_is_never_read_through_a_dropped_ones_snapshot() {
    let order = Tag::parse("order").unwrap();
    let (to_thread, requests) = std::sync::mpsc::channel::<Arc<Segments>>();
    let (answer, answers) = std::sync::mpsc::channel::<Option<u64>>();
    let taker = {
        let order = order.clone();
        std::thread::spawn(move || {
            for segments in requests {
                answer.send(segments.try_next_id(&order)).unwrap();
            }
        })
    };
    let first = order_from(1).await;
    assert_eq!(first.next_id(&order).await, Ok(1));
    to_thread.send(Arc::clone(&first)).unwrap();
    assert_eq!(answers.recv().unwrap(), Some(2), "the thread's snapshot of the first engine");
    first.shutdown().await;
    drop(first);
    let second = order_from(1_000).await;
    assert_eq!(second.next_id(&order).await, Ok(1_000));
    to_thread.send(Arc::clone(&second)).unwrap();
    assert_eq!(answers.recv().unwrap(), Some(1_001), "read through the dropped engine");
    drop(to_thread);
    taker.join().unwrap();
    second.shutdown().await;
}

/// A thread remembers its last two hits (`LastRegistry::hit` and `previous`, swapped when a
/// take names the previous one): takes by name over three tags in a seeded random order,
/// each tag's ids in a range of its own, always come from the named tag's generator and
/// increase per tag, whichever of the two hits, or the hashed lookup, found it.
#[tokio::test]
async fn takes_switching_among_tags_each_come_from_the_named_tag() {
    let store = Arc::new(MemoryStore::new());
    let names = ["alpha", "beta", "gamma"];
    let base = |i: usize| 1 + 1_000_000_000 * i as u64;
    for (i, name) in names.iter().enumerate() {
        let start = StartId::new(base(i)).unwrap();
        store.create_tag(&spec(Tag::parse(name).unwrap(), Some(start))).await.unwrap();
    }
    let segments = Segments::start(store, SegmentConfig::default()).unwrap();
    let mut last = [0u64; 3];
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    for _ in 0..3_000 {
        // xorshift: runs of one tag, two tags in turn, and all three mixed.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let i = (seed % 3) as usize;
        let id = segments.next_id_by_name(names[i]).await.unwrap();
        assert!(
            (base(i)..base(i + 1)).contains(&id),
            "{} answered {id}, an id of another tag",
            names[i]
        );
        assert!(id > last[i], "{}: {id} after {}", names[i], last[i]);
        last[i] = id;
    }
}
