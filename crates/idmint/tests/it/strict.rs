//! Strict tags across nodes on one store: one owner at a time, takes elsewhere forwarded to
//! it and coalesced, every id answered before a take was sent below that take's ids (checked
//! with takes in turn on alternating nodes and with many at once), failover to a new owner
//! above the old one's ids (after a shutdown and after an owner vanished without one), a
//! strict tag created after a node started learnt from the store, and deletion. The
//! timestamp oracle on the same machinery: increasing across nodes and owners, whatever the
//! nodes' clocks do.
//!
//! Nodes reach each other through [`Direct`], a `PeerLink` that calls the other `Node` in
//! this process: what the server's gRPC link does, without the transport.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use idmint::clock::{Clock, ManualClock, SystemClock};
use idmint::node::{Feature, NodeError, Peer, PeerError, PeerLink, PublicIds};
use idmint::peer::FenceToken;
use idmint::segment::{Count, Error};
use idmint::strict::StrictConfig;
use idmint::witness::{MetaMarks, Witness};
use idmint::{Node, NodeBuilder, NodeConfig, Tag};
use idmint_core::StartId;
use idmint_store::{MemoryStore, StoreError, StoreUrl};

/// A lease short enough for a test to wait out.
const TTL_MS: u64 = 600;
const MARGIN_MS: u64 = 200;

/// Nodes by address, called in-process.
#[derive(Default)]
struct Direct {
    nodes: Mutex<HashMap<String, Weak<Node>>>,
    /// Calls made, to see coalescing.
    calls: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl PeerLink for Direct {
    async fn next_ids(
        &self,
        peer: &Peer,
        tag: &Tag,
        count: Count,
        fence: Option<FenceToken>,
    ) -> Result<PublicIds, PeerError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let node = self.nodes.lock().unwrap().get(&peer.grpc_url).and_then(Weak::upgrade);
        let Some(node) = node else {
            let reason = "no such node".to_string();
            return Err(PeerError::Unreachable { peer: peer.grpc_url.clone(), reason });
        };
        let ids = match fence {
            Some(fence) => node
                .forwarded_ids(tag, count, fence)
                .await
                .map(|r| PublicIds::Numbers(r.ids().collect())),
            None => node.next_public_ids(tag, count).await,
        };
        ids.map_err(|error| match error {
            NodeError::Segment(Error::UnknownTag(_)) => PeerError::Refused {
                peer: peer.grpc_url.clone(),
                code: "unknown_tag".into(),
                message: error.to_string(),
            },
            other => {
                PeerError::Unreachable { peer: peer.grpc_url.clone(), reason: other.to_string() }
            }
        })
    }

    async fn timestamps(
        &self,
        peer: &Peer,
        count: Count,
        fence: Option<FenceToken>,
    ) -> Result<u64, PeerError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let node = self.nodes.lock().unwrap().get(&peer.grpc_url).and_then(Weak::upgrade);
        let Some(node) = node else {
            let reason = "no such node".to_string();
            return Err(PeerError::Unreachable { peer: peer.grpc_url.clone(), reason });
        };
        let range = match fence {
            Some(fence) => node.forwarded_timestamps(count, fence).await,
            None => node.timestamps(count).await,
        };
        let range = range.map_err(|error| PeerError::Unreachable {
            peer: peer.grpc_url.clone(),
            reason: error.to_string(),
        })?;
        Ok(range.start())
    }
}

/// A node named `name` on `store`, reached through `link`.
async fn node(name: &str, store: &Arc<MemoryStore>, link: &Arc<Direct>) -> Arc<Node> {
    node_on_clock(name, store, link, Arc::new(SystemClock)).await
}

/// [`node`] on `clock` (the oracle's physical part).
async fn node_on_clock(
    name: &str,
    store: &Arc<MemoryStore>,
    link: &Arc<Direct>,
    clock: Arc<dyn Clock>,
) -> Arc<Node> {
    node_witnessed(name, store, link, clock, None).await
}

/// [`node_on_clock`] with `witness`, if any.
async fn node_witnessed(
    name: &str,
    store: &Arc<MemoryStore>,
    link: &Arc<Direct>,
    clock: Arc<dyn Clock>,
    witness: Option<Witness>,
) -> Arc<Node> {
    let mut config = NodeConfig::new(StoreUrl::Memory);
    if let Some(witness) = witness {
        config.segment = config.segment.with_witness(witness);
    }
    let mut strict = StrictConfig::new(Peer { grpc_url: name.to_string() });
    (strict.lease_ttl_ms, strict.lease_margin_ms) = (TTL_MS, MARGIN_MS);
    config.strict = Some(strict);
    let node = NodeBuilder::new(config)
        .stores(Arc::clone(store))
        .peer_link(Arc::clone(link) as Arc<dyn PeerLink>)
        .clock(clock)
        .start()
        .await
        .unwrap();
    let node = Arc::new(node);
    link.nodes.lock().unwrap().insert(name.to_string(), Arc::downgrade(&node));
    node
}

async fn take(node: &Node, name: &str) -> u64 {
    node.next_public_text_by_name(name).await.unwrap().to_string().parse().unwrap()
}

/// Takes in turn on two nodes, each sent after the last was answered, increase; the first
/// node owns the tag it created and the other forwards; ranges are refused, and the name is
/// taken for plain and strict tags alike.
#[tokio::test]
async fn takes_in_turn_on_two_nodes_increase() {
    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b) = (node("a", &store, &link).await, node("b", &store, &link).await);
    let tag = Tag::parse("chat").unwrap();
    a.create_strict_tag(&tag, None).await.unwrap();
    let mut last = 0;
    for round in 0..200 {
        let node = if round % 3 == 0 { &a } else { &b };
        let id = take(node, "chat").await;
        assert!(id > last, "round {round}: {id} after {last}");
        last = id;
    }
    assert_eq!(b.next_public_ids(&tag, Count::new(5).unwrap()).await.unwrap(), {
        PublicIds::Numbers((last + 1..last + 6).collect())
    });
    let refused = b.lease(&tag, Count::ONE).await.unwrap_err();
    assert!(matches!(refused, NodeError::StrictTag(_)), "{refused}");
    let exists =
        |e: NodeError| matches!(e, NodeError::Segment(Error::Store(StoreError::TagExists(_))));
    assert!(exists(b.create_strict_tag(&tag, None).await.unwrap_err()));
    let spec = idmint_store::TagSpec {
        tag: tag.clone(),
        step: idmint_core::Step::new(10).unwrap(),
        start: None,
        description: idmint_core::Description::default(),
        force: false,
    };
    assert!(exists(b.create_tag(&spec).await.unwrap_err()));
    a.shutdown().await;
    b.shutdown().await;
}

/// Many takes at once on a forwarding node: every id once, each caller's ids in the order
/// it was answered, and fewer calls to the owner than takes (coalesced).
#[tokio::test]
async fn concurrent_forwarded_takes_are_coalesced_and_unique() {
    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b) = (node("a", &store, &link).await, node("b", &store, &link).await);
    a.create_strict_tag(&Tag::parse("feed").unwrap(), None).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let b = Arc::clone(&b);
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..100 {
                    ids.push(take(&b, "feed").await);
                }
                ids
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        let ids = task.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "a caller's ids went back");
        all.extend(ids);
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "an id was answered twice");
    let calls = link.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(calls < count as u64, "{calls} calls for {count} takes: nothing coalesced");
    a.shutdown().await;
    b.shutdown().await;
}

/// The owner shut down: the next take elsewhere owns the tag and starts above every id the
/// old owner answered. The new owner vanished without a shutdown (its lease left to expire):
/// another node waits out the lease and the margin, then serves above it.
#[tokio::test]
async fn a_new_owner_starts_above_the_old_ones_ids() {
    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b) = (node("a", &store, &link).await, node("b", &store, &link).await);
    a.create_strict_tag(&Tag::parse("ord").unwrap(), Some(StartId::new(1_000).unwrap()))
        .await
        .unwrap();
    let first = take(&a, "ord").await;
    assert_eq!(first, 1_000);
    a.shutdown().await;
    link.nodes.lock().unwrap().remove("a");
    let on_b = take(&b, "ord").await;
    assert!(on_b > first, "{on_b} after {first}");

    let c = node("c", &store, &link).await;
    assert!(take(&c, "ord").await > on_b);
    // b vanishes as a crash would end it: its lease is neither released nor renewed.
    link.nodes.lock().unwrap().remove("b");
    drop(b);
    let vanished_at = std::time::Instant::now();
    let after = loop {
        match c.next_public_text_by_name("ord").await {
            Ok(text) => break text.to_string().parse::<u64>().unwrap(),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(after > on_b);
    assert!(vanished_at.elapsed() < Duration::from_millis(TTL_MS * 4), "failover took too long");
    c.shutdown().await;
}

/// A strict tag created after a node started is learnt from the store at its first take
/// there; deleting it stops it everywhere.
#[tokio::test]
async fn a_later_strict_tag_is_learnt_and_a_deleted_one_is_unknown() {
    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b) = (node("a", &store, &link).await, node("b", &store, &link).await);
    let tag = Tag::parse("late").unwrap();
    let unknown = b.next_public_text_by_name("late").await.unwrap_err();
    assert!(matches!(unknown, NodeError::Segment(Error::UnknownTag(_))), "{unknown}");
    a.create_strict_tag(&tag, None).await.unwrap();
    // b found the name unrecorded a moment ago: it looks again within about a second, as
    // for a plain tag created behind its back.
    let asked = std::time::Instant::now();
    let x = loop {
        match b.next_public_text_by_name("late").await {
            Ok(text) => break text.to_string().parse::<u64>().unwrap(),
            Err(NodeError::Segment(Error::UnknownTag(_))) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("{error}"),
        }
    };
    assert!(asked.elapsed() < Duration::from_millis(1_500), "{:?}", asked.elapsed());
    assert!(take(&a, "late").await > x);
    a.delete_tag(&tag).await.unwrap();
    let gone = b.next_public_text_by_name("late").await.unwrap_err();
    assert!(matches!(gone, NodeError::Segment(Error::UnknownTag(_))), "{gone}");
    // Created again: above every id the deleted tag had.
    b.create_strict_tag(&tag, None).await.unwrap();
    assert!(take(&a, "late").await > x + 1);
    a.shutdown().await;
    b.shutdown().await;
}

async fn takes(node: &Node, name: &str, n: usize) -> Vec<u64> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(take(node, name).await);
    }
    ids
}

fn plain_spec(tag: &Tag) -> idmint_store::TagSpec {
    idmint_store::TagSpec {
        tag: tag.clone(),
        step: idmint_core::Step::new(10).unwrap(),
        start: None,
        description: idmint_core::Description::default(),
        force: false,
    }
}

/// The tag's lease row deleted, or restored from a backup taken before the owner's takes:
/// the ceiling recorded beside it in the tag metadata keeps the next owner above every id.
#[tokio::test]
async fn a_lease_row_deleted_or_restored_older_never_brings_ids_back() {
    use idmint::strict::lease_space;

    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b, c) = (
        node("a", &store, &link).await,
        node("b", &store, &link).await,
        node("c", &store, &link).await,
    );
    let tag = Tag::parse("ord").unwrap();
    a.create_strict_tag(&tag, None).await.unwrap();
    let backup = store.snapshot_worker_rows();
    let on_a = takes(&a, "ord", 3).await;
    a.shutdown().await;
    link.nodes.lock().unwrap().remove("a");
    store.delete_worker_rows(&lease_space(&tag));
    let on_b = takes(&b, "ord", 3).await;
    assert!(on_b[0] > on_a[2], "{on_b:?} after {on_a:?}");
    b.shutdown().await;
    link.nodes.lock().unwrap().remove("b");
    store.restore_worker_rows(&backup);
    let on_c = takes(&c, "ord", 1).await;
    assert!(on_c[0] > on_b[2], "{on_c:?} after {on_b:?}");
    c.shutdown().await;
}

/// A plain tag deleted and created again as strict starts above its tombstone; a strict tag
/// deleted and created again as plain starts above its ceiling (a start below it refused).
#[tokio::test]
async fn a_name_changing_policy_never_brings_ids_back() {
    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let a = node("a", &store, &link).await;
    let (plain, strict) = (Tag::parse("pl").unwrap(), Tag::parse("st").unwrap());
    a.create_tag(&plain_spec(&plain)).await.unwrap();
    let as_plain = takes(&a, "pl", 3).await;
    a.delete_tag(&plain).await.unwrap();
    a.create_strict_tag(&plain, None).await.unwrap();
    let as_strict = takes(&a, "pl", 1).await;
    assert!(as_strict[0] > as_plain[2], "{as_strict:?} after {as_plain:?}");

    a.create_strict_tag(&strict, None).await.unwrap();
    let as_strict = takes(&a, "st", 3).await;
    a.delete_tag(&strict).await.unwrap();
    let mut below = plain_spec(&strict);
    below.start = Some(StartId::new(1).unwrap());
    let refused = a.create_tag(&below).await.unwrap_err();
    assert!(refused.to_string().contains("below"), "{refused}");
    a.create_tag(&plain_spec(&strict)).await.unwrap();
    let as_plain = takes(&a, "st", 1).await;
    assert!(as_plain[0] > as_strict[2], "{as_plain:?} after {as_strict:?}");
    a.shutdown().await;
}

/// One batch of the oracle on `node`: its first and last timestamps.
async fn stamps(node: &Node, count: u64) -> (u64, u64) {
    let range = node.timestamps(Count::new(count).unwrap()).await.unwrap();
    (range.start(), range.end() - 1)
}

/// The oracle on two nodes whose clocks differ and jump: batches in turn on either node, each
/// asked after the last was answered, increase, never span a millisecond, follow the clock
/// when it is ahead, and never go back when it steps back (the logical part carries them). A
/// new owner (the old one shut down, then one vanished without a shutdown) starts above
/// every timestamp of the old one even with its clock far behind.
#[tokio::test]
async fn the_oracle_increases_across_nodes_clocks_and_owners() {
    use idmint_core::tso::split;

    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let a_clock = Arc::new(ManualClock::at_system_time());
    let b_clock = Arc::new(ManualClock::new(a_clock.now_ms() - 60_000));
    let a = node_on_clock("a", &store, &link, a_clock.clone()).await;
    let b = node_on_clock("b", &store, &link, b_clock.clone()).await;
    let mut last = 0;
    let mut check = |(first, end): (u64, u64), count: u64, what: &str| {
        assert!(first > last, "{what}: {first} after {last}");
        assert_eq!(end - first + 1, count, "{what}");
        assert_eq!(split(first).0, split(end).0, "{what}: a batch spans a millisecond");
        last = end;
        first
    };
    let first = check(stamps(&a, 1).await, 1, "first");
    assert_eq!(split(first).0, a_clock.now_ms(), "the owner's clock is the physical part");
    for round in 0..300_u64 {
        let (node, clock) = if round % 2 == 0 { (&a, &a_clock) } else { (&b, &b_clock) };
        match round % 5 {
            0 => clock.advance(7),
            1 => clock.set(clock.now_ms() - 2_000),
            _ => {}
        }
        let count = [1, 1_000, 7][(round % 3) as usize];
        check(stamps(node, count).await, count, &format!("round {round}"));
    }
    // The owner's clock jumps a minute ahead: the oracle follows it.
    a_clock.advance(60_000);
    let ahead = check(stamps(&b, 1).await, 1, "ahead");
    assert_eq!(split(ahead).0, a_clock.now_ms());
    // The owner shut down: b, its clock a minute behind a's, owns the oracle next, above a's
    // ceiling (up to 3 s ahead of a's clock).
    a.shutdown().await;
    link.nodes.lock().unwrap().remove("a");
    let on_b = check(stamps(&b, 1).await, 1, "after the owner's shutdown");
    assert!(split(on_b).0 > a_clock.now_ms(), "b's timestamp is below a's clock");
    // b vanishes (its lease left to expire): c, its clock behind too, serves above it.
    let c = node_on_clock("c", &store, &link, b_clock.clone()).await;
    check(stamps(&c, 1).await, 1, "forwarded to b");
    link.nodes.lock().unwrap().remove("b");
    drop(b);
    let on_c = loop {
        match c.timestamps(Count::ONE).await {
            Ok(range) => break range.start(),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    check((on_c, on_c), 1, "after the owner vanished");
    // A node with no oracle refuses for good.
    c.shutdown().await;
    let plain = NodeBuilder::new(NodeConfig::new(StoreUrl::Memory))
        .stores(Arc::clone(&store))
        .start()
        .await
        .unwrap();
    let none = plain.timestamps(Count::ONE).await.unwrap_err();
    assert!(matches!(none, NodeError::NotConfigured { feature: Feature::Tso, .. }), "{none}");
    plain.shutdown().await;
}

/// The whole store restored from a backup taken before a strict tag's ids and the oracle's
/// timestamps (lease rows and metadata together, as a new store holding only the tag): with
/// a witness, the next owner starts above every id and timestamp answered before; without
/// one it repeats them (the documented limit, shown here so the test fails if the witness
/// does nothing).
#[tokio::test]
async fn with_a_witness_a_store_restored_whole_never_brings_strict_ids_back() {
    let clock = Arc::new(ManualClock::at_system_time());
    let witness = Witness::new(Arc::new(MetaMarks::new(Arc::new(MemoryStore::new()))), "w");
    for witnessed in [false, true] {
        let link = Arc::new(Direct::default());
        let tag = Tag::parse("ord").unwrap();
        let witness = witnessed.then(|| witness.clone());
        let before = Arc::new(MemoryStore::new());
        let a = node_witnessed("a", &before, &link, clock.clone(), witness.clone()).await;
        a.create_strict_tag(&tag, None).await.unwrap();
        let ids = takes(&a, "ord", 5).await;
        let (_, stamp) = stamps(&a, 10).await;
        a.shutdown().await;
        link.nodes.lock().unwrap().remove("a");
        // The backup: the tag created, nothing taken.
        let restored = Arc::new(MemoryStore::new());
        let b = node_witnessed("b", &restored, &link, clock.clone(), witness.clone()).await;
        b.create_strict_tag(&tag, None).await.unwrap();
        let after = take(&b, "ord").await;
        let (again, _) = stamps(&b, 1).await;
        b.shutdown().await;
        if witnessed {
            assert!(after > ids[4], "{after} after {ids:?}");
            assert!(again > stamp, "{again} after {stamp}");
        } else {
            assert!(after <= ids[4] && again <= stamp, "the limit without a witness is gone");
        }
    }
}

/// A forwarded take carries the token of the lease row the forwarder found: the owner serves
/// it only under that very holding; a node that does not hold the tag, or holds it under
/// another token (taken over since), refuses, and the forwarder looks for the owner again.
#[tokio::test]
async fn a_forwarded_take_is_served_only_under_the_lease_it_found() {
    use idmint::strict::lease_space;
    use idmint_store::LeaseStore;

    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b) = (node("a", &store, &link).await, node("b", &store, &link).await);
    let tag = Tag::parse("fenced").unwrap();
    a.create_strict_tag(&tag, None).await.unwrap();
    let rows = store.list_leases(&lease_space(&tag)).await.unwrap();
    let token = rows.iter().find(|r| r.holder == "a").map(|r| r.token).unwrap();
    let served = a.forwarded_ids(&tag, Count::ONE, token).await.unwrap();
    let stale = a.forwarded_ids(&tag, Count::ONE, token + 1).await.unwrap_err();
    assert!(matches!(&stale, NodeError::Segment(Error::Unavailable { .. })), "{stale}");
    let elsewhere = b.forwarded_ids(&tag, Count::ONE, token).await.unwrap_err();
    assert!(matches!(&elsewhere, NodeError::Segment(Error::Unavailable { .. })), "{elsewhere}");
    // b's own takes find the owner and its token, and continue above.
    assert!(take(&b, "fenced").await > served.start());
    a.shutdown().await;
    b.shutdown().await;
}

/// The holder of each tag's lease, per the store.
async fn holders(store: &MemoryStore, tags: &[Tag]) -> Vec<String> {
    use idmint::strict::lease_space;
    use idmint_store::LeaseStore;
    let now = store.now_ms().await.unwrap();
    let mut holders = Vec::new();
    for tag in tags {
        let rows = store.list_leases(&lease_space(tag)).await.unwrap();
        holders.extend(rows.into_iter().filter(|r| r.expires_ms > now).map(|r| r.holder));
    }
    holders
}

/// Ownership spreads over the live nodes: tags created on one node move to their homes
/// (hashed over the members), a node that joins takes its share, a node that leaves hands
/// its tags on; every tag's ids increase throughout, one owner at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_spreads_over_the_live_nodes_as_they_join_and_leave() {
    let (store, link) = (Arc::new(MemoryStore::new()), Arc::new(Direct::default()));
    let (a, b) = (node("a", &store, &link).await, node("b", &store, &link).await);
    let tags: Vec<Tag> = (0..24).map(|i| Tag::parse(&format!("p{i}")).unwrap()).collect();
    for tag in &tags {
        a.create_strict_tag(tag, None).await.unwrap();
    }
    let mut last: HashMap<Tag, u64> = HashMap::new();
    let settle = || tokio::time::sleep(Duration::from_millis(TTL_MS * 3));
    round(&tags, &[&a, &b], &mut last).await;
    settle().await;
    round(&tags, &[&a, &b], &mut last).await;
    let owners = holders(&store, &tags).await;
    assert_eq!(owners.len(), tags.len(), "{owners:?}");
    for name in ["a", "b"] {
        assert!(owners.iter().any(|o| o == name), "no tag moved to {name}: {owners:?}");
    }
    // c joins: it takes its share.
    let c = node("c", &store, &link).await;
    for _ in 0..3 {
        settle().await;
        round(&tags, &[&a, &b, &c], &mut last).await;
    }
    let owners = holders(&store, &tags).await;
    assert!(owners.iter().any(|o| o == "c"), "no tag moved to c: {owners:?}");
    // b leaves: its tags go on elsewhere, above their ids.
    b.shutdown().await;
    link.nodes.lock().unwrap().remove("b");
    for _ in 0..2 {
        round(&tags, &[&a, &c], &mut last).await;
        settle().await;
    }
    let owners = holders(&store, &tags).await;
    assert!(owners.iter().all(|o| o != "b"), "{owners:?}");
    a.shutdown().await;
    c.shutdown().await;
}

/// One take of every tag, spread over `nodes`: each above the tag's last id.
async fn round(tags: &[Tag], nodes: &[&Arc<Node>], last: &mut HashMap<Tag, u64>) {
    for (i, tag) in tags.iter().enumerate() {
        let id = take(nodes[i % nodes.len()], tag.as_str()).await;
        let before = last.insert(tag.clone(), id).unwrap_or(0);
        assert!(id > before, "{tag}: {id} after {before}");
    }
}

/// A tag metadata store counting the policy lookups.
struct CountingMeta {
    inner: Arc<MemoryStore>,
    lookups: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl idmint_store::TagMetaStore for CountingMeta {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        self.lookups.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.meta(tag, name).await
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

/// Requests for names the store does not hold cost bounded tag metadata lookups too (the
/// policy of a name the segment engine found unknown): one per name per
/// `UNKNOWN_TAG_TTL_MS`, however often it is asked, and at most
/// `UNKNOWN_TAG_LOOKUPS_PER_S_MAX` a second.
#[tokio::test]
async fn unknown_names_cost_bounded_metadata_lookups() {
    use idmint_core::limits::UNKNOWN_TAG_LOOKUPS_PER_S_MAX;
    let store = Arc::new(MemoryStore::new());
    let meta = Arc::new(CountingMeta { inner: Arc::clone(&store), lookups: Default::default() });
    let mut config = NodeConfig::new(StoreUrl::Memory);
    config.snowflake = Err("not in this test".into());
    config.strict = Some(StrictConfig::new(Peer { grpc_url: "a".into() }));
    let node = NodeBuilder::new(config)
        .stores(Arc::clone(&store))
        .tag_meta_store(Arc::clone(&meta) as Arc<dyn idmint_store::TagMetaStore>)
        .start()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let before = meta.lookups.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..1_000 {
        let refused = node.next_public_text_by_name("ghost").await.unwrap_err();
        assert!(matches!(refused, NodeError::Segment(Error::UnknownTag(_))), "{refused}");
    }
    let one_name = meta.lookups.load(std::sync::atomic::Ordering::SeqCst) - before;
    let seconds = started.elapsed().as_secs() + 1;
    assert!(one_name <= seconds, "{one_name} metadata lookups for one unknown name");
    for i in 0..3_000 {
        match node.next_public_text_by_name(&format!("nope-{i}")).await {
            Err(NodeError::Segment(Error::UnknownTag(_) | Error::Unavailable { .. })) => {}
            other => panic!("{other:?}"),
        }
    }
    let all = meta.lookups.load(std::sync::atomic::Ordering::SeqCst) - before;
    let budget = UNKNOWN_TAG_LOOKUPS_PER_S_MAX * (started.elapsed().as_secs() + 1) + one_name;
    assert!(all <= budget, "{all} metadata lookups for 3 000 unknown names");
    node.shutdown().await;
}
